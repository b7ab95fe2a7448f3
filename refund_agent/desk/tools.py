"""The refund desk's five tools: their argument models, their declarations' read-only side
(ShopTools: look-ups and pricing) and the refund quote.

Order ids are made canonical while the arguments are parsed, so no later code sees a raw
spelling. The two tools with side effects (``issue_refund``, which needs approval, and
``send_customer_message``, an effect) are carried out by actions.py under the call's
idempotency key; here they are only declared, validated and priced. ``escalate`` raises the
ticket to a team lead (stored once per call): it pays and sends nothing, so the agent may tell
the customer a lead will look only after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict

from ..intake import same_address
from ..tools import Tool, ToolKind, at_most, parse_call, schemas
from .policy import HeldMap, Quote, policy_facts, quote_refund, units_left
from .shop import MAX_DOLLARS, Order, Reason, Shop, canonical_order_id, to_cents

OrderId = Annotated[str, AfterValidator(canonical_order_id),
                    Field(description="The order number, for example A1234.")]
HeldLines = Callable[[str], HeldMap]

# The most a model may write into each text argument, in characters. Everything it writes is
# stored, shown to a person and sent back to it on every later turn: a 2 MB summary froze the
# review for two minutes and grew the store by 12.8 MB. Over the cap, the call fails as a tool
# error naming the cap, and the model can try again, shorter. (Checked by a validator, not by
# ``max_length``, so the tool schemas the model is sent stay as they were.)
MAX_SUMMARY_CHARS = 1_000      # "one or two sentences" for the approver and the customer
MAX_MESSAGE_CHARS = 10_000     # an email to the customer
MAX_SKU_CHARS = 100


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LookupOrder(_Args):
    order_id: OrderId


class CheckRefundPolicy(_Args):
    order_id: OrderId


class RefundLine(_Args):
    line: Annotated[str, at_most(MAX_SKU_CHARS, "sku")] = Field(
        description="The line's sku, as lookup_order shows it.")
    reason: Reason = Field(description="damaged: arrived damaged or defective. changed_mind: "
                                       "unused, and the customer no longer wants it.")
    # Strict function calling requires every property, so "all the units" is null rather than
    # a missing field; a number must be a JSON integer (no "2", no 2.5, no true).
    units: Annotated[int, Strict()] | None = Field(
        default=None,
        description="How many of the line's units to refund (1 of 4 glasses: 1), or null for "
                    "all the units not yet refunded.")


class IssueRefund(_Args):
    order_id: OrderId
    lines: list[RefundLine] = Field(description="The order lines to refund, each once, each "
                                                "with its reason.")
    amount: Annotated[float, Strict()] | None = Field(
        description="Optional check: the total in US dollars you expect, or null. The amount "
                    "is computed from the lines by the policy; a different figure fails the "
                    "call and tells you the computed one.")
    summary: Annotated[str, at_most(MAX_SUMMARY_CHARS, "summary")] = Field(
        description="One or two sentences for the approver and the customer: what is "
                    "refunded and why.")

    def requested(self) -> list[tuple[str, Reason, int | None]]:
        return [(line.line.strip(), line.reason, line.units) for line in self.lines]


class SendCustomerMessage(_Args):
    message: Annotated[str, at_most(MAX_MESSAGE_CHARS, "message")] = Field(
        description="The email body. It goes only to the customer who wrote in; the "
                    "shop's signature is added automatically.")


class Escalate(_Args):
    kind: Literal["threat", "manager", "policy_exception", "cannot_read"] = Field(
        description="threat: the customer threatens a chargeback or bank dispute, a bad "
                    "review or legal action. manager: they ask for a manager or supervisor. "
                    "policy_exception: they ask for something the policy does not allow and "
                    "you cannot grant. cannot_read: you cannot read or handle the email "
                    "yourself (a language you do not read), so a person must answer it.")
    reason: Annotated[str, at_most(MAX_SUMMARY_CHARS, "reason")] = Field(
        description="One sentence for the lead: what the customer said and wants.")


# The refund desk's tools as the model sees them; the functions that carry them out are
# bound in desk/actions.py (REFUND_TOOLS), which owns the approval flow and the idempotency keys.
TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("lookup_order", "Look up an order: its lines (sku, item, price, quantity, units left "
         "to refund), dates, payment method and earlier refunds. Only orders placed by the "
         "customer who wrote in are visible.", LookupOrder),
    Tool("check_refund_policy", "Get the refund policy plus the facts it depends on for one "
         "order, computed for you line by line: days since delivery, whether it is inside the "
         "window, each line's status and what it refunds as damaged or for a change of mind.",
         CheckRefundPolicy),
    Tool("issue_refund", "Propose a refund of some order lines, each with its reason and how "
         "many of its units (null: all that remain). The amount is computed by the policy. A "
         "person must approve it first, and may approve "
         "only some lines; the output says what was refunded, declined or rejected, with the "
         "reviewer's note.", IssueRefund, ToolKind.NEEDS_APPROVAL, done_status="refunded"),
    Tool("send_customer_message", "Email the customer who wrote in.", SendCustomerMessage,
         ToolKind.EFFECT),
    # Its only write, the escalation, is saved in the transaction that saves its output
    # (escalations.py), so like a look-up it may simply run again after a crash; and it is
    # never held back beside an undecided proposal, since it promises nothing that did not
    # happen.
    Tool("escalate", "Raise this ticket to a team lead, who sees it in the desk's escalation "
         "queue. Call it once when the customer threatens (chargeback, bad review, legal "
         "action), asks for a manager, or asks for an exception the policy does not allow. It "
         "sends and pays nothing.", Escalate, ToolKind.READ_ONLY),
)}


def tool_schemas() -> list[dict[str, Any]]:
    """The refund desk's tools in the Responses API's function-tool format."""
    return schemas(TOOLS)


def parse_args(name: str, arguments: str) -> BaseModel | str:
    """Validate a refund desk call's arguments; a string is an error message for the model."""
    return parse_call(TOOLS, name, arguments)


