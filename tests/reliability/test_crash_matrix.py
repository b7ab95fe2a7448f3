"""Crash matrix: kill the real command at every named crash point, start again, check nothing
happened twice and nothing was lost.

Each scenario is a chain of terminal commands, each a new process, exactly as a user types them
(forked from a warm interpreter that has the package imported, tests/helpers/forkserver.py, so a
case does not spend most of its time importing the openai SDK five times). For every command of
every scenario and every crash point that command passes, the test

1. restores the output folder as it was just before that command (taken from a crash-free
   baseline run of the same scenario, so earlier commands are not repeated for every case),
2. runs the command with ``REFUND_AGENT_CRASH_AT=<point>`` and asserts it died by SIGKILL,
3. starts again with ``refund-agent resume`` and runs the rest of the chain,
4. compares everything against the crash-free baseline (see ``helpers.crash.measure``).

Every case runs on SQLite. On PostgreSQL (the ``backend`` fixture: each output folder has a
database of its own on the session's throwaway server, tests/helpers/pg.py, and copying a folder
copies its database too) the angry customer's cases run, which pass every crash point, so every
boundary is killed on both engines; ``REFUND_AGENT_PG_FULL_MATRIX=1`` runs every case there as
well (about four minutes more on 2 cores).

The scenarios, the checks and the baselines are in tests/helpers/crash.py, shared with the soak,
the races, the faults and the power-loss tests.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import cli_env
from helpers.crash import (
    APPROVER,
    CASES,
    SCENARIOS,
    Baselines,
    assert_held,
    expect_ok,
    finish_chain,
    kill_and_finish,
    measure,
    record,
)

from refund_agent.desk.agent import CRASH_POINTS

# -- the tests -----------------------------------------------------------------------------------

# The cases PostgreSQL runs by default: one scenario that passes every crash point.
PG_FULL_MATRIX = os.environ.get("REFUND_AGENT_PG_FULL_MATRIX", "") not in ("", "0")
PG_CASES = {case for case in CASES if case[0] == "angry"}


def test_every_crash_point_is_in_the_matrix():
    """A crash point the desk declares (desk/agent.py) and no case here would go untested,
    on either engine."""
    assert {p for _s, _i, p in CASES} == set(CRASH_POINTS)
    assert {p for _s, _i, p in PG_CASES} == set(CRASH_POINTS)


@pytest.mark.parametrize(("scenario", "index", "point"), CASES,
                         ids=[f"{s}-{SCENARIOS[s][i][0]}-{p}" for s, i, p in CASES])
def test_crash_then_resume(scenario: str, index: int, point: str, baselines: Baselines,
                           tmp_path: Path):
    if baselines.backend.postgres and not PG_FULL_MATRIX and \
            (scenario, index, point) not in PG_CASES:
        pytest.skip("on PostgreSQL this crash point is killed in the angry scenario; "
                    "REFUND_AGENT_PG_FULL_MATRIX=1 runs every case")
    output, kills, metrics = kill_and_finish(baselines, scenario, index, point, tmp_path)
    command = " ".join(SCENARIOS[scenario][index])
    record("crash_matrix", scenario=scenario, command=command, point=point,
           killed=True, kills=kills, backend=baselines.backend.name, **metrics)
    assert_held(metrics, f"{scenario} / {command} / {point}")


# The angry customer passes every crash point, so running its cases once more with zero retention
# (store=false, the transcript sent each turn) puts every boundary through that mode too.
ZERO_RETENTION_CASES = [case for case in CASES if case[0] == "angry"]


@pytest.fixture(scope="session")
def zero_retention_baselines(tmp_path_factory: pytest.TempPathFactory) -> Baselines:
    return Baselines(tmp_path_factory.mktemp("zero-retention-baselines"))


def stored_responses(output: Path) -> int:
    """How many responses the offline provider kept for this output folder."""
    path = output / "offline-model.sqlite3"
    if not path.exists():
        return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    finally:
        db.close()


@pytest.mark.parametrize(("scenario", "index", "point"), ZERO_RETENTION_CASES,
                         ids=[f"{s}-{SCENARIOS[s][i][0]}-{p}" for s, i, p in ZERO_RETENTION_CASES])
def test_crash_then_resume_with_zero_retention(scenario: str, index: int, point: str,
                                               zero_retention_baselines: Baselines,
                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The same kill and resume with REFUND_AGENT_ZERO_RETENTION=1 in every process: nothing
    happens twice or goes missing, and the provider keeps no response at all."""
    monkeypatch.setenv("REFUND_AGENT_ZERO_RETENTION", "1")  # cli_env passes it to each process
    assert stored_responses(zero_retention_baselines.get(scenario).before[-1]) == 0
    output, kills, metrics = kill_and_finish(zero_retention_baselines, scenario, index, point,
                                             tmp_path)
    metrics["responses_kept_by_provider"] = stored_responses(output)
    command = " ".join(SCENARIOS[scenario][index])
    record("crash_matrix", scenario=f"{scenario} (zero retention)", command=command,
           point=point, killed=True, kills=kills, **metrics)
    assert_held(metrics, f"zero retention: {scenario} / {command} / {point}")


