"""The crash matrix and the races, on a small agent that is not the refund desk: the store-credit
agent of tests/helpers/credit.py, whose effect function checks neither the decision nor the
lease (the loop does both).

Each case is a chain of commands, each a new process, as the desk's matrix
(tests/reliability/test_crash_matrix.py) is: ``start`` (the email, until the credit waits for a
person), then ``approve`` or ``reject`` (the decision, then the run to its end). The command is
killed (SIGKILL) at each crash point it passes, again wherever a resume passes that point once
more (helpers.process.crash_again), then a fresh process resumes what is left (``resume``: what
``resumable()`` hands a worker) and the chain goes on. Then: the credit issued exactly once on
an approval and never on a rejection, every call answered once, one decision audited once, and
the same conversation as without a crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.credit import CreditDesk
from helpers.process import (
    DATA,
    PROJECT_ROOT,
    TESTS,
    crash_again,
    expect_killed,
    expect_ok,
    process_env,
    run_python,
)

from refund_agent import ApprovalStatus, RunStatus, Settings

APPROVER = "Dana Kim"
NOTE = "Credited by phone already."

# One command of a chain, in a new process: as a person (or a worker) does it.
COMMAND = r"""
import sys
from helpers.credit import ANA, EMAIL, CreditDesk
desk = CreditDesk()
command = sys.argv[1]
if command == "start":
    desk.advance(desk.start(ANA, EMAIL, sender_name="Ana Ruiz").id)
elif command in ("approve", "reject"):
    (pending,) = desk.store.approvals("pending")
    if command == "approve":
        desk.approve(pending.id, pending.fingerprint, by=sys.argv[2])
    else:
        desk.reject(pending.id, pending.fingerprint, by=sys.argv[2], note=sys.argv[3])
    desk.advance(pending.run_id)
else:   # resume: what a worker picks up after a crash
    for run in desk.resumable():
        desk.advance(run.id)
"""

SCENARIOS: dict[str, list[tuple[str, ...]]] = {
    "approve": [("start",), ("approve", APPROVER)],
    "reject": [("start",), ("reject", APPROVER, NOTE)],
}
# The crash points each command passes, in order, written out by hand on purpose (as the
# desk's are): a command that stops passing one fails its case, not the table silently. The
# lookup runs ahead of its response's commit (no before_tool of its own); the proposal's
# before_tool is the first. A rejection never reaches the effect function: no after_credit.
_START = ("after_run_created", "after_response", "before_tool", "after_approval_queued")
PASSES: dict[tuple[str, int], tuple[str, ...]] = {
    ("approve", 0): _START,
    ("approve", 1): ("after_decision", "before_tool", "after_credit", "after_tool"),
    ("reject", 0): _START,
    ("reject", 1): ("after_decision", "before_tool", "after_tool"),
}
CASES = [(scenario, index, point) for (scenario, index), points in PASSES.items()
         for point in points]
# As helpers.crash's: after these the next process reaches the same point again (the work
# before it is not recorded yet); after those it gets past (the step it follows is saved).
REPEATING = {"before_tool", "after_credit"}
PROGRESSING = {"after_response", "after_tool", "after_approval_queued"}


def _command(output: Path, *args: str, **env: str):
    return run_python(COMMAND, output, *args, **env)


def _desk(output: Path) -> CreditDesk:
    """The agent on ``output``, as the processes see it (the stand-in, no key)."""
    return CreditDesk(Settings(api_key="", data_dir=DATA, output_dir=output, max_retries=2,
                               timeout=30.0))


def _outcome(output: Path) -> dict[str, Any]:
    """What the checks compare: the run, its calls, its decision, the credits issued."""
    desk = _desk(output)
    try:
        (run,) = desk.store.runs()
        calls = desk.store.calls_named("lookup_account") + desk.store.calls_named("issue_credit")
        (approval,) = desk.store.approvals(None)
        return {
            "run": run, "approval": approval, "credits": desk.credits(),
            "calls": [(c.call_id, c.name, c.output) for c in calls],
            "steps": [s.kind for s in desk.store.steps(run.id)
                      if s.kind not in ("restart", "stopped", "error")],
            "audit": [e.event for e in desk.store.audit() if e.approval_id == approval.id],
            "audit_problem": desk.store.verify_audit(),
        }
    finally:
        desk.store.close()


def _chain(output: Path, scenario: str, upto: int) -> None:
    for command in SCENARIOS[scenario][:upto]:
        expect_ok(_command(output, *command), " ".join(command))


@pytest.fixture(scope="module")
def credit_baselines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each scenario once without a crash: the conversation every crashed case must match."""
    made = {}
    for scenario in SCENARIOS:
        output = tmp_path_factory.mktemp(f"credit-{scenario}") / "output"
        _chain(output, scenario, len(SCENARIOS[scenario]))
        made[scenario] = _outcome(output)
    return made


def test_every_crash_point_the_credit_agent_declares_is_in_the_matrix():
    assert {point for _s, _i, point in CASES} == set(CreditDesk.crash_points)
    assert REPEATING | PROGRESSING <= set(CreditDesk.crash_points)


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "index", "point"), CASES,
                         ids=[f"{s}-{SCENARIOS[s][i][0]}-{p}" for s, i, p in CASES])
