"""What a decision checks before it pays, as pure functions (the store runs them in its
transaction, with figures it read there).

Two money rules live here. An approver's limit covers everything that person has approved on
the order, not one decision: otherwise a refund above it can be split (approve one line, then
the re-proposed rest; or two tickets for one order) and paid without a lead. And a kept line is
never paid more than its card showed, line by line: a total can hide one line's rise behind
another line's removal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .models import ApprovalLine
from .policy import Quote
from .shop import Order


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


def unit_problem(proposed: Mapping[str, ApprovalLine], order: Order, kept: Sequence[str],
                 lowered: Mapping[str, int]) -> dict[str, int | None] | str:
    """The units each kept line is approved for, or why the approver's units are refused.

    ``proposed`` are the approval's item lines by sku; ``lowered`` the units an approver set
    (sku -> units). An approver may only take away: 1 up to the units proposed (a line
    proposed before units were counted had all of them). A kept line not in ``lowered``
    keeps its proposed units (None: all the line's units, for rows from before schema 8).
    """
    strangers = sorted(set(lowered) - set(kept))
    if strangers:
        return (f"units were given for {', '.join(strangers)}, which is not a kept line of "
                "this refund.")
    out: dict[str, int | None] = {}
    for sku in kept:
        line = proposed.get(sku)
        units = line.units if line is not None else None
        if sku in lowered:
            item = order.item(sku)
            most = units if units is not None else (item.quantity if item else 1)
            wanted = lowered[sku]
            if isinstance(wanted, bool) or not isinstance(wanted, int) or not 1 <= wanted <= most:
                name = line.name if line is not None else sku
                return (f"{name} ({sku}) was proposed for {most} unit{'s' if most != 1 else ''}"
                        f"; approve 1 to {most} of them, or untick the line.")
            units = wanted
        out[sku] = units
    return out
