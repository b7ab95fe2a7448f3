"""Crash matrix: kill the real command at every named crash point, start again, check nothing
happened twice and nothing was lost.

Each scenario is a chain of terminal commands, each a new ``python -m refund_agent`` process,
exactly as a user types them. For every command of every scenario and every crash point that
command passes, the test

1. restores the output folder as it was just before that command (taken from a crash-free
   baseline run of the same scenario, so earlier commands are not repeated for every case),
2. runs the command with ``REFUND_AGENT_CRASH_AT=<point>`` and asserts it died by SIGKILL,
3. starts again with ``refund-agent resume`` and runs the rest of the chain,
4. compares everything against the crash-free baseline (see :func:`check_invariants`).

Every case runs on SQLite. On PostgreSQL (the ``backend`` fixture: each output folder has a
database of its own on the session's throwaway server, tests/pg.py, and copying a folder copies
its database too) the angry customer's cases run, which pass every crash point, so every
boundary is killed on both engines; ``REFUND_AGENT_PG_FULL_MATRIX=1`` runs every case there as
well (about four minutes more on 2 cores).

The helpers here are shared with ``test_soak.py``. With ``REFUND_AGENT_RELIABILITY_LOG`` set,
every case appends one JSON line with what it measured; ``scripts/reliability_report.py``
turns those lines into ``docs/RELIABILITY.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_env, run_cli, running_on
from pg import Backend

from refund_agent.crash import CRASH_POINTS
from refund_agent.store import Store

# -- the scenarios -----------------------------------------------------------------------------

APPROVER = "Dana Kim"
SCENARIOS: dict[str, list[tuple[str, ...]]] = {
    "approve": [("sample", "damaged"), ("approve", "--as", APPROVER)],
    "reject": [("sample", "damaged"),
               ("reject", "--as", APPROVER, "--note", "The carafe is not covered; it was used.")],
    "past_window": [("sample", "past-window")],
    "reply": [("sample", "damaged"), ("approve", "--as", APPROVER),
              ("reply", "Thanks. Do I need to send the broken one back?")],
    "angry": [("angry",), ("approve", "--as", APPROVER)],
}

# The crash points each command passes, in the order it passes them (first time only: a point
# fires the first time a process reaches it). Written out by hand on purpose: if a command stops
# passing a point, its case fails because the process was not killed, and this table is wrong.
_START_WAITS = ("after_run_created", "after_response", "before_tool", "after_tool",
                "after_approval_queued")
_APPROVE = ("after_decision", "before_tool", "before_refund", "after_refund", "after_tool",
            "after_response", "after_email")
PASSES: dict[tuple[str, int], tuple[str, ...]] = {
    ("approve", 0): _START_WAITS,
    ("approve", 1): _APPROVE,
    ("reject", 0): _START_WAITS,
    ("reject", 1): ("after_decision", "before_tool", "after_tool", "after_response",
                    "after_email"),
    ("past_window", 0): ("after_run_created", "after_response", "before_tool", "after_tool",
                         "after_email"),
    ("reply", 0): _START_WAITS,
    ("reply", 1): _APPROVE,
    ("reply", 2): ("after_response", "before_tool", "after_email", "after_tool"),
    ("angry", 0): _START_WAITS,
    ("angry", 1): (*_APPROVE, "after_simulated_reply"),
}

CASES = [(scenario, index, point) for (scenario, index), points in PASSES.items()
         for point in points]


# -- the reliability log -------------------------------------------------------------------------

def record(suite: str, **fields: Any) -> None:
    """Append one JSON line to ``$REFUND_AGENT_RELIABILITY_LOG`` (if set) for the report.

    Every line says which backend the case ran on: ``backend=`` if given, else the running
    test's ``backend`` parameter (conftest.running_on), which is "sqlite" for a test that has
    none.
    """
    path = os.environ.get("REFUND_AGENT_RELIABILITY_LOG")
    if not path:
        return
    fields.setdefault("backend", running_on())
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"suite": suite, "at": time.time(), **fields}) + "\n")


# -- reading an output folder ----------------------------------------------------------------------

def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            out.append({"torn": line})
    return out


@dataclass
class Outcome:
    """Everything the invariants look at, read straight from the files a run leaves behind."""

    runs: list[dict[str, Any]]
    steps: dict[str, list[str]]              # run id -> step kinds, oldest first
    calls: list[dict[str, Any]]
    approvals: list[dict[str, Any]]
    lines: list[dict[str, Any]]              # approval_lines: each proposal's order lines
    audit: list[dict[str, Any]]
    replies: list[dict[str, Any]]
    refunds: list[dict[str, Any]]
    emails: list[dict[str, Any]]
    integrity: str
    audit_problem: str | None
    extra: dict[str, Any] = field(default_factory=dict)


SQLITE = Backend("sqlite")


def read_outcome(output: Path, backend: Backend = SQLITE) -> Outcome:
    if backend.postgres:
        return _read_pg_outcome(output, backend)
    db_path = output / "refund-agent.sqlite3"
    store = Store(db_path)
    try:
        audit_problem = store.verify_audit()
    finally:
        store.close()
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        rows = lambda sql: [dict(r) for r in db.execute(sql)]  # noqa: E731
        runs = rows("SELECT * FROM runs ORDER BY created_at")
        steps: dict[str, list[str]] = {r["id"]: [] for r in runs}
        for s in rows("SELECT run_id, kind FROM steps ORDER BY id"):
            steps[s["run_id"]].append(s["kind"])
        return Outcome(
            runs=runs, steps=steps,
            calls=rows("SELECT * FROM calls ORDER BY rowid"),
            approvals=rows("SELECT * FROM approvals ORDER BY requested_at"),
            lines=rows("SELECT * FROM approval_lines ORDER BY approval_id, seq"),
            audit=rows("SELECT * FROM audit ORDER BY id"),
            replies=rows("SELECT * FROM replies ORDER BY id"),
            refunds=_jsonl(output / "refunds.log"),
            emails=_jsonl(output / "outbox.log"),
            integrity=db.execute("PRAGMA integrity_check").fetchone()[0],
            audit_problem=audit_problem,
        )
    finally:
        db.close()


def _read_pg_outcome(output: Path, backend: Backend) -> Outcome:
    """The same outcome read from the folder's PostgreSQL database; the payments and emails
    are the ledger table's rows there (a key cannot be stored twice, so no torn lines)."""
    store = Store(backend.url(output))
    try:
        rows = lambda sql: [dict(r) for r in store.query(sql)]  # noqa: E731
        runs = rows("SELECT * FROM runs ORDER BY created_at")
        steps: dict[str, list[str]] = {r["id"]: [] for r in runs}
        for s in rows("SELECT run_id, kind FROM steps ORDER BY id"):
            steps[s["run_id"]].append(s["kind"])
        ledger = {log: [json.loads(text) for _, text in store.ledger_rows(log)]
                  for log in ("refunds", "outbox")}
        return Outcome(
            runs=runs, steps=steps,
            calls=rows("SELECT * FROM calls ORDER BY response_id, seq"),
            approvals=rows("SELECT * FROM approvals ORDER BY requested_at"),
            lines=rows("SELECT * FROM approval_lines ORDER BY approval_id, seq"),
            audit=rows("SELECT * FROM audit ORDER BY id"),
            replies=rows("SELECT * FROM replies ORDER BY id"),
            refunds=ledger["refunds"], emails=ledger["outbox"],
            integrity="ok" if store.integrity_ok() else "not ok",
            audit_problem=store.verify_audit(),
        )
    finally:
        store.close()