def test_a_kill_at_any_point_then_a_fresh_process_credits_exactly_once(
        scenario: str, index: int, point: str, credit_baselines, tmp_path: Path):
    output = tmp_path / "output"
    _chain(output, scenario, index)
    command = SCENARIOS[scenario][index]
    expect_killed(_command(output, *command, REFUND_AGENT_CRASH_AT=point), point,
                  " ".join(command))
    crash_again(lambda **env: _command(output, "resume", **env), point,
                repeating=REPEATING, progressing=PROGRESSING)
    expect_ok(_command(output, "resume"), "resume after the crash")
    for later in SCENARIOS[scenario][index + 1:]:
        expect_ok(_command(output, *later), " ".join(later))

    got, base = _outcome(output), credit_baselines[scenario]
    approval = got["approval"]
    assert got["run"].status == RunStatus.DONE, got["run"].error
    if scenario == "approve":
        assert approval.status == ApprovalStatus.APPROVED
        (credit,) = got["credits"]                              # exactly once
        assert credit["idempotency_key"] == approval.id
        assert credit["request"]["amount_cents"] == approval.amount_cents == 2500
    else:
        assert approval.status == ApprovalStatus.REJECTED and got["credits"] == []
    # Every call answered once, as without the crash: the same calls, each with one output.
    assert all(output is not None for _id, _name, output in got["calls"]), got["calls"]
    assert len({call_id for call_id, _n, _o in got["calls"]}) == len(got["calls"])
    assert [(n, json.loads(o).get("status")) for _i, n, o in got["calls"]] == \
        [(n, json.loads(o).get("status")) for _i, n, o in base["calls"]]
    # One decision, audited once; the same conversation; the audit chain whole.
    assert got["audit"] == base["audit"] and got["audit"][0] == "requested"
    assert got["steps"] == base["steps"]
    assert got["run"].requests == base["run"].requests
    assert got["audit_problem"] is None


# -- races between processes -----------------------------------------------------------------

# Reads the pending credit, says it is ready, and decides when told to go, so that two processes
# decide together: exit 3 (printing why) for the one that finds it already decided.
_DECIDE_ON_GO = r"""
import pathlib, sys, time
from refund_agent import AlreadyDecided
from helpers.credit import CreditDesk
desk = CreditDesk()
(pending,) = desk.store.approvals("pending")
ready, go = pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.005)
try:
    desk.approve(pending.id, pending.fingerprint, by=sys.argv[1])
except AlreadyDecided as exc:
    print(exc)
    sys.exit(3)
"""

# Advances one run when told to go: exit 4 (printing why) if another process holds it.
_ADVANCE_ON_GO = r"""
import pathlib, sys, time
from refund_agent import RunBusy
from helpers.credit import CreditDesk
desk = CreditDesk()
ready, go = pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.005)
try:
    print(desk.advance(sys.argv[1]).status)
except RunBusy as exc:
    print(exc)
    sys.exit(4)
"""


def _race(script: str, output: Path, tmp_path: Path, args: list[str], **env: str
          ) -> list[tuple[int, str]]:
    """Two processes running ``script`` with ``args[k]`` each, let go together once both are
    ready; their exit codes and outputs, sorted."""
    go = tmp_path / "go"
    path = os.pathsep.join([str(TESTS), str(PROJECT_ROOT)])
    racers = [subprocess.Popen([sys.executable, "-c", script, arg, str(tmp_path / f"ready{k}"),
                                str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=process_env(output, PYTHONPATH=path, **env))
              for k, arg in enumerate(args)]
    # No deadline of its own (a busy machine is slow, not wrong): pytest-timeout ends a hang.
    while not all((tmp_path / f"ready{k}").exists() for k in range(len(args))):
        assert all(p.poll() is None for p in racers), [p.stderr.read() for p in racers]
        time.sleep(0.01)
    go.touch()
    done = []
    for racer in racers:
        stdout, stderr = racer.communicate(timeout=90)
        assert "Traceback" not in stderr, stderr
        done.append((racer.returncode, stdout.strip()))
    return sorted(done)


@pytest.mark.slow
def test_two_processes_approving_one_credit_at_once_one_wins(credit_baselines, tmp_path: Path):
    output = tmp_path / "output"
    _chain(output, "approve", 1)
    (won, _), (lost, why) = _race(_DECIDE_ON_GO, output, tmp_path, ["Dana Kim", "Lee Park"])
    assert (won, lost) == (0, 3)
    assert why.startswith("This store credit was already approved by "), why
    expect_ok(_command(output, "resume"), "resume")
    got = _outcome(output)
    assert got["run"].status == RunStatus.DONE and len(got["credits"]) == 1
    assert got["audit"].count("approved") == 1 and got["audit"].count("ignored") == 1
    assert [e for e in got["audit"] if e != "ignored"] == credit_baselines["approve"]["audit"]


@pytest.mark.slow
def test_two_processes_advancing_one_run_at_once_one_advances(credit_baselines, tmp_path: Path):
    output = tmp_path / "output"
    desk = _desk(output)
    run = desk.start("ana.ruiz@example.com", "Please credit CR-1001 for the late delivery.")
    desk.store.close()
    # A slow model keeps the winner inside its first request while the other one starts.
    raced = _race(_ADVANCE_ON_GO, output, tmp_path, [run.id, run.id],
                  REFUND_AGENT_OFFLINE_LATENCY="1")
    (advanced, status), (busy, why) = raced
    assert (advanced, busy) == (0, 4), raced
    assert status == RunStatus.WAITING and "is being advanced by process" in why
    expect_ok(_command(output, "approve", APPROVER), "approve")
    got, base = _outcome(output), credit_baselines["approve"]
    assert got["run"].status == RunStatus.DONE and len(got["credits"]) == 1
    # The loser wrote nothing: the conversation one owner has, audited as one owner's.
    assert (got["audit"], got["steps"], got["run"].requests) == (
        base["audit"], base["steps"], base["run"].requests)
