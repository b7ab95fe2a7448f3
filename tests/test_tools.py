"""Tool schemas and the guards inside the read-only tools."""

import json

from refund_agent import Shop, tool_schemas
from refund_agent.config import PROJECT_ROOT
from refund_agent.outbox import with_signature
from refund_agent.tools import CheckRefundPolicy, IssueRefund, LookupOrder, ShopTools, parse_args

SHOP = Shop(PROJECT_ROOT / "data")


def test_schemas_are_strict_and_generated():
    schemas = {s["name"]: s for s in tool_schemas()}
    assert set(schemas) == {"lookup_order", "check_refund_policy", "issue_refund",
                            "send_customer_message"}
    refund = schemas["issue_refund"]["parameters"]
    assert refund["additionalProperties"] is False and refund["required"] == [
        "order_id", "amount", "reason"]
    assert refund["properties"]["amount"]["type"] == "number"
    assert all(s["strict"] for s in schemas.values())
    assert "title" not in json.dumps(schemas)


def test_bad_arguments_become_messages_for_the_model():
    assert "Invalid arguments for issue_refund" in parse_args("issue_refund", '{"order_id": 1}')
    assert "Invalid arguments" in parse_args("lookup_order", "{not json")
    assert "extra" in parse_args("lookup_order", '{"order_id": "A1", "card": "x"}').lower()
    assert "no tool called 'pay_now'" in parse_args("pay_now", "{}")
    assert parse_args("lookup_order", '{"order_id": "A1043"}') == LookupOrder(order_id="A1043")


def test_a_stranger_learns_nothing_about_an_order():
    stranger = ShopTools(SHOP, "mallory@example.com", {})
    found = stranger.lookup_order(LookupOrder(order_id="A1043"))
    missing = stranger.lookup_order(LookupOrder(order_id="A9999"))
    assert set(found) == {"error"} and "Maya" not in found["error"]
    # An existing and a missing order look the same, so order numbers cannot be probed.
    assert found["error"].replace("A1043", "X") == missing["error"].replace("A9999", "X")
    assert set(stranger.check_refund_policy(CheckRefundPolicy(order_id="A1043"))) == {"error"}
    assert stranger.refund_problem(IssueRefund(order_id="A1043", amount=1, reason="r"))


def test_owner_sees_the_order_case_insensitively():
    maya = ShopTools(SHOP, "Maya.Chen@Example.com", {})
    assert maya.lookup_order(LookupOrder(order_id="a1043"))["customer"]["name"] == "Maya Chen"


def test_refunds_made_here_count_as_earlier_refunds():
    maya = ShopTools(SHOP, "maya.chen@example.com", {"A1043": 48.0})
    facts = maya.check_refund_policy(CheckRefundPolicy(order_id="A1043"))["facts"]
    assert (facts["refunded_so_far"], facts["left_to_refund"]) == (48.0, 32.95)
    assert maya.refund_problem(IssueRefund(order_id="A1043", amount=48, reason="again"))


def test_signature_is_added_exactly_once():
    sig = SHOP.info.signature
    once = with_signature("Hello", sig)
    assert once.endswith(sig) and once.count(sig) == 1
    assert with_signature(once, sig) == once
    assert with_signature("Hello\n\nWarmly,", sig) == once
