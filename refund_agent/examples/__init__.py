"""Other agents built on refund-agent's public loop (``refund_agent.__all__``), each short
enough to read whole: closing an account (no money), paying a supplier's invoice (money)."""

from .closure import ClosureAgent
from .payables import PayablesAgent

__all__ = ["ClosureAgent", "PayablesAgent"]
