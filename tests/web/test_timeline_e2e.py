"""The run's timeline on the ticket page, drawn in Debian's Chromium (issue 47).

A refund proposed by one terminal command and approved by another: two processes. The store's
times before the decision are then moved three days and four hours back, as if the approver
had come back after a long weekend (the audit log is left alone: its hash chain covers its
times). The page must draw the chart with a lane per process and the wait as a labelled break.
"""

from __future__ import annotations

from helpers import browser
from helpers.browser import AppServer, open_ticket
from helpers.cli import run_cli
from playwright.sync_api import expect

from refund_agent.models import StepKind
from refund_agent.store import Store

playwright, context = browser.playwright, browser.context
app_server = browser.app_server
pytestmark = browser.pytestmark

WAIT = 3 * 86400 + 4 * 3600   # 3 d 4 h


def age_the_wait(store: Store, run_id: str, seconds: float) -> None:
    """Move everything before the decision ``seconds`` into the past: the wait grows by that."""
    decided = min(s.id for s in store.steps(run_id) if s.kind == StepKind.DECISION)
    store.execute("UPDATE steps SET at = at - ? WHERE run_id = ? AND id < ?",
                  (seconds, run_id, decided))
    store.execute("UPDATE approvals SET requested_at = requested_at - ? WHERE run_id = ?",
                  (seconds, run_id))
    store.execute("UPDATE runs SET created_at = created_at - ? WHERE id = ?", (seconds, run_id))


def test_a_ticket_approved_days_later_in_another_process_draws_its_timeline(
        context, app_server: AppServer):
    out = app_server.output
    proposed = run_cli(out, "sample")
    assert proposed.returncode == 0, proposed.stderr
    approved = run_cli(out, "approve", "--as", "Dana Kim")
    assert approved.returncode == 0, approved.stderr
    store = Store(out / "refund-agent.sqlite3")
    (run,) = store.runs()
    steps = store.steps(run.id)
    proposer = steps[0].pid
    approver = next(s.pid for s in steps if s.kind == StepKind.DECISION)
    assert proposer != approver
    age_the_wait(store, run.id, WAIT)

    app_server.start()
    page = context.new_page()
    page.goto(app_server.url)
    page.get_by_text("Audit log").first.wait_for()
    open_ticket(page)
    chart = page.locator("[class*='st-key-timeline_chart']")
    drawing = chart.get_by_test_id("stVegaLiteChart").locator("svg").first
    expect(drawing).to_be_visible()
    # The marks and labels are SVG text in the page (the chart asks for the SVG renderer).
    expect(drawing.get_by_text("⋯ waited 3 d 4 h ⋯")).to_be_visible()
    for lane in (f"process {proposer} (terminal)", f"process {approver} (terminal)",
                 "a person"):
        expect(drawing.get_by_text(lane, exact=True)).to_be_visible()
    # The same in words under the chart, for anyone who cannot see it.
    expect(chart.get_by_text(
        f"2 processes: process {proposer} (terminal), process {approver} (terminal); "
        f"waited 3 d 4 h; approved by Dana Kim (in process {approver}); process {approver} "
        f"took the run over from process {proposer}.")).to_be_visible()
    chart.get_by_text("The timeline as text").click()
    expect(chart.get_by_text("waited for a person on $48.00 · 3 d 4 h",
                             exact=False)).to_be_visible()
