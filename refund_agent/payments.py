"""Stand-in for a payment provider: refunds are written to ``refunds.log`` instead of a bank."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from .ledger import IdempotentLog, StoreLog
from .policy import Quote


class Payments:
    """Issues refunds exactly once per idempotency key (the approval id: the run and the
    ``issue_refund`` call id, see callrecords.py).

    Each refund records its order lines, so the log alone can be reconciled line by line with
    the approvals and the audit.
    """

    def __init__(self, output_dir: Path, store: Any | None = None) -> None:
        # ``store``: a shared store (PostgreSQL) keeps the records where every host sees them.
        self.log: IdempotentLog | StoreLog = (
            StoreLog(store, "refunds") if store is not None
            else IdempotentLog(Path(output_dir) / "refunds.log"))

    def refund(self, key: str, quote: Quote, summary: str) -> tuple[dict[str, Any], bool]:
        """Refund what ``quote`` pays; returns (refund, reused)."""
        request = {"order_id": quote.order_id, "amount_cents": quote.total_cents,
                   # Units only where the refund counted them (schema 8 on), so a refund
                   # approved before then asks for exactly what it asked for then.
                   "lines": [{"line": q.line, "reason": q.reason, "amount_cents": q.amount_cents,
                              **({"units": q.units, "of_units": q.quantity}
                                 if q.units is not None and (q.quantity or 1) > 1 else {})}
                             for q in quote.lines],
                   "reason": summary}
        return self.log.once(key, request, lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})

    def refunds(self) -> list[dict[str, Any]]:
        return self.log.records()

    def find(self, key: str) -> dict[str, Any] | None:
        """The refund made with this idempotency key, or None."""
        return self.log.find(key)
