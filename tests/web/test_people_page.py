"""The page's parts for a team (issue 36), in Debian's Chromium against `streamlit run app.py`:
a ticket's owner buttons and the inbox's Mine/Unassigned switch, work offered to whoever can
decide it, and the ticket as a thread (the emails in and out, the agent's steps folded under
each turn) with its height measured for the angry-customer sample."""

from __future__ import annotations

import subprocess
import sys

from helpers import browser
from helpers.browser import CARD, AppServer, open_ticket, sign_in
from helpers.cli import cli_env
from playwright.sync_api import expect

from refund_agent.config import PROJECT_ROOT
from refund_agent.desk.accounts import Accounts
from refund_agent.desk.records import DeskStore

playwright, context = browser.playwright, browser.context
app_server, server = browser.app_server, browser.server
pytestmark = browser.pytestmark


def terminal(out, *args: str, **env: str) -> None:
    done = subprocess.run([sys.executable, "-m", "refund_agent", *args],
                          env=cli_env(out, **env), cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def ticket_height(page) -> float:
    """The height in px of the ticket's column (the tallest column holding the ticket)."""
    columns = page.locator("[data-testid='stColumn']").filter(
        has=page.get_by_text("Every step in order"))
    return max(columns.nth(i).bounding_box()["height"] for i in range(columns.count()))


def test_the_angry_customer_reads_as_a_thread(context, app_server: AppServer):
    out = app_server.output
    terminal(out, "angry")                                  # the model plays Priya
    terminal(out, "approve", "--as", "Dana Kim")
    (run,) = DeskStore(out / "refund-agent.sqlite3").runs()
    app_server.start()
    page = context.new_page()
    page.goto(f"{app_server.url}?run={run.id}")
    page.get_by_text("Every step in order").wait_for()
    emails = page.get_by_role("group", name="Chat message from customer")
    expect(emails.first).to_be_visible()
    replies = page.get_by_role("group", name="Chat message from support")
    expect(replies.first).to_be_visible()
    folds = page.locator("[data-testid='stExpander']").filter(has_text="Agent's steps:")
    assert folds.count() == emails.count()   # one fold per turn, under each email in
    # The latest turn's note for the team is in view; earlier ones fold with their turn.
    expect(page.get_by_text("Note for the team", exact=True).filter(visible=True)
           ).to_have_count(1)
    thread = ticket_height(page)
    page.get_by_text("Every step in order").click()
    page.get_by_text("Reasoning:").first.wait_for()
    every = ticket_height(page)
    print(f"angry ticket: thread {thread:.0f} px, every step {every:.0f} px")
    assert thread < 4000 and thread < every * 0.7
    page.get_by_text("Every step in order").click()
    folds.first.click()                                      # a turn's steps open in place
    expect(folds.first.get_by_text("lookup_order", exact=False).first).to_be_visible()


def test_owners_mine_and_unassigned_and_work_offered(context, app_server: AppServer):
    store = DeskStore(app_server.output / "refund-agent.sqlite3")
    accounts = Accounts(store)
    accounts.add("Ana Ruiz", "approver", "ana-password", limit=40)
    accounts.add("Kim Vo", "approver", "kim-password", limit=60)
    accounts.add("Lee Park", "lead", "lee-password")
    terminal(app_server.output, "sample")                   # Maya's $48.00 waits
    app_server.start()
    page = context.new_page()
    page.goto(app_server.url)
    sign_in(page, "Ana Ruiz", "ana-password")
    page.get_by_text("Signed in as Ana Ruiz").wait_for()
    # Above Ana's $40: the card names who can decide it, without a hand-off.
    card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
    expect(card.get_by_text("Can decide: Kim Vo (up to $60.00), Lee Park (lead)")
           ).to_be_visible()

    open_ticket(page)
    page.get_by_text("Nobody owns this ticket").wait_for()
    page.get_by_role("button", name="Claim").click()
    page.get_by_text("Owner: Ana Ruiz").wait_for()
    expect(page.get_by_text("Claimed by Ana Ruiz")).to_be_visible()   # on the ticket
    page.get_by_role("radio", name="Mine").click()
    expect(page.locator("[class*='st-key-run_']")).to_have_count(1)
    page.get_by_role("radio", name="Unassigned").click()
    page.get_by_text("No tickets match.").wait_for()
    expect(page.locator("[class*='st-key-run_']")).to_have_count(0)
    page.get_by_role("radio", name="Everyone's").click()
    open_ticket(page)
    page.get_by_role("button", name="Release").click()
    page.get_by_text("Nobody owns this ticket").wait_for()
    assert [(e.event, e.actor) for e in store.audit() if e.event in ("claimed", "released")] == [
        ("claimed", "Ana Ruiz"), ("released", "Ana Ruiz")]
    # Out of office (item 8): the work goes to a delegate until the end of the chosen day.
    page.get_by_role("button", name="Out of office").click()
    page.get_by_role("button", name="Hand over my work").click()
    page.get_by_text("your work goes to", exact=False).first.wait_for()
    (delegate,) = store.away().values()
    assert delegate in ("Kim Vo", "Lee Park")
    assert [e.note for e in store.audit() if e.event == "away"][0].endswith(
        f"tickets and approvals go to {delegate}")
    page.get_by_role("button", name="I'm back").click()
    page.get_by_role("button", name="Out of office").wait_for()
    assert store.away() == {}