IGNORED_STEPS = {"restart", "stopped", "error"}


def paid_lines(refund: dict[str, Any]) -> list[tuple[str, str, int]]:
    """A refund's lines as the payments log records them: (line, reason, cents)."""
    return [(x["line"], x["reason"], x["amount_cents"]) for x in refund["request"]["lines"]]


def _refund_facts(out: Outcome) -> list[tuple[str, int, list[tuple[str, str, int]]]]:
    """What was paid, independent of ids and order: (order, cents, lines) per refund."""
    return sorted((r["request"]["order_id"], r["request"]["amount_cents"], paid_lines(r))
                  for r in out.refunds if "torn" not in r)


def measure(out: Outcome, baseline: Outcome | None = None) -> dict[str, int]:
    """Count every way the exactly-once promise could have been broken (all zero = held)."""
    by_call = {c["key"]: c for c in out.calls if c["key"]}  # by idempotency key
    approvals = {a["id"]: a for a in out.approvals}
    kept: dict[str, list[tuple[str, str, int]]] = {}
    for line in out.lines:
        if line["decision"] == "approved":
            kept.setdefault(line["approval_id"], []).append(
                (line["line"], line["reason"], line["amount_cents"]))
    paid = Counter((r["request"]["order_id"], x["line"]) for r in out.refunds
                   if "torn" not in r for x in r["request"]["lines"])
    refund_keys = Counter(r.get("idempotency_key") for r in out.refunds)
    email_keys = Counter(e.get("idempotency_key") for e in out.emails)
    sender = {r["id"]: r["sender"] for r in out.runs}
    audit_by: dict[str, Counter] = {}
    for e in out.audit:
        if e["approval_id"]:
            audit_by.setdefault(e["approval_id"], Counter())[e["event"]] += 1
    m = {
        # Side effects: at most one per approval / per send call, and only for the right ones.
        "torn_log_lines": sum("torn" in r for r in out.refunds + out.emails),
        "duplicate_refunds": sum(n - 1 for n in refund_keys.values()),
        "refunds_without_approval": sum(
            1 for k in refund_keys
            if k not in approvals or approvals[k]["status"] != "approved"),
        "refund_amount_mismatch": sum(
            1 for r in out.refunds if r.get("idempotency_key") in approvals
            and (r["request"]["amount_cents"]
                 != approvals[r["idempotency_key"]]["amount_cents"]
                 or r["request"]["amount_cents"] != sum(c for _l, _r, c in paid_lines(r)))),
        # Line by line: each refund pays exactly the lines its approval kept, and no order
        # line is paid by two refunds.
        "refund_lines_mismatch": sum(
            1 for r in out.refunds if r.get("idempotency_key") in approvals
            and paid_lines(r) != kept.get(r["idempotency_key"], [])),
        "lines_paid_twice": sum(n - 1 for n in paid.values()),
        "approved_not_refunded": sum(1 for a in out.approvals
                                     if a["status"] == "approved" and a["id"] not in refund_keys),
        "duplicate_emails": sum(n - 1 for n in email_keys.values()),
        "emails_without_call": sum(1 for k in email_keys
                                   if k not in by_call
                                   or by_call[k]["name"] != "send_customer_message"),
        "emails_to_someone_else": sum(
            1 for e in out.emails
            if e.get("idempotency_key") in by_call
            and e["request"]["to"] != sender[by_call[e["idempotency_key"]]["run_id"]]),
        "send_calls_not_sent": sum(1 for c in out.calls if c["name"] == "send_customer_message"
                                   and c["output"] and c["key"] not in email_keys),
        # Decisions: none lost, none doubled, each audited once.
        "pending_approvals": sum(1 for a in out.approvals if a["status"] == "pending"),
        "lost_decisions": sum(1 for a in out.approvals if a["status"] != "pending"
                              and audit_by.get(a["id"], Counter())[a["status"]] != 1),
        "audit_requested_not_once": sum(1 for a in out.approvals
                                        if audit_by.get(a["id"], Counter())["requested"] != 1),
        "audit_refund_not_once": sum(
            1 for a in out.approvals if a["status"] == "approved"
            and audit_by.get(a["id"], Counter())["issued"]
            + audit_by.get(a["id"], Counter())["reused"] != 1),
        # Runs: finished, every call answered, every reply sent, store sound.
        "runs_not_done": sum(1 for r in out.runs if r["status"] != "done"),
        "calls_without_output": sum(1 for c in out.calls if c["output"] is None),
        "replies_not_sent": sum(1 for r in out.replies if r["response_id"] is None),
        "timeline_refund_steps_off": sum(
            1 for run_id, kinds in out.steps.items()
            if kinds.count("refund") != sum(1 for a in out.approvals
                                            if a["run_id"] == run_id and a["id"] in refund_keys)),
        "audit_chain_broken": int(out.audit_problem is not None),
        "integrity_not_ok": int(out.integrity != "ok"),
    }
    if baseline is not None:
        # The same conversation as without a crash: no extra or missing model requests, emails,
        # refunds or timeline entries (a repeated call would show up in every one of these).
        def kinds(o: Outcome) -> list[list[str]]:
            return [[k for k in o.steps[r["id"]] if k not in IGNORED_STEPS] for r in o.runs]
        m["runs_differ_from_baseline"] = int(len(out.runs) != len(baseline.runs))
        m["requests_differ_from_baseline"] = int(
            [r["requests"] for r in out.runs] != [r["requests"] for r in baseline.runs])
        m["timeline_differs_from_baseline"] = int(kinds(out) != kinds(baseline))
        m["emails_differ_from_baseline"] = int(
            [(e["request"]["to"], e["request"]["body"]) for e in out.emails]
            != [(e["request"]["to"], e["request"]["body"]) for e in baseline.emails])
        m["refunds_differ_from_baseline"] = int(_refund_facts(out) != _refund_facts(baseline))
        m["decisions_differ_from_baseline"] = int(
            [(a["status"], a["decided_by"]) for a in out.approvals]
            != [(a["status"], a["decided_by"]) for a in baseline.approvals])
    return m


