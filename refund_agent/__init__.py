"""refund-agent: an AI support agent that asks a person before it refunds, and finishes the
same run exactly once, across restarts and crashes."""

from .agent import Agent, Cancel, LiveEvent
from .config import Settings, load_settings
from .customer import converse
from .errors import (
    AlreadyDecided,
    ConfigError,
    DecisionRefused,
    IdempotencyConflict,
    NotFound,
    RefundAgentError,
    RunBusy,
    RunNotReady,
    StoreError,
)
from .models import Approval, AuditEntry, Call, Reply, Run, RunStatus, Step
from .policy import PolicyFacts, policy_facts, refund_ceiling, refund_problem
from .shop import Order, Shop
from .store import Store
from .tools import tool_schemas

__all__ = [
    "Agent", "AlreadyDecided", "Approval", "AuditEntry", "Call", "Cancel", "ConfigError",
    "DecisionRefused", "IdempotencyConflict", "LiveEvent", "NotFound", "Order", "PolicyFacts",
    "RefundAgentError", "Reply", "Run", "RunBusy", "RunNotReady", "RunStatus", "Settings", "Shop",
    "Step", "Store", "StoreError", "converse", "load_settings", "policy_facts", "refund_ceiling",
    "refund_problem", "tool_schemas",
]
