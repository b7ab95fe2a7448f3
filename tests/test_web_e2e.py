"""The helpdesk end to end: `streamlit run app.py` as a real process, driven by headless Chromium.

These tests kill and restart the server the way a user would (Ctrl+C is gentler than the
SIGKILL used here), and check what the page shows and what the store recorded. They use
Debian's Chromium; they are skipped, never downloading a browser, when it is not installed.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cli_env
from playwright.sync_api import expect, sync_playwright

from refund_agent.config import PROJECT_ROOT
from refund_agent.store import Store

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install chromium); these "
           "tests never download a browser")

LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 30_000
CARD = "[class*='st-key-card_']"
# The offline model proposes two lines for this email: POUR-GLS-01 damaged $48.00 and
# MUG-STN-2 changed_mind $18.50.
TWO_LINE_EMAIL = ("Order A1043: the coffee maker arrived shattered, and honestly I also don't "
                  "want the mugs anymore.")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AppServer:
    """``streamlit run app.py`` in its own process, on a fixed port so it can be restarted."""

    def __init__(self, output: Path, log: Path) -> None:
        self.output, self.log = output, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0, **extra_env: str) -> AppServer:
        env = cli_env(self.output, REFUND_AGENT_OFFLINE_LATENCY="0", **extra_env)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port",
                 str(self.port), "--server.address", "127.0.0.1", "--server.headless", "true",
                 "--browser.gatherUsageStats", "false"],
                cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:  # the health endpoint answers once the server accepts pages
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited early:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "_stcore/health", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL, as a crash or a power cut would: nothing gets to clean up."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture(scope="module")
def playwright():
    with sync_playwright() as pw:  # one per module: Playwright's sync API does not nest
        yield pw


@pytest.fixture(scope="module")
def context(playwright):
    """One Chromium and one context for the module: pages share its cache of the page's
    scripts, which saves seconds per page; each page is still its own Streamlit session."""
    chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    context.set_default_timeout(WAIT_MS)
    yield context
    context.close()
    chromium.close()


@pytest.fixture
def app_server(tmp_path: Path) -> Iterator[AppServer]:
    """A server not yet started (tests start it with the environment they need)."""
    app = AppServer(tmp_path / "output", tmp_path / "streamlit.log")
    yield app
    app.kill()


@pytest.fixture
def server(app_server: AppServer) -> AppServer:
    return app_server.start()


def new_page(context, url: str):
    page = context.new_page()
    page.goto(url)
    page.get_by_role("button", name="Cracked on arrival").wait_for()
    return page


def save_name(page, name: str) -> None:
    page.get_by_label("Your name (signs every decision in the audit log)").fill(name)
    page.get_by_role("button", name="Save name").click()
    page.get_by_text("Deciding as").wait_for()


def downloaded_audit(page, entries: int) -> list[dict[str, str]]:
    """Wait for the audit table to hold ``entries`` rows, then download it as CSV."""
    page.get_by_text(f"Hash chain intact, payments and emails reconciled · {entries} entries"
                     ).wait_for()
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
    page.get_by_role("button", name="Cracked on arrival").click()
    card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
    card.wait_for()
    print(f"\nproposal card visible {time.monotonic() - started:.2f} s after the click")
    expect(page.get_by_text("Proposed refund $48.00 on order A1043")).to_be_visible()
    # The card shows the line, ticked, with what the policy allows for it.
    expect(card.get_by_text("POUR-GLS-01 · full value $48.00")).to_be_visible()
    expect(card.get_by_role("checkbox")).to_be_checked()
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
    save_name(page, "Dana Kim")
    card.get_by_role("button", name="Approve").click()

    page.get_by_text("Note for the team", exact=True).wait_for()
    expect(page.get_by_text("Server restarted: process", exact=False)).to_be_visible()
    expect(page.get_by_text("Approved by Dana Kim", exact=True)).to_be_visible()
    expect(page.get_by_text("issued: $48.00")).to_be_visible()
    expect(page.get_by_text("Email to maya.chen@example.com")).to_be_visible()
    expect(page.locator(CARD)).to_have_count(0)

    audit = downloaded_audit(page, 3)
    rows = [(r["event"], r["actor"], int(r["pid"])) for r in audit]
    assert rows == [("issued", "payments", server.pid), ("approved", "Dana Kim", server.pid),
                    ("requested", "agent", old_pid)]
    assert [json.loads(r["lines"]) for r in audit] == [
        [{"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 4800}]] * 3
    store = Store(server.output / "refund-agent.sqlite3")
    assert [(e.event, e.pid) for e in store.audit()] == [
        ("requested", old_pid), ("approved", server.pid), ("issued", server.pid)]
    assert store.verify_audit() is None


def test_two_pages_approving_at_once_make_one_decision(context, server: AppServer):
    first = new_page(context, server.url)
    second = new_page(context, server.url)
    save_name(first, "Dana Kim")
    save_name(second, "Sam Lee")
    first.get_by_role("button", name="Cracked on arrival").click()
    buttons = []
    for page in (first, second):  # every open tab shows the same queue
        card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
        button = card.get_by_role("button", name="Approve")
        button.wait_for()
        buttons.append(button)
    # Back to back, before either page hears about the other: dispatching the click events
    # skips the pointer simulation, so the two land milliseconds apart even on a busy machine.
    for button in buttons:
        button.dispatch_event("click")

    store = Store(server.output / "refund-agent.sqlite3")
    deadline = time.monotonic() + WAIT_MS / 1000
    while not [e for e in store.audit() if e.event == "ignored"]:
        assert time.monotonic() < deadline, "the second approval never reached the server"
        first.wait_for_timeout(50)
    events = [e.event for e in store.audit()]
    assert events.count("approved") == 1 and events.count("ignored") == 1
    winner = store.approvals(None)[0].decided_by
    winning, losing = (first, second) if winner == "Dana Kim" else (second, first)
    # The message goes on with when it was decided.
    losing.get_by_text(f"This refund was already approved by {winner} at ").wait_for()
    winning.get_by_text(f"Approved $48.00 for order A1043 as {winner}.", exact=False).wait_for()
    winning.get_by_text("Note for the team", exact=True).wait_for()
    assert len(store.audit()) == 4  # requested, approved, ignored, issued: one refund


def test_crash_after_refund_is_picked_up_and_not_repeated(context, app_server: AppServer):
    app_server.start(CRASH_AFTER_REFUND="1")
    page = new_page(context, app_server.url)
    save_name(page, "Dana Kim")
    page.get_by_role("button", name="Cracked on arrival").click()
    card = page.locator(CARD).filter(has_text="$48.00 for order A1043")
    card.wait_for()
    expect(page.get_by_role("button", name="Download CSV")).to_be_visible()
    crashed_pid = app_server.pid
    card.get_by_role("button", name="Approve").click()
    # The crash point kills the server right after the payment provider made the refund.
    assert app_server.proc.wait(30) == -signal.SIGKILL

    app_server.start()  # without the crash point, as a person would restart it
    page.get_by_text(f"Server pid {app_server.pid}").wait_for()
    page.get_by_text("Note for the team", exact=True).wait_for()
    expect(page.get_by_text("reused, not repeated", exact=False)).to_be_visible()
    expect(page.get_by_text("Server restarted: process", exact=False)).to_be_visible()
    page.get_by_text("Hash chain intact, payments and emails reconciled · 3 entries").wait_for()

    store = Store(app_server.output / "refund-agent.sqlite3")
    assert [(e.event, e.pid) for e in store.audit()] == [
        ("requested", crashed_pid), ("approved", crashed_pid), ("reused", app_server.pid)]
    refunds = (app_server.output / "refunds.log").read_text().splitlines()
    assert len(refunds) == 1  # one refund at the payment provider, however many attempts


def test_partial_approval_pays_only_the_ticked_line(context, server: AppServer):
    page = new_page(context, server.url)
    save_name(page, "Dana Kim")
    page.get_by_text("Write your own email").click()
    page.get_by_label("From (the customer's address)").fill("maya.chen@example.com")
    page.get_by_label("Email", exact=True).fill(TWO_LINE_EMAIL)
    page.get_by_role("button", name="Send to the agent").click()
    card = page.locator(CARD).filter(has_text="$66.50 for order A1043")
    card.wait_for()
    expect(card.get_by_text("MUG-STN-2 · $26.00 less a $7.50 return fee")).to_be_visible()
    expect(card.get_by_role("checkbox")).to_have_count(2)

    # Untick the mugs: the card says what the kept line comes to before anyone approves.
    # The test id is on the checkbox's <label>, which wraps the (visually hidden) input.
    mugs = card.get_by_test_id("stCheckbox").filter(has_text="Stoneware mugs, set of 2")
    mugs.click()
    expect(mugs.get_by_role("checkbox")).not_to_be_checked()
    card.get_by_text("Approving pays $48.00 for the ticked lines instead of $66.50").wait_for()
    card.get_by_role("textbox").fill("The mugs were used, so they cannot be returned.")
    card.get_by_role("button", name="Approve").click()

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
    store = Store(server.output / "refund-agent.sqlite3")
    (decided,) = store.approvals(None)
    assert decided.amount == 48.0 and [x.line for x in decided.declined] == ["MUG-STN-2"]
    assert store.verify_audit() is None


# -- accounts and the host check --------------------------------------------------------------


def sign_in(page, name: str, password: str) -> None:
    form = page.get_by_test_id("stForm").filter(has_text="Sign in to decide refunds")
    form.get_by_label("Name", exact=True).fill(name)
    form.get_by_label("Password", exact=True).fill(password)
    form.get_by_role("button", name="Sign in").click()


def test_sign_in_an_approver_above_the_limit_is_refused_and_a_lead_approves(
        context, app_server: AppServer):
    from refund_agent.accounts import Accounts
    store = Store(app_server.output / "refund-agent.sqlite3")
    Accounts(store).add("Ana Ruiz", "approver", "ana-password", limit=40)
    Accounts(store).add("Lee Park", "lead", "lee-password")
    app_server.start()

    ana = new_page(context, app_server.url + "?approver=Anyone")  # the old URL signs nothing
    expect(ana.get_by_text("Single-user demo mode")).to_have_count(0)
    expect(ana.get_by_label("Your name (signs every decision in the audit log)")).to_have_count(0)
    sign_in(ana, "Ana Ruiz", "wrong-password")
    ana.get_by_text("Wrong name or password.").wait_for()
    sign_in(ana, "Ana Ruiz", "ana-password")
    ana.get_by_text("Signed in as Ana Ruiz").wait_for()
    assert "Ana" not in ana.url and "password" not in ana.url

    ana.get_by_role("button", name="Cracked on arrival").click()
    card = ana.locator(CARD).filter(has_text="$48.00 for order A1043")
    card.wait_for()
    expect(card.get_by_text("$48.00 is above your approval limit of $40.00: a lead must "
                            "decide")).to_be_visible()
    card.get_by_role("button", name="Approve").click()
    ana.get_by_text("Cannot approve: $48.00 is above Ana Ruiz's approval limit").wait_for()
    (approval,) = store.approvals(None)
    assert approval.status == "pending"

    lee = new_page(context, app_server.url)
    sign_in(lee, "Lee Park", "lee-password")
    lee.get_by_text("Signed in as Lee Park").wait_for()
    lee_card = lee.locator(CARD).filter(has_text="$48.00 for order A1043")
    expect(lee_card.get_by_text("above your approval limit")).to_have_count(0)
    lee_card.get_by_role("button", name="Approve").click()
    lee.get_by_text("Approved $48.00 for order A1043 as Lee Park", exact=False).wait_for()
    expect(ana.locator(CARD)).to_have_count(0)  # the other tab sees it decided
    # The run's end reruns the whole page, which would cancel a download started before it.
    lee.get_by_text("Note for the team", exact=True).wait_for()
    audit = downloaded_audit(lee, 4)
    assert [(r["event"], r["actor"]) for r in audit] == [
        ("issued", "payments"), ("approved", "Lee Park"), ("refused", "Ana Ruiz"),
        ("requested", "agent")]
    assert store.verify_audit() is None


def test_a_page_opened_under_a_foreign_host_is_refused(playwright, server: AppServer):
    # A browser that resolves evil.example to this machine, as DNS rebinding would: the
    # request reaches the server with "Host: evil.example:PORT".
    chromium = playwright.chromium.launch(
        executable_path=str(CHROMIUM),
        args=LAUNCH_ARGS + ["--host-resolver-rules=MAP evil.example 127.0.0.1",
                            "--no-proxy-server"])
    try:
        page = chromium.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"http://evil.example:{server.port}/?approver=Anyone")
        page.get_by_text("This desk does not answer under this host name").wait_for()
        expect(page.get_by_role("button", name="Cracked on arrival")).to_have_count(0)
        expect(page.get_by_text("Waiting for approval")).to_have_count(0)
        # The same server still answers under its own name.
        page.goto(server.url)
        page.get_by_role("button", name="Cracked on arrival").wait_for()
        expect(page.get_by_text("does not answer under this host name")).to_have_count(0)
    finally:
        chromium.close()


def test_an_added_host_name_is_served(playwright, app_server: AppServer):
    app_server.start(REFUND_AGENT_ALLOWED_HOSTS="desk.example.com")
    chromium = playwright.chromium.launch(
        executable_path=str(CHROMIUM),
        args=LAUNCH_ARGS + ["--host-resolver-rules=MAP desk.example.com 127.0.0.1",
                            "--no-proxy-server"])
    try:
        page = chromium.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"http://desk.example.com:{app_server.port}/")
        page.get_by_role("button", name="Cracked on arrival").wait_for()
        expect(page.get_by_text("does not answer under this host name")).to_have_count(0)
    finally:
        chromium.close()
