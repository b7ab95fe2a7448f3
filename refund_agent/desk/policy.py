"""The refund policy as pure functions: no I/O, no model, easy to test.

A refund is a set of order lines, each with a reason. What it pays is computed here, from the
order, the shop's policy terms, the lines, how many units of each and their reasons, and the
units other refunds already hold; the model never supplies a number this module has not
computed. The ledger's unit is the order line's units: a line of four glasses can be refunded
one glass at a time, over several refunds, but never beyond its four; a refund waiting for
approval reserves the units it names, so two tickets cannot both spend the same glass.
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
        units: how many of the line's units it holds; None means all of them (refunds made
            before units were counted, schema 7 and older, refunded whole lines).
    """

    reason: Reason | Literal["shipping"]
    state: Literal["refunded", "pending"]
    by: str
    amount_cents: int
    units: int | None = None


#: What refunds hold on an order, by line. A line can be held by several refunds at once (one
#: glass refunded, another waiting), so a value is a sequence of holds; a single Held is read as
#: a sequence of one (the common case, and how callers with one hold per line write it).
HeldMap = Mapping[str, "Held | Sequence[Held]"]


def holds(held: HeldMap) -> dict[str, list[Held]]:
    """Every line's holds as a list, whichever way ``held`` spells them."""
    return {line: [h] if isinstance(h, Held) else list(h) for line, h in held.items()}


def held_units(order: Order, line: str, holders: Sequence[Held], *,
               state: str | None = None, reason: str | None = None) -> int:
    """How many units of ``line`` these holds take (all of them for a hold without units)."""
    item = order.item(line)
    quantity = item.quantity if item is not None else 1
    return min(quantity, sum(quantity if h.units is None else h.units for h in holders
                             if (state is None or h.state == state)
                             and (reason is None or h.reason == reason)))


def units_left(order: Order, line: str, held: HeldMap) -> int:
    """The units of a line no refund holds yet (paid, approved or waiting)."""
    item = order.item(line)
    if item is None:
        return 0
    return item.quantity - held_units(order, line, all_held(order, held).get(line, []))


class QuotedLine(BaseModel):
    """One line of a refund: what it pays and the most the policy allows for it."""

    line: str
    name: str
    reason: Reason | Literal["shipping"]
    amount_cents: int
    allowed_cents: int   # the unit price times these units (shipping: the shipping paid)
    fee_cents: int = 0   # the return fee taken from this line
    units: int | None = None  # how many of the line's units (None: shipping)
    quantity: int | None = None  # how many units the line has (None: shipping)

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


class _Merged(dict):
    """Holds already merged with the shop's earlier refunds, so merging again adds nothing."""


def all_held(order: Order, held: HeldMap) -> dict[str, list[Held]]:
    """The holds of refunds in the store plus those refunded before (the shop's export)."""
    if isinstance(held, _Merged):
        return held
    merged = _Merged(holds(held))
    for past in order.refunds:
        for line in past.lines:
            item = order.item(line.line)
            units = line.units if item is not None else None
            full = (item.cents if units is None else to_cents(item.price) * units) if item \
                else order.shipping_cents
            amount = full if line.amount is None else to_cents(line.amount)
            merged.setdefault(line.line, []).append(
                Held(line.reason, "refunded", "an earlier refund", amount, units))
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


def _line_problem(order: Order, line: str, units: int | None,
                  held: Mapping[str, list[Held]]) -> str | None:
    item = order.item(line)
    holders = held.get(line, [])
    if line == SHIPPING:
        if holders:   # paid once, ever: say so, not that items are still open
            holder = holders[0]
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
    if units is not None and not 1 <= units <= item.quantity:
        return (f"{item.name} ({line}) has {item.quantity} unit"
                f"{'s' if item.quantity != 1 else ''}: ask for 1 to {item.quantity}, or leave "
                "units out for all that remain.")
    left = item.quantity - held_units(order, line, holders)
    if left == 0:
        refunded = [h for h in holders if h.state == "refunded"]
        if len(refunded) == len(holders):
            return f"{item.name} ({line}) has already been refunded ({refunded[0].by})."
        waiting = next(h for h in holders if h.state == "pending")
        return (f"{item.name} ({line}) is already in a refund waiting for approval "
                f"({waiting.by}); it cannot be requested twice.")
    if units is not None and units > left:
        taken = "; ".join(f"{held_units(order, line, [h])} {h.state} ({h.by})" for h in holders)
        return (f"{item.name} ({line}) has {left} of its {item.quantity} units left to refund "
                f"({taken}); ask for at most {left}.")
    return None


