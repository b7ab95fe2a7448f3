"""The refund policy as pure functions: no I/O, no model, easy to test.

A refund is a set of order lines, each with a reason. What it pays is computed here, from the
order, the shop's policy terms, the lines and their reasons, and the lines other refunds
already hold; the model never supplies a number this module has not computed. The ledger's unit
is the order line: a line is refunded at most once, ever, and a refund waiting for approval
reserves its lines, so two tickets cannot both spend the same item.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

from pydantic import BaseModel

from .shop import Order, PolicyTerms, Reason, to_cents, to_dollars

SHIPPING = "SHIPPING"
REASONS: tuple[Reason, ...] = ("damaged", "changed_mind")


@dataclass(frozen=True)
class Held:
    """A line that some refund already holds.

    Attributes:
        reason: why it was (or is to be) refunded; shipping follows "every item damaged".
        state: "refunded" (paid, or approved and about to be paid) or "pending" (reserved by a
            refund waiting for approval).
        by: which refund holds it (an approval id, or "an earlier refund").
        amount_cents: what that refund pays for the line.
    """

    reason: Reason | Literal["shipping"]
    state: Literal["refunded", "pending"]
    by: str
    amount_cents: int


class QuotedLine(BaseModel):
    """One line of a refund: what it pays and the most the policy allows for it."""

    line: str
    name: str
    reason: Reason | Literal["shipping"]
    amount_cents: int
    allowed_cents: int   # the line's price times quantity (shipping: the shipping paid)
    fee_cents: int = 0   # the return fee taken from this line

    @property
    def amount(self) -> float:
        return to_dollars(self.amount_cents)


class Quote(BaseModel):
    """A refund the policy allows: its lines (shipping included when due) and its total."""

    order_id: str
    lines: list[QuotedLine]

    @property
    def total_cents(self) -> int:
        return sum(q.amount_cents for q in self.lines)

    @property
    def amount(self) -> float:
        return to_dollars(self.total_cents)

    def line_ids(self) -> list[str]:
        return [q.line for q in self.lines]


def days_since_delivery(order: Order, today: date) -> int | None:
    return None if order.delivered_on is None else (today - order.delivered_on).days


def all_held(order: Order, held: Mapping[str, Held]) -> dict[str, Held]:
    """The lines held by refunds in the store plus those refunded before (the shop's export)."""
    merged = dict(held)
    for past in order.refunds:
        for line in past.lines:
            item = order.item(line.line)
            full = item.cents if item else order.shipping_cents
            amount = full if line.amount is None else to_cents(line.amount)
            merged[line.line] = Held(line.reason, "refunded", "an earlier refund", amount)
    return merged


def window_problem(order: Order, terms: PolicyTerms, today: date) -> str | None:
    """Why nothing on this order can be refunded today, or None."""
    days = days_since_delivery(order, today)
    if days is None:
        return (f"Order {order.order_id} has not been delivered yet: offer to cancel it "
                "instead of a refund.")
    if days > terms.window_days:
        text = (f"Order {order.order_id} was delivered {days} days ago, past the "
                f"{terms.window_days}-day refund window.")
        covered = [i.name for i in order.items if i.category in terms.warranty_categories]
        if covered:
            text += (f" The {' and '.join(covered)} is covered by the manufacturer's warranty: "
                     "offer a repair or a replacement.")
        return text
    return None


def _line_problem(order: Order, line: str, held: Mapping[str, Held]) -> str | None:
    item = order.item(line)
    if line == SHIPPING:
        holder = held.get(SHIPPING)
        if holder is not None:   # paid once, ever: say so, not that items are still open
            return ("Shipping has already been refunded" if holder.state == "refunded" else
                    "Shipping is already in a refund waiting for approval") + f" ({holder.by})."
        if not shipping_owed(order, held):
            return ("Shipping is refunded only once every item of the order has been refunded "
                    "as damaged; the refund that completes that includes it by itself.")
        return None
    if item is None:
        lines = ", ".join(f"{i.sku} ({i.name})" for i in order.items)
        return f"Order {order.order_id} has no line {line!r}. Its lines: {lines}."
    if item.final_sale:
        return f"{item.name} ({line}) is final sale and is never refunded."
    holder = held.get(line)
    if holder is not None and holder.state == "refunded":
        return f"{item.name} ({line}) has already been refunded ({holder.by})."
    if holder is not None:
        return (f"{item.name} ({line}) is already in a refund waiting for approval "
                f"({holder.by}); it cannot be requested twice.")
    return None


def _return_fees(lines: Sequence[tuple[int, int]], terms: PolicyTerms) -> list[int]:
    """The return fee each changed-mind line pays, given (line cents, quantity) per line.

    Charged per item, each unit pays the fee (never more than its line). Charged per refund,
    the one fee is shared in proportion to the lines' prices (largest remainder), so no line
    pays for another and none is refunded for nothing unless the whole refund is.
    """
    fee = terms.return_fee_cents
    if terms.return_fee_per == "item":
        return [min(fee * qty, cents) for cents, qty in lines]
    subtotal = sum(cents for cents, _ in lines)
    if not lines or subtotal == 0:
        return [0] * len(lines)
    fee = min(fee, subtotal)
    shares = [fee * cents // subtotal for cents, _ in lines]
    by_remainder = sorted(range(len(lines)), key=lambda i: -(fee * lines[i][0] % subtotal))
    for i in by_remainder[: fee - sum(shares)]:
        shares[i] += 1
    return shares


def quote_refund(order: Order, terms: PolicyTerms, requested: Sequence[tuple[str, Reason]],
                 held: Mapping[str, Held], today: date, *, shipping: bool = True
                 ) -> Quote | str:
    """What refunding these lines for these reasons pays, or why the policy does not allow it.

    Args:
        order: the order, with the refunds made before this desk existed.
        terms: the shop's policy numbers.
        requested: (line, reason) pairs; lines are skus of the order.
        held: lines other refunds in the store hold (this refund's own lines left out).
        today: the day the window is counted to.
        shipping: whether shipping may be added (a decision re-quotes with the proposal's
            shipping, so an approval can never pay more than the card showed).
    """
    problem = window_problem(order, terms, today)
    if problem:
        return problem
    if not requested:
        return "Name at least one line of the order to refund."
    held = all_held(order, held)
    seen: set[str] = set()
    for line, reason in requested:
        if reason not in REASONS:
            return f"The reason for {line} must be one of {', '.join(REASONS)}, not {reason!r}."
        if line in seen:
            return f"Line {line} is named twice; name each line once."
        seen.add(line)
        problem = _line_problem(order, line, held)
        if problem:
            return problem

    # Shipping named on its own is what the refunds that covered every item did not include
    # (they were proposed side by side); it is priced by the rule below like any other time.
    items = [(order.item(line), reason) for line, reason in requested if line != SHIPPING]
    returned = [item for item, reason in items if reason == "changed_mind"]
    fees = dict(zip([i.sku for i in returned],
                    _return_fees([(i.cents, i.quantity) for i in returned], terms), strict=True))
    # A line the return fee eats entirely would be "refunded" for nothing and could never be
    # refunded again (say it turns out damaged), so it is left out rather than spent.
    eaten = [i.name for i in returned if i.cents <= fees[i.sku]]
    if eaten:
        return (f"The return fee takes all of what {' and '.join(eaten)} would refund: leave "
                f"{'it' if len(eaten) == 1 else 'them'} out of a change-of-mind refund.")
    quoted = [QuotedLine(line=item.sku, name=item.name, reason=reason,
                         amount_cents=item.cents - fees.get(item.sku, 0),
                         allowed_cents=item.cents, fee_cents=fees.get(item.sku, 0))
              for item, reason in items]

    damaged_now = {line for line, reason in requested if reason == "damaged"}
    damaged_before = {line for line, h in held.items()
                      if h.state == "refunded" and h.reason == "damaged"}
    every_item_damaged = all(i.sku in damaged_now | damaged_before for i in order.items)
    if (shipping and order.shipping_cents and SHIPPING not in held and every_item_damaged):
        quoted.append(QuotedLine(line=SHIPPING, name="Shipping", reason="shipping",
                                 amount_cents=order.shipping_cents,
                                 allowed_cents=order.shipping_cents))

    quote = Quote(order_id=order.order_id, lines=quoted)
    # The per-line rules already keep every refund inside what was paid (an order's total is
    # its lines plus shipping, checked at load); this is the policy's own ceiling, kept as a
    # second, independent guard.
    left = left_to_refund_cents(order, held)
    if quote.total_cents > left:
        return (f"${quote.amount:.2f} is more than is left to refund on order "
                f"{order.order_id} (${to_dollars(left):.2f}).")
    return quote


def shipping_owed(order: Order, held: Mapping[str, Held]) -> bool:
    """Every item refunded (or approved) as damaged, yet shipping not refunded."""
    return bool(order.shipping_cents) and SHIPPING not in held and all(
        (h := held.get(i.sku)) is not None and h.state == "refunded" and h.reason == "damaged"
        for i in order.items)


def refunded_cents(order: Order, held: Mapping[str, Held]) -> int:
    """What refunds made (or approved, so about to be) pay on this order."""
    return sum(h.amount_cents for h in all_held(order, held).values() if h.state == "refunded")


def left_to_refund_cents(order: Order, held: Mapping[str, Held]) -> int:
    return max(0, order.total_cents - refunded_cents(order, held))


# -- the facts the model reads ------------------------------------------------------------------

class LineFacts(BaseModel):
    line: str
    name: str
    category: str
    price: float
    quantity: int
    line_total: float
    final_sale: bool
    status: str           # refundable, final sale, refunded, waiting for approval, outside window
    if_damaged: float     # what this line refunds as damaged (0 when not refundable)
    if_changed_mind: float  # what it refunds for a change of mind, before a per-refund fee


class PolicyFacts(BaseModel):
    """What the refund policy turns on for one order, computed on a given day."""

    order_id: str
    delivered: bool
    days_since_delivery: int | None
    window_days: int
    within_window: bool
    lines: list[LineFacts]
    shipping: float
    shipping_refundable: bool
    shipping_owed: bool   # every item was refunded as damaged, shipping not yet: request SHIPPING
    warranty: list[str]   # items the manufacturer's warranty covers instead, past the window
    return_fee: float
    return_fee_per: str
    paid: float
    refunded_so_far: float
    left_to_refund: float
    notes: list[str]


def policy_facts(order: Order, terms: PolicyTerms, held: Mapping[str, Held],
                 today: date) -> PolicyFacts:
    """The facts the policy turns on for ``order`` as of ``today``, line by line."""
    days = days_since_delivery(order, today)
    closed = window_problem(order, terms, today)
    merged = all_held(order, held)
    lines = []
    for item in order.items:
        holder = merged.get(item.sku)
        if item.final_sale:
            status = "final sale"
        elif holder is not None:
            status = "refunded" if holder.state == "refunded" else "waiting for approval"
        elif closed:
            status = "not refundable: outside the window" if days is not None else (
                "not refundable: not delivered")
        else:
            status = "refundable"
        open_ = status == "refundable"
        per_item_fee = (min(terms.return_fee_cents * item.quantity, item.cents)
                        if terms.return_fee_per == "item" else 0)
        lines.append(LineFacts(
            line=item.sku, name=item.name, category=item.category, price=item.price,
            quantity=item.quantity, line_total=to_dollars(item.cents), final_sale=item.final_sale,
            status=status, if_damaged=to_dollars(item.cents) if open_ else 0.0,
            if_changed_mind=to_dollars(item.cents - per_item_fee) if open_ else 0.0))
    notes: list[str] = []
    if closed:
        notes.append(closed)
    if any(i.final_sale for i in order.items):
        notes.append("Final-sale lines are never refunded.")
    fee = f"${terms.return_fee:.2f}"
    notes.append(f"Change of mind: a {fee} return fee "
                 + ("per refund, shared by the changed-mind lines in it." if
                    terms.return_fee_per == "refund" else "per item returned."))
    notes.append("Call issue_refund with the lines and a reason per line; the amount is "
                 "computed for you.")
    shipping_open = bool(order.shipping_cents) and SHIPPING not in merged and not any(
        i.final_sale for i in order.items)
    return PolicyFacts(
        order_id=order.order_id, delivered=days is not None, days_since_delivery=days,
        window_days=terms.window_days, within_window=closed is None, lines=lines,
        shipping=order.shipping, shipping_refundable=shipping_open and closed is None,
        shipping_owed=closed is None and shipping_owed(order, merged),
        warranty=[i.name for i in order.items if days is not None and days > terms.window_days
                  and i.category in terms.warranty_categories],
        return_fee=terms.return_fee, return_fee_per=terms.return_fee_per, paid=order.total,
        refunded_so_far=to_dollars(refunded_cents(order, held)),
        left_to_refund=to_dollars(left_to_refund_cents(order, held)), notes=notes,
    )
