"""refund-agent: an AI support agent that asks a person before it refunds, and finishes the
same run exactly once, across restarts and crashes.

Two layers, both public:

- **The loop** (``refund_agent/loop.py``, start there): a durable agent loop for any tools,
  which pauses before a call that needs a person and continues the same run once they
  decide. Build your own agent from :class:`Loop`, :class:`Tool` and :class:`CallContext`;
  ``refund_agent/examples/`` has two, each one screen long.
- **The refund desk** (``refund_agent.desk``): ``Agent``, the refund agent on that loop, with
  its shop, policy and outside systems, as the web page and the terminal use it. It stands on
  the loop: ``import refund_agent`` loads none of it (``from refund_agent.desk import Agent``).
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import Settings, load_settings
from .crash import LOOP_POINTS
from .errors import (
    AgentError,
    AlreadyDecided,
    ConfigError,
    DecisionRefused,
    EndRun,
    IdempotencyConflict,
    LeaseLost,
    NotFound,
    RefundAgentError,
    RunBusy,
    RunNotReady,
    StoreError,
)
from .intake import same_address
from .loop import Loop
from .models import (
    Approval,
    ApprovalLine,
    ApprovalStatus,
    AuditEntry,
    Call,
    Proposal,
    Reply,
    Run,
    RunStatus,
    Step,
    StepKind,
)
from .outside.ledger import IdempotentLog
from .providers.client import ModelAccess, open_model
from .store import Lease, Store
from .streaming import Cancel, LiveEvent
from .tools import CallContext, Outcome, Tool, ToolKind, toolset
from .turns import Finished, NextInput, Waiting

__all__ = [
    # The loop: what an agent of your own is built from.
    "LOOP_POINTS", "Approval", "ApprovalStatus", "Call", "CallContext", "Cancel", "Finished",
    "IdempotentLog", "Lease", "LiveEvent", "Loop", "ModelAccess", "NextInput", "Outcome",
    "Proposal", "Reply", "Run", "RunStatus", "Settings", "Step", "StepKind", "Store", "Tool",
    "ToolKind", "Waiting", "load_settings", "open_model", "same_address", "toolset",
    # The errors (refund_agent/errors.py draws their tree).
    "AgentError", "AlreadyDecided", "ConfigError", "DecisionRefused", "EndRun",
    "IdempotencyConflict", "LeaseLost", "NotFound", "RefundAgentError", "RunBusy", "RunNotReady",
    "StoreError",
    # Records the desk's pages and the audit read.
    "ApprovalLine", "AuditEntry",
]

# The refund desk's names, once imported from here: still found (``from refund_agent import
# Agent``), read from ``refund_agent.desk`` on first use, so ``import refund_agent`` itself
# loads nothing above the loop (tests/loop/test_layout.py runs it in a fresh interpreter).
_DESK = frozenset({
    "Agent", "Order", "PolicyFacts", "PolicyTerms", "Quote", "Shop", "canonical_order_id",
    "converse", "policy_facts", "quote_refund", "tool_schemas",
})


def __getattr__(name: str) -> Any:
    """A desk name asked of the package: imported from ``refund_agent.desk`` then."""
    if name in _DESK:
        value = getattr(importlib.import_module(".desk", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
