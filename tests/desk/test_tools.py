"""Tool schemas and the guards inside the read-only tools."""

import json

from refund_agent.config import PROJECT_ROOT
from refund_agent.desk import Shop, tool_schemas
from refund_agent.desk.policy import Held, Quote
from refund_agent.desk.tools import (
    CheckRefundPolicy,
    IssueRefund,
    LookupOrder,
    ShopTools,
    parse_args,
)
from refund_agent.outside import with_signature

SHOP = Shop(PROJECT_ROOT / "data")


def nothing_held(_order_id: str) -> dict[str, Held]:
    return {}


def coffee_maker(amount=None, summary="Cracked carafe.", order_id="A1043") -> IssueRefund:
    return IssueRefund(order_id=order_id, lines=[{"line": "POUR-GLS-01", "reason": "damaged"}],
                       amount=amount, summary=summary)


def test_schemas_are_strict_and_generated():
    schemas = {s["name"]: s for s in tool_schemas()}
    assert set(schemas) == {"lookup_order", "check_refund_policy", "issue_refund",
                            "send_customer_message", "escalate"}
    refund = schemas["issue_refund"]["parameters"]
    assert refund["additionalProperties"] is False and refund["required"] == [
        "order_id", "lines", "amount", "summary"]
    # The amount is an optional check: a number or null, never a string or a boolean.
    assert refund["properties"]["amount"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    line = refund["properties"]["lines"]["items"]
    assert line["additionalProperties"] is False and line["required"] == [
        "line", "reason", "units"]
    assert line["properties"]["reason"]["enum"] == ["damaged", "changed_mind"]
    # Units are a whole number or null (all that remain); strict mode needs the key present.
    assert line["properties"]["units"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert all(s["strict"] for s in schemas.values())
    assert "title" not in json.dumps(schemas)


def test_bad_arguments_become_messages_for_the_model():
    assert "Invalid arguments for issue_refund" in parse_args("issue_refund", '{"order_id": 1}')
    assert "Invalid arguments" in parse_args("lookup_order", "{not json")
    assert "extra" in parse_args("lookup_order", '{"order_id": "A1", "card": "x"}').lower()
    assert "no tool called 'pay_now'" in parse_args("pay_now", "{}")
    assert parse_args("lookup_order", '{"order_id": "A1043"}') == LookupOrder(order_id="A1043")
    # Order ids are canonical from the moment they are parsed.
    assert parse_args("lookup_order", '{"order_id": " #a 1043 "}') == LookupOrder(order_id="A1043")
    lines = '"lines": [{"line": "POUR-GLS-01", "reason": "damaged"}], "summary": "s"'
    for amount in ("true", '"48"', '"48.00"'):
        assert "Invalid arguments for issue_refund" in parse_args(
            "issue_refund", f'{{"order_id": "A1043", {lines}, "amount": {amount}}}')
    assert "Invalid arguments" in parse_args(
        "issue_refund", '{"order_id": "A1043", "lines": [{"line": "POUR-GLS-01", '
                        '"reason": "broken"}], "amount": null, "summary": "s"}')
    assert "summary: Field required" in parse_args(
        "issue_refund", '{"order_id": "A1043", "lines": [], "amount": null}')
    parsed = parse_args("issue_refund", f'{{"order_id": "a1043", {lines}, "amount": 48}}')
    assert parsed.order_id == "A1043" and parsed.amount == 48.0


def test_a_stranger_learns_nothing_about_an_order():
    stranger = ShopTools(SHOP, "mallory@example.com", nothing_held)
    found = stranger.lookup_order(LookupOrder(order_id="A1043"))
    missing = stranger.lookup_order(LookupOrder(order_id="A9999"))
    assert set(found) == {"error"} and "Maya" not in found["error"]
    # An existing and a missing order look the same, so order numbers cannot be probed.
    assert found["error"].replace("A1043", "X") == missing["error"].replace("A9999", "X")
    assert set(stranger.check_refund_policy(CheckRefundPolicy(order_id="A1043"))) == {"error"}
    refused = stranger.quote(coffee_maker())
    assert isinstance(refused, str) and "No order A1043 was found" in refused
    assert "Maya" not in refused and "POUR" not in refused


def test_owner_sees_the_order_case_insensitively():
    maya = ShopTools(SHOP, "Maya.Chen@Example.com", nothing_held)
    assert maya.lookup_order(LookupOrder(order_id="a1043"))["customer"]["name"] == "Maya Chen"


def test_the_owner_gets_a_quote_computed_by_the_policy():
    maya = ShopTools(SHOP, "maya.chen@example.com", nothing_held)
    quote = maya.quote(coffee_maker(order_id=" #a1043 "))
    assert isinstance(quote, Quote) and quote.order_id == "A1043"
    assert [(q.line, q.reason, q.amount_cents) for q in quote.lines] == [
        ("POUR-GLS-01", "damaged", 4800)]
    assert maya.quote(coffee_maker(amount=48)) == quote == maya.quote(coffee_maker(amount=48.0))
    # A stated amount that is not the computed one is refused with the computed figure.
    for wrong in (47.99, 48.01, 80.95, -48.0, 0.0, 1e308, float("inf"), float("nan")):
        refused = maya.quote(coffee_maker(amount=wrong))
        assert isinstance(refused, str) and refused.startswith("These lines refund $48.00, not")
    assert "summary" in maya.quote(coffee_maker(summary="   "))


def test_refunds_made_here_count_as_earlier_refunds():
    held = {"A1043": {"POUR-GLS-01": Held("damaged", "refunded", "approval call_1", 4800)}}
    maya = ShopTools(SHOP, "maya.chen@example.com", lambda order_id: held.get(order_id, {}))
    facts = maya.check_refund_policy(CheckRefundPolicy(order_id="A1043"))["facts"]
    assert (facts["refunded_so_far"], facts["left_to_refund"]) == (48.0, 32.95)
    status = {line["line"]: line["status"] for line in facts["lines"]}
    assert status["POUR-GLS-01"] != "refundable" and status["MUG-STN-2"] == "refundable"
    again = maya.quote(coffee_maker(summary="again"))
    assert isinstance(again, str) and "has already been refunded" in again
    # A line held by a refund waiting for approval is reserved just the same.
    held["A1043"] = {"POUR-GLS-01": Held("damaged", "pending", "approval call_2", 4800)}
    waiting = maya.quote(coffee_maker(summary="again"))
    assert isinstance(waiting, str) and "already in a refund waiting for approval" in waiting


def test_signature_is_added_exactly_once():
    sig = SHOP.info.signature
    once = with_signature("Hello", sig)
    assert once.endswith(sig) and once.count(sig) == 1
    assert with_signature(once, sig) == once
    assert with_signature("Hello\n\nWarmly,", sig) == once
