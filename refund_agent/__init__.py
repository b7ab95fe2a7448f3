"""refund-agent: an AI support agent that asks a person before it refunds, and finishes the
same run exactly once, across restarts and crashes."""

from .config import Settings, load_settings
from .desk.agent import Agent
from .desk.customer import converse
from .desk.policy import PolicyFacts, Quote, policy_facts, quote_refund
from .desk.shop import Order, PolicyTerms, Shop, canonical_order_id
from .desk.tools import tool_schemas
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
from .loop import Loop
from .models import (
    Approval,
    ApprovalLine,
    ApprovalStatus,
    AuditEntry,
    Call,
    Reply,
    Run,
    RunStatus,
    Step,
    StepKind,
)
from .store import Store
from .streaming import Cancel, LiveEvent
from .tools import Tool, ToolKind, toolset
from .turns import Finished, NextInput, Waiting

__all__ = [
    "Agent", "AlreadyDecided", "Approval", "ApprovalLine", "ApprovalStatus", "AuditEntry",
    "Call", "Cancel", "ConfigError", "DecisionRefused", "Finished", "IdempotencyConflict",
    "LiveEvent", "Loop", "NextInput", "NotFound", "Order", "PolicyFacts", "PolicyTerms",
    "Quote", "RefundAgentError", "Reply", "Run", "RunBusy", "RunNotReady", "RunStatus",
    "Settings", "Shop", "Step", "StepKind", "Store", "StoreError", "Tool", "ToolKind",
    "Waiting", "canonical_order_id", "converse", "load_settings", "policy_facts",
    "quote_refund", "tool_schemas", "toolset",
]
