"""Stand-in for a payment provider: refunds are written to ``refunds.log`` instead of a bank."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .ledger import IdempotentLog
from .policy import cents, dollars


class Payments:
    """Issues refunds exactly once per idempotency key (the ``issue_refund`` call id)."""

    def __init__(self, output_dir: Path) -> None:
        self.log = IdempotentLog(Path(output_dir) / "refunds.log")
        # Cents refunded per order, folded in as the log grows, so asking about one order does
        # not add up every refund ever made.
        self._lock = threading.Lock()
        self._generation = -1
        self._counted = 0
        self._cents: dict[str, int] = {}

    def refund(self, key: str, order_id: str, amount: float,
               reason: str) -> tuple[dict[str, Any], bool]:
        """Refund ``amount`` on ``order_id``; returns (refund, reused)."""
        request = {"order_id": order_id, "amount": round(amount, 2), "reason": reason}
        return self.log.once(key, request, lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})

    def refunds(self) -> list[dict[str, Any]]:
        return self.log.records()

    def find(self, key: str) -> dict[str, Any] | None:
        """The refund made with this idempotency key, or None."""
        return self.log.find(key)

    def refresh(self) -> list[dict[str, Any]]:
        """Read the refunds made since the last call into the per-order index.

        In a new process this parses the whole log once, so callers about to take a lock (a
        decision's transaction) call it first. Returns a last line without its newline that
        still parses, if any (counted by readers, but not indexed until it is complete).
        """
        with self._lock:
            generation, records, tail = self.log.scan()
            if generation != self._generation:
                self._generation, self._counted, self._cents = generation, 0, {}
            new = records[self._counted:]
            for record in new:
                order, amount = _order_cents(record)
                self._cents[order] = self._cents.get(order, 0) + amount
            self._counted += len(new)
            return tail

    def refunded(self, order_id: str, except_key: str | None = None) -> float:
        """Dollars refunded on ``order_id`` so far, leaving out the refund made with one key."""
        tail = self.refresh()
        with self._lock:
            total = self._cents.get(order_id, 0)
        for record in tail:
            order, amount = _order_cents(record)
            total += amount if order == order_id else 0
        if except_key is not None:
            # Keys are unique in the log (``once`` sees to it), so one lookup finds the refund.
            left_out = self.log.find(except_key)
            if left_out is not None:
                order, amount = _order_cents(left_out)
                total -= amount if order == order_id else 0
        return dollars(total)

    def refunded_by_order(self, except_key: str | None = None) -> Mapping[str, float]:
        """A read-only view {order id: dollars refunded}, computed one order at a time."""
        return _RefundedView(self, except_key)


def _order_cents(record: dict[str, Any]) -> tuple[str, int]:
    request = record["request"]
    return request["order_id"], cents(request["amount"])


class _RefundedView(Mapping[str, float]):
    """What :class:`~refund_agent.tools.ShopTools` needs: ``view.get(order_id, 0.0)``."""

    def __init__(self, payments: Payments, except_key: str | None) -> None:
        self._payments, self._except = payments, except_key

    def __getitem__(self, order_id: str) -> float:
        amount = self._payments.refunded(order_id, self._except)
        if not amount:
            raise KeyError(order_id)
        return amount

    def __iter__(self) -> Iterator[str]:
        orders = {_order_cents(r)[0] for r in self._payments.refunds()
                  if r.get("idempotency_key") != self._except}
        return iter(sorted(orders))

    def __len__(self) -> int:
        return sum(1 for _ in self)
