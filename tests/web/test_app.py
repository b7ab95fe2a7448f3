"""The helpdesk page (Streamlit's AppTest, no browser) and its background worker.

AppTest runs ``app.py`` in this process, so the page's worker threads and the offline model run
here too. Runs are asynchronous, so tests re-run the page until what they wait for shows up.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time

import pytest
from helpers import page
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)
from helpers.page import (
    APP,
    TIMEOUT,
    TWO_LINE_EMAIL,
    add_accounts,
    box,
    confirm,
    decide,
    eventually,
    open_page,
    plain,
    rerun_until,
    review,
    save_name,
    shows,
    sign_in,
    start_damaged,
    start_two_lines,
    texts,
)
from streamlit.testing.v1 import AppTest

from refund_agent import AlreadyDecided, DecisionRefused, RunNotReady, RunStatus, Settings
from refund_agent.desk import Agent
from refund_agent.providers.client import offline_server
from refund_agent.store import Store
from refund_agent.web.worker import Worker

output, store = page.output, page.store  # the page's fixtures (tests/helpers/page.py)


def test_page_shows_the_shop_the_model_and_the_server(output):
    at = open_page()
    header = " ".join(texts(at, "markdown"))
    assert "Juniper & Pine Home Goods" in header
    assert "offline stand-in model (no XAI_API_KEY set)" in header
    assert f"Server pid {os.getpid()}" in header and "Worker running" in header
    labels = {b.label for b in at.button}
    assert {"Cracked on arrival", "Past 30 days", "Angry customer"} <= labels
    assert shows(at, "Pick a ticket in the inbox", "info")


def test_sample_button_creates_a_run_that_reaches_the_queue(output, store):
    at = open_page()
    approval = start_damaged(at, store)
    run_id = at.session_state["selected"]
    assert approval.run_id == run_id and approval.amount == 48.0
    # The ticket shows the proposal and its lines, the inbox lists the run, the card its lines
    # (each with what the policy allows) and the order's facts.
    at.run()
    assert shows(at, "Proposed refund $48.00 on order A1043", "warning")
    assert shows(at, "- POUR-GLS-01 damaged $48.00", "warning")
    (row,) = [b for b in at.button if b.key == f"run_{run_id}"]
    assert "Maya Chen · A1043 · $48.00" in plain(row.label)
    # The card only summarizes; the review shows every line and what the policy allows.
    assert shows(at, "- Glass pour-over coffee maker · damaged · $48.00", "markdown")
    review(at, approval.id)
    carafe = box(at, approval.id, "POUR-GLS-01")
    assert carafe.value is True
    # Its label is what a screen reader says: plain words, no Markdown.
    assert carafe.label == "Glass pour-over coffee maker, damaged, $48.00"
    assert shows(at, "POUR-GLS-01 · full value $48.00", "markdown")
    assert shows(at, "1 day ago, inside the 30-day window", "markdown")
    assert shows(at, "Other lines: Stoneware mugs, set of 2 $26.00 (refundable)", "markdown")
    assert shows(at, "Paid: $80.95, refunded so far $0.00, left $80.95", "markdown")
    assert not shows(at, "Most the policy allows", "markdown")
    frame = at.dataframe[0].value
    assert frame["Event"].tolist() == ["requested"]
    assert frame["Lines"].tolist() == ["POUR-GLS-01 damaged $48.00"]
    assert store.run(run_id).status == RunStatus.WAITING


def test_past_window_sample_is_declined_without_a_person(output, store):
    at = open_page()
    at.button(key="sample_past-window").click().run()
    rerun_until(at, "Email to tom.becker@example.com", "markdown")
    rerun_until(at, "Note for the team", "info")
    run = store.run(at.session_state["selected"])
    assert run.status == RunStatus.DONE and store.approvals(None) == []
    assert shows(at, "Waiting for approval (0)", "markdown")


def test_approve_card_finishes_the_run(output, store):
    at = open_page()
    approval = start_damaged(at, store)
    save_name(at, "Dana Kim")
    assert shows(at, "Deciding as Dana Kim", "markdown")
    decide(at, approval.id)
    assert shows(at, "Approved $48.00 for order A1043 as Dana Kim", "toast")
    assert at.session_state["review"] is None        # the review closed
    rerun_until(at, "Note for the team", "info")
    run = store.run(approval.run_id)
    assert run.status == RunStatus.DONE
    assert shows(at, "Approved by Dana Kim", "success")
    assert shows(at, "issued: $48.00", "success")
    assert shows(at, "Email to maya.chen@example.com", "markdown")
    assert [e.event for e in store.audit()] == ["requested", "approved", "issued"]
    assert at.dataframe[0].value["Event"].tolist() == ["issued", "approved", "requested"]
    # A finished run offers the customer's reply box, and a reply continues the run.
    at.text_area(key=f"reply_{run.id}").input("Thanks! When will it arrive?")
    at.button(key=f"reply_send_{run.id}").click().run()
    rerun_until(at, "Customer replied", "markdown")
    eventually(lambda: store.run(run.id).status == RunStatus.DONE and
               store.run(run.id).requests > run.requests, what="the reply's turn")


def test_a_proposal_that_changed_under_the_open_review_is_refused_not_approved(output, store):
    """What you see is what you sign: the review was drawn, then the proposal changed in the
    store; the click names what was drawn and is refused, audited, and nothing is paid."""
    at = open_page()
    approval = start_damaged(at, store)
    save_name(at, "Dana Kim")
    review(at, approval.id)
    assert at.button(key=f"confirm_{approval.id}").label == "Approve $48.00"
    with sqlite3.connect(output / "refund-agent.sqlite3") as db:
        db.execute("UPDATE approvals SET summary = 'Refund the whole order' WHERE id = ?",
                   (approval.id,))
    at.button(key=f"confirm_{approval.id}").click().run()
    assert shows(at, "changed since it was shown to Dana Kim", "error")
    assert store.approval(approval.id).status == "pending"
    assert [e.event for e in store.audit()] == ["requested", "refused"]
    # Confirming again decides what the review now shows (and shows it was redrawn).
    at.button(key=f"confirm_{approval.id}").click().run()
    assert shows(at, "Approved $48.00 for order A1043 as Dana Kim", "toast")


def test_partial_approval_pays_only_the_kept_lines(output, store):
    at = open_page()
    approval = start_two_lines(at, store)
    save_name(at, "Dana Kim")
    review(at, approval.id)
    mugs = box(at, approval.id, "MUG-STN-2")
    assert shows(at, "MUG-STN-2 · $26.00 less a $7.50 return fee", "markdown")
    assert not shows(at, "Approving pays", "info")
    # Unticking a line shows what the kept lines come to, before anyone clicks.
    mugs.uncheck().run()
    assert shows(at, "Approving pays $48.00 for the ticked lines instead of $66.50. Declined: "
                     "Stoneware mugs, set of 2.", "info")
    assert at.button(key=f"confirm_{approval.id}").label == "Approve $48.00"
    confirm(at, approval.id, "The mugs were used, so no return.")
    assert shows(at, "Approved $48.00 for order A1043 as Dana Kim (declined: Stoneware mugs, "
                     "set of 2)", "toast")
    decided = store.approval(approval.id)
    assert decided.status == "approved" and decided.amount == 48.0
    assert [x.line for x in decided.kept] == ["POUR-GLS-01"]
    assert [x.line for x in decided.declined] == ["MUG-STN-2"]
    eventually(lambda: store.run(approval.run_id).status == RunStatus.DONE, what="run done")
    rerun_until(at, "Note for the team", "info")
    assert shows(at, "- Declined: MUG-STN-2", "success")  # the decision
    assert shows(at, "Refund re_", "success") and shows(at, "issued: $48.00", "success")
    assert shows(at, "- POUR-GLS-01 damaged $48.00 (Glass pour-over coffee maker)", "success")
    # One payment, for the kept line only.
    (record,) = (output / "refunds.log").read_text().splitlines()
    paid = json.loads(record)["request"]
    assert paid["amount_cents"] == 4800
    assert [(x["line"], x["amount_cents"]) for x in paid["lines"]] == [("POUR-GLS-01", 4800)]
    frame = at.dataframe[0].value
    assert frame["Event"].tolist() == ["issued", "approved", "requested"]
    assert frame["Lines"].tolist() == [
        "POUR-GLS-01 damaged $48.00", "POUR-GLS-01 damaged $48.00",
        "POUR-GLS-01 damaged $48.00; MUG-STN-2 changed_mind $18.50"]


def test_approving_with_no_line_ticked_is_refused(output, store):
    at = open_page()
    approval = start_damaged(at, store)
    save_name(at, "Dana Kim")
    review(at, approval.id)
    box(at, approval.id, "POUR-GLS-01").uncheck().run()
    assert shows(at, "No line is ticked. To refund nothing, reject with a note instead.",
                 "warning")
    confirm(at, approval.id)
    assert not at.exception
    assert shows(at, "Keep at least one of the proposed lines", "error")
    assert store.approval(approval.id).status == "pending"
    assert not (output / "refunds.log").exists() or \
        (output / "refunds.log").read_text().strip() == ""
    # Ticking it again approves the whole refund.
    box(at, approval.id, "POUR-GLS-01").check().run()
    confirm(at, approval.id)
    assert shows(at, "Approved $48.00 for order A1043 as Dana Kim.", "toast")


def test_reject_needs_a_note(output, store):
    at = open_page()
    approval = start_damaged(at, store)
    save_name(at, "Dana Kim")
    decide(at, approval.id, "reject")
    assert shows(at, "A rejection needs a note", "error")
    assert store.approval(approval.id).status == "pending"
    assert at.session_state["review"]                  # still open, for the note
    confirm(at, approval.id, "The carafe is covered by the courier claim.")
    assert shows(at, "Rejected the refund for order A1043 as Dana Kim", "toast")
    decided = store.approval(approval.id)
    assert decided.status == "rejected" and decided.note.startswith("The carafe is covered")
    rerun_until(at, "Rejected by Dana Kim", "error")
    eventually(lambda: store.run(approval.run_id).status == RunStatus.DONE, what="run done")


def test_approver_name_is_needed(output, store):
    at = open_page()
    approval = start_damaged(at, store)
    decide(at, approval.id)
    assert shows(at, "Enter your name before deciding", "error")
    assert store.approval(approval.id).status == "pending"
    save_name(at, "   ")
    assert shows(at, "Enter your name first", "error")
    save_name(at, "Dana Kim")
    assert not at.error
    # Asked once: the name is kept for the session and used for the next decision.
    at.run()
    assert shows(at, "Deciding as Dana Kim", "markdown")
    confirm(at, approval.id)
    assert store.approval(approval.id).decided_by == "Dana Kim"


def test_two_sessions_approving_yield_one_decision(output, store):
    first, second = open_page(), open_page()
    approval = start_damaged(first, store)
    for at, name in ((first, "Dana Kim"), (second, "Sam Lee")):
        save_name(at, name)
        rerun_until(at, "$48.00 for order A1043", "markdown")
    # Both open the review; the first confirms; the second's review says so instead of a
    # button that would pay again.
    review(first, approval.id)
    review(second, approval.id)
    confirm(first, approval.id)
    second.run()
    assert shows(second, "no longer waiting: it was approved by Dana Kim", "info")
    assert not second.exception
    assert not [b for b in second.button if b.key == f"confirm_{approval.id}"]
    assert [e.event for e in store.audit()].count("approved") == 1
    # The first person's second look is theirs, not someone else's doing.
    review_again = open_page()
    save_name(review_again, "Dana Kim")
    review_again.session_state["review"] = {"id": approval.id, "mode": "approve"}
    review_again.run()
    assert shows(review_again, "You approved this refund", "info")


def test_the_audit_check_runs_off_the_page_and_shows_tampering(output, store):
    """The check runs in the worker's thread; the page shows its verdict, then the edit."""
    at = open_page()
    start_damaged(at, store)
    rerun_until(at, "Hash chain intact, payments and emails reconciled · 1 entry", "caption")
    with sqlite3.connect(output / "refund-agent.sqlite3") as db:
        db.execute("UPDATE audit SET actor = 'Mallory' WHERE event = 'requested'")
    rerun_until(at, "Audit check failed: Audit entry 1 (requested) was edited", "error")


