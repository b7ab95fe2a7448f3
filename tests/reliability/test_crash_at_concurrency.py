"""Exactly once with many runs in flight (issue #46, item 3): ``refund-agent work
--concurrency 16`` is killed (SIGKILL, refund_agent/crash.py) at every crash point a worker
passes while 16 runs hold their leases, a new worker finishes, and every effect happened once:
the money invariants of the crash matrix (helpers.crash.measure), and each run as a crash-free
burst leaves it. On PostgreSQL, two workers at ``--concurrency 16`` share one store and never
advance one run twice.

The burst: 13 damaged-item tickets on orders of their own, two past the return window and the
angry customer (the model writing back as her), all in flight at once; a person decides every
proposal (two approved, then one rejected); a second worker drains the decisions. The stand-in
answers after 0.3 s, so the whole batch is claimed before the first answer comes back.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from benchlib import bench_settings, clone_id, make_bench_shop, start_ticket
from helpers.cli import PROJECT_ROOT, cli_env, run_forked
from helpers.crash import (
    IGNORED_STEPS,
    Outcome,
    assert_held,
    read_outcome,
    refund_facts,
)
from helpers.crash import measure as money_checks
from helpers.pg import Backend

from offline_model import OfflineServer
from refund_agent.desk import Agent
from refund_agent.desk.agent import CRASH_POINTS

pytestmark = [pytest.mark.slow]

IN_FLIGHT = 16
DAMAGED = 13
LATENCY = "0.3"
# Where the worker is killed, by phase: draining the new emails (proposals, the late ones
# declined and answered), then the decisions (refunds, emails, the customer's simulated reply).
# after_tool is passed in both, but first, with every run still in flight, by the rejected
# proposals (their output saved at once); in the first phase only the two late emails reach it,
# after the proposals have paused.
NEW_EMAILS = ("after_response", "before_tool", "after_approval_queued", "after_email")
DECISIONS = ("before_tool", "before_refund", "after_refund", "after_email", "after_tool",
             "after_response", "after_simulated_reply")
POINTS = sorted(set(NEW_EMAILS) | set(DECISIONS))
# Runs in flight at the kill. At the points every run of a phase reaches before any of them
# can end, the whole batch (but, at after_approval_queued, the one whose own commit let its
# lease go). The others come after a reply, when some runs may have paused or finished: more
# than one run in flight, and at after_simulated_reply, reached only by the angry customer's
# run at its very end, perhaps only that one.
BATCH = {("new", p) for p in ("after_response", "before_tool", "after_approval_queued")} | {
    ("decided", p) for p in ("before_tool", "before_refund", "after_refund", "after_tool")}
LEAST_HELD = {"after_simulated_reply": 1}


def test_every_crash_point_of_the_worker_is_killed_at_concurrency():
    """The other two are passed by other commands (start, decide), never by a worker; the
    crash matrix kills them there."""
    assert set(POINTS) == set(CRASH_POINTS) - {"after_run_created", "after_decision"}


def _seed(output: Path, data: Path, **settings: str) -> list[str]:
    agent = Agent(bench_settings(output, data, **settings))
    ids = []
    for i in range(DAMAGED):
        ids.append(start_ticket(agent, clone_id(i + 1)).id)
        if i in (4, 9):
            ids.append(agent.start_sample("past-window").id)
    ids.append(agent.start_sample("angry").id)
    agent.store.close()
    assert len(ids) == IN_FLIGHT
    return ids


def _decide(output: Path, data: Path, **settings: str) -> int:
    """Every proposal decided in the tickets' order: two approved, then one rejected (the angry
    customer's approved)."""
    agent = Agent(bench_settings(output, data, **settings))
    order = {run.id: i for i, run in enumerate(reversed(agent.store.runs(limit=-1)))}
    pending = sorted(agent.store.approvals("pending", limit=-1), key=lambda a: order[a.run_id])
    for i, approval in enumerate(pending):
        approve = i % 3 != 2 or agent.store.run(approval.run_id).kind == "angry"
        agent.decide(approval.id, approve, "Dana Kim", None if approve else "Not covered.",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.store.close()
    return len(pending)


def _work(output: Path, data: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_forked(output, "work", "--concurrency", str(IN_FLIGHT), "--idle-exit", "0",
                      timeout=120, REFUND_AGENT_DATA=str(data),
                      REFUND_AGENT_OFFLINE_LATENCY=LATENCY, **env)


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> None:
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr


def _leased(output: Path, data: Path) -> int:
    """Runs whose lease a killed worker still holds (a SIGKILL gives nothing up)."""
    agent = Agent(bench_settings(output, data))
    try:
        return sum(r.lease_pid is not None for r in agent.store.runs(limit=-1))
    finally:
        agent.store.close()


def _phase(output: Path, data: Path, point: str | None, crash_here: bool) -> int:
    """Drain with a kill at ``point`` (if it is passed in this phase), then without; the runs
    the killed worker held."""
    held = 0
    if point and crash_here:
        crashed = _work(output, data, REFUND_AGENT_CRASH_AT=point)
        assert crashed.returncode == -9, (f"work was meant to die at {point} but exited "
                                          f"{crashed.returncode}:\n{crashed.stdout}\n"
                                          f"{crashed.stderr}")
        assert f"[crash point {point}:" in crashed.stderr and "Traceback" not in crashed.stderr
        held = _leased(output, data)
    _ok(_work(output, data), "work")
    return held


def _burst(root: Path, point: str | None = None) -> tuple[Outcome, list[int]]:
    data = make_bench_shop(root / "data", DAMAGED)
    output = root / "output"
    _seed(output, data)
    held = [_phase(output, data, point, point in NEW_EMAILS)]
    assert _decide(output, data) == DAMAGED + 1
    held.append(_phase(output, data, point, point in DECISIONS))
    return read_outcome(output), held


def _shape(out: Outcome) -> dict[str, object]:
    """What a burst comes to, whatever order its runs finished in (runs, and their decisions,
    in the order the emails came)."""
    order = {r["id"]: i for i, r in enumerate(out.runs)}
    return {
        "runs": [(r["status"], r["requests"], tuple(k for k in out.steps[r["id"]]
                                                    if k not in IGNORED_STEPS))
                 for r in out.runs],
        "decisions": sorted((order[a["run_id"]], a["status"], a["decided_by"])
                            for a in out.approvals),
        "refunds": refund_facts(out),
        "emails": sorted((e["request"]["to"], e["request"]["body"]) for e in out.emails),
    }


@pytest.fixture(scope="module")
def crash_free(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out, _held = _burst(tmp_path_factory.mktemp("burst-baseline"))
    assert_held(money_checks(out), "the crash-free burst")
    return _shape(out)


@pytest.mark.parametrize("point", POINTS)
def test_kill_the_worker_with_16_runs_in_flight(point: str, crash_free: dict[str, object],
                                                tmp_path: Path):
    out, held = _burst(tmp_path, point)
    # The kill came with the batch claimed and in flight (LEAST_HELD).
    least = [(IN_FLIGHT - 1 if ("new", point) in BATCH else 2) if point in NEW_EMAILS else 0,
             (DAMAGED if ("decided", point) in BATCH else LEAST_HELD.get(point, 2))
             if point in DECISIONS else 0]
    assert all(h >= n for h, n in zip(held, least, strict=True)), f"runs held: {held}"
    metrics = money_checks(out)
    shape = _shape(out)
    metrics.update({f"{k}_differ_from_crash_free": int(shape[k] != crash_free[k])
                    for k in shape})
    assert_held(metrics, f"work --concurrency {IN_FLIGHT} killed at {point}")


# -- two workers, one PostgreSQL store -----------------------------------------------------------

TWO_WORKERS_TICKETS = 32


def _worker(output: Path, data: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "refund_agent", "work", "--concurrency",
                             str(IN_FLIGHT), "--idle-exit", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT,
                            env=cli_env(output, REFUND_AGENT_DATA=str(data), **env))


def _two_workers(output: Path, data: Path, env: dict[str, str]) -> list[Counter]:
    """Both workers until idle; the runs each reported (run id -> times)."""
    workers = [_worker(output, data, env) for _ in range(2)]
    said = []
    try:
        for proc in workers:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0 and "Traceback" not in err, f"{out}\n{err}"
            said.append(Counter(line.split(":")[0] for line in out.splitlines()
                                if line.startswith("run_")))
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
    return said


@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_two_workers_at_concurrency_16_never_advance_one_run_twice(pg_cluster, tmp_path: Path):
    backend = Backend("postgresql", pg_cluster)
    output = tmp_path / "output"
    env = backend.prepare(output)
    model = OfflineServer(tmp_path / "model.sqlite3", latency=0.5).start()
    try:
        env |= {"REFUND_AGENT_OFFLINE_URL": model.base_url, "PYTHONPATH": str(PROJECT_ROOT)}
        data = make_bench_shop(tmp_path / "data", TWO_WORKERS_TICKETS)
        settings = {"database_url": env["REFUND_AGENT_DATABASE_URL"],
                    "offline_url": model.base_url}
        agent = Agent(bench_settings(output, data, **settings))
        ids = {start_ticket(agent, clone_id(i + 1)).id for i in range(TWO_WORKERS_TICKETS)}
        phases = [_two_workers(output, data, env)]
        _decide(output, data, **settings)
        phases.append(_two_workers(output, data, env))
    finally:
        model.close()
    for said in phases:
        together = said[0] + said[1]
        # Every run reported once, by one of the two: none advanced twice, none left.
        assert set(together) == ids and set(together.values()) == {1}, together
        assert all(said), f"one worker took every run: {said}"
    out = read_outcome(output, backend)
    metrics = money_checks(out)
    # Every ticket of a kind went the same way: no turn of any run was sent twice.
    by_decision: dict[str, set] = {}
    for r in out.runs:
        decided = next(a["status"] for a in out.approvals if a["run_id"] == r["id"])
        by_decision.setdefault(decided, set()).add(
            (r["requests"], tuple(k for k in out.steps[r["id"]] if k not in IGNORED_STEPS)))
    metrics["runs_that_went_differently"] = sum(len(v) - 1 for v in by_decision.values())
    assert_held(metrics, "two workers at concurrency 16 on PostgreSQL")