def assert_held(metrics: dict[str, int], context: str) -> None:
    broken = {k: v for k, v in metrics.items() if v}
    assert not broken, f"{context}: exactly-once broken: {broken}"


# -- baselines -----------------------------------------------------------------------------------

@dataclass
class Baseline:
    before: list[Path]        # the output folder just before each command
    outcome: Outcome


def copy_output(src: Path, dst: Path, backend: Backend = SQLITE) -> Path:
    """The output folder as it is, and its database on PostgreSQL."""
    shutil.copytree(src, dst)
    backend.copy(src, dst)
    return dst


def cli(output: Path, *args: str, backend: Backend = SQLITE,
        **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(output, *args, timeout=60, **backend.env(output), **env)


def expect_ok(proc: subprocess.CompletedProcess[str], what: str) -> None:
    assert proc.returncode == 0, (f"{what} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                                  f"stderr:\n{proc.stderr}")
    assert "Traceback" not in proc.stderr, proc.stderr


class Baselines:
    """Crash-free runs of each scenario, made once per test session and on first use."""

    def __init__(self, root: Path, backend: Backend = SQLITE) -> None:
        self.root = root
        self.backend = backend
        self._made: dict[str, Baseline] = {}

    # The helpers, on this backend.
    def copy(self, src: Path, dst: Path) -> Path:
        return copy_output(src, dst, self.backend)

    def cli(self, output: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return cli(output, *args, backend=self.backend, **env)

    def read(self, output: Path) -> Outcome:
        return read_outcome(output, self.backend)

    def get(self, scenario: str) -> Baseline:
        if scenario not in self._made:
            work = self.root / scenario / "work"
            work.mkdir(parents=True)
            self.backend.prepare(work)
            before = []
            for i, command in enumerate(SCENARIOS[scenario]):
                before.append(self.copy(work, self.root / scenario / f"before-{i}"))
                expect_ok(self.cli(work, *command), f"baseline {scenario}: {' '.join(command)}")
            outcome = self.read(work)
            assert_held(measure(outcome), f"baseline {scenario}")
            self._made[scenario] = Baseline(before, outcome)
        return self._made[scenario]


@pytest.fixture(scope="session")
def baselines(tmp_path_factory: pytest.TempPathFactory, backend: Backend) -> Baselines:
    return Baselines(tmp_path_factory.mktemp(f"baselines-{backend.name}"), backend)


# After a crash at one of these, the next process gets past it (the step it follows is saved),
# so `resume` with the same crash point dies at its next occurrence, and so on: every occurrence
# of the point in the rest of the command gets its own kill.
PROGRESSING = {"after_response", "after_tool", "after_approval_queued", "after_simulated_reply"}
# After a crash at one of these, the next process reaches the very same point again (the work
# before it is not recorded yet): `resume` with it must die there once more, harmlessly.
REPEATING = {"before_tool", "before_refund", "after_refund", "after_email"}


def crash_again(output: Path, point: str, backend: Backend = SQLITE) -> int:
    """Resume with the same crash point: at every later occurrence, or once more at the same
    spot. Returns the extra kills."""
    kills = 0
    if point in REPEATING:
        again = cli(output, "resume", backend=backend, REFUND_AGENT_CRASH_AT=point)
        assert again.returncode == -9, f"resume did not reach {point} again:\n{again.stdout}"
        kills += 1
    elif point in PROGRESSING:
        for _ in range(20):
            again = cli(output, "resume", backend=backend, REFUND_AGENT_CRASH_AT=point)
            if again.returncode != -9:
                expect_ok(again, f"resume with {point}")
                break
            kills += 1
        else:
            raise AssertionError(f"{point} never stopped firing: no progress between kills")
    return kills


def finish_chain(output: Path, scenario: str, after: int, backend: Backend = SQLITE
                 ) -> list[str]:
    """After a crash in command ``after``: resume, then the rest of the chain; the commands run."""
    ran = []
    resumed = cli(output, "resume", backend=backend)
    expect_ok(resumed, "resume after the crash")
    ran.append("resume")
    for command in SCENARIOS[scenario][after + 1:]:
        expect_ok(cli(output, *command, backend=backend), " ".join(command))
        ran.append(" ".join(command))
    return ran


# -- the tests -----------------------------------------------------------------------------------

# The cases PostgreSQL runs by default: one scenario that passes every crash point.
PG_FULL_MATRIX = os.environ.get("REFUND_AGENT_PG_FULL_MATRIX", "") not in ("", "0")
PG_CASES = {case for case in CASES if case[0] == "angry"}


def test_every_crash_point_is_in_the_matrix():
    """A crash point added to crash.py without a case here would go untested, on either engine."""
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


def kill_and_finish(baselines: Baselines, scenario: str, index: int, point: str,
                    tmp_path: Path) -> tuple[Path, int, dict]:
    """Kill the scenario's command ``index`` at ``point``, resume, run the rest of the chain;
    returns the output folder, the kills, and what differs from the crash-free baseline."""
    base = baselines.get(scenario)
    output = baselines.copy(base.before[index], tmp_path / "output")
    command = SCENARIOS[scenario][index]
    crashed = baselines.cli(output, *command, REFUND_AGENT_CRASH_AT=point)
    assert crashed.returncode == -9, (
        f"{' '.join(command)} was meant to die at {point} but exited {crashed.returncode}:\n"
        f"{crashed.stdout}\n{crashed.stderr}")
    assert f"[crash point {point}:" in crashed.stderr
    assert "Traceback" not in crashed.stderr
    kills = 1 + crash_again(output, point, baselines.backend)
    finish_chain(output, scenario, index, baselines.backend)
    return output, kills, measure(baselines.read(output), base.outcome)


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
import refund_agent.customer as customer
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