def test_the_queue_draws_the_oldest_cards_a_page_at_a_time(output, tmp_path, monkeypatch):
    """Three refunds waiting and a page of two: the two oldest, then the third on request."""
    from benchlib import make_bench_shop, start_ticket

    from refund_agent.config import load_settings
    from refund_agent.web import approvals as desk

    monkeypatch.setenv("REFUND_AGENT_DATA", str(make_bench_shop(tmp_path / "shop", 3)))
    monkeypatch.setattr(desk, "QUEUE_PAGE", 2)
    agent = Agent(load_settings())
    waiting = []
    for order in ("B00001", "B00002", "B00003"):
        run = agent.advance(start_ticket(agent, order).id)
        waiting.append(agent.store.run_approvals(run.id)[0].id)
    at = open_page()
    assert shows(at, "Waiting for approval (3)", "markdown")
    cards = [b.key for b in at.button if b.key and b.key.startswith("approve_")]
    assert cards == [f"approve_{a}" for a in waiting[:2]]
    assert at.button(key="queue_more").label == "Show 1 more (1 not shown)"
    at.button(key="queue_more").click().run()
    cards = [b.key for b in at.button if b.key and b.key.startswith("approve_")]
    assert cards == [f"approve_{a}" for a in waiting]
    assert not [b for b in at.button if b.key == "queue_more"]


