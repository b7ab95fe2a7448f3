"""The refund policy as pure functions: no I/O, no model, easy to test.

The model reads the policy text, but the numbers it turns on (days since delivery, what is left
to refund, the most the policy could ever allow) are computed here, so the model never has to
count days or add up earlier refunds, and so code can hold the line whatever the model says.
"""

from __future__ import annotations

import math
from datetime import date

from pydantic import BaseModel

from .shop import Order

WINDOW_DAYS = 30
RETURN_FEE_CENTS = 750


def cents(amount: float) -> int:
    return round(amount * 100)


def dollars(amount_cents: int) -> float:
    return round(amount_cents / 100, 2)


class ItemFacts(BaseModel):
    name: str
    category: str
    price: float
    quantity: int
    final_sale: bool


class PolicyFacts(BaseModel):
    """What the refund policy turns on for one order, computed on a given day."""

    order_id: str
    delivered: bool
    days_since_delivery: int | None
    window_days: int
    within_window: bool
    items: list[ItemFacts]
    final_sale_items: list[str]
    appliances: list[str]
    shipping: float
    return_fee: float
    paid: float
    refunded_so_far: float
    left_to_refund: float
    max_refund: float
    notes: list[str]


def _refunded_cents(order: Order) -> int:
    return sum(cents(r.amount) for r in order.refunds)


def refund_ceiling(order: Order, today: date) -> int:
    """The most the policy could allow for this order, in cents.

    That is every item that is not final sale at full price (the damaged case), plus shipping
    when nothing in the order is final sale (shipping needs every item to be damaged), capped at
    what is left of the order total. Zero outside the window or before delivery.
    """
    if order.delivered_on is None or (today - order.delivered_on).days > WINDOW_DAYS:
        return 0
    refundable = [i for i in order.items if not i.final_sale]
    ceiling = sum(i.cents for i in refundable)
    if refundable and len(refundable) == len(order.items):
        ceiling += cents(order.shipping)
    left = cents(order.total) - _refunded_cents(order)
    return max(0, min(ceiling, left))


def policy_facts(order: Order, today: date) -> PolicyFacts:
    """Compute the facts the policy turns on for ``order`` as of ``today``."""
    days = None if order.delivered_on is None else (today - order.delivered_on).days
    within = days is not None and days <= WINDOW_DAYS
    left = max(0, cents(order.total) - _refunded_cents(order))
    items = [
        ItemFacts(
            name=i.name, category=i.category, price=i.price, quantity=i.quantity,
            final_sale=i.final_sale,
        )
        for i in order.items
    ]
    notes: list[str] = []
    if days is None:
        notes.append("Not delivered yet: offer to cancel the order instead of a refund.")
    elif not within:
        notes.append(f"Delivered {days} days ago, past the {WINDOW_DAYS}-day window: no refund.")
        appliances = [i.name for i in order.items if i.category == "appliance"]
        if appliances:
            notes.append("Appliances past the window get a warranty repair or replacement.")
    if any(i.final_sale for i in order.items):
        notes.append("Final-sale items are never refunded.")
    notes.append("Change of mind: one $7.50 return fee per return, taken from the refund.")
    if _refunded_cents(order):
        notes.append("Earlier refunds reduce what is left to refund.")
    return PolicyFacts(
        order_id=order.order_id, delivered=days is not None, days_since_delivery=days,
        window_days=WINDOW_DAYS, within_window=within, items=items,
        final_sale_items=[i.name for i in order.items if i.final_sale],
        appliances=[i.name for i in order.items if i.category == "appliance"],
        shipping=order.shipping, return_fee=dollars(RETURN_FEE_CENTS), paid=order.total,
        refunded_so_far=dollars(_refunded_cents(order)), left_to_refund=dollars(left),
        max_refund=dollars(refund_ceiling(order, today)), notes=notes,
    )


def refund_problem(order: Order, amount: float, today: date) -> str | None:
    """Why a refund of ``amount`` for ``order`` cannot be proposed, or None if it can."""
    if amount != amount or amount <= 0:  # amount != amount catches NaN
        return "The amount must be a positive number of dollars."
    if math.isinf(amount * 100):  # infinity, or so large the cents overflow: no integer exists
        return f"The amount is more than the policy allows for order {order.order_id}."
    if abs(amount * 100 - round(amount * 100)) > 1e-6 or cents(amount) == 0:
        return "The amount must be in whole cents."
    ceiling = refund_ceiling(order, today)
    if ceiling == 0:
        return (f"Order {order.order_id} cannot be refunded under the policy "
                "(outside the window, not delivered, final sale, or already fully refunded).")
    if cents(amount) > ceiling:
        return (f"${amount:.2f} is more than the policy allows for order {order.order_id}: "
                f"at most ${dollars(ceiling):.2f}.")
    return None