def _return_fees(lines: Sequence[tuple[int, int]], terms: PolicyTerms) -> list[int]:
    """The return fee each changed-mind line pays, given (cents, units returned) per line.

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


Requested = tuple[str, Reason] | tuple[str, Reason, "int | None"]


def requested_units(request: Requested) -> tuple[str, Reason, int | None]:
    """(line, reason, units) from a request written with or without its units."""
    line, reason, *rest = request
    return line, reason, (rest[0] if rest else None)


def quote_refund(order: Order, terms: PolicyTerms, requested: Sequence[Requested],
                 held: HeldMap, today: date, *, shipping: bool = True) -> Quote | str:
    """What refunding these units for these reasons pays, or why the policy does not allow it.

    Args:
        order: the order, with the refunds made before this desk existed.
        terms: the shop's policy numbers.
        requested: (line, reason) or (line, reason, units) per line; lines are skus of the
            order; units None (or left out) means all the units no other refund holds.
        held: what other refunds in the store hold (this refund's own lines left out).
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
    wanted: list[tuple[str, Reason, int]] = []
    for line, reason, units in map(requested_units, requested):
        if reason not in REASONS:
            return f"The reason for {line} must be one of {', '.join(REASONS)}, not {reason!r}."
        if line in seen:
            return f"Line {line} is named twice; name each line once."
        seen.add(line)
        problem = _line_problem(order, line, units, held)
        if problem:
            return problem
        if line != SHIPPING:
            left = order.item(line).quantity - held_units(order, line, held.get(line, []))
            wanted.append((line, reason, left if units is None else units))

    # Shipping named on its own is what the refunds that covered every item did not include
    # (they were proposed side by side); it is priced by the rule below like any other time.
    items = [(order.item(line), reason, units) for line, reason, units in wanted]
    returned = [(item, units) for item, reason, units in items if reason == "changed_mind"]
    fees = dict(zip([i.sku for i, _ in returned],
                    _return_fees([(to_cents(i.price) * n, n) for i, n in returned], terms),
                    strict=True))
    # Units the return fee eats entirely would be "refunded" for nothing and could never be
    # refunded again (say they turn out damaged), so they are left out rather than spent.
    eaten = [i.name for i, n in returned if to_cents(i.price) * n <= fees[i.sku]]
    if eaten:
        return (f"The return fee takes all of what {' and '.join(eaten)} would refund: leave "
                f"{'it' if len(eaten) == 1 else 'them'} out of a change-of-mind refund.")
    quoted = [QuotedLine(line=item.sku, name=item.name, reason=reason,
                         amount_cents=to_cents(item.price) * units - fees.get(item.sku, 0),
                         allowed_cents=to_cents(item.price) * units,
                         fee_cents=fees.get(item.sku, 0), units=units,
                         quantity=item.quantity)
              for item, reason, units in items]

    # Shipping is owed once every unit of every item is refunded as damaged: by this refund,
    # or by refunds already made (approved); units merely waiting elsewhere do not count yet.
    damaged_now = {line: units for line, reason, units in wanted if reason == "damaged"}
    every_unit_damaged = all(
        damaged_now.get(i.sku, 0) + held_units(order, i.sku, held.get(i.sku, []),
                                               state="refunded", reason="damaged")
        >= i.quantity for i in order.items)
    if (shipping and order.shipping_cents and SHIPPING not in held and every_unit_damaged):
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


def shipping_owed(order: Order, held: HeldMap) -> bool:
    """Every unit of every item refunded (or approved) as damaged, yet shipping not refunded."""
    merged = all_held(order, held)
    return bool(order.shipping_cents) and SHIPPING not in merged and all(
        held_units(order, i.sku, merged.get(i.sku, []), state="refunded", reason="damaged")
        >= i.quantity for i in order.items)


def refunded_cents(order: Order, held: HeldMap) -> int:
    """What refunds made (or approved, so about to be) pay on this order."""
    return sum(h.amount_cents for hs in all_held(order, held).values() for h in hs
               if h.state == "refunded")


def left_to_refund_cents(order: Order, held: HeldMap) -> int:
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
    units_left: int       # units no refund holds yet (what issue_refund may still ask for)
    units_refunded: int   # units refunded (or approved) already
    units_waiting: int    # units reserved by refunds waiting for approval
    unit_price: float
    if_damaged: float     # what the units left refund as damaged (0 when not refundable)
    if_changed_mind: float  # what they refund for a change of mind, before a per-refund fee


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
        holders = merged.get(item.sku, [])
        refunded = held_units(order, item.sku, holders, state="refunded")
        waiting = held_units(order, item.sku, holders, state="pending")
        left = max(0, item.quantity - refunded - waiting)
        if item.final_sale:
            status = "final sale"
        elif left == 0:
            status = "refunded" if waiting == 0 else "waiting for approval"
        elif closed:
            status = "not refundable: outside the window" if days is not None else (
                "not refundable: not delivered")
        else:
            status = "refundable"
        open_ = status == "refundable"
        unit = to_cents(item.price)
        per_item_fee = (min(terms.return_fee_cents * left, unit * left)
                        if terms.return_fee_per == "item" else 0)
        lines.append(LineFacts(
            line=item.sku, name=item.name, category=item.category, price=item.price,
            quantity=item.quantity, line_total=to_dollars(item.cents), final_sale=item.final_sale,
            status=status, units_left=left if not item.final_sale else 0,
            units_refunded=refunded, units_waiting=waiting, unit_price=item.price,
            if_damaged=to_dollars(unit * left) if open_ else 0.0,
            if_changed_mind=to_dollars(unit * left - per_item_fee) if open_ else 0.0))
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
    if any(i.quantity > 1 for i in order.items):
        notes.append("A line with several units can be refunded in part: give the units the "
                     "customer's problem concerns (for example 1 of 4), or null for all the "
                     "units left.")
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
