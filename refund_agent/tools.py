"""The four function tools the model gets: their argument models, schemas and read-only logic.

Schemas are generated from the pydantic models (strict: every field required, nothing extra),
so the JSON the model sees and the validation the code does can never drift apart. The two
tools with side effects (``issue_refund`` and ``send_customer_message``) are carried out by the
agent, which owns the approval flow and the idempotency keys; here they are only validated.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .policy import policy_facts, refund_problem
from .shop import Order, PastRefund, Shop


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LookupOrder(_Args):
    order_id: str = Field(description="The order number, for example A1234.")


class CheckRefundPolicy(_Args):
    order_id: str = Field(description="The order number the refund is about.")


class IssueRefund(_Args):
    order_id: str = Field(description="The order to refund.")
    amount: float = Field(description="Refund amount in US dollars, at most what the policy "
                                      "allows.")
    reason: str = Field(description="One sentence for the approver: what is refunded and why.")


class SendCustomerMessage(_Args):
    message: str = Field(description="The email body. It goes only to the customer who wrote in; "
                                     "the shop's signature is added automatically.")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[_Args]


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("lookup_order", "Look up an order: items, prices, dates, payment method and earlier "
         "refunds. Only orders placed by the customer who wrote in are visible.", LookupOrder),
    Tool("check_refund_policy", "Get the refund policy plus the facts it depends on for one "
         "order, computed for you: days since delivery, whether it is inside the window, "
         "final-sale items, what is left to refund and the most the policy allows.",
         CheckRefundPolicy),
    Tool("issue_refund", "Propose a refund. A person must approve it first; the output tells "
         "you whether it was issued or rejected (with the reviewer's note).", IssueRefund),
    Tool("send_customer_message", "Email the customer who wrote in.", SendCustomerMessage),
)}


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Make a pydantic JSON schema strict-mode friendly: no titles, all fields required."""
    schema = {k: v for k, v in schema.items() if k != "title"}
    schema["properties"] = {
        name: {k: v for k, v in prop.items() if k != "title"}
        for name, prop in schema["properties"].items()
    }
    schema["required"] = list(schema["properties"])
    schema["additionalProperties"] = False
    return schema


@functools.cache
def _tool_schemas_json() -> str:
    return json.dumps([
        {"type": "function", "name": t.name, "description": t.description,
         "parameters": _strict(t.args.model_json_schema()), "strict": True}
        for t in TOOLS.values()
    ])


def tool_schemas() -> list[dict[str, Any]]:
    """The tools in the Responses API's function-tool format (a fresh copy each call).

    Generating the schemas takes pydantic a few hundred microseconds and every turn sends them,
    so they are generated once and copied from their JSON text.
    """
    return json.loads(_tool_schemas_json())


def parse_args(name: str, arguments: str) -> _Args | str:
    """Validate a call's arguments; a string is an error message for the model."""
    tool = TOOLS.get(name)
    if tool is None:
        return f"There is no tool called {name!r}. Use one of: {', '.join(TOOLS)}."
    try:
        return tool.args.model_validate_json(arguments or "{}")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                             for e in exc.errors())
        return f"Invalid arguments for {name}: {problems}."


def as_output(value: dict[str, Any]) -> str:
    return json.dumps(value, default=str)


class ShopTools:
    """The read-only tools, bound to one shop and one customer's address.

    Args:
        shop: the shop's data.
        sender: the address the request came from; only that customer's orders are visible.
        refunded_elsewhere: order id -> dollars refunded through the payment provider since the
            data was exported (so "left to refund" stays true after this agent's refunds).
    """

    def __init__(self, shop: Shop, sender: str, refunded_elsewhere: Mapping[str, float]
                 ) -> None:
        self.shop, self.sender, self.refunded_elsewhere = shop, sender, refunded_elsewhere

    def _owned_order(self, order_id: str) -> Order | str:
        order = self.shop.order(order_id)
        # An unknown order and someone else's order get the same answer, so a stranger cannot
        # probe which order numbers exist.
        if order is None or order.customer.email.lower() != self.sender.strip().lower():
            return (f"No order {order_id} was found for {self.sender}. Ask the customer to check "
                    "the order number, or to write from the address they ordered with.")
        extra = self.refunded_elsewhere.get(order.order_id, 0.0)
        if extra:
            earlier = PastRefund(amount=extra, on=self.today, reason="Refunded by this desk")
            order = order.model_copy(update={"refunds": [*order.refunds, earlier]})
        return order

    @property
    def today(self) -> date:
        return self.shop.today

    def lookup_order(self, args: LookupOrder) -> dict[str, Any]:
        order = self._owned_order(args.order_id)
        if isinstance(order, str):
            return {"error": order}
        return order.model_dump(mode="json")

    def check_refund_policy(self, args: CheckRefundPolicy) -> dict[str, Any]:
        order = self._owned_order(args.order_id)
        if isinstance(order, str):
            return {"error": order}
        facts = policy_facts(order, self.today)
        return {"policy": self.shop.policy_text, "facts": facts.model_dump(mode="json")}

    def refund_problem(self, args: IssueRefund) -> str | None:
        """Why this refund cannot be proposed (or issued), or None if the policy allows it."""
        order = self._owned_order(args.order_id)
        if isinstance(order, str):
            return order
        if not args.reason.strip():
            return "Give a reason for the refund, for the person who approves it."
        return refund_problem(order, args.amount, self.today)

