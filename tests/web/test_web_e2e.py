"""The helpdesk end to end: `streamlit run app.py` as a real process, driven by headless Chromium.

These tests kill and restart the server the way a user would (Ctrl+C is gentler than the
SIGKILL used here), and check what the page shows and what the store recorded. They use
Debian's Chromium; they are skipped, never downloading a browser, when it is not installed.
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

from helpers import browser
from helpers.browser import (
    CARD,
    CHROMIUM,
    LAUNCH_ARGS,
    TWO_LINE_EMAIL,
    WAIT_MS,
    AppServer,
    open_review,
    sign_in,
)
from helpers.cli import cli_env
from playwright.sync_api import expect

from refund_agent.config import PROJECT_ROOT
from refund_agent.desk.records import DeskStore
from refund_agent.store import Store

# The browser and server fixtures, and the skip when Chromium is missing (tests/helpers/browser.py).
playwright, context = browser.playwright, browser.context
app_server, server = browser.app_server, browser.server
pytestmark = browser.pytestmark


def new_page(context, url: str):
    page = context.new_page()
    page.goto(url)
    page.get_by_text("Audit log").first.wait_for()
    return page


def start_sample(page, label: str = "Cracked on arrival") -> None:
    """Click a sample ticket (the "New ticket" section folds away once tickets exist)."""
    button = page.get_by_role("button", name=label)
    if not button.is_visible():
        page.get_by_text("New ticket: a sample, or your own email").click()
    button.click()


def save_name(page, name: str) -> None:
    field = page.get_by_label("Your name (signs every decision in the audit log)")
    change = page.get_by_role("button", name="Change")
    field.or_(change).first.wait_for()
    if change.is_visible():   # a name this browser kept (a cookie) from an earlier test
        change.click()
    field.fill(name)
    page.get_by_role("button", name="Save name").click()
    page.get_by_text("Deciding as").wait_for()


def downloaded_audit(page, entries: int) -> list[dict[str, str]]:
    """Wait for the audit table to hold ``entries`` rows, then download it as CSV."""
    # A miss prints the caption the page did show (a stale count, a problem, the hourglass).
    caption = page.get_by_text("Hash chain intact, payments and emails reconciled")
    expect(caption).to_contain_text(f" · {entries} {'entry' if entries == 1 else 'entries'} · ",
                                    timeout=WAIT_MS)
    table = page.locator("[data-testid='stDataFrame'] table")
    expect(table).to_have_attribute("aria-rowcount", str(entries + 1))  # plus the header
    with page.expect_download() as download:
        page.get_by_role("button", name="Download CSV").click()
    with open(download.value.path(), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_refund_survives_a_server_restart(context, server: AppServer):
    page = new_page(context, server.url)
    old_pid = server.pid
    expect(page.get_by_text(f"Server pid {old_pid}")).to_be_visible()
    save_name(page, "Dana Kim")

    started = time.monotonic()
    start_sample(page)
    card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
    card.wait_for()
    print(f"\nproposal card visible {time.monotonic() - started:.2f} s after the click")
    expect(page.get_by_text("Proposed refund $48.00 on order A1043")).to_be_visible()
    # The review shows the line, ticked, with what the policy allows for it; cancelling it
    # decides nothing.
    review = open_review(page, card)
    expect(review.get_by_text("POUR-GLS-01 · full value $48.00")).to_be_visible()
    expect(review.get_by_role("checkbox")).to_be_checked()
    expect(review.get_by_text("Paid: $80.95, refunded so far $0.00, left $80.95")).to_be_visible()
    review.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    # Let the audit table's scripts load first: a browser remembers a script import that
    # failed while the server was down, and would show the table as broken until a reload.
    expect(page.get_by_role("button", name="Download CSV")).to_be_visible()

    # The server dies and comes back as a new process; the page reconnects by itself and
    # reopens the same ticket (it is in the page's URL). The name is not: it lived in the old
    # process's session, and a URL never carries who signs.
    server.kill()
    server.start()
    assert server.pid != old_pid
    page.get_by_text(f"Server pid {server.pid}").wait_for()
    assert "approver" not in page.url
    # The typed name is kept by the browser across the restart (the URL never carries it).
    page.get_by_text("Deciding as Dana Kim").wait_for()
    open_review(page, card).get_by_role("button", name="Approve $48.00").click()

    page.get_by_text("Note for the team", exact=True).wait_for()
    expect(page.get_by_text("Server restarted: process", exact=False)).to_be_visible()
    expect(page.get_by_text("Approved by Dana Kim", exact=True)).to_be_visible()
    expect(page.get_by_text("issued: $48.00")).to_be_visible()
    expect(page.get_by_text("Email to maya.chen@example.com", exact=True)).to_be_visible()
    expect(page.locator(CARD)).to_have_count(0)

    audit = downloaded_audit(page, 3)
    rows = [(r["event"], r["actor"], int(r["pid"])) for r in audit]
    assert rows == [("issued", "payments", server.pid), ("approved", "Dana Kim", server.pid),
                    ("requested", "agent", old_pid)]
    assert [json.loads(r["lines"]) for r in audit] == [
        [{"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 4800}]] * 3
    store = DeskStore(server.output / "refund-agent.sqlite3")
    assert [(e.event, e.pid) for e in store.audit()] == [
        ("requested", old_pid), ("approved", server.pid), ("issued", server.pid)]
    assert store.verify_audit() is None


def test_two_pages_approving_at_once_make_one_decision(context, server: AppServer):
    first = new_page(context, server.url)
    second = new_page(context, server.url)
    save_name(first, "Dana Kim")
    save_name(second, "Sam Lee")
    start_sample(first)
    buttons = []
    for page in (first, second):  # every open tab shows the same queue; both open the review
        card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
        button = open_review(page, card).get_by_role("button", name="Approve $48.00")
        button.wait_for()
        buttons.append(button)
    # Back to back, before either page hears about the other: dispatching the click events
    # skips the pointer simulation, so the two land milliseconds apart even on a busy machine.
    for button in buttons:
        button.dispatch_event("click")

    store = DeskStore(server.output / "refund-agent.sqlite3")
    deadline = time.monotonic() + WAIT_MS / 1000
    while not store.approvals(None)[0].decided_by:
        assert time.monotonic() < deadline, "no approval reached the server"
        first.wait_for_timeout(50)
    winner = store.approvals(None)[0].decided_by
    winning, losing = (first, second) if winner == "Dana Kim" else (second, first)
    winning.get_by_text("Note for the team", exact=True).wait_for()
    # The later click either lost the race inside the store (audited as ignored, and told who
    # won and when) or arrived after it and found the review already closed by the decision.
    ignored = [e for e in store.audit() if e.event == "ignored"]
    if ignored:
        losing.get_by_text(f"This refund was already approved by {winner} at ").wait_for()
    else:
        losing.get_by_text(f"it was approved by {winner}", exact=False).wait_for()
    events = [e.event for e in store.audit()]
    assert events.count("approved") == 1 and events.count("issued") == 1
    assert len((server.output / "refunds.log").read_text().splitlines()) == 1


def test_crash_after_refund_is_picked_up_and_not_repeated(context, app_server: AppServer):
    app_server.start(CRASH_AFTER_REFUND="1")
    page = new_page(context, app_server.url)
    save_name(page, "Dana Kim")
    start_sample(page)
    card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
    card.wait_for()
    expect(page.get_by_role("button", name="Download CSV")).to_be_visible()
    crashed_pid = app_server.pid
    open_review(page, card).get_by_role("button", name="Approve $48.00").click()
    # The crash point kills the server right after the payment provider made the refund.
    assert app_server.proc.wait(30) == -signal.SIGKILL

    app_server.start()  # without the crash point, as a person would restart it
    page.get_by_text(f"Server pid {app_server.pid}").wait_for()
    page.get_by_text("Note for the team", exact=True).wait_for()
    # The thread's words (the timeline's text list says "reused, not repeated" too).
    expect(page.get_by_text("already made before the crash; reused, not repeated")).to_be_visible()
    expect(page.get_by_text("Server restarted: process", exact=False)).to_be_visible()
    page.get_by_text("Hash chain intact, payments and emails reconciled · 3 entries").wait_for()

    store = DeskStore(app_server.output / "refund-agent.sqlite3")
    assert [(e.event, e.pid) for e in store.audit()] == [
        ("requested", crashed_pid), ("approved", crashed_pid), ("reused", app_server.pid)]
    refunds = (app_server.output / "refunds.log").read_text().splitlines()
    assert len(refunds) == 1  # one refund at the payment provider, however many attempts


def send_email(page, sender: str, body: str) -> None:
    if not page.get_by_label("From (the customer's address)").is_visible():
        page.get_by_text("New ticket: a sample, or your own email").click()
    page.get_by_label("From (the customer's address)").fill(sender)
    page.get_by_label("Email", exact=True).fill(body)
    page.get_by_role("button", name="Send to the agent").click()


def test_partial_approval_pays_only_the_ticked_line(context, server: AppServer):
    page = new_page(context, server.url)
    save_name(page, "Dana Kim")
    send_email(page, "maya.chen@example.com", TWO_LINE_EMAIL)
    card = page.locator(CARD).filter(has_text="$66.50 for order A1043")
    card.wait_for()
    review = open_review(page, card)
    expect(review.get_by_text("MUG-STN-2 · $26.00 less a $7.50 return fee")).to_be_visible()
    expect(review.get_by_role("checkbox")).to_have_count(2)

    # Untick the mugs: the review says what the kept line comes to before anyone approves.
    # The test id is on the checkbox's <label>, which wraps the (visually hidden) input.
    # Named in plain words for a screen reader (no Markdown in its label).
    mugs = review.get_by_test_id("stCheckbox").filter(
        has=page.get_by_role("checkbox", name="Stoneware mugs, set of 2, changed mind, $18.50"))
    mugs.click()
    expect(mugs.get_by_role("checkbox")).not_to_be_checked()
    review.get_by_text("Approving pays $48.00 for the ticked lines instead of $66.50").wait_for()
    review.get_by_role("textbox").fill("The mugs were used, so they cannot be returned.")
    review.get_by_role("button", name="Approve $48.00").click()

    page.get_by_text("Note for the team", exact=True).wait_for()
    expect(page.get_by_text("Approved by Dana Kim", exact=True)).to_be_visible()
    expect(page.get_by_text("Declined: MUG-STN-2", exact=True)).to_be_visible()
    expect(page.get_by_text("issued: $48.00")).to_be_visible()
    expect(page.locator(CARD)).to_have_count(0)

    (record,) = (server.output / "refunds.log").read_text().splitlines()
    paid = json.loads(record)["request"]
    assert paid["amount_cents"] == 4800
    assert [(x["line"], x["amount_cents"]) for x in paid["lines"]] == [("POUR-GLS-01", 4800)]
    audit = downloaded_audit(page, 3)
    assert [r["event"] for r in audit] == ["issued", "approved", "requested"]
    assert [[x["line"] for x in json.loads(r["lines"])] for r in audit] == [
        ["POUR-GLS-01"], ["POUR-GLS-01"], ["POUR-GLS-01", "MUG-STN-2"]]
    store = DeskStore(server.output / "refund-agent.sqlite3")
    (decided,) = store.approvals(None)
    assert decided.amount == 48.0 and [x.line for x in decided.declined] == ["MUG-STN-2"]
    assert store.verify_audit() is None


# -- accounts and the host check --------------------------------------------------------------


def test_sign_in_an_approver_above_the_limit_is_refused_and_a_lead_approves(
        context, app_server: AppServer):
    from refund_agent.desk.accounts import Accounts
    store = DeskStore(app_server.output / "refund-agent.sqlite3")
    Accounts(store).add("Ana Ruiz", "approver", "ana-password", limit=40)
    Accounts(store).add("Lee Park", "lead", "lee-password")
    app_server.start()

    ana = context.new_page()
    ana.goto(app_server.url + "?approver=Anyone")  # the old URL signs nothing
    ana.get_by_role("button", name="Sign in").wait_for()   # all a visitor is shown
    expect(ana.get_by_text("Single-user demo")).to_have_count(0)
    expect(ana.get_by_label("Your name (signs every decision in the audit log)")).to_have_count(0)
    sign_in(ana, "Ana Ruiz", "wrong-password")
    ana.get_by_text("Wrong name or password.").wait_for()
    sign_in(ana, "Ana Ruiz", "ana-password")
    ana.get_by_text("Signed in as Ana Ruiz").wait_for()
    # The desk is drawn once signed in; its "New ticket" section opens as it appears.
    ana.get_by_role("button", name="Cracked on arrival").wait_for()
    assert "Ana" not in ana.url and "password" not in ana.url

    start_sample(ana)
    card = ana.locator(CARD).filter(has_text="$48.00 for order A1043")
    card.wait_for()
    expect(card.get_by_text("Needs a lead")).to_be_visible()
    # The card's first button says where it leads: a hand-off, not an approval.
    review = open_review(ana, card, "Send to a lead…")
    expect(review.get_by_text("Needs a lead: $48.00 is above your approval limit of "
                              "$40.00")).to_be_visible()
    # No dead green Approve: the review sends the refund to a lead instead.
    expect(review.get_by_role("button", name="Approve $48.00")).to_have_count(0)
    review.get_by_role("button", name="Send to a lead").click()
    ana.get_by_text("Sent to a lead: it is in the escalation queue").wait_for()
    (approval,) = store.approvals(None)
    assert approval.status == "pending" and store.handed_off() == {approval.id}

    lee = context.new_page()
    lee.goto(app_server.url)
    sign_in(lee, "Lee Park", "lee-password")
    lee.get_by_text("Signed in as Lee Park").wait_for()
    # The lead's first screen is what needs a person: the hand-off is there.
    expect(lee.get_by_role("radio", name="Needs a person 1")).to_be_checked()
    lee.locator("[class*='st-key-escalation_']").filter(
        has_text="Over an approver's limit").wait_for()
    lee_card = lee.locator(CARD).filter(has_text="$48.00 for order A1043")
    review = open_review(lee, lee_card)
    expect(review.get_by_text("above your approval limit")).to_have_count(0)
    review.get_by_role("button", name="Approve $48.00").click()
    lee.get_by_text("Approved $48.00 for order A1043 as Lee Park", exact=False).wait_for()
    expect(ana.locator(CARD)).to_have_count(0)  # the other tab sees it decided
    # The run's end reruns the whole page, which would cancel a download started before it.
    lee.get_by_text("Note for the team", exact=True).wait_for()
    audit = downloaded_audit(lee, 7)    # the accounts' creation and the failed sign-in too
    assert [(r["event"], r["actor"]) for r in audit][:5] == [
        ("issued", "payments"), ("approved", "Lee Park"), ("handed_off", "Ana Ruiz"),
        ("requested", "agent"), ("sign_in_failed", "ana ruiz")]
    assert store.escalations()[0].taken_by == "Lee Park"
    assert [r["event"] for r in audit][5:] == ["account_added", "account_added"]
    assert store.verify_audit() is None


@contextmanager
def browser_resolving(playwright, name: str):
    """A page in a Chromium that resolves ``name`` to this machine, as DNS rebinding or a
    team's own DNS would: requests reach the server with "Host: NAME:PORT"."""
    chromium = playwright.chromium.launch(
        executable_path=str(CHROMIUM),
        args=LAUNCH_ARGS + [f"--host-resolver-rules=MAP {name} 127.0.0.1", "--no-proxy-server"])
    try:
        page = chromium.new_page()
        page.set_default_timeout(WAIT_MS)
        yield page
    finally:
        chromium.close()


