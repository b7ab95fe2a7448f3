"""The refund policy's arithmetic, tested without any model."""

import json
import shutil
from datetime import date, timedelta

import pytest

from refund_agent import ConfigError
from refund_agent.config import PROJECT_ROOT
from refund_agent.desk import Shop, policy_facts, quote_refund
from refund_agent.desk.policy import Held, Quote
from refund_agent.desk.shop import Item, Order, PolicyTerms, canonical_order_id

TODAY = date(2026, 6, 15)


@pytest.fixture(scope="module")
def shop() -> Shop:
    return Shop(PROJECT_ROOT / "data", today=TODAY)


def quote(shop: Shop, order_id: str, *lines, held=None, terms=None) -> Quote | str:
    return quote_refund(shop.order(order_id), terms or shop.terms, list(lines), held or {},
                        TODAY)


def test_sample_orders_reproduce_the_guide(shop):
    maya, priya, tom = shop.order("A1043"), shop.order("a1066"), shop.order("#A1021")
    assert (maya.total, maya.shipping, [i.price for i in maya.items]) == (80.95, 6.95, [48, 26])
    assert maya.delivered_on == TODAY - timedelta(days=1)
    assert (priya.total, [i.final_sale for i in priya.items]) == (94.95, [True, False])
    assert (TODAY - tom.delivered_on).days == 47 and tom.items[0].category == "appliance"


@pytest.mark.parametrize("spelling", ["A1043", "#A1043", " A1043", "A1043 ", "a1043", "#a 1043",
                                      "A 1043", "\tA1043\n", "Ａ１０４３", "# A1043"])
def test_every_spelling_of_an_order_id_is_one_id(shop, spelling):
    assert canonical_order_id(spelling) == "A1043"
    assert shop.order(spelling).order_id == "A1043"


def test_damaged_line_is_refunded_in_full(shop):
    q = quote(shop, "A1043", ("POUR-GLS-01", "damaged"))
    assert q.total_cents == 4800 and q.line_ids() == ["POUR-GLS-01"]


def test_shipping_only_when_every_item_is_damaged(shop):
    assert quote(shop, "A1043", ("POUR-GLS-01", "damaged"),
                 ("MUG-STN-2", "damaged")).total_cents == 8095
    # The coffee maker refunded as damaged earlier, the mugs damaged now: shipping comes too.
    held = {"POUR-GLS-01": Held("damaged", "refunded", "approval x", 4800)}
    q = quote(shop, "A1043", ("MUG-STN-2", "damaged"), held=held)
    assert q.line_ids() == ["MUG-STN-2", "SHIPPING"] and q.total_cents == 2600 + 695
    # ...but not while that earlier refund is only waiting for approval.
    pending = {"POUR-GLS-01": Held("damaged", "pending", "approval x", 4800)}
    assert quote(shop, "A1043", ("MUG-STN-2", "damaged"), held=pending).total_cents == 2600


def test_shipping_left_out_by_two_side_by_side_refunds_can_be_requested(shop):
    # Both items went out as damaged in two refunds proposed while the other waited, so
    # neither included shipping; once both are refunded, shipping is owed and can be named.
    both = {"POUR-GLS-01": Held("damaged", "refunded", "approval a", 4800),
            "MUG-STN-2": Held("damaged", "refunded", "approval b", 2600)}
    facts = policy_facts(shop.order("A1043"), shop.terms, both, TODAY)
    assert facts.shipping_owed and facts.left_to_refund == 6.95
    q = quote(shop, "A1043", ("SHIPPING", "damaged"), held=both)
    assert q.line_ids() == ["SHIPPING"] and q.total_cents == 695
    with_it = {**both, "SHIPPING": Held("shipping", "refunded", "approval c", 695)}
    assert "Shipping has already been refunded (approval c)" in quote(
        shop, "A1043", ("SHIPPING", "damaged"), held=with_it)
    one_changed_mind = {**both, "MUG-STN-2": Held("changed_mind", "refunded", "b", 1850)}
    assert "only once every item" in quote(shop, "A1043", ("SHIPPING", "damaged"),
                                           held=one_changed_mind)


def test_mixed_request_charges_the_fee_only_on_the_returned_line(shop):
    q = quote(shop, "A1043", ("POUR-GLS-01", "damaged"), ("MUG-STN-2", "changed_mind"))
    assert [(x.line, x.amount_cents, x.fee_cents) for x in q.lines] == [
        ("POUR-GLS-01", 4800, 0), ("MUG-STN-2", 1850, 750)]


def test_final_sale_never_and_no_shipping_with_a_final_sale_item(shop):
    assert "final sale" in quote(shop, "A1066", ("GIFT-50", "damaged"))
    assert quote(shop, "A1066", ("SKL-CI-10", "damaged")).total_cents == 3900
    assert quote(shop, "A1066", ("SKL-CI-10", "changed_mind")).total_cents == 3150


def test_a_line_is_refunded_once_and_reserved_while_pending(shop):
    refunded = {"SKL-CI-10": Held("damaged", "refunded", "approval a", 3900)}
    assert "already been refunded" in quote(shop, "A1066", ("SKL-CI-10", "damaged"),
                                            held=refunded)
    pending = {"SKL-CI-10": Held("damaged", "pending", "approval b", 3900)}
    assert "waiting for approval (approval b)" in quote(shop, "A1066", ("SKL-CI-10", "damaged"),
                                                         held=pending)
    # A refund from the shop's own export holds its line too.
    assert "already been refunded" in quote(shop, "A1058", ("NAP-LIN-4", "damaged"))


