"""The refund policy's arithmetic, tested without any model."""

from datetime import date, timedelta

import pytest

from refund_agent import Shop, policy_facts, refund_ceiling, refund_problem
from refund_agent.config import PROJECT_ROOT
from refund_agent.shop import Item, Order

TODAY = date(2026, 6, 15)


@pytest.fixture(scope="module")
def shop() -> Shop:
    return Shop(PROJECT_ROOT / "data", today=TODAY)


def test_sample_orders_reproduce_the_guide(shop):
    maya, priya, tom = shop.order("A1043"), shop.order("a1066"), shop.order("#A1021")
    assert (maya.total, maya.shipping, [i.price for i in maya.items]) == (80.95, 6.95, [48, 26])
    assert maya.delivered_on == TODAY - timedelta(days=1)
    assert (priya.total, [i.final_sale for i in priya.items]) == (94.95, [True, False])
    assert (TODAY - tom.delivered_on).days == 47 and tom.items[0].category == "appliance"


def test_facts_for_damaged_order(shop):
    facts = policy_facts(shop.order("A1043"), TODAY)
    assert facts.days_since_delivery == 1 and facts.within_window
    assert facts.left_to_refund == 80.95
    # Every item could be damaged and nothing is final sale, so shipping can come back too.
    assert facts.max_refund == 80.95


def test_final_sale_caps_the_ceiling(shop):
    facts = policy_facts(shop.order("A1066"), TODAY)
    assert facts.final_sale_items == ["Gift card, $50"]
    assert facts.max_refund == 39.00  # the skillet only; no shipping with a final-sale item
    assert refund_problem(shop.order("A1066"), 94.95, TODAY).startswith("$94.95 is more")
    assert refund_problem(shop.order("A1066"), 31.50, TODAY) is None


def test_past_window_allows_nothing(shop):
    order = shop.order("A1021")
    facts = policy_facts(order, TODAY)
    assert not facts.within_window and facts.max_refund == 0
    assert any("warranty" in n for n in facts.notes)
    assert "cannot be refunded" in refund_problem(order, 10, TODAY)


def test_earlier_refunds_reduce_what_is_left(shop):
    facts = policy_facts(shop.order("A1058"), TODAY)
    assert (facts.refunded_so_far, facts.left_to_refund) == (32.00, 59.95)
    assert facts.max_refund == 59.95


def test_window_edge_and_undelivered(shop):
    order = shop.order("A1043")
    assert refund_ceiling(order, order.delivered_on + timedelta(days=30)) > 0
    assert refund_ceiling(order, order.delivered_on + timedelta(days=31)) == 0
    assert refund_ceiling(shop.order("A1074"), TODAY) == 0


@pytest.mark.parametrize("amount,problem", [
    (0, "positive"), (-5, "positive"), (float("nan"), "positive"), (10.005, "whole cents"),
    (80.96, "more than the policy allows"), (80.95, None), (0.01, None),
])
def test_refund_problem_amounts(shop, amount, problem):
    result = refund_problem(shop.order("A1043"), amount, TODAY)
    assert (result is None) if problem is None else (problem in result)


def test_money_is_added_in_cents():
    # 0.1 + 0.2 style drift must not let a refund slip a cent over the ceiling.
    items = [Item(sku=f"S{i}", name=f"Thing {i}", category="x", price=0.1) for i in range(3)]
    order = Order(order_id="Z1", customer={"name": "Z", "email": "z@example.com"},
                  ordered_on=TODAY, delivered_on=TODAY, payment_method="card", items=items,
                  shipping=0.2, total=0.5, refunds=[])
    assert refund_ceiling(order, TODAY) == 50
    assert refund_problem(order, 0.5, TODAY) is None
    assert refund_problem(order, 0.51, TODAY) is not None
