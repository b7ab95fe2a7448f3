"""One owner per run, on the refund desk: one heartbeat per advance, replies stored once or
refused, and the terminal's processes (a paused owner woken after a takeover, a clock 16 minutes
ahead) writing once. The loop's own rule, on its store and on a small agent that is not the
desk, is tests/loop/test_fencing.py. Lease expiry is shortened through
``REFUND_AGENT_LEASE_SECONDS`` instead of waiting fifteen minutes.
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
from refund_agent.errors import RunNotReady
from refund_agent.models import RunStatus
from refund_agent.store import Store

# Slow as tests/loop/test_fencing.py is (tests/conftest.py marks that module by name): paused
# owners woken after a takeover, skewed clocks.
pytestmark = pytest.mark.slow


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


# -- the heartbeat ---------------------------------------------------------------------------

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


# -- replies: accepted and stored once, or refused and not stored -------------------------------

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