def test_a_page_opened_under_a_foreign_host_is_refused(playwright, server: AppServer):
    with browser_resolving(playwright, "evil.example") as page:
        page.goto(f"http://evil.example:{server.port}/?approver=Anyone")
        page.get_by_text("This desk does not answer under this host name").wait_for()
        expect(page.get_by_text("Inbox")).to_have_count(0)
        expect(page.get_by_text("Waiting for approval")).to_have_count(0)
        # The same server still answers under its own name.
        page.goto(server.url)
        page.get_by_text("Audit log").first.wait_for()
        expect(page.get_by_text("does not answer under this host name")).to_have_count(0)


def test_an_added_host_name_is_served(playwright, app_server: AppServer):
    app_server.start(REFUND_AGENT_ALLOWED_HOSTS="desk.example.com")
    with browser_resolving(playwright, "desk.example.com") as page:
        page.goto(f"http://desk.example.com:{app_server.port}/")
        page.get_by_text("Audit log").first.wait_for()
        expect(page.get_by_text("does not answer under this host name")).to_have_count(0)


# -- the desk: ask the customer, expiry, the inbox at scale -------------------------------------


def test_ask_the_customer_then_their_reply_brings_a_new_proposal(context, server: AppServer):
    page = new_page(context, server.url)
    save_name(page, "Dana Kim")
    start_sample(page)
    card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
    review = open_review(page, card, "Ask…")
    # A question is required: the review says so and stays open.
    review.get_by_role("button", name="Send the question").click()
    review.get_by_text("Write the question for the customer").wait_for()
    review.get_by_role("textbox").fill("Could you send a photo of the crack?")
    review.get_by_role("button", name="Send the question").click()
    expect(page.get_by_role("dialog")).to_have_count(0)

    page.get_by_text("Waiting on the customer: the team asked them a question").wait_for()
    expect(page.get_by_text("Sent back to the customer with a question by Dana Kim")
           ).to_be_visible()
    # In the email out; the tool call that sent it folds under the turn (the thread view).
    expect(page.get_by_text("Could you send a photo of the crack?").filter(visible=True).first
           ).to_be_visible()
    expect(page.locator(CARD)).to_have_count(0)
    assert not (server.output / "refunds.log").exists()

    page.get_by_label("Reply as the customer").fill(
        "Here is the photo: the carafe has a crack down the side.")
    page.get_by_role("button", name="Send reply").click()
    card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
    card.wait_for()                                 # the same run proposed again
    open_review(page, card).get_by_role("button", name="Approve $48.00").click()
    page.get_by_text("issued: $48.00").wait_for()
    store = DeskStore(server.output / "refund-agent.sqlite3")
    (run,) = store.runs()
    assert [a.status for a in store.run_approvals(run.id)] == ["asked", "approved"]
    assert [e.event for e in store.audit()] == ["requested", "asked", "requested", "approved",
                                                "issued"]
    assert len((server.output / "refunds.log").read_text().splitlines()) == 1


