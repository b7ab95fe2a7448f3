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
from dataclasses import dataclass

from ..models import ApprovalLine
from .identity import same_person
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
    # Each front end names its way to a lead after this (the terminal's `handoff` command, the
    # page's Send to a lead), and offers it on the same per-order sum: see handoff_problem.
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


# -- four eyes, hand-offs and one's own tickets ----------------------------------------------
#
# A refund that takes what an order pays above the shop's two-person amount (shop.json
# "two_person_above") is paid only once two different accounts approved it, the same lines both
# times: the first approval records a sign-off and leaves the refund pending; the second
# completes it. What counts is the order's total, everything approved on it (paid or being
# paid, any ticket, any person) plus this refund, as approver limits count: otherwise one
# person pays $80.95 as $48.00 and then $32.95. The rules are pure so the store can run them
# inside the decision's transaction, on the sign-off and the total it read there.


@dataclass(frozen=True)
class SignOff:
    """The first of two approvals a refund above the two-person amount needs."""

    by: str
    at: float
    amount_cents: int
    keep: tuple[str, ...]   # the item lines the first person kept, sorted
    note: str | None = None


PAY, SIGN_OFF = "pay", "sign_off"


def needs_two(amount_cents: int, above_cents: int | None, before_cents: int = 0) -> bool:
    """Whether paying ``amount_cents`` takes two people (``above_cents`` None: never), with
    ``before_cents`` approved on the order already (by anyone, on any ticket)."""
    return above_cents is not None and amount_cents + before_cents > above_cents


def four_eyes(by: str, amount_cents: int, keep: Sequence[str], above_cents: int | None,
              first: SignOff | None, before_cents: int = 0) -> tuple[str, str | None]:
    """What an approval by ``by`` does: (PAY, None), (SIGN_OFF, None) or ("refuse", why).

    Args:
        by: who approves now.
        amount_cents: what the kept lines pay.
        keep: the item lines kept.
        above_cents: the shop's two-person amount (None: one person is enough).
        first: the sign-off recorded before, if any.
        before_cents: what the order had approved before this refund (every ticket, anyone).
    """
    if first is None:
        two = needs_two(amount_cents, above_cents, before_cents)
        return (SIGN_OFF, None) if two else (PAY, None)
    if same_person(first.by, by):
        return "refuse", (f"{by} already signed this refund off; refunds that bring an order "
                          f"above {_dollars(above_cents or 0)} need a second, different person "
                          "to approve them.")
    if tuple(sorted(keep)) != first.keep or amount_cents != first.amount_cents:
        return "refuse", (f"{first.by} signed off {_dollars(first.amount_cents)} for "
                          f"{', '.join(first.keep) or 'the shipping'}; approve the same lines to "
                          "complete the refund, or reject it with a note.")
    return PAY, None


def own_ticket_problem(by: str, raised_by: str | None) -> str | None:
    """Why ``by`` may not approve a refund on a ticket they opened themselves, or None."""
    if raised_by and same_person(raised_by, by):
        return (f"{by} opened this ticket; someone else must approve its refund (send it to a "
                "lead, or ask a colleague).")
    return None


def handoff_needed(amount_cents: int, limit_cents: int | None, before_cents: int = 0) -> bool:
    """Whether the approver with ``limit_cents`` must hand this refund to a lead."""
    return limit_cents is not None and amount_cents + before_cents > limit_cents


def handoff_problem(by: str, amount_cents: int, limit_cents: int | None,
                    before_cents: int = 0) -> str | None:
    """Why ``by`` may not send this refund to a lead, or None: a hand-off is for a refund above
    the sender's limit (the audit says so), as the page offers *Send to a lead* only then.

    ``before_cents`` is what ``by`` approved on the order before, as the approval's own check
    (:func:`limit_problem`) counts it: whatever that refuses, a hand-off must accept.
    """
    if handoff_needed(amount_cents, limit_cents, before_cents):
        return None
    if limit_cents is None:
        return (f"{by} has no approval limit, so nothing needs a lead: approve, reject or ask "
                "the customer.")
    within = (f"{_dollars(amount_cents)} is within {by}'s approval limit of "
              f"{_dollars(limit_cents)}")
    if before_cents:
        within = (f"{_dollars(amount_cents)} and the {_dollars(before_cents)} {by} approved "
                  f"on this order before are within {by}'s approval limit of "
                  f"{_dollars(limit_cents)}")
    return f"{within}: approve, reject or ask the customer; a hand-off is for refunds above it."


def take_problem(limit_cents: int | None) -> str | None:
    """Why the account with ``limit_cents`` may not take an escalation, or None: only a lead
    (an account without a limit; anyone in the single-user demo) takes them."""
    if limit_cents is None:
        return None
    return "Only a lead (an account without a limit) takes escalations."
