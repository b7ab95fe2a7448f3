"""The lead's day on the desk, in Chromium against `streamlit run app.py` (one server for the
module): every status with its badge and filter, an angry reply escalated and taken by a lead,
the two-person rule, and the audit CSV read back with pandas.

The tickets are made before the server starts, by the same agent code in this process, on a
copy of the sample shop that needs two people above $50.
"""

from __future__ import annotations

import json
import re
import shutil
import time

import pandas as pd
import pytest
from helpers import browser
from helpers.browser import CARD, CHROMIUM, AppServer, open_review, sign_in
from helpers.cli import DATA
from playwright.sync_api import expect

from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.desk.accounts import Accounts
from refund_agent.providers.client import open_model

playwright, context = browser.playwright, browser.context   # the browser fixtures, reused
pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium")]

MAYA = "maya.chen@example.com"
SAM = "sam.ortiz@example.com"
TWO_LINES = ("Order A1043: the coffee maker arrived shattered, and honestly I also don't want "
             "the mugs anymore.")   # $48.00 + $18.50 = $66.50
ANGRY = ("If you don't refund the whole order I'm filing a chargeback with my bank and leaving "
         "a one-star review everywhere I can. Get me a manager.")


def _tickets(agent: Agent) -> dict[str, str]:
    """One ticket in each finished state, two waiting; returns name -> run id."""
    runs: dict[str, str] = {}

    def proposed(name: str, sender: str, body: str):
        run = agent.advance(agent.start(sender, body).id)
        runs[name] = run.id
        return agent.store.approvals("pending")[-1]

    # The coffee maker's order, decided three ways (each frees its lines for the next).
    rejected = proposed("rejected", MAYA, TWO_LINES)
    agent.decide(rejected.id, False, "Lee Park",
                 note="Please send a photo of the carafe first.",
                 fingerprint=rejected.fingerprint)
    agent.advance(runs["rejected"])
    asked = proposed("asked", MAYA, TWO_LINES)
    agent.ask(asked.id, "Lee Park", "Which mug is chipped?", fingerprint=asked.fingerprint)
    agent.advance(runs["asked"])
    proposed("expired", MAYA, TWO_LINES)
    agent.store.expire(0)
    agent.advance(runs["expired"])
    mugs_kept = proposed("partly", MAYA, TWO_LINES)
    agent.decide(mugs_kept.id, True, "Lee Park", keep=["POUR-GLS-01"], note="Mugs were used.",
                 fingerprint=agent.store.approval(mugs_kept.id).fingerprint)
    agent.advance(runs["partly"])
    # $59.95 (the board and the shipping): waits for two people.
    proposed("two_person", "leo.martins@example.com",
             "Order A1058: the oak cutting board arrived cracked.")
    # The angry customer's skillet, paid; her reply comes from the page.
    angry = agent.advance(agent.start_sample("angry").id)
    runs["angry"] = angry.id
    agent.decide(agent.store.approvals("pending")[-1].id, True, "Lee Park",
                 fingerprint=agent.store.approval(agent.store.approvals("pending")[-1].id).fingerprint)
    agent.advance(angry.id)
    runs["declined"] = agent.advance(agent.start_sample("past-window").id).id
    proposed("waiting", SAM, "Order A1099: the ceramic vase arrived cracked.")
    for status in ("failed", "stopped"):
        run = agent.start("ines.okafor@example.com", "Order A1074: the kettle arrived dented.")
        # As a crash or a person's Stop would leave them.
        agent.store.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run.id))
        runs[status] = run.id
    return runs


@pytest.fixture(scope="module")
def desk(tmp_path_factory):
    root = tmp_path_factory.mktemp("desk")
    data = shutil.copytree(DATA, root / "data")
    shop = json.loads((data / "shop.json").read_text())
    shop["desk"] = {"two_person_above": 50, "remind_after_hours": 24}
    (data / "shop.json").write_text(json.dumps(shop))
    # One more customer, whose refund is left waiting whatever the other tests decide.
    orders = json.loads((data / "orders.json").read_text())
    vase = json.loads(json.dumps(orders["orders"][0]))
    vase.update(order_id="A1099", refunds=[], shipping=0.0, total=30.0)
    vase["customer"] = {**vase["customer"], "name": "Sam Ortiz", "email": SAM}
    vase["items"] = [{**vase["items"][0], "sku": "VAS-CER-1", "name": "Ceramic vase",
                      "price": 30.0}]
    orders["orders"].append(vase)
    (data / "orders.json").write_text(json.dumps(orders))
    settings = Settings(api_key="", data_dir=data, output_dir=root / "output", max_retries=2,
                        timeout=30.0)
    agent = Agent(settings, model=open_model(settings))
    accounts = Accounts(agent.store)
    accounts.add("Lee Park", "lead", "lee-password")
    accounts.add("Bo Diaz", "approver", "bo-password", limit=100)
    runs = _tickets(agent)
    server = AppServer(root / "output", root / "streamlit.log")
    server.start(REFUND_AGENT_DATA=str(data))
    yield server, agent, runs
    server.kill()


def signed_in_page(context, server: AppServer, name: str, password: str):
    page = context.new_page()
    page.goto(server.url)
    sign_in(page, name, password)
    page.get_by_text(f"Signed in as {name}").wait_for()
    return page