@pytest.mark.parametrize("lines,problem", [
    ([], "at least one line"),
    ([("POUR-GLS-01", "damaged"), ("POUR-GLS-01", "changed_mind")], "named twice"),
    ([("NOPE", "damaged")], "has no line 'NOPE'"),
    ([("SHIPPING", "damaged")], "Shipping is refunded only once every item"),
    ([("POUR-GLS-01", "because")], "must be one of"),
])
def test_malformed_requests_are_explained(shop, lines, problem):
    assert problem in quote(shop, "A1043", *lines)


def test_past_window_and_undelivered_allow_nothing(shop):
    text = quote(shop, "A1021", ("MIX-STD-5Q", "damaged"))
    assert "past the 30-day refund window" in text and "warranty" in text
    assert "not been delivered" in quote(shop, "A1074", ("KTL-ENM-2L", "damaged"))
    order = shop.order("A1043")
    edge = order.delivered_on + timedelta(days=30)
    assert isinstance(quote_refund(order, shop.terms, [("MUG-STN-2", "damaged")], {}, edge), Quote)
    assert isinstance(quote_refund(order, shop.terms, [("MUG-STN-2", "damaged")], {},
                                   edge + timedelta(days=1)), str)


def test_facts_line_by_line(shop):
    facts = policy_facts(shop.order("A1058"), shop.terms, {}, TODAY)
    status = {line.line: (line.status, line.if_damaged, line.if_changed_mind)
              for line in facts.lines}
    assert status == {"NAP-LIN-4": ("refunded", 0.0, 0.0),
                      "BRD-OAK-M": ("refundable", 54.0, 54.0)}
    assert (facts.refunded_so_far, facts.left_to_refund) == (32.00, 59.95)


def test_per_refund_fee_is_shared_in_proportion_and_never_zeroes_a_line():
    terms = PolicyTerms(window_days=30, return_fee=7.50, return_fee_per="refund")
    items = [Item(sku="A", name="Mug", category="x", price=5.00),
             Item(sku="B", name="Bowl", category="x", price=5.00),
             Item(sku="C", name="Vase", category="x", price=0.01)]
    order = Order(order_id="Z1", customer={"name": "Z", "email": "z@example.com"},
                  ordered_on=TODAY, delivered_on=TODAY, payment_method="card", items=items,
                  shipping=0, total=10.01, refunds=[])
    q = quote_refund(order, terms, [("A", "changed_mind"), ("B", "changed_mind")], {}, TODAY)
    assert [x.amount_cents for x in q.lines] == [125, 125] and q.total_cents == 250
    eaten = quote_refund(order, terms, [("C", "changed_mind")], {}, TODAY)
    assert "return fee takes all of what Vase" in eaten


def test_per_item_fee_is_charged_per_unit():
    terms = PolicyTerms(window_days=30, return_fee=2.00, return_fee_per="item")
    items = [Item(sku="A", name="Glass", category="x", price=4.00, quantity=3)]
    order = Order(order_id="Z2", customer={"name": "Z", "email": "z@example.com"},
                  ordered_on=TODAY, delivered_on=TODAY, payment_method="card", items=items,
                  shipping=0, total=12.00, refunds=[])
    q = quote_refund(order, terms, [("A", "changed_mind")], {}, TODAY)
    assert q.total_cents == 1200 - 600


def test_a_14_day_window_and_5_dollar_fee_by_editing_the_data_alone(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(PROJECT_ROOT / "data", data)
    shop_json = json.loads((data / "shop.json").read_text())
    shop_json["policy"].update(window_days=14, return_fee=5.00, return_fee_per="item")
    (data / "shop.json").write_text(json.dumps(shop_json))
    shop = Shop(data, today=TODAY)
    assert "for 14 days after delivery" in shop.policy_text and "$5.00" in shop.policy_text
    assert "charged for each item returned" in shop.policy_text
    # A1058 was delivered 12 days ago: inside 14 days. The board for a change of mind: 54 - 5.
    assert quote(shop, "A1058", ("BRD-OAK-M", "changed_mind")).total_cents == 4900
    # A1066, delivered 6 days ago, is inside; an order delivered 16 days ago would not be.
    orders = json.loads((data / "orders.json").read_text())
    orders["orders"][3]["delivered_days_ago"] = 16
    (data / "orders.json").write_text(json.dumps(orders))
    assert "past the 14-day refund window" in quote(Shop(data, today=TODAY), "A1058",
                                                    ("BRD-OAK-M", "damaged"))


@pytest.mark.parametrize("field,value,message", [
    ("price", float("nan"), "finite"), ("price", float("inf"), "finite"),
    ("price", 1e308, "between 0"), ("price", 10.005, "whole cents"), ("price", -1, "between 0"),
    ("quantity", 0, "greater than or equal to 1"), ("price", True, "valid number"),
])
def test_bad_money_in_the_data_is_refused_with_the_order_and_field(tmp_path, field, value,
                                                                   message):
    data = tmp_path / "data"
    shutil.copytree(PROJECT_ROOT / "data", data)
    orders = json.loads((data / "orders.json").read_text())
    orders["orders"][0]["items"][0][field] = value
    (data / "orders.json").write_text(json.dumps(orders))
    with pytest.raises(ConfigError) as err:
        Shop(data).orders  # noqa: B018 - loading is the point
    assert "order A1043" in str(err.value) and field in str(err.value)
    assert message in str(err.value)


def test_a_total_that_is_not_its_lines_is_refused(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(PROJECT_ROOT / "data", data)
    orders = json.loads((data / "orders.json").read_text())
    orders["orders"][0]["total"] = 99.00
    (data / "orders.json").write_text(json.dumps(orders))
    with pytest.raises(ConfigError, match="total 99.00 is not items plus shipping"):
        Shop(data).orders  # noqa: B018