def test_an_approval_nobody_decides_expires_and_the_customer_is_told(context,
                                                                      app_server: AppServer):
    # A refund proposed from the terminal, then left: the desk starts with a one-second expiry.
    out = app_server.output
    proposed = subprocess.run([sys.executable, "-m", "refund_agent", "sample"],
                              env=cli_env(out), cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=60)
    assert proposed.returncode == 0, proposed.stderr
    time.sleep(1.2)
    app_server.start(REFUND_AGENT_APPROVAL_DAYS=str(1 / 86400))
    page = new_page(context, app_server.url)
    # The worker expires it as it starts, and the run tells the customer.
    page.get_by_role("radio", name="Expired 1").wait_for()
    page.locator("[class*='st-key-run_']").first.click()
    page.get_by_text("Expired: not decided in time, closed by expiry").wait_for()
    expect(page.get_by_role("group", name="Chat message from support")
           .get_by_text("wasn't reviewed in time")).to_be_visible()
    expect(page.locator(CARD)).to_have_count(0)
    store = DeskStore(out / "refund-agent.sqlite3")
    assert [e.event for e in store.audit()] == ["requested", "expired"]
    assert not (out / "refunds.log").exists()


def seed_tickets(store: Store, n: int) -> None:
    """``n`` tickets straight into the store (no model): six customers, statuses in turn."""
    people = [("Tom Becker", "tom.becker@example.com"), ("Maya Chen", "maya.chen@example.com"),
              ("Priya Nair", "priya.nair@example.com"), ("Leo Martins", "leo.martins@example.com"),
              ("Ines Okafor", "ines.okafor@example.com"), ("Sam Lee", "sam.lee@example.com")]
    statuses = ["done", "done", "waiting", "asked", "failed", "done"]
    for i in range(n):
        name, email = people[i % len(people)]
        run = store.create_run(sender=email, sender_name=name, subject=f"Refund request {i}",
                               email=f"Order A{2000 + i}: it arrived broken.")
        store.execute("UPDATE runs SET status = ?, created_at = ? WHERE id = ?",
                      (statuses[i % len(statuses)], 1_700_000_000 + i, run.id))


