"""The payment provider's interface, and its stand-in: refunds written to ``refunds.log``.

Every provider (this stand-in, Stripe in stripe.py) refunds exactly once per idempotency key,
the approval id, and keeps its record of each refund in the same ledger (``refunds.log`` beside
an SQLite store, the ledger table's "refunds" rows on a shared one), which the desk's
reconcile.py checks against the approvals and the audit.

A provider is handed a :class:`RefundRequest`, plain data of its own: the agent that pays (the
refund desk, desk/actions.py) builds it from whatever it priced, so nothing here knows how.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .ledger import IdempotentLog, StoreLog


@dataclass(frozen=True)
class RefundRequest:
    """One refund to make once, as a payment provider needs it.

    Attributes:
        key: the idempotency key (the approval id: the run and the call id); one refund per key.
        order_id: the order it refunds, which names the payment (Stripe: its ``payment_ref``).
        amount_cents: what it pays in all, the sum of ``lines`` when there are lines.
        lines: what it pays for, as plain data (``line``, ``reason``, ``amount_cents``, and
            ``units``/``of_units`` where units were counted), kept whole in the ledger.
        summary: what the refund is for, in words (the ledger's ``reason``).
    """

    key: str
    order_id: str
    amount_cents: int
    lines: tuple[Mapping[str, Any], ...] = ()
    summary: str = ""

    def __post_init__(self) -> None:
        # Itemized refunds (ARCHITECTURE.md, "Money"): a total that is not its lines' sum is a
        # caller's mistake, never something to pay.
        if self.lines and sum(int(line["amount_cents"]) for line in self.lines) \
                != self.amount_cents:
            raise ValueError(f"refund {self.key}: {self.amount_cents} cents is not the sum of "
                             "its lines")

    def record(self) -> dict[str, Any]:
        """What a refund record's ``request`` holds, compared whole under the same key (a
        different request with this key is refused) and by reconcile with the approval."""
        return {"order_id": self.order_id, "amount_cents": self.amount_cents,
                "lines": [dict(line) for line in self.lines], "reason": self.summary}


class Payments(Protocol):
    """What the agent needs of a payment provider."""

    log: IdempotentLog | StoreLog

    def refund(self, request: RefundRequest) -> tuple[dict[str, Any], bool]:
        """Refund what ``request`` pays, once per its key; returns (record, reused).

        The record carries ``refund_id``; reused is True when an earlier request with this key
        had already made the refund (audited as 'reused'). A different request under a key
        already used raises IdempotencyConflict.
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


class StandInPayments:
    """Issues refunds exactly once per idempotency key (the approval id: the run and the
    ``issue_refund`` call id, see models.py (call_key)).

    Each refund records its order lines, so the log alone can be reconciled line by line with
    the approvals and the audit.
    """

    def __init__(self, output_dir: Path, store: Any | None = None) -> None:
        # ``store``: a shared store (PostgreSQL) keeps the records where every host sees them.
        self.log = ledger_for(output_dir, store, "refunds")

    def refund(self, request: RefundRequest) -> tuple[dict[str, Any], bool]:
        """Refund what ``request`` pays; returns (refund, reused)."""
        return self.log.once(request.key, request.record(),
                             lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})

    def refunds(self) -> list[dict[str, Any]]:
        return self.log.records()

    def find(self, key: str) -> dict[str, Any] | None:
        """The refund made with this idempotency key, or None."""
        return self.log.find(key)
