"""The audit panel's background integrity check (refund_agent/web/integrity.py).

The check runs in a thread of the server process, so the page never waits on it: these tests
drive the watch directly on real SQLite stores, tamper with the store and the payment log the
way an attacker with file access would, and check that the verdict follows, that a check never
runs for nothing, and that checks take at most their share of the time however slow they are.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest
from helpers.page import eventually

from refund_agent.desk import Agent
from refund_agent.web.integrity import IntegrityWatch


def finished_refund(agent: Agent) -> None:
    """One ticket proposed, approved and finished: audit entries, a payment, an email."""
    run = agent.advance(agent.start_sample("damaged").id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.advance(run.id)


@pytest.fixture
def watch(agent: Agent):
    finished_refund(agent)
    w = IntegrityWatch(agent.store, agent.settings.output_dir,
                       lambda: setattr(w, "told", w.told + 1), poll=0.05)
    w.told = 0   # how often pages were told to draw again
    w.start()
    yield w
    w.stop()


def test_a_clean_store_is_reported_intact_with_its_entry_count(watch, agent: Agent):
    verdict = eventually(watch.latest, what="a verdict")
    assert verdict.problem is None
    assert verdict.entries == len(agent.store.audit()) == 3   # requested, approved, issued
    # Nothing changes, so nothing is checked again.
    checks = watch.checks
    time.sleep(0.5)
    assert watch.checks == checks and watch.told == 1
    # A commit that leaves the verdict as it was is checked, but pages are not redrawn for it.
    with sqlite3.connect(agent.settings.output_dir / "refund-agent.sqlite3") as db:
        db.execute("UPDATE runs SET updated_at = updated_at")
    eventually(lambda: watch.checks > checks, what="a check after the commit")
    assert watch.told == 1


def test_an_edited_audit_entry_is_caught_without_anyone_asking(watch, agent: Agent):
    eventually(lambda: watch.latest(), what="the first verdict")
    with sqlite3.connect(agent.settings.output_dir / "refund-agent.sqlite3") as db:
        db.execute("UPDATE audit SET amount = 4.8 WHERE event = 'issued'")
    verdict = eventually(lambda: (v := watch.latest()) and v.problem and v,
                         what="the edit to be caught")
    assert "was edited after it was written" in verdict.problem


def test_a_forged_payment_record_is_caught(watch, agent: Agent):
    eventually(lambda: watch.latest(), what="the first verdict")
    log = agent.settings.output_dir / "refunds.log"
    record = json.loads(log.read_text().splitlines()[0])
    record["idempotency_key"] = "call_forged"
    with log.open("a") as fh:
        fh.write(json.dumps(record) + "\n")
    verdict = eventually(lambda: (v := watch.latest()) and v.problem and v,
                         what="the forged record to be caught")
    assert "call_forged" in verdict.problem and "forged" in verdict.problem


def checks_in_three_seconds(agent: Agent, check) -> int:  # noqa: ANN001
    """How many times the watch checks in 3 s of a store that changes all the time."""
    finished_refund(agent)
    stop = threading.Event()

    def keep_changing() -> None:
        db = sqlite3.connect(agent.settings.output_dir / "refund-agent.sqlite3")
        while not stop.wait(0.02):
            with db:
                db.execute("UPDATE runs SET updated_at = updated_at")

    changer = threading.Thread(target=keep_changing)
    changer.start()
    w = IntegrityWatch(agent.store, agent.settings.output_dir, lambda: None,
                       check=check, poll=0.05, duty=0.1)
    try:
        w.start()
        time.sleep(3.0)
        return w.checks
    finally:
        w.stop()
        stop.set()
        changer.join()


def test_slow_checks_take_at_most_their_share_of_a_core(agent: Agent):
    """A check that uses 0.2 s of CPU: with a 10 % share, each is followed by 1.8 s of rest,
    so 3 s hold two checks at most."""
    def slow_check(store, output_dir):  # noqa: ANN001, ANN202
        busy_until = time.thread_time() + 0.2
        while time.thread_time() < busy_until:
            pass

    assert 1 <= checks_in_three_seconds(agent, slow_check) <= 2


def test_a_check_that_only_waited_is_not_rested_for(agent: Agent):
    """A check that took 0.2 s of waiting (for the GIL or the disk on a busy host) and no CPU
    rests only the poll interval: resting nine times its wall time left the page showing a
    verdict tens of seconds old on a loaded CI machine."""
    def waiting_check(store, output_dir):  # noqa: ANN001, ANN202
        time.sleep(0.2)

    assert checks_in_three_seconds(agent, waiting_check) >= 3   # resting by wall time: 2


def test_a_check_that_fails_to_run_is_logged_and_retried(agent: Agent, caplog):
    calls: list[int] = []

    def flaky(store, output_dir):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")
        return None

    w = IntegrityWatch(agent.store, agent.settings.output_dir, lambda: None, check=flaky,
                       poll=0.02)
    w.start()
    try:
        verdict = eventually(w.latest, what="a verdict after the retry")
    finally:
        w.stop()
    assert verdict.problem is None and len(calls) == 2
    assert "The integrity check could not run" in caplog.text

