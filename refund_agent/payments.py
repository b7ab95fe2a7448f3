"""Stand-in for a payment provider: refunds are written to ``refunds.log`` instead of a bank."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from .ledger import IdempotentLog


class Payments:
    """Issues refunds exactly once per idempotency key (the ``issue_refund`` call id)."""

    def __init__(self, output_dir: Path) -> None:
        self.log = IdempotentLog(Path(output_dir) / "refunds.log")

    def refund(self, key: str, order_id: str, amount: float,
               reason: str) -> tuple[dict[str, Any], bool]:
        """Refund ``amount`` on ``order_id``; returns (refund, reused)."""
        request = {"order_id": order_id, "amount": round(amount, 2), "reason": reason}
        return self.log.once(key, request, lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})

    def refunds(self) -> list[dict[str, Any]]:
        return self.log.records()