def test_mistakes_show_messages_not_tracebacks(output, store):
    at = open_page()
    at.text_input(key="mail_from").input("not an address")
    at.text_area(key="mail_body").input("My order A1058 arrived broken.")
    at.button(key="mail_send").click().run()
    assert shows(at, "is not an email address", "error")
    at.text_input(key="mail_from").input("leo.martins@example.com")
    at.text_area(key="mail_body").input("   ")
    at.button(key="mail_send").click().run()
    assert shows(at, "The email is empty", "error")
    assert not at.exception and store.runs() == []


def test_custom_email_starts_a_run(output, store):
    at = open_page()
    at.text_input(key="mail_from").input("leo.martins@example.com")
    at.text_input(key="mail_name").input("Leo Martins")
    at.text_area(key="mail_body").input("My order A1058 arrived with a broken lid.")
    at.button(key="mail_send").click().run()
    (run,) = store.runs()
    assert run.sender == "leo.martins@example.com" and at.session_state["selected"] == run.id
    assert at.session_state["mail_body"] == ""
    eventually(lambda: store.run(run.id).status != RunStatus.WORKING, what="the run to settle")


def test_corrupt_database_is_a_message(output):
    output.mkdir(parents=True)
    (output / "refund-agent.sqlite3").write_bytes(b"this is not a database" * 100)
    at = open_page()
    assert shows(at, "is not a readable refund-agent database", "error")


