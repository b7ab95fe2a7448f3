"""Other agents built on refund-agent's loop (agent.Loop): short enough to read whole."""

from .closure import ClosureAgent

__all__ = ["ClosureAgent"]
