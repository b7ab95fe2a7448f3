"""The approver's queue and review: the card of a pending refund, its policy facts, what
unticking lines would pay, the limit and reminder notices, and the review's confirm button."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...desk.policy import Quote
from ...desk.timeouts import human_duration
from ...models import Approval
from .format import ago, money

REASON_LABELS = {"damaged": "damaged", "changed_mind": "changed mind", "shipping": "shipping"}


@dataclass(frozen=True)
class CardLine:
    """One order line of a proposed refund, as the approver sees it."""

    line: str      # the sku, or SHIPPING
    name: str
    reason: str    # damaged, changed_mind, shipping
    amount: float  # what the refund pays for it
    allowed: float  # the line's full value: the most any reason could refund
    fee: float     # the return fee taken from it
    units: int | None = None     # how many of the line's units it refunds (None: all)
    quantity: int | None = None  # how many the line has

    @property
    def counted(self) -> bool:
        """A line of several units, which the approver may lower."""
        return self.tickable and self.units is not None and (self.quantity or 1) > 1

    @property
    def units_label(self) -> str:
        """``1 of 4 units`` for a line of several units, '' otherwise."""
        return f"{self.units} of {self.quantity} units" if self.counted else ""

    @property
    def tickable(self) -> bool:
        """Item lines can be unticked; shipping follows the policy."""
        return self.reason != "shipping"

    @property
    def reason_label(self) -> str:
        return REASON_LABELS.get(self.reason, self.reason)

    @property
    def summary(self) -> str:
        """``Glass pour-over coffee maker · damaged · $48.00`` (shipping: no reason)."""
        if not self.tickable:
            return f"{self.name} · {money(self.amount)}"
        count = f" · {self.units_label}" if self.counted else ""
        return f"{self.name}{count} · {self.reason_label} · {money(self.amount)}"

    @property
    def basis(self) -> str:
        """Why this amount: ``MUG-STN-2 · $26.00 less a $7.50 return fee``."""
        if self.reason == "shipping":
            return "refunded because every item arrived damaged; dropped if an item is unticked"
        if self.fee:
            why = f"{money(self.allowed)} less a {money(self.fee)} return fee"
        elif abs(self.amount - self.allowed) < 0.005:
            why = f"full value {money(self.allowed)}"
        else:
            why = f"of {money(self.allowed)}"
        return f"{self.line} · {why}"


def plain_line(line: CardLine) -> str:
    """A refund line in plain words, for a checkbox a screen reader names:
    ``Glass pour-over coffee maker, damaged, $48.00``."""
    units = f", {line.units_label}" if line.counted else ""
    return f"{line.name}{units}, {line.reason_label}, {money(line.amount)}"


@dataclass(frozen=True)
class Card:
    """What an approver sees for one pending refund."""

    approval_id: str
    run_id: str
    customer: str
    order_id: str
    amount: float
    summary: str
    lines: list[CardLine] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)
    problem: str | None = None
    requested: str = ""

    @property
    def title(self) -> str:
        return f"{money(self.amount)} for order {self.order_id}"

    @property
    def within_policy(self) -> bool:
        return self.problem is None

    @property
    def item_lines(self) -> list[CardLine]:
        """The lines with a checkbox."""
        return [line for line in self.lines if line.tickable]

    @property
    def shipping_lines(self) -> list[CardLine]:
        return [line for line in self.lines if not line.tickable]


def fact_rows(facts: dict[str, Any], own: Collection[str] = (),
              changed_mind: bool = False) -> list[tuple[str, str]]:
    """The policy facts an approver needs, as (label, value) rows.

    Args:
        facts: ``desk.policy.PolicyFacts`` as a dict (this refund's lines left out).
        own: the lines of this refund; the order's other lines are listed with their status.
        changed_mind: whether this refund returns something, so the return-fee rule matters.
    """
    rows: list[tuple[str, str]] = []
    days = facts.get("days_since_delivery")
    window = facts.get("window_days", 30)
    if days is None:
        rows.append(("Delivered", "not yet"))
    else:
        inside = "inside" if facts.get("within_window") else "outside"
        rows.append(("Delivered", f"{days} day{'s' if days != 1 else ''} ago, {inside} the "
                                  f"{window}-day window"))
    others = [line for line in facts.get("lines") or [] if line.get("line") not in own]
    if others:
        rows.append(("Other lines", "; ".join(
            f"{line.get('name', line.get('line'))} {money(line.get('line_total'))} "
            f"({line.get('status', '')})" for line in others)))
    if changed_mind and facts.get("return_fee") is not None:
        per = ("per refund, shared by its changed-mind lines"
               if facts.get("return_fee_per") == "refund" else "per item returned")
        rows.append(("Return fee", f"{money(facts['return_fee'])} {per}"))
    if "paid" in facts:
        rows.append(("Paid", f"{money(facts['paid'])}, refunded so far "
                             f"{money(facts.get('refunded_so_far', 0))}, left "
                             f"{money(facts.get('left_to_refund', 0))}"))
    return rows


def approval_card(approval: Approval, facts: dict[str, Any], problem: str | None,
                  now: float | None = None) -> Card:
    lines = [CardLine(line=line.line, name=line.name, reason=line.reason, amount=line.amount,
                      allowed=round(line.allowed_cents / 100, 2),
                      fee=round(line.fee_cents / 100, 2), units=line.units,
                      quantity=line.quantity) for line in approval.lines]
    return Card(approval_id=approval.id, run_id=approval.run_id, customer=approval.customer,
                order_id=approval.order_id, amount=approval.amount, summary=approval.summary,
                lines=lines,
                facts=fact_rows(facts, {line.line for line in approval.lines},
                                any(line.reason == "changed_mind" for line in approval.lines)),
                problem=problem,
                requested=f"requested {ago(approval.requested_at, now)} by process "
                          f"{approval.requested_pid}")


def kept_notice(card: Card, keep: Collection[str], quote: Quote | str | None,
                lowered: Mapping[str, int] | None = None) -> tuple[str, str] | None:
    """What approving with some lines unticked would do, as (kind, plain text), or None.

    ``kind`` is "info" or "warning"; ``quote`` is :meth:`Agent.quote_kept`'s answer, or None when it
    could not be computed (the sum of the ticked lines is then shown as an estimate).
    """
    items = card.item_lines
    fewer = {sku: n for sku, n in (lowered or {}).items() if sku in keep}
    if all(line.line in keep for line in items) and not fewer:
        return None
    kept = [line for line in items if line.line in keep]
    if not kept:
        return "warning", ("No line is ticked. To refund nothing, reject with a note instead.")
    declined = ", ".join(line.name for line in items if line.line not in keep)
    if fewer:
        lowered_text = ", ".join(f"{line.name} {fewer[line.line]} of the {line.units} units "
                                 "proposed" for line in kept if line.line in fewer)
        declined = "; ".join(filter(None, [declined, f"fewer units: {lowered_text}"]))
    if isinstance(quote, str):
        return "warning", f"The ticked lines cannot be approved: {quote}"
    if quote is None:
        total = sum(line.amount for line in kept)
        return "info", (f"Approving pays about {money(total)} for the ticked lines (an estimate: "
                        f"the return fee and shipping are re-computed on approval) instead of "
                        f"{money(card.amount)}. Declined: {declined}.")
    return "info", (f"Approving pays {money(quote.amount)} for the ticked lines instead of "
                    f"{money(card.amount)}. Declined: {declined}.")


def reminder(requested_at: float, after_hours: float, now: float) -> str | None:
    """``Waiting 40 min``, ``Waiting 26 h``: what a card says once a refund waited past the
    reminder time."""
    waited = now - requested_at
    if waited < after_hours * 3600:
        return None
    # In people's units: a 30-minute reminder said "Waiting 0 h" (issue 36).
    return f"Waiting {human_duration(waited)} for approval"


def limit_notice(amount: float, limit: float | None, before: float = 0.0) -> str | None:
    """What the card says when approving ``amount`` is above the signed-in approver's limit,
    with ``before`` already approved by them on the order (the limit is per order, in all:
    approving.limit_problem, which the decision runs)."""
    if limit is None or round(amount * 100) + round(before * 100) <= round(limit * 100):
        return None
    if round(before * 100) == 0:
        over = f"{money(amount)} is above your approval limit of {money(limit)}"
    else:
        over = (f"{money(amount)} would bring what you approved on this order to "
                f"{money(amount + before)} ({money(before)} before), above your approval "
                f"limit of {money(limit)} per order")
    return (f"Needs a lead: {over}. Send it to a lead (you can still reject it, or untick "
            "lines to bring it within your limit).")


@dataclass(frozen=True)
class ReviewAction:
    """The review's one confirm button: what it says, and what it does."""

    label: str
    hand_off: bool    # sends the refund to a lead instead of deciding it
    disabled: bool


def review_action(mode: str, pays: float, limit: float | None, before: float = 0.0,
                  two: bool = False, signed_off: bool = False,
                  problem: str | None = None) -> ReviewAction:
    """The confirm button of the review in ``mode`` (approve, ask, reject).

    Where approving would be refused for the approver's limit (``pays`` plus the ``before``
    they approved on the order), the button is *Send to a lead*, which works, never an
    Approve that errors: a refusal must offer the decision that works. ``two``: the order's
    total takes two people; ``signed_off``: the first of them is on record.
    """
    if mode == "approve" and limit_notice(pays, limit, before) is not None:
        return ReviewAction("Send to a lead", hand_off=True, disabled=False)
    if mode == "approve" and two and not signed_off:
        label = f"Sign off {money(pays)} (first of two)"
    else:
        label = {"approve": f"Approve {money(pays)}", "ask": "Send the question",
                 "reject": "Reject the refund"}[mode]
    return ReviewAction(label, hand_off=False, disabled=mode == "approve" and problem is not None)


def card_approve_label(amount: float, limit: float | None, before: float = 0.0) -> str:
    """The card's first button, which opens the review: *Send to a lead…* where approving is
    above what the signed-in approver may still approve on the order, else *Approve…*."""
    return "Send to a lead…" if limit_notice(amount, limit, before) else "Approve…"