def test_unknown_ticket_in_the_url_is_a_message(output):
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["run"] = "run_gone"
    at.run()
    assert shows(at, "Ticket run_gone is not in this desk's store", "info")
    assert at.session_state["selected"] is None and not at.exception


def test_bad_settings_are_a_message(output, monkeypatch):
    monkeypatch.setenv("REFUND_AGENT_TIMEOUT", "soon")
    at = open_page()
    assert shows(at, "REFUND_AGENT_TIMEOUT must be a number", "error")


def test_stop_and_resume_from_the_page(output, store, monkeypatch):
    # Slow enough that Stop lands while the first request streams, even on a busy machine.
    monkeypatch.setenv("REFUND_AGENT_OFFLINE_LATENCY", "4")
    at = open_page()
    at.button(key="sample_damaged").click().run()
    rerun_until(at, "Thinking…", "markdown")  # the first request is streaming
    at.button(key="stop").click().run()
    run_id = at.session_state["selected"]
    eventually(lambda: store.run(run_id).status == RunStatus.STOPPED, what="the stop")
    rerun_until(at, "Stopped. Resume continues", "warning")
    assert store.run(run_id).requests == 0  # the aborted request was never recorded
    assert not at.button(key="resume").disabled
    # The page's offline model (shared per output folder in this process) may be fast now.
    offline_server(Settings(output_dir=output)).latency = 0
    at.button(key="resume").click().run()
    eventually(lambda: store.run(run_id).status == RunStatus.WAITING, what="the resumed run")