def test_crash_twice_in_a_row(baselines: Baselines, tmp_path: Path):
    """The resume itself dies (right after the refund, again), and a third process finishes."""
    base = baselines.get("approve")
    output = baselines.copy(base.before[1], tmp_path / "output")
    first = baselines.cli(output, "approve", "--as", APPROVER, REFUND_AGENT_CRASH_AT="after_refund")
    assert first.returncode == -9
    second = baselines.cli(output, "resume", REFUND_AGENT_CRASH_AT="after_refund")
    assert second.returncode == -9
    third = baselines.cli(output, "resume", REFUND_AGENT_CRASH_AT="after_email")
    assert third.returncode == -9
    expect_ok(baselines.cli(output, "resume"), "final resume")
    outcome = baselines.read(output)
    metrics = measure(outcome, base.outcome)
    events = [e["event"] for e in outcome.audit]
    # The payment provider made the refund once; both later processes got it back.
    assert events == ["requested", "approved", "reused"], events
    record("crash_matrix", backend=baselines.backend.name, scenario="approve",
           command="approve, resume, resume",
           point="after_refund x2 + after_email", killed=True, kills=3, **metrics)
    assert_held(metrics, "three crashes in a row")


def test_restart_after_crash_is_reported_in_the_timeline(baselines: Baselines, tmp_path: Path):
    """The new process marks where it picked the run up, and the audit names both processes."""
    base = baselines.get("approve")
    output = baselines.copy(base.before[1], tmp_path / "output")
    crashed = baselines.cli(output, "approve", "--as", APPROVER,
                            REFUND_AGENT_CRASH_AT="after_refund")
    assert crashed.returncode == -9
    resumed = baselines.cli(output, "resume")
    expect_ok(resumed, "resume")
    assert "picked up by a new process" in resumed.stdout
    assert "already made; reused, not repeated" in resumed.stdout
    outcome = baselines.read(output)
    refund = outcome.refunds[0]
    reuse = next(e for e in outcome.audit if e["event"] == "reused")
    approved = next(e for e in outcome.audit if e["event"] == "approved")
    assert refund["pid"] == approved["pid"] != reuse["pid"]  # made by the process that died
    assert reuse["note"] == refund["refund_id"]


def test_the_checks_catch_what_they_claim_to(baselines: Baselines, tmp_path: Path):
    """The invariants are only worth something if they fail on a broken outcome."""
    if baselines.backend.postgres:
        pytest.skip("edits the JSONL logs and the SQLite file; on PostgreSQL the ledger's unique "
                    "key makes a doubled payment unstorable (test_postgres.py checks the rest)")
    base = baselines.get("approve")
    output = baselines.copy(base.before[1], tmp_path / "output")
    expect_ok(baselines.cli(output, "approve", "--as", APPROVER), "approve")
    assert not any(measure(baselines.read(output), base.outcome).values())

    refunds, outbox = output / "refunds.log", output / "outbox.log"
    line = refunds.read_text().splitlines()[0]
    refunds.write_text(f"{line}\n{line}\n")          # the provider paid twice
    email = outbox.read_text().splitlines()[0]
    outbox.write_text(outbox.read_text() + email + "\n")  # the first email went out twice
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    db.execute("UPDATE audit SET note = 'edited' WHERE event = 'approved'")
    db.execute("UPDATE runs SET status = 'waiting'")
    db.commit()
    db.close()
    broken = measure(baselines.read(output), base.outcome)
    for name in ("duplicate_refunds", "duplicate_emails", "audit_chain_broken", "runs_not_done",
                 "emails_differ_from_baseline", "refunds_differ_from_baseline",
                 "lines_paid_twice"):
        assert broken[name], name

    # The provider paid another amount for the line than the person approved.
    paid = json.loads(line)
    paid["request"]["amount_cents"] += 100
    paid["request"]["lines"][0]["amount_cents"] += 100
    refunds.write_text(json.dumps(paid) + "\n")
    broken = measure(baselines.read(output), base.outcome)
    for name in ("refund_amount_mismatch", "refund_lines_mismatch",
                 "refunds_differ_from_baseline"):
        assert broken[name], name
    assert not broken["duplicate_refunds"] and not broken["lines_paid_twice"]


_DIE_WHILE_THE_CUSTOMER_WRITES = r"""
import os, signal, sys
import refund_agent.desk.customer as customer
def die(agent, run, lease):
    sys.stderr.write("[killed while the simulated customer writes]\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
customer.simulate_reply = die
from refund_agent.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_killed_while_the_simulated_customer_writes(baselines: Baselines, tmp_path: Path):
    """Not a named crash point: the process dies during the request for the customer's reply.
    The conversation must not end there; resume asks for the reply again."""
    base = baselines.get("angry")
    output = baselines.copy(base.before[1], tmp_path / "output")
    proc = subprocess.run([sys.executable, "-c", _DIE_WHILE_THE_CUSTOMER_WRITES, "approve",
                           "--as", APPROVER], capture_output=True, text=True, timeout=60,
                          env=cli_env(output, **baselines.backend.env(output)))
    assert proc.returncode == -9 and "[killed while the simulated customer" in proc.stderr
    finish_chain(output, "angry", 1, baselines.backend)
    metrics = measure(baselines.read(output), base.outcome)
    record("crash_matrix", backend=baselines.backend.name, scenario="angry", command="approve",
           point="during the simulated customer's request", killed=True, **metrics)
    assert_held(metrics, "killed while the simulated customer writes")