def pill(page, label: str):
    return page.get_by_role("radio", name=re.compile(rf"^{re.escape(label)} \d+$"))


ROW = "[class*='st-key-run_']"


def test_every_status_has_its_badge_filter_and_count(context, desk):
    server, _agent, _runs = desk
    page = signed_in_page(context, server, "Lee Park", "lee-password")
    # A lead starts on what needs a person: the expired, failed and stopped tickets.
    expect(pill(page, "Needs a person")).to_be_checked()
    for badge in ("Expired", "Failed", "Stopped"):
        expect(page.locator(ROW).filter(has_text=badge).first).to_be_visible()
    expect(page.locator(ROW).filter(has_text="Paid")).to_have_count(0)
    for label, badges in [("Paid", ["Paid"]), ("Partly paid", ["Partly paid"]),
                          ("Rejected", ["Rejected"]), ("Waiting on customer",
                                                       ["Waiting on customer"]),
                          ("Expired", ["Expired"]), ("Declined by policy", ["Declined by policy"]),
                          ("Failed or stopped", ["Failed", "Stopped"]),
                          ("Waiting for approval", ["Waiting for approval"])]:
        pill(page, label).click()
        rows = page.locator(ROW)
        expect(rows.first).to_be_visible()
        count = int(pill(page, label).inner_text().rsplit(" ", 1)[1])
        expect(rows).to_have_count(count)
        for badge in badges:
            expect(rows.filter(has_text=badge).first).to_be_visible()
    page.close()


def test_an_angry_reply_lands_in_the_escalation_queue_and_a_lead_takes_it(context, desk):
    server, agent, runs = desk
    page = signed_in_page(context, server, "Lee Park", "lee-password")
    pill(page, "Paid").click()
    page.locator(ROW).filter(has_text="Priya Nair").first.click()
    page.get_by_text("I want a full refund").first.wait_for()
    page.get_by_label("Reply as the customer").fill(ANGRY)
    page.get_by_role("button", name="Send reply").click()
    card = page.locator("[class*='st-key-escalation_']").filter(
        has_text="Threat (chargeback, review, legal)")
    card.wait_for()
    expect(card.get_by_text("chargeback")).to_be_visible()
    page.get_by_text("Escalated to a team lead: Threat").first.wait_for()   # on the ticket
    card.get_by_role("button", name="Take it").click()
    page.get_by_text(re.compile(r"Taken: Threat .* by Lee Park at")).wait_for()
    (escalation,) = [e for e in agent.store.escalations() if e.run_id == runs["angry"]]
    assert escalation.taken_by == "Lee Park" and escalation.taken_at is not None
    # The customer was told a lead will look only because the escalation was raised.
    last = agent.outbox.messages()[-1]["request"]
    assert last["to"] == "priya.nair@example.com" and "team lead" in last["body"]
    page.close()


def test_two_people_approve_above_the_shop_amount_and_one_refund_is_paid(context, desk):
    server, agent, runs = desk
    (approval,) = [a for a in agent.store.approvals("pending") if a.run_id == runs["two_person"]]
    bo = signed_in_page(context, server, "Bo Diaz", "bo-password")
    card = bo.locator(CARD).filter(has_text="$59.95 for order A1058")
    expect(card.get_by_text("Two people")).to_be_visible()
    review = open_review(bo, card)
    review.get_by_role("button", name="Sign off $59.95 (first of two)").click()
    bo.get_by_text("Signed off $59.95 for order A1058 as Bo Diaz").wait_for()
    assert agent.store.approval(approval.id).status == "pending"

    lee = signed_in_page(context, server, "Lee Park", "lee-password")
    card = lee.locator(CARD).filter(has_text="$59.95 for order A1058")
    expect(card.get_by_text("Signed off by Bo Diaz")).to_be_visible()
    review = open_review(lee, card)
    expect(review.get_by_text("First sign-off by Bo Diaz")).to_be_visible()
    review.get_by_role("button", name="Approve $59.95").click()
    lee.get_by_text("Approved $59.95 for order A1058 as Lee Park").wait_for()
    deadline = time.monotonic() + 30
    while not [r for r in agent.payments.refunds() if r["idempotency_key"] == approval.id]:
        assert time.monotonic() < deadline, "the refund was not paid"
        time.sleep(0.1)
    assert len([r for r in agent.payments.refunds() if r["idempotency_key"] == approval.id]) == 1
    events = [(e.event, e.actor) for e in agent.store.audit() if e.approval_id == approval.id]
    assert ("signed_off", "Bo Diaz") in events and ("approved", "Lee Park") in events
    bo.close()
    lee.close()


def test_the_audit_csv_opens_in_pandas_with_zoned_times_and_ticket_links(context, desk):
    server, _agent, runs = desk
    page = signed_in_page(context, server, "Lee Park", "lee-password")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download CSV").click()
    frame = pd.read_csv(download.value.path(), keep_default_na=False)
    times = pd.to_datetime(frame["time"], format="ISO8601")
    assert times.dt.tz is not None and times.is_monotonic_decreasing
    linked = frame[frame["ticket"] != ""]
    assert len(linked) and (linked["ticket_url"] == server.url.rstrip("/") + "/?run="
                            + linked["ticket"]).all()
    assert set(linked["ticket"]) >= {runs["rejected"], runs["partly"]}
    assert "Maya Chen" in set(frame["customer"]) or MAYA in set(frame["customer"])
    page.close()