# -- the worker on its own ---------------------------------------------------------------------


@pytest.fixture
def worker(agent: Agent):
    w = Worker(agent)
    w.start()
    yield w
    w.shutdown()


def wait_status(store: Store, run_id: str, status: RunStatus, timeout: float = TIMEOUT) -> None:
    eventually(lambda: store.run(run_id).status == status and True, timeout,
               f"run {run_id} to be {status.value}")


def settle(worker: Worker, run_id: str) -> None:
    eventually(lambda: not worker.is_active(run_id), what=f"run {run_id}'s thread to finish")


def test_worker_runs_a_sample_to_the_queue_and_finishes_it(worker, agent):
    run = worker.submit_sample("damaged")
    wait_status(agent.store, run.id, RunStatus.WAITING)
    settle(worker, run.id)
    (approval,) = agent.store.approvals("pending")
    worker.decide(approval.id, True, "Dana",
                  fingerprint=worker.agent.store.approval(approval.id).fingerprint)
    wait_status(agent.store, run.id, RunStatus.DONE)
    kinds = [s.kind for s in agent.store.steps(run.id)]
    assert "refund" in kinds and "message" in kinds and kinds[-2] == "note"


def test_worker_passes_the_kept_lines_to_the_decision(worker, agent):
    run = worker.submit_email("maya.chen@example.com", TWO_LINE_EMAIL)
    wait_status(agent.store, run.id, RunStatus.WAITING)
    settle(worker, run.id)
    (approval,) = agent.store.approvals("pending")
    decided = worker.decide(approval.id, True, "Dana", "Mugs were used", keep=["MUG-STN-2"],
                            fingerprint=worker.agent.store.approval(approval.id).fingerprint)
    assert decided.amount == 18.5 and [x.line for x in decided.declined] == ["POUR-GLS-01"]
    wait_status(agent.store, run.id, RunStatus.DONE)
    (refund,) = agent.payments.refunds()
    assert [x["line"] for x in refund["request"]["lines"]] == ["MUG-STN-2"]