class ShopTools:
    """The read-only tools and the refund pricing, bound to one shop and one customer.

    Args:
        shop: the shop's data.
        sender: the address the request came from; only that customer's orders are visible.
        held: order id -> the lines refunds in the store hold on it.
    """

    def __init__(self, shop: Shop, sender: str, held: HeldLines) -> None:
        self.shop, self.sender, self.held = shop, sender, held

    def owned_order(self, order_id: str) -> Order | str:
        """The customer's order, or a message for the model (the same for someone else's)."""
        order = self.shop.order(order_id)
        # An unknown order and someone else's order get the same answer, so a stranger cannot
        # probe which order numbers exist.
        # Compared in canonical form; a look-alike sender (a KELVIN SIGN for K) matches no one.
        if order is None or not same_address(order.customer.email, self.sender):
            return (f"No order {order_id} was found for {self.sender}. Ask the customer to check "
                    "the order number, or to write from the address they ordered with.")
        return order

    def lookup_order(self, args: LookupOrder) -> dict[str, Any]:
        order = self.owned_order(args.order_id)
        if isinstance(order, str):
            return {"error": order}
        held = self.held(order.order_id)
        out = order.model_dump(mode="json")
        for item in out["items"]:
            item["units_left"] = 0 if item["final_sale"] else units_left(order, item["sku"], held)
        return out

    def check_refund_policy(self, args: CheckRefundPolicy) -> dict[str, Any]:
        order = self.owned_order(args.order_id)
        if isinstance(order, str):
            return {"error": order}
        facts = policy_facts(order, self.shop.terms, self.held(order.order_id), self.shop.today)
        return {"policy": self.shop.policy_text, "facts": facts.model_dump(mode="json")}

    def quote(self, args: IssueRefund, held: HeldMap | None = None) -> Quote | str:
        """What this refund pays under the policy, or why it cannot be proposed.

        Args:
            args: the model's arguments (order id already canonical).
            held: the lines other refunds hold, when the caller read them inside its own
                transaction; read from the store otherwise.
        """
        order = self.owned_order(args.order_id)
        if isinstance(order, str):
            return order
        if not args.summary.strip():
            return "Give a summary of the refund, for the person who approves it."
        held = self.held(order.order_id) if held is None else held
        quote = quote_refund(order, self.shop.terms, args.requested(), held, self.shop.today)
        if isinstance(quote, str) or args.amount is None:
            return quote
        stated = args.amount
        if (not math.isfinite(stated) or abs(stated) > MAX_DOLLARS
                or to_cents(stated) != quote.total_cents):
            breakdown = "; ".join(f"{q.name} ({q.reason}) ${q.amount:.2f}" for q in quote.lines)
            return (f"These lines refund ${quote.amount:.2f}, not {stated}: {breakdown}. "
                    f"Call issue_refund again with amount {quote.amount} or null.")
        return quote
