"""Money per unit (issue 24): a line of four glasses can be refunded one glass at a time.

The policy prices units, the ledger holds units (schema 8), a waiting refund reserves the units
it names, an approver may lower them (re-priced, the limit checked on the new price), and a
store from schema 7 reads its refunded lines as all their units. The money state machine
(test_money_invariants.py) checks the same rules over generated shops with 1 to 10 units.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers.cli import run_cli

from refund_agent import Settings
from refund_agent.cli import only_lines
from refund_agent.desk import Agent
from refund_agent.desk.policy import Held, policy_facts, quote_refund, units_left
from refund_agent.desk.records import DeskStore
from refund_agent.desk.shop import Shop
from refund_agent.errors import AlreadyDecided, DecisionRefused, StoreError
from refund_agent.store import SCHEMA_VERSION

CORPUS_SHOP = Path(__file__).parents[1] / "corpus" / "shop"
DANIEL = "d.ferreira@example.org"
TUMBLERS = "GT-DW-350"   # RT20602: four double-wall tumblers at $14.50, and a tray


@pytest.fixture(scope="module")
def shop() -> Shop:
    return Shop(CORPUS_SHOP)


def test_units_are_priced_one_by_one(shop: Shop):
    order = shop.order("RT20602")
    item = order.item(TUMBLERS)
    assert item.quantity == 4
    one = quote_refund(order, shop.terms, [(TUMBLERS, "damaged", 1)], {}, shop.today)
    assert [(q.line, q.units, q.amount_cents) for q in one.lines] == [(TUMBLERS, 1, 1450)]
    # No units: all that remain; a waiting refund of one glass reserves it.
    waiting = {TUMBLERS: Held("damaged", "pending", "approval a", 1450, 1)}
    rest = quote_refund(order, shop.terms, [(TUMBLERS, "damaged")], waiting, shop.today)
    assert [(q.units, q.amount_cents) for q in rest.lines] == [(3, 4350)]
    assert "3 of its 4 units left" in quote_refund(order, shop.terms, [(TUMBLERS, "damaged", 4)],
                                                   waiting, shop.today)
    assert "1 to 4" in quote_refund(order, shop.terms, [(TUMBLERS, "damaged", 5)], {},
                                    shop.today)
    assert "1 to 4" in quote_refund(order, shop.terms, [(TUMBLERS, "damaged", 0)], {},
                                    shop.today)
    all_four = [Held("damaged", "refunded", "approval a", 1450, 1),
                Held("damaged", "pending", "approval b", 4350, 3)]
    assert "waiting for approval" in quote_refund(order, shop.terms, [(TUMBLERS, "damaged", 1)],
                                                  {TUMBLERS: all_four}, shop.today)
    facts = policy_facts(order, shop.terms, {TUMBLERS: all_four[:1]}, shop.today)
    line = next(x for x in facts.lines if x.line == TUMBLERS)
    assert (line.units_left, line.units_refunded, line.if_damaged) == (3, 1, 43.5)


def test_returned_units_pay_the_fee_as_the_shop_says(shop: Shop):
    order = shop.order("RT20602")
    quote = quote_refund(order, shop.terms, [(TUMBLERS, "changed_mind", 2)], {}, shop.today)
    fee = shop.terms.return_fee_cents
    expected = 2900 - (min(fee * 2, 2900) if shop.terms.return_fee_per == "item" else
                       min(fee, 2900))
    assert quote.lines[0].amount_cents == expected and quote.lines[0].units == 2


def test_shipping_only_when_every_unit_is_refunded_as_damaged():
    order = Shop(CORPUS_SHOP).order("RT20602")
    terms, today = Shop(CORPUS_SHOP).terms, Shop(CORPUS_SHOP).today
    one_line = order.model_copy(update={"items": [order.item(TUMBLERS)],
                                        "shipping": 5.0, "total": 58.0 + 5.0})
    three = quote_refund(one_line, terms, [(TUMBLERS, "damaged", 3)], {}, today)
    assert "SHIPPING" not in three.line_ids()
    # The fourth glass completes it, over two refunds: shipping comes with it, once.
    before = {TUMBLERS: Held("damaged", "refunded", "approval a", 4350, 3)}
    last = quote_refund(one_line, terms, [(TUMBLERS, "damaged", 1)], before, today)
    assert last.line_ids() == [TUMBLERS, "SHIPPING"] and last.total_cents == 1450 + 500
    # Pending units do not count yet; a returned unit never earns shipping.
    pending = {TUMBLERS: Held("damaged", "pending", "approval a", 4350, 3)}
    assert "SHIPPING" not in quote_refund(one_line, terms, [(TUMBLERS, "damaged", 1)], pending,
                                          today).line_ids()
    returned = {TUMBLERS: Held("changed_mind", "refunded", "approval a", 4000, 3)}
    assert "SHIPPING" not in quote_refund(one_line, terms, [(TUMBLERS, "damaged", 1)], returned,
                                          today).line_ids()


def test_only_takes_sku_or_sku_and_units():
    assert only_lines(None) == (None, {})
    assert only_lines(["GT-DW-350:1", "ST-BMB-L"]) == (["GT-DW-350", "ST-BMB-L"],
                                                       {"GT-DW-350": 1})
    for bad in (["GT-DW-350:0"], ["GT-DW-350:x"], ["GT-DW-350:"], ["A", "A:1"]):
        with pytest.raises(DecisionRefused):
            only_lines(bad)


@pytest.fixture(scope="module")
def agent(tmp_path_factory) -> Agent:
    """The real agent and SDK against the offline stand-in, on the corpus shop (four glasses)."""
    with pytest.MonkeyPatch.context() as env:
        for name in ("XAI_API_KEY", "REFUND_AGENT_CRASH_AT", "CRASH_AFTER_REFUND",
                     "REFUND_AGENT_OFFLINE_FAULTS", "REFUND_AGENT_OFFLINE_LATENCY"):
            env.delenv(name, raising=False)
        output = tmp_path_factory.mktemp("units") / "output"
        yield Agent(Settings(api_key="", data_dir=CORPUS_SHOP, output_dir=output,
                             max_retries=2, timeout=30.0))


def _ticket(agent: Agent, body: str):
    run = agent.advance(agent.start(DANIEL, body, subject="Tumblers").id)
    return run, agent.store.run_approvals(run.id)


def test_one_broken_glass_of_four_is_one_glass_then_two_tickets_never_pass_four(agent: Agent):
    run, (approval,) = _ticket(agent, "Hi, one of the four tumblers in RT20602 arrived with a "
                                      "crack in the outer wall. The others and the tray are "
                                      "fine.\nDaniel")
    assert [(x.line, x.units, x.quantity, x.amount_cents) for x in approval.lines] == [
        (TUMBLERS, 1, 4, 1450)]
    agent.decide(approval.id, True, "Dana",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.advance(run.id)
    paid = [r for r in agent.payments.refunds() if r["idempotency_key"] == approval.id]
    assert len(paid) == 1 and paid[0]["request"]["lines"] == [
        {"line": TUMBLERS, "reason": "damaged", "amount_cents": 1450, "units": 1,
         "of_units": 4}]
    email = [s.data["body"] for s in agent.store.steps(run.id) if s.kind == "message"][-1]
    assert "1 of 4" in email
    # A second ticket for three more: the units left. A third finds nothing left.
    run2, (second,) = _ticket(agent, "Order RT20602: three of the tumblers have now cracked "
                                     "the same way. The tray is fine.")
    assert [(x.units, x.amount_cents) for x in second.lines] == [(3, 4350)]
    # The approver lowers it to two: re-priced, and the limit checked on the new price (a
    # $29.00 limit refuses the three, takes the two); the third stays refundable.
    with pytest.raises(DecisionRefused):
        agent.decide(second.id, True, "Ben", limit_cents=2900,
                     fingerprint=agent.store.approval(second.id).fingerprint)
    with pytest.raises(DecisionRefused):
        agent.decide(second.id, True, "Ben", limit_cents=2900, units={TUMBLERS: 4},
                     fingerprint=agent.store.approval(second.id).fingerprint)
    agent.decide(second.id, True, "Ben", limit_cents=2900, units={TUMBLERS: 2},
                 fingerprint=agent.store.approval(second.id).fingerprint)
    assert [(x.units, x.amount_cents) for x in agent.store.approval(second.id).lines] == [
        (2, 2900)]
    agent.advance(run2.id)
    with pytest.raises(AlreadyDecided):
        agent.decide(second.id, True, "Dana", units={TUMBLERS: 3},
                     fingerprint=agent.store.approval(second.id).fingerprint)   # decided already
    order = agent.shop.order("RT20602")
    assert units_left(order, TUMBLERS, agent.store.held_lines("RT20602")) == 1
    _ticket(agent, "RT20602: two more tumblers arrived cracked. Tray fine.")
    units = sum(x.units for a in agent.store.approvals(status=None)
                for x in a.lines if x.line == TUMBLERS and x.decision in ("approved", None))
    assert units <= 4
    paid_units = sum(x.get("units", 0) for r in agent.payments.refunds()
                     for x in r["request"]["lines"] if x["line"] == TUMBLERS)
    assert paid_units == 3


def test_a_schema_7_store_reads_a_refunded_line_as_all_its_units(tmp_path: Path, shop: Shop):
    path = tmp_path / "refund-agent.db"
    DeskStore(path).close()
    db = sqlite3.connect(path)
    # Turn it back into schema 7: no units columns, the unique index, no trigger.
    db.executescript(
        "DROP TRIGGER units_held_within_quantity; DROP INDEX lines_held;"
        "DROP TRIGGER units_held_within_quantity_on_update;"
        "ALTER TABLE approval_lines DROP COLUMN units;"
        "ALTER TABLE approval_lines DROP COLUMN quantity;"
        "CREATE UNIQUE INDEX lines_held_once ON approval_lines(order_id, line) WHERE held = 1;"
        "INSERT INTO approvals(id, run_id, response_id, call_id, order_id, amount_cents,"
        " proposed_cents, summary, customer, status, requested_at, requested_pid, decided_by)"
        " VALUES ('old', 'r', 'resp', 'c', 'RT20602', 5800, 5800, 's', 'd', 'approved', 0, 1,"
        " 'Dana');"
        "INSERT INTO approval_lines(approval_id, order_id, seq, line, name, reason,"
        " amount_cents, allowed_cents, fee_cents, held, decision) VALUES ('old', 'RT20602', 0,"
        " 'GT-DW-350', 'Double-wall glass tumbler', 'damaged', 5800, 5800, 0, 1, 'approved');"
        "PRAGMA user_version = 7;")
    db.close()
    store = DeskStore(path)
    assert store.schema_version() == SCHEMA_VERSION
    held = store.held_lines("RT20602")
    assert [(h.state, h.units) for h in held[TUMBLERS]] == [("refunded", None)]
    order = shop.order("RT20602")
    assert units_left(order, TUMBLERS, held) == 0
    assert "already been refunded" in quote_refund(order, shop.terms, [(TUMBLERS, "damaged", 1)],
                                                   held, shop.today)
    # And the database itself refuses a new hold beside the whole-line one.
    with pytest.raises(StoreError, match="beyond the line quantity"):
        store.execute(
            "INSERT INTO approval_lines(approval_id, order_id, seq, line, name, reason,"
            " amount_cents, allowed_cents, fee_cents, held, units, quantity) VALUES ('new',"
            " 'RT20602', 0, 'GT-DW-350', 'T', 'damaged', 1450, 1450, 0, 1, 1, 4)")
    store.close()


def test_the_terminal_approves_fewer_units_with_only_sku_colon_n(tmp_path: Path):
    out, shop = tmp_path / "out", {"REFUND_AGENT_DATA": str(CORPUS_SHOP)}
    sent = run_cli(out, "send", "Two of the four tumblers in RT20602 arrived cracked. The tray "
                   "is fine.", "--from", DANIEL, **shop)
    assert sent.returncode == 0, sent.stderr
    assert f"{TUMBLERS}    damaged       $29.00 x2 of 4" in sent.stdout
    bad = run_cli(out, "approve", "--as", "Dana", "--only", f"{TUMBLERS}:3", **shop)
    assert bad.returncode != 0 and "approve 1 to 2 of them" in bad.stdout + bad.stderr
    assert "Traceback" not in bad.stderr
    approved = run_cli(out, "approve", "--as", "Dana", "--only", f"{TUMBLERS}:1",
                       "--note", "One crack in the photo.", **shop)
    assert approved.returncode == 0, approved.stderr
    assert "Approved $14.50 for RT20602" in approved.stdout
    assert f"{TUMBLERS} x1 of 4 approved" in approved.stdout
    (refund,) = [json.loads(x) for x in (out / "refunds.log").read_text().splitlines()]
    assert refund["request"]["lines"] == [{"line": TUMBLERS, "reason": "damaged",
                                           "amount_cents": 1450, "units": 1, "of_units": 4}]
    assert run_cli(out, "audit", "--verify", **shop).returncode == 0
