"""One owner per run, provably: fencing tokens, the heartbeat, the database's clock, replies.

A run is advanced by whoever holds its lease. These tests make a second owner appear the ways
it happens for real (a process paused past its lease and resumed, a process whose clock runs
ahead, two replies at once) and check that exactly one of them gets to write, so the customer
gets one email and the run makes the requests one owner would make. Lease expiry is shortened
through ``REFUND_AGENT_LEASE_SECONDS`` instead of waiting fifteen minutes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.cli import cli_env, run_cli
from helpers.crash import record

from refund_agent.config import PROJECT_ROOT
from refund_agent.desk import Agent
from refund_agent.errors import LeaseLost, NotFound, RunBusy, RunNotReady
from refund_agent.models import RunStatus
from refund_agent.store import Store


def _wait_for(predicate, timeout: float = 30.0, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(every)


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the store's rule --------------------------------------------------------------------------

def test_every_write_of_a_replaced_owner_is_refused(tmp_path):
    store = Store(tmp_path / "s.sqlite3", lease_seconds=0.2)
    run = store.create_run(sender="a@example.com", sender_name="A", subject="s", email="e")
    old = store.acquire(run.id, "old")
    with pytest.raises(RunBusy):
        store.acquire(run.id, "new")          # fresh and alive: nobody may take it
    time.sleep(0.3)                            # the owner stopped renewing (paused, say)
    new = store.acquire(run.id, "new")
    assert new.epoch == old.epoch + 1
    writes = {
        "response": lambda lease: store.record_response(
            lease, response_id="resp_x", calls=[], steps=[], usage={}, replies_sent=[]),
        "output": lambda lease: store.record_output(lease, "call_x", "{}", []),
        "renew": store.renew,
        "check": store.check_lease,
        "cost": lambda lease: store.add_cost(lease, {}, None),
        "approval": lambda lease: store.queue_approval(
            lease, response_id="r", call_id="c", subject="A1", title="s", customer="a",
            price=lambda held: "never priced"),
        "reply": lambda lease: store.add_reply(run.id, "hi", True, lease=lease),
        "release": lambda lease: store.release(lease, RunStatus.DONE),
    }
    for name, write in writes.items():
        with pytest.raises(LeaseLost):
            write(old)
        assert store.run(run.id).requests == 0, name
    store.renew(new)
    store.release(new, RunStatus.DONE)
    assert store.run(run.id).status == RunStatus.DONE


def test_lease_epoch_reads_the_stored_fencing_token(tmp_path):
    """Store.lease_epoch is the public reader the walkthrough's fencing cell checks a claim
    with: it follows every taking of the lease (acquire, claim) and outlives a release."""
    store = Store(tmp_path / "s.sqlite3", lease_seconds=0.05)
    run = store.create_run(sender="a@example.com", sender_name="A", subject="s", email="e")
    assert store.lease_epoch(run.id) == 0
    first = store.acquire(run.id, "first")
    assert store.lease_epoch(run.id) == first.epoch == 1
    time.sleep(0.1)
    claimed = store.claim("second")
    assert claimed is not None and store.lease_epoch(run.id) == claimed.epoch == 2
    store.release(claimed, RunStatus.DONE)
    assert store.lease_epoch(run.id) == 2
    with pytest.raises(NotFound):
        store.lease_epoch("run_missing")


def test_lease_expiry_reads_the_databases_clock_not_the_processes(tmp_path, monkeypatch):
    store = Store(tmp_path / "s.sqlite3", lease_seconds=60)
    run = store.create_run(sender="a@example.com", sender_name="A", subject="s", email="e")
    store.acquire(run.id, "first")
    # This process's clock jumps 16 minutes ahead; the lease is still fresh by the database's.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 16 * 60)
    with pytest.raises(RunBusy):
        Store(tmp_path / "s.sqlite3", lease_seconds=60).acquire(run.id, "second")


# -- replies: accepted and stored once, or refused and not stored -------------------------------

def test_one_advance_of_several_requests_starts_one_heartbeat(agent: Agent, monkeypatch):
    """The lease heartbeat is a thread per advance, not one started and joined per model
    request (it was one per request: 3 threads for Maya's first three requests)."""
    started: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == "lease-heartbeat":
            started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING and run.requests >= 3
    assert started == ["lease-heartbeat"]
    approval = agent.store.run_approvals(run.id)[-1]
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    started.clear()
    run = agent.advance(run.id)
    assert run.status == RunStatus.DONE and run.requests >= 5
    assert started == ["lease-heartbeat"]


def test_a_heartbeat_for_the_whole_advance_still_closes_the_stream_of_a_lost_lease(tmp_path):
    """Renewal keeps its guarantee across requests: once a renewal finds the lease taken, the
    stream open then, or the next one attached, is closed, and check() raises LeaseLost."""
    from refund_agent.streaming import Heartbeat

    store = Store(tmp_path / "s.sqlite3", lease_seconds=0.3)
    run_id = store.create_run(sender="a@example.com", sender_name="A", subject="s",
                              email="e").id
    lease = store.acquire(run_id, "one")

    class Stream:
        closed = False

        def close(self) -> None:
            self.closed = True

    with Heartbeat(store, lease) as heartbeat:
        store.execute("UPDATE runs SET lease_token = 'other', lease_epoch = lease_epoch + 1"
                      " WHERE id = ?", (run_id,))
        _wait_for(lambda: heartbeat.lost is not None, timeout=10)
        later = Stream()
        heartbeat.attach(later)
        assert later.closed
        with pytest.raises(LeaseLost):
            heartbeat.check()
    store.close()


def test_two_replies_at_once_one_is_stored(agent: Agent):
    run = agent.advance(agent.start_sample("past-window").id)
    assert run.status == RunStatus.DONE
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def reply(text: str) -> None:
        barrier.wait()
        try:
            agent.add_reply(run.id, text)
            outcomes.append("accepted")
        except RunNotReady as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=reply, args=(t,)) for t in ("First", "Second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("accepted") == 1
    (refused,) = [o for o in outcomes if o != "accepted"]
    assert "was not saved" in refused
    assert len(agent.store.replies(run.id)) == 1
    record("fencing", case="two replies at once",
           replies_stored_twice=len(agent.store.replies(run.id)) - 1,
           refused_replies_stored=0)


def test_a_reply_while_the_run_works_is_refused_and_not_stored(agent: Agent):
    run = agent.start_sample("damaged")
    lease = agent.store.acquire(run.id, "someone")      # a live process is on it
    with pytest.raises(RunNotReady, match="was not saved"):
        agent.add_reply(run.id, "Any news?")
    assert agent.store.replies(run.id) == []
    agent.store.release(lease, RunStatus.DONE)
    agent.add_reply(run.id, "Any news?")
    assert len(agent.store.replies(run.id)) == 1


# -- real processes ----------------------------------------------------------------------------

def _spawn(out: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "refund_agent", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=cli_env(out, **env), cwd=PROJECT_ROOT)


def test_a_paused_owner_that_wakes_after_a_takeover_does_nothing_more(tmp_path):
    """SIGSTOP `approve` mid-request after the refund, let `resume` take over, then SIGCONT."""
    out = tmp_path / "output"
    assert run_cli(out, "sample").returncode == 0
    slow = {"REFUND_AGENT_LEASE_SECONDS": "2", "REFUND_AGENT_OFFLINE_LATENCY": "3"}
    owner = _spawn(out, "approve", "--as", "Dana", **slow)
    try:
        _wait_for(lambda: _lines(out / "refunds.log"))     # paid; the next request streams
        time.sleep(0.3)
        owner.send_signal(signal.SIGSTOP)
        time.sleep(3)                                       # well past its 2-second lease
        takeover = run_cli(out, "resume", REFUND_AGENT_LEASE_SECONDS="2")
        assert takeover.returncode == 0, takeover.stderr
        owner.send_signal(signal.SIGCONT)
        stdout, stderr = owner.communicate(timeout=60)
    finally:
        if owner.poll() is None:
            owner.kill()
    assert owner.returncode == 1, (stdout, stderr)
    assert "taken over by" in stderr and "Traceback" not in stderr
    emails, refunds = _lines(out / "outbox.log"), _lines(out / "refunds.log")
    store = Store(out / "refund-agent.sqlite3")
    (run,) = store.runs()
    assert (len(emails), len(refunds), run.status, run.requests) == (1, 1, RunStatus.DONE, 5)
    assert store.verify_audit() is None
    record("fencing", case="paused owner wakes after takeover",
           duplicate_emails=len(emails) - 1, duplicate_refunds=len(refunds) - 1,
           extra_model_requests=run.requests - 5, tracebacks=0)


def test_a_process_with_a_clock_16_minutes_ahead_cannot_take_a_live_run(tmp_path):
    out = tmp_path / "output"
    assert run_cli(out, "sample").returncode == 0
    owner = _spawn(out, "approve", "--as", "Dana", REFUND_AGENT_OFFLINE_LATENCY="2")
    skewed = tmp_path / "skew"
    skewed.mkdir()
    (skewed / "sitecustomize.py").write_text(
        "import time\n_real = time.time\ntime.time = lambda: _real() + 16 * 60\n")
    try:
        _wait_for(lambda: _lines(out / "refunds.log"))
        pythonpath = os.pathsep.join([str(skewed), os.environ.get("PYTHONPATH", "")])
        (run,) = Store(out / "refund-agent.sqlite3").runs()
        other = run_cli(out, "resume", "--run", run.id, PYTHONPATH=pythonpath)
        stdout, stderr = owner.communicate(timeout=60)
    finally:
        if owner.poll() is None:
            owner.kill()
    assert other.returncode == 1 and "is being advanced by process" in other.stderr
    assert owner.returncode == 0, stderr
    store = Store(out / "refund-agent.sqlite3")
    (run,) = store.runs()
    assert (len(_lines(out / "outbox.log")), run.requests) == (1, 5)
    record("fencing", case="clock 16 minutes ahead",
           duplicate_emails=len(_lines(out / "outbox.log")) - 1,
           extra_model_requests=run.requests - 5, tracebacks=0)