def test_search_filters_and_pages_over_120_tickets(context, app_server: AppServer):
    seed_tickets(DeskStore(app_server.output / "refund-agent.sqlite3"), 120)
    app_server.start()
    page = new_page(context, app_server.url)
    rows = page.locator("[class*='st-key-run_']")
    page.get_by_text("Tickets, newest first · 1–50 of 120").wait_for()
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("Refund request 119")     # newest first
    page.get_by_role("button", name="Older").click()
    page.get_by_text("51–100 of 120").wait_for()
    page.get_by_role("button", name="Older").click()
    page.get_by_text("101–120 of 120").wait_for()
    expect(rows).to_have_count(20)
    expect(rows.last).to_contain_text("Refund request 0")
    # Back by keyset pages (the page before the first row shown), to the newest again.
    page.get_by_role("button", name="Newer").click()
    page.get_by_text("51–100 of 120").wait_for()
    expect(rows.first).to_contain_text("Refund request 69")
    page.get_by_role("button", name="Newer").click()
    page.get_by_text("1–50 of 120").wait_for()
    expect(rows.first).to_contain_text("Refund request 119")

    # Status filters carry their counts; choosing one starts again at the newest.
    expect(page.get_by_role("radio", name="Waiting for approval 20")).to_be_visible()
    page.get_by_role("radio", name="Waiting on customer 20").click()
    page.get_by_text("1–20 of 20").wait_for()
    expect(rows.first).to_contain_text("Waiting on customer")

    # Search by name, by order number (in the email), by address; counts follow the search.
    page.get_by_role("radio", name="All 120").click()
    search = page.get_by_placeholder("Name, email, order or words")
    search.fill("tom becker")
    search.press("Enter")
    page.get_by_text("1–20 of 20").wait_for()
    expect(page.get_by_role("radio", name="All 20")).to_be_visible()
    search.fill("A2117")
    search.press("Enter")
    page.get_by_text("1–1 of 1").wait_for()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Leo Martins")   # ticket 117: the fourth customer
    search.fill("nobody-by-that-name")
    search.press("Enter")
    page.get_by_text("No tickets match.").wait_for()


def test_the_card_and_its_buttons_are_on_screen_at_1280_by_800(playwright, server: AppServer):
    chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
    try:
        page = chromium.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(WAIT_MS)
        page.goto(server.url)
        page.get_by_text("Audit log").first.wait_for()
        save_name(page, "Dana Kim")
        start_sample(page)
        card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
        card.wait_for()
        for name in ("Approve…", "Ask…", "Reject…"):
            box = card.get_by_role("button", name=name).bounding_box()
            assert box and box["y"] >= 0 and box["y"] + box["height"] <= 800, (name, box)
        # The card links to its ticket.
        card.get_by_role("button", name="Ticket").click()
        page.get_by_text("Proposed refund $48.00 on order A1043").wait_for()
    finally:
        chromium.close()