def test_worker_decisions_race_to_one(worker, agent):
    run = worker.submit_sample("damaged")
    wait_status(agent.store, run.id, RunStatus.WAITING)
    (approval,) = agent.store.approvals("pending")
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def click(name: str) -> None:
        barrier.wait()
        try:
            worker.decide(approval.id, True, name,
                          fingerprint=worker.agent.store.approval(approval.id).fingerprint)
            outcomes.append("ok")
        except AlreadyDecided as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=click, args=(f"approver {i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 1
    winner = agent.store.approval(approval.id).decided_by
    # The losers are told who won, and when.
    losers = sorted(outcomes)[:3]
    assert all(o.startswith(f"This refund was already approved by {winner} at ") for o in losers)
    wait_status(agent.store, run.id, RunStatus.DONE)
    assert len(agent.payments.refunds()) == 1


def test_worker_streams_live_deltas_and_stops_mid_request(settings: Settings, tmp_path):
    # Slow enough that Stop lands mid-request even on a busy machine; fast again to resume.
    slow = Agent(settings.with_(output_dir=tmp_path / "slow", offline_latency=4.0))
    worker = Worker(slow)
    worker.start()
    try:
        run = worker.submit_sample("damaged")
        segments = eventually(lambda: worker.live(run.id), what="streamed deltas")
        assert segments[0].kind == "reasoning" and segments[0].text
        assert worker.stop(run.id, "Dana Kim")
        wait_status(slow.store, run.id, RunStatus.STOPPED)
        # Who stopped it is in the audit, signed (issue 36: Stop left no audit line at all).
        assert [(e.event, e.actor, e.run_id) for e in slow.store.audit()] == [
            ("stopped", "Dana Kim", run.id)]
        settle(worker, run.id)
        assert worker.live(run.id) == [] and slow.store.run(run.id).requests == 0
        assert slow.store.steps(run.id)[-1].kind == "stopped"
        with pytest.raises(RunNotReady):
            worker.reply(run.id, "Hello?")  # only a finished run takes a reply
        slow.model.server.latency = 0
        assert worker.resume(run.id)
        wait_status(slow.store, run.id, RunStatus.WAITING, timeout=30)
    finally:
        worker.shutdown()


def test_worker_resumes_a_run_a_crashed_process_left_mid_turn(settings: Settings, tmp_path):
    out = tmp_path / "crashed"
    result = run_cli(out, REFUND_AGENT_CRASH_AT="after_response")
    assert result.returncode != 0  # killed by its own crash point
    agent = Agent(settings.with_(output_dir=out))
    (orphan,) = agent.store.orphaned_runs()
    worker = Worker(agent)
    try:
        assert worker.start() == [orphan.id]
        wait_status(agent.store, orphan.id, RunStatus.WAITING)
        assert any(s.kind == "restart" for s in agent.store.steps(orphan.id))
    finally:
        worker.shutdown()


def test_worker_reuses_the_refund_after_a_crash_after_refund(settings: Settings, tmp_path):
    out = tmp_path / "after-refund"
    assert run_cli(out).returncode == 0  # stops at the approval
    crashed = run_cli(out, "approve", "--as", "Dana", CRASH_AFTER_REFUND="1")
    assert crashed.returncode != 0
    agent = Agent(settings.with_(output_dir=out))
    assert len(agent.payments.refunds()) == 1
    worker = Worker(agent)
    try:
        (run_id,) = worker.start()
        wait_status(agent.store, run_id, RunStatus.DONE)
    finally:
        worker.shutdown()
    assert len(agent.payments.refunds()) == 1  # reused, not repeated
    assert [e.event for e in agent.store.audit()] == ["requested", "approved", "reused"]


def test_worker_converses_for_the_angry_sample(worker, agent):
    run = worker.submit_sample("angry")
    wait_status(agent.store, run.id, RunStatus.WAITING)
    (approval,) = agent.store.approvals("pending")
    worker.decide(approval.id, True, "Dana",
                  fingerprint=worker.agent.store.approval(approval.id).fingerprint)
    wait_status(agent.store, run.id, RunStatus.DONE)
    settle(worker, run.id)
    finished = agent.store.run(run.id)
    assert finished.simulated_replies >= 1
    assert any(s.kind == "reply" and s.data["simulated"] for s in agent.store.steps(run.id))


def test_worker_refuses_work_it_cannot_do(worker, agent):
    run = worker.submit_sample("damaged")
    wait_status(agent.store, run.id, RunStatus.WAITING)
    settle(worker, run.id)
    with pytest.raises(RunNotReady, match="waiting for a person"):
        worker.resume(run.id)
    (approval,) = agent.store.approvals("pending")
    with pytest.raises(DecisionRefused, match="name"):
        worker.decide(approval.id, True, "  ",
                      fingerprint=worker.agent.store.approval(approval.id).fingerprint)
    assert not worker.stop(run.id)  # nothing in flight
    worker.shutdown()
    assert not worker.running
    with pytest.raises(RunNotReady, match="not running"):
        worker.submit_sample("damaged")


# -- accounts: sign-in, limits ----------------------------------------------------------------


def test_no_accounts_is_an_explicit_demo_mode(output, store):
    at = open_page()
    assert shows(at, "Single-user demo: no accounts", "markdown")
    assert not at.text_input(key="approver_input").value
    add_accounts(store)
    at.run()
    assert not shows(at, "Single-user demo", "markdown")
    assert at.button(key="sign_in")  # the name form gave way to the sign-in


def test_sign_in_signs_every_decision_and_a_wrong_password_is_refused(output, store):
    add_accounts(store)
    at = open_page()
    sign_in(at, "Lee Park", "not-the-password")
    assert shows(at, "Wrong name or password.", "error")
    assert "account" not in at.session_state or not at.session_state["account"]
    assert at.text_input(key="signin_password").value == ""   # never kept after a try
    sign_in(at, "Lee Park", "lee-password")
    assert shows(at, "Signed in as Lee Park · lead, no limit", "markdown")
    approval = start_damaged(at, store)
    assert "account" not in at.query_params and "approver" not in at.query_params
    decide(at, approval.id)
    assert shows(at, "Approved $48.00 for order A1043 as Lee Park", "toast")
    assert store.approval(approval.id).decided_by == "Lee Park"
    # Signing out asks again.
    at.button(key="sign_out").click().run()
    assert at.button(key="sign_in")


def test_an_approver_above_the_limit_is_refused_and_a_lead_approves(output, store):
    add_accounts(store)
    ana = open_page()
    sign_in(ana, "Ana Ruiz", "ana-password")
    assert shows(ana, "Signed in as Ana Ruiz · approver, up to $40.00", "markdown")
    approval = start_damaged(ana, store)
    review(ana, approval.id)
    assert shows(ana, "Needs a lead: $48.00 is above your approval limit of $40.00",
                 "warning")
    # No dead Approve: the review's button sends the refund to a lead instead.
    assert not [b for b in ana.button if b.label.startswith("Approve $")]
    confirm(ana, approval.id)
    assert shows(ana, "Sent to a lead", "toast")
    assert store.approval(approval.id).status == "pending"
    assert store.handed_off() == {approval.id}
    assert [(e.event, e.actor) for e in store.audit()][2:] == [("requested", "agent"),
                                                           ("handed_off", "Ana Ruiz")]
    assert not (output / "refunds.log").exists()
    lee = open_page()
    sign_in(lee, "Lee Park", "lee-password")
    rerun_until(lee, "$48.00 for order A1043", "markdown")
    review(lee, approval.id)
    assert not shows(lee, "above your approval limit", "warning")
    confirm(lee, approval.id)
    assert shows(lee, "Approved $48.00 for order A1043 as Lee Park", "toast")
    eventually(lambda: store.run(approval.run_id).status == RunStatus.DONE, what="run done")
    assert [e.event for e in store.audit()] == ["account_added", "account_added", "requested",
                                                "handed_off", "approved", "issued"]
    (escalation,) = store.escalations()
    assert escalation.kind == "over_limit" and escalation.taken_by == "Lee Park"
    assert store.verify_audit() is None


def test_an_approver_may_reject_above_the_limit_and_approve_a_part_within_it(output, store):
    from refund_agent.desk.accounts import Accounts
    Accounts(store).add("Ana Ruiz", "approver", "ana-password", limit=50)
    at = open_page()
    sign_in(at, "Ana Ruiz", "ana-password")
    approval = start_two_lines(at, store)
    review(at, approval.id)
    assert shows(at, "$66.50 is above your approval limit of $50.00", "warning")
    # Unticking the mugs brings what approving pays ($48.00) within the limit.
    box(at, approval.id, "MUG-STN-2").uncheck().run()
    assert not shows(at, "above your approval limit", "warning")
    confirm(at, approval.id, "The mugs were used.")
    # Ana typed this ticket in herself: someone else approves its refund.
    assert shows(at, "Ana Ruiz opened this ticket; someone else must approve", "error")
    Accounts(store).add("Bo Diaz", "approver", "bo-password-1", limit=50)
    bo = open_page()
    sign_in(bo, "Bo Diaz", "bo-password-1")
    rerun_until(bo, "$66.50 for order A1043", "markdown")
    review(bo, approval.id)
    box(bo, approval.id, "MUG-STN-2").uncheck().run()
    confirm(bo, approval.id, "The mugs were used.")
    assert shows(bo, "Approved $48.00 for order A1043 as Bo Diaz", "toast")
    assert store.approval(approval.id).amount == 48.0


def test_over_the_limit_with_what_she_approved_before_the_page_offers_a_lead(output, store):
    """Issue 33.2 on the page: Ana ($50.00 per order) approved the $48.00 coffee maker; the
    $32.95 for the mugs is within her limit alone, above it with the $48.00. The card and the
    review offer Send to a lead (which works), never a green Approve that the decision
    refuses."""
    from refund_agent.config import load_settings
    from refund_agent.desk.accounts import Accounts
    Accounts(store).add("Ana Ruiz", "approver", "ana-password", limit=50)
    agent = Agent(load_settings())
    maya = "maya.chen@example.com"
    run = agent.advance(agent.start(maya, "Order A1043: the glass pour-over coffee maker "
                                          "arrived cracked.").id)
    agent.decide(store.approvals("pending")[0].id, True, "Ana Ruiz", limit_cents=5000,
                 fingerprint=agent.store.approval(store.approvals("pending")[0].id).fingerprint)
    agent.advance(run.id)
    agent.advance(agent.start(maya, "Order A1043: the stoneware mugs arrived shattered.").id)
    (mugs,) = store.approvals("pending")
    assert mugs.amount_cents == 3295
    at = open_page()
    sign_in(at, "Ana Ruiz", "ana-password")
    rerun_until(at, "$32.95 for order A1043", "markdown")
    assert at.button(key=f"approve_{mugs.id}").label == "Send to a lead…"
    review(at, mugs.id)
    assert shows(at, "Needs a lead: $32.95 would bring what you approved on this order to "
                     "$80.95 ($48.00 before)", "warning")
    assert not [b for b in at.button if b.label.startswith("Approve $")]
    confirm(at, mugs.id)
    assert shows(at, "Sent to a lead", "toast")
    assert store.approval(mugs.id).status == "pending" and store.handed_off() == {mugs.id}


def test_a_removed_account_cannot_decide(output, store):
    add_accounts(store)
    at = open_page()
    sign_in(at, "Lee Park", "lee-password")
    approval = start_damaged(at, store)
    review(at, approval.id)
    store.remove_account("Lee Park", "test")
    # The next draw signs the session out: only the sign-in form is left, nothing to decide.
    at.run()
    assert shows(at, "Your account was removed or changed since you signed in", "warning")
    assert [b.key for b in at.button] == ["sign_in"]
    assert store.approval(approval.id).status == "pending"


def test_worker_sweeps_up_a_run_orphaned_after_it_started(agent: Agent, monkeypatch):
    """A run left mid-turn by a process that died after this server started (a killed
    terminal, another host) is picked up by the periodic sweep, not only at start-up."""
    from refund_agent.web import worker as worker_module
    monkeypatch.setattr(worker_module, "SWEEP_EVERY", 0.2)
    w = Worker(agent)
    w.start()
    try:
        # Created with no owner: exactly what a process killed before its first turn leaves.
        orphan = agent.start_sample("damaged")
        assert orphan.id in [r.id for r in agent.store.orphaned_runs()]
        wait_status(agent.store, orphan.id, RunStatus.WAITING)
        # A run that someone else holds is left alone.
        busy = agent.start_sample("past-window")
        lease = agent.store.acquire(busy.id, "someone-else")
        time.sleep(1.0)
        assert agent.store.run(busy.id).status == RunStatus.WORKING
        assert agent.store.steps(busy.id)[-1].kind == "email"     # nobody advanced it
        agent.store.release(lease, RunStatus.STOPPED)
    finally:
        w.shutdown()
