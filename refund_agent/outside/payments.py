"""The payment provider's interface, and its stand-in: refunds written to ``refunds.log``.

Every provider (this stand-in, Stripe in stripe.py) refunds exactly once per idempotency key,
the approval id, and keeps its record of each refund in the same ledger (``refunds.log`` beside
an SQLite store, the ledger table's "refunds" rows on a shared one), which reconcile.py checks
against the approvals and the audit.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Protocol

from ..desk.policy import Quote
from .ledger import IdempotentLog, StoreLog


class Payments(Protocol):
    """What the agent needs of a payment provider."""

    log: IdempotentLog | StoreLog

    def refund(self, key: str, quote: Quote, summary: str) -> tuple[dict[str, Any], bool]:
        """Refund what ``quote`` pays, once per ``key``; returns (record, reused).

        The record carries ``refund_id``; reused is True when an earlier request with this key
        had already made the refund (audited as 'reused').
        """
        ...

    def refunds(self) -> list[dict[str, Any]]: ...

    def find(self, key: str) -> dict[str, Any] | None: ...


def ledger_for(output_dir: Path, store: Any | None, name: str) -> IdempotentLog | StoreLog:
    """The log ``name`` ("refunds", "outbox", ...): the store's ledger table on a shared store
    (PostgreSQL), where every host sees it; else ``<name>.log`` beside the SQLite store."""
    if store is not None:
        return StoreLog(store, name)
    return IdempotentLog(Path(output_dir) / f"{name}.log")


def refund_request(quote: Quote, summary: str) -> dict[str, Any]:
    """What a refund record's ``request`` holds (reconcile compares it with the approval)."""
    return {"order_id": quote.order_id, "amount_cents": quote.total_cents,
            # Units only where the refund counted them (schema 8 on), so a refund approved
            # before then asks for exactly what it asked for then.
            "lines": [{"line": q.line, "reason": q.reason, "amount_cents": q.amount_cents,
                       **({"units": q.units, "of_units": q.quantity}
                          if q.units is not None and (q.quantity or 1) > 1 else {})}
                      for q in quote.lines],
            "reason": summary}


class StandInPayments:
    """Issues refunds exactly once per idempotency key (the approval id: the run and the
    ``issue_refund`` call id, see models.py (call_key)).

    Each refund records its order lines, so the log alone can be reconciled line by line with
    the approvals and the audit.
    """

    def __init__(self, output_dir: Path, store: Any | None = None) -> None:
        # ``store``: a shared store (PostgreSQL) keeps the records where every host sees them.
        self.log = ledger_for(output_dir, store, "refunds")

    def refund(self, key: str, quote: Quote, summary: str) -> tuple[dict[str, Any], bool]:
        """Refund what ``quote`` pays; returns (refund, reused)."""
        return self.log.once(key, refund_request(quote, summary),
                             lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})

    def refunds(self) -> list[dict[str, Any]]:
        return self.log.records()

    def find(self, key: str) -> dict[str, Any] | None:
        """The refund made with this idempotency key, or None."""
        return self.log.find(key)
