"""The page in Chromium trusts no one it has not signed in and shows outside text as text
(issue 21: 7 and 10). Same server and browser as tests/web/test_web_e2e.py
(tests/helpers/browser.py)."""

from __future__ import annotations

import urllib.parse

from helpers import browser
from helpers.browser import AppServer, sign_in
from helpers.cli import run_cli

from refund_agent.desk.accounts import Accounts
from refund_agent.desk.records import DeskStore

# The end-to-end tests' browser and server fixtures, and their skip when Chromium is missing.
playwright, context = browser.playwright, browser.context
app_server, server = browser.app_server, browser.server
pytestmark = browser.pytestmark

HOSTILE_RUN = ("[Open the refund](https://evil.example/pay) ![x](https://evil.example/t.png) "
               ":red[**Approved by Lee Park**]")


def test_the_run_query_parameter_renders_no_link_image_or_colour(context, server: AppServer):
    page = context.new_page()
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.goto(server.url + "?run=" + urllib.parse.quote(HOSTILE_RUN))
    alert = page.get_by_test_id("stAlert").filter(has_text="is not in this desk's store")
    alert.wait_for()
    # Shown character for character: the brackets, the URL, the colour directive, the stars
    # (the URLs with an invisible WORD JOINER that keeps them from becoming links).
    assert HOSTILE_RUN in alert.inner_text().replace("\u2060", "")
    assert alert.locator("a").count() == 0 and alert.locator("img").count() == 0
    assert page.locator("a[href*='evil.example'], img[src*='evil.example']").count() == 0
    assert alert.locator("[style*='color']").count() == 0   # no :red[...] text
    # The remote image was never fetched (the only request naming it is the page's own URL).
    assert not [url for url in asked if url.startswith(("http://evil", "https://evil"))]
    page.close()


def test_a_visitor_sees_only_the_sign_in_form(context, app_server: AppServer):
    out = app_server.output
    made = run_cli(out)            # a ticket waiting for approval: Maya Chen, order A1043
    assert made.returncode == 0, made.stderr
    store = DeskStore(out / "refund-agent.sqlite3")
    (approval,) = store.approvals("pending")
    Accounts(store).add("Lee Park", "lead", "lee-password")
    app_server.start()

    page = context.new_page()
    page.goto(app_server.url + f"?run={approval.run_id}")   # a link straight to the ticket
    page.get_by_role("button", name="Sign in").wait_for()
    page.wait_for_timeout(1500)   # the page has settled: nothing more arrives
    html = page.content()
    for secret in ("maya", "Maya", "A1043", "$48.00", "Audit log", "Download CSV",
                   approval.run_id, "Inbox", "Waiting for approval"):
        assert secret not in html, secret
    # The only buttons: Sign in (and the password field's show/hide eye, Streamlit's menu).
    names = {b.inner_text().split("\n")[-1] for b in page.get_by_role("button").all()}
    assert {name for name in names if name not in ("", "visibility")} == {"Sign in"}, names
    for action in ("Cracked on arrival", "Send to the agent", "Stop", "Resume", "Approve…"):
        assert action not in html, action
    # Signed in, the same tab gets the desk and the ticket.
    sign_in(page, "Lee Park", "lee-password")
    page.get_by_text("Signed in as Lee Park").wait_for()
    page.get_by_text("Proposed refund $48.00 on order A1043").wait_for()
    page.close()
