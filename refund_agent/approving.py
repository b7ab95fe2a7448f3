"""What a decision checks before it pays, as pure functions (the store runs them in its
transaction, with figures it read there).

Two money rules live here. An approver's limit covers everything that person has approved on
the order, not one decision: otherwise a refund above it can be split (approve one line, then
the re-proposed rest; or two tickets for one order) and paid without a lead. And a kept line is
never paid more than its card showed, line by line: a total can hide one line's rise behind
another line's removal.
"""

from __future__ import annotations

from collections.abc import Sequence

from .models import ApprovalLine
from .policy import Quote


def _dollars(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def limit_problem(by: str, limit_cents: int, order_id: str, this_cents: int,
                  before_cents: int) -> str | None:
    """Why ``by`` may not approve ``this_cents`` more on the order, or None.

    Args:
        by: who decides.
        limit_cents: the most ``by`` may approve on one order, in all.
        order_id: the order.
        this_cents: what this decision pays.
        before_cents: what ``by`` approved on this order before (every ticket and run).
    """
    if this_cents + before_cents <= limit_cents:
        return None
    if before_cents == 0:
        return (f"{_dollars(this_cents)} is above {by}'s approval limit of "
                f"{_dollars(limit_cents)}; a lead must decide this refund.")
    return (f"{_dollars(this_cents)} would bring what {by} has approved on order {order_id} to "
            f"{_dollars(this_cents + before_cents)} ({_dollars(before_cents)} approved before), "
            f"above {by}'s approval limit of {_dollars(limit_cents)} per order; a lead must "
            "decide this refund.")


def overpaid_line(proposed: Sequence[ApprovalLine], quote: Quote) -> str | None:
    """Why a kept line would now pay more than the amount proposed for it, or None.

    ``proposed`` are the approval's lines as the card showed them; ``quote`` prices the kept
    ones today. A line the proposal did not have counts as proposed at nothing.
    """
    shown = {line.line: line.amount_cents for line in proposed}
    for q in quote.lines:
        before = shown.get(q.line, 0)
        if q.amount_cents > before:
            return (f"{q.name} ({q.line}) now pays {_dollars(q.amount_cents)}, more than the "
                    f"{_dollars(before)} its card showed; ask the agent to propose again.")
    return None
