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
from .models import Approval, ApprovalLine, AuditEntry, Call, Reply, Run, RunStatus, Step
from .policy import PolicyFacts, Quote, policy_facts, quote_refund
from .shop import Order, PolicyTerms, Shop, canonical_order_id
from .store import Store
from .tools import tool_schemas

__all__ = [
    "Agent", "AlreadyDecided", "Approval", "ApprovalLine", "AuditEntry", "Call", "Cancel",
    "ConfigError", "DecisionRefused", "IdempotencyConflict", "LiveEvent", "NotFound", "Order",
    "PolicyFacts", "PolicyTerms", "Quote", "RefundAgentError", "Reply", "Run", "RunBusy",
    "RunNotReady", "RunStatus", "Settings", "Shop", "Step", "Store", "StoreError",
    "canonical_order_id", "converse", "load_settings", "policy_facts", "quote_refund",
    "tool_schemas",
]
