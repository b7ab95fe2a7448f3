"""The crash cases' shared parts: the scenarios, what a case reads back, the exactly-once checks.

tests/reliability/test_crash_matrix.py kills every command of every scenario at every crash point it
passes; the soak, the races, the faults, the power-loss states and the PostgreSQL tests read
and check their outcomes with the same :func:`read_outcome` and :func:`measure`.

Every command here is a new process forked from a warm interpreter (``helpers.cli.run_forked``,
tests/helpers/forkserver.py): the kills are real SIGKILLs of the process running the command,
at refund_agent/crash.py's points, without paying a second of imports for each of the five or
so processes a case starts. With ``REFUND_AGENT_RELIABILITY_LOG`` set, every case appends one
JSON line with what it measured (:func:`record`); ``scripts/reliability_report.py`` turns
those lines into ``docs/RELIABILITY.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refund_agent.desk.records import DeskStore

from . import process
from .cli import run_forked, running_on
from .pg import Backend
from .process import expect_ok

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
# (The lookups a response starts with run before it is committed and are saved with it: no
# before_tool/after_tool of their own. The proposal's before_tool is the first one.)
_START_WAITS = ("after_run_created", "after_response", "before_tool", "after_approval_queued")
_APPROVE = ("after_decision", "before_tool", "before_refund", "after_refund", "after_tool",
            "after_response", "after_email")
PASSES: dict[tuple[str, int], tuple[str, ...]] = {
    ("approve", 0): _START_WAITS,
    ("approve", 1): _APPROVE,
    ("reject", 0): _START_WAITS,
    ("reject", 1): ("after_decision", "before_tool", "after_tool", "after_response",
                    "after_email"),
    ("past_window", 0): ("after_run_created", "after_response", "before_tool", "after_email",
                         "after_tool"),
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
    test's ``backend`` parameter (helpers.cli.running_on), which is "sqlite" for a test that has
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
    store = DeskStore(db_path)
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
    store = DeskStore(backend.url(output))
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


def refund_facts(out: Outcome) -> list[tuple[str, int, list[tuple[str, str, int]]]]:
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
        m["refunds_differ_from_baseline"] = int(refund_facts(out) != refund_facts(baseline))
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
    """One ``refund-agent`` command in a new (forked) process, on ``backend``."""
    return run_forked(output, *args, timeout=60, **backend.env(output), **env)


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
    return process.crash_again(
        lambda **env: cli(output, "resume", backend=backend, **env), point,
        repeating=REPEATING, progressing=PROGRESSING)


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
