"""Power loss, not only kill -9: every crash state built from the writes the store really made.

``tests/helpers/powerloss.py`` records the file operations of a scenario's real ``refund-agent``
processes with strace and builds the disk states a power cut at each point could leave (its
module docstring is the disk model). Each state is written to a fresh folder, with the outside
systems (payment and email stand-ins, the model provider) as they were at the crash, and
recovered by fresh processes (``tests/helpers/powerloss_recover.py``): ``refund-agent resume``
or the web worker's start-up recovery, then the rest of the scenario as a person would do it, then
``refund-agent audit --verify``. After that:

* nothing paid or emailed twice, nothing paid without its approval (test_crash_matrix.measure,
  the same checks as the kill -9 matrix), and the same refunds, emails and decisions as the
  crash-free run;
* nothing lost that a person was told: an approval the run said it was waiting for still
  exists, and a decision ``approve`` printed as done is still approved, without deciding again;
* every run continues (or fails with a message), the store passes ``PRAGMA integrity_check``,
  and ``audit --verify`` agrees with the payment and email logs.

The normal run explores a seeded sample of a few hundred states over both scenarios;
``REFUND_AGENT_POWERLOSS_FULL=1`` explores every point between syncs and more random states.
With ``REFUND_AGENT_RELIABILITY_LOG`` set, each exploration appends its counts for
``scripts/reliability_report.py``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import powerloss as pl
from helpers.cli import cli_env
from helpers.crash import Outcome, measure, read_outcome, record, refund_facts

from refund_agent.config import PROJECT_ROOT

APPROVER = "Dana Kim"
SCENARIOS: dict[str, list[list[str]]] = {
    "damaged": [["sample", "damaged"], ["approve", "--as", APPROVER]],
    "angry": [["angry"], ["approve", "--as", APPROVER]],
}
FULL = os.environ.get("REFUND_AGENT_POWERLOSS_FULL", "") not in ("", "0")
SEED = int(os.environ.get("REFUND_AGENT_POWERLOSS_SEED", "27"))
# The bounded sample: distinct states recovered per scenario (the full run takes every one).
BOUNDED_STATES = 150
RECOVER = Path(pl.__file__).with_name("powerloss_recover.py")
# Generous: each state costs about a second of CPU, and the cores may be shared.
pytestmark = pytest.mark.timeout(7200 if FULL else 900)

# A deliberate break for the test that the exploration finds it: the person's decision is
# committed without a sync (synchronous=NORMAL instead of FULL), in the recorded processes only.
_BREAK_DECISION_SYNC = r"""
import sys
import refund_agent.store as store
from refund_agent.desk.records import DeskStore
_tx, _decide = store.Store._tx, DeskStore.decide
def decide(self, *args, **kwargs):
    self._unsynced = True
    try:
        return _decide(self, *args, **kwargs)
    finally:
        self._unsynced = False
def tx(self, durable=True):
    return _tx(self, durable=durable and not getattr(self, "_unsynced", False))
DeskStore.decide, store.Store._tx = decide, tx
from refund_agent.cli import main
sys.exit(main(sys.argv[1:]))
"""


# -- recording ---------------------------------------------------------------------------------

@dataclass
class Recorded:
    scenario: str
    ops: list[pl.Op]
    folder: Path          # the crash-free run's output folder, as it ended
    terminals: list[str]  # what each command printed
    baseline: Outcome     # what the crash-free run left
    files: dict[str, bytes]   # the folder's files when the last command ended (-shm aside)


def record_scenario(scenario: str, root: Path, broken: bool = False) -> Recorded:
    """Run the scenario's commands under strace in a new output folder."""
    folder = (root / "output").resolve()
    folder.mkdir(parents=True)
    recording = pl.Recording(folder)
    terminals = []
    for index, argv in enumerate(SCENARIOS[scenario]):
        log, terminal = root / f"strace-{index}.log", root / f"terminal-{index}.txt"
        program = (["-c", _BREAK_DECISION_SYNC] if broken else ["-m", "refund_agent"])
        pl.record_command([sys.executable, *program, *argv], cli_env(folder), PROJECT_ROOT,
                          log, terminal)
        recording.add(log.read_text(), index, str(terminal))
        terminals.append(terminal.read_text())
        log.unlink()  # tens of megabytes of hex; the ops hold what matters
    # The files first: reading the outcome opens the store, which makes a -wal of its own.
    files = {p.name: p.read_bytes() for p in folder.iterdir() if not pl.is_ignored(p.name)}
    return Recorded(scenario, recording.ops, folder, terminals, read_outcome(folder), files)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Recorded]:
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (Debian: apt-get install strace)")
    return {s: record_scenario(s, tmp_path_factory.mktemp(f"record-{s}")) for s in SCENARIOS}


# -- the states ------------------------------------------------------------------------------------

@dataclass
class State:
    scenario: str
    point: int
    label: str
    files: dict[str, bytes]
    terminal: str     # each command's output up to the crash, NUL-separated
    recovery: str     # "cli" (refund-agent resume) or "web" (the worker's start-up)

    @property
    def said(self) -> list[str]:
        return self.terminal.split("\x00")

    def where(self, ops: list[pl.Op]) -> str:
        """The crash point, the state and the recovery, for a person reading a failure."""
        op = ops[self.point] if self.point < len(ops) else None
        at = (f"before op {self.point} of {len(ops)} ({op.kind} {op.name or ''}, command "
              f"{op.command})" if op else f"after the last op ({self.point})")
        lines = [line.strip() for line in self.terminal.replace("\x00", "\n").splitlines()
                 if line.strip()]
        last = f", just after the terminal printed {lines[-1][:80]!r}" if lines else ""
        return (f"{self.scenario}: power cut {at}{last}; state '{self.label}'; recovered by "
                f"{'the web worker' if self.recovery == 'web' else 'refund-agent resume'}")


@dataclass
class Exploration:
    built: int = 0            # crash states generated, duplicates included
    distinct: int = 0         # different ones (the same files, the same things told)
    states: list[State] = field(default_factory=list)   # the ones to recover


def build_states(rec: Recorded, full: bool, seed: int, limit: int | None,
                 command: int | None = None) -> Exploration:
    """Every crash state the model allows at the chosen points (deduplicated), then a seeded
    sample of ``limit`` of them (all when None). The sample takes first the state that loses
    everything unsynced at each point next to a sync of the store or a line the terminal
    printed, then the state that keeps everything there, then the others.
    ``command``: only power cuts while that command of the scenario runs."""
    rng = random.Random(f"{seed}-{rec.scenario}")
    between, samples = (8, 6) if full else (2, 2)
    seen: dict[str, State] = {}
    built = 0
    for point in pl.points(rec.ops, rng, between):
        if command is not None and (point == 0 or rec.ops[point - 1].command != command):
            continue
        p = pl.pending(rec.ops, point)
        for choice in pl.choices(rec.ops, p, rng, samples):
            built += 1
            files, terminal = pl.crash_state(rec.ops, p, choice)
            # Two states with the same files and the same things told to the person recover
            # the same way: the rest of what the terminal printed does not matter.
            key = pl.digest(files, json.dumps(told(terminal.split("\x00"))))
            if key not in seen:
                recovery = "web" if int(key[:8], 16) % 3 == 0 else "cli"
                seen[key] = State(rec.scenario, point, choice.label, files, terminal, recovery)
    states = list(seen.values())
    distinct = len(states)
    if limit is not None and len(states) > limit:
        marks = set()
        for i, op in enumerate(rec.ops):
            if op.kind == "dirsync" or (op.kind == "sync" and pl.is_local(op.name)):
                marks.update((i, i + 1))
            elif op.kind == "say":
                marks.add(i + 1)
        order = {"synced only": 0, "all": 1}
        rng.shuffle(states)
        states.sort(key=lambda s: order.get(s.label, 2) if s.point in marks else 2)
        states = sorted(states[:limit], key=lambda s: s.point)
    return Exploration(built, distinct, states)


def told(said: list[str]) -> dict[str, str | bool | None]:
    """What the terminal had told the person when the power went: the ticket was taken (its
    email is echoed once the run is committed), the run's id, the approval it waits for, the
    decision done."""
    run = re.search(r"^Run (\S+): ", said[0], re.M)
    waiting = re.search(r"Waiting for approval \(([^)\s]+)\)", said[0])
    return {"started": "Email from " in said[0], "run": run and run.group(1),
            "waiting": waiting and waiting.group(1),
            "decided": len(said) > 1 and "Approved $" in said[1]}


# -- recovering and judging ---------------------------------------------------------------------

def recover_all(states: list[State], root: Path, jobs: int = 2) -> list[dict]:
    """Materialise each state and recover it with fresh processes (``jobs`` fork servers)."""
    tasks = []
    for i, state in enumerate(states):
        folder = pl.materialise(state.files, root / f"state-{i}")
        tasks.append({"id": i, "folder": str(folder), "recovery": state.recovery,
                      "decided": told(state.said)["decided"], "approver": APPROVER})
    env = cli_env(root)
    env.pop("REFUND_AGENT_OUTPUT")
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    servers = []
    for j in range(jobs):
        # The tasks go in a file, not a pipe: a server's answers fill its stdout while the
        # tasks for the next one are still being written, and two full pipes deadlock.
        mine = root / f"tasks-{j}.jsonl"
        mine.write_text("".join(json.dumps(t) + "\n" for t in tasks[j::jobs]))
        with open(mine) as stdin:
            servers.append(subprocess.Popen([sys.executable, str(RECOVER)], stdin=stdin,
                                            stdout=subprocess.PIPE, text=True, env=env,
                                            cwd=PROJECT_ROOT))
    results: dict[int, dict] = {}
    for proc in servers:
        for line in proc.stdout:
            r = json.loads(line)
            results[r["id"]] = r
        proc.wait()
    return [results.get(i, {"id": i, "after": {}, "steps": [], "lost": True})
            for i in range(len(states))]


def problems(state: State, result: dict) -> list[str]:
    """What recovery from this state broke (empty: every promise held)."""
    out: list[str] = []
    if result.get("lost"):
        return ["the recovery server never answered"]
    first, after = result["steps"][0], result["after"]
    if first["rc"] not in (0, 1) or "Traceback" in first["stderr"]:
        out.append(f"recovery exited {first['rc']}: {first['stderr'][-300:]}")
    elif first["rc"] == 1 and not (first["stderr"].strip() or "failed" in first["stdout"]):
        out.append("recovery failed without a message")
    for step in result["steps"][1:]:
        if step["argv"] != ["<inspect>"] and (step["rc"] != 0 or "Traceback" in step["stderr"]):
            out.append(f"{' '.join(step['argv'])} exited {step['rc']}: "
                       f"{(step['stderr'] or step['stdout'])[-300:]}")
    if after.get("integrity") != "ok":
        out.append(f"integrity_check after recovery: {after.get('integrity', 'store unreadable')}")
    runs = {r: s for r, s in after.get("runs", [])}
    approvals = {a: (s, by) for a, _run, s, by in after.get("approvals", [])}
    said = told(state.said)
    if said["started"] and not runs:
        out.append("the terminal showed the ticket's email, but no run is left")
    if said["run"] and said["run"] not in runs:
        out.append(f"run {said['run']} was reported but is gone")
    if said["waiting"] and said["waiting"] not in approvals:
        out.append(f"approval {said['waiting']} was said to be waiting but is gone")
    if said["decided"]:
        decided = [a for a, (s, by) in approvals.items() if s == "approved" and by == APPROVER]
        if not decided:
            out.append(f"approve printed success but after recovery: {approvals}")
    for run, status in runs.items():
        if status == "working":
            out.append(f"run {run} still marked working after recovery")
        if status == "failed" and not after.get("errors", {}).get(run):
            out.append(f"run {run} failed without a message")
    return out


# Once a known gap, now a violation: the angry customer's conversation goes on in the
# `approve` process, the simulated customer writing back within the agent's advance, under
# its lease (customer.converse). It used to ask for her reply after the run had ended, so a
# death in between (a kill -9 as much as a power cut) left the run done and `resume` had
# nothing to continue. Counted apart as well, for the report.
CUT_SHORT = "the simulated customer's conversation ended early"


def final_checks(folder: Path, base: Outcome, simulated: bool = False) -> list[str]:
    """The outcome after recovery and the rest of the scenario, against the crash-free run."""
    if not (folder / pl.DB_NAME).exists():
        return ["no store after recovery"]
    try:
        outcome = read_outcome(folder)
    except Exception as exc:  # noqa: BLE001 - a store that cannot be read is the finding
        return [f"store unreadable: {exc}"]
    metrics = measure(outcome)
    out = [f"{k}={v}" for k, v in metrics.items() if v]
    if outcome.runs:
        def emails(o):
            return [(e["request"]["to"], e["request"]["body"]) for e in o.emails]
        if refund_facts(outcome) != refund_facts(base):
            out.append("refunds differ from the crash-free run")
        sent, expected = emails(outcome), emails(base)
        if sent != expected:
            cut = (simulated and sent == expected[:len(sent)] and len(sent) < len(expected)
                   and all(r["status"] == "done" for r in outcome.runs))
            out.append(CUT_SHORT if cut else "emails differ from the crash-free run")
        if [(a["status"], a["decided_by"]) for a in outcome.approvals] != \
                [(a["status"], a["decided_by"]) for a in base.approvals]:
            out.append("decisions differ from the crash-free run")
    elif outcome.refunds or outcome.emails:
        out.append("money or email went out for a run the store does not have")
    return out


@dataclass
class Verdicts:
    built: int
    distinct: int
    recovered: int
    violations: list[str]
    seconds: float
    cut_short: int = 0        # see CUT_SHORT


def explore(rec: Recorded, root: Path, *, full: bool = FULL, seed: int = SEED,
            limit: int | None = BOUNDED_STATES, jobs: int = 2,
            command: int | None = None) -> Verdicts:
    started = time.monotonic()
    exploration = build_states(rec, full, seed, None if full else limit, command)
    results = recover_all(exploration.states, root, jobs)
    violations, cut_short = [], 0
    for i, (state, result) in enumerate(zip(exploration.states, results, strict=True)):
        found = problems(state, result)
        found += final_checks(root / f"state-{i}", rec.baseline, rec.scenario == "angry")
        cut_short += CUT_SHORT in found
        if found:
            violations.append(f"{state.where(rec.ops)}: {'; '.join(found)}")
        else:
            shutil.rmtree(root / f"state-{i}", ignore_errors=True)
    return Verdicts(exploration.built, exploration.distinct, len(results), violations,
                    time.monotonic() - started, cut_short)


# -- the tests -----------------------------------------------------------------------------------

def test_replaying_the_recording_gives_the_files_the_run_left(recorded):
    """The recorder misses nothing: replaying every op rebuilds the final folder byte for byte
    (the -shm, mmap'd, aside), and the recording has syncs, directory syncs and the terminal."""
    for rec in recorded.values():
        assert pl.replay(rec.ops).files() == rec.files, rec.scenario
        # What the checks read off the terminal is there in a run that went to its end, so
        # a changed message cannot quietly turn those checks off.
        said = told(rec.terminals)
        assert said["started"] and said["run"] and said["waiting"] and said["decided"], said
        kinds = {op.kind for op in rec.ops}
        assert {"write", "sync", "dirsync", "create", "unlink", "say"} <= kinds


def test_the_model_loses_what_was_not_synced():
    """The disk model itself, on a hand-made recording: a synced write survives, an unsynced
    one survives as any prefix, torn at a sector; a creation not synced through its folder is
    lost; outside files are kept as they were."""
    ops = [pl.Op("create", 1, pl.DB_NAME), pl.Op("dirsync", name="."),
           pl.Op("write", 1, pl.DB_NAME, offset=0, data=b"a" * 1024),
           pl.Op("sync", 1, pl.DB_NAME),
           pl.Op("write", 1, pl.DB_NAME, offset=1024, data=b"b" * 1024),
           pl.Op("create", 2, pl.DB_NAME + "-wal"),
           pl.Op("write", 2, pl.DB_NAME + "-wal", offset=0, data=b"w"),
           pl.Op("create", 3, "refunds.log"),
           pl.Op("write", 3, "refunds.log", offset=0, data=b"paid\n")]
    p = pl.pending(ops, len(ops))
    assert p.names == [5] and p.data == {1: [4], 2: [6]}
    lost, _ = pl.crash_state(ops, p, pl.Choice(0, ((1, 0), (2, 0))))
    assert lost == {pl.DB_NAME: b"a" * 1024, "refunds.log": b"paid\n"}
    torn, _ = pl.crash_state(ops, p, pl.Choice(1, ((1, 1), (2, 1)), ((1, 512),)))
    assert torn[pl.DB_NAME] == b"a" * 1024 + b"b" * 512 and torn[pl.DB_NAME + "-wal"] == b"w"
    assert pl.sector_tears(ops[4]) == [512]


def _explore_and_record(recorded, tmp_path, scenario: str) -> Verdicts:
    verdicts = explore(recorded[scenario], tmp_path)
    record("power_loss", scenario=scenario, full=FULL, seed=SEED, states_built=verdicts.built,
           distinct=verdicts.distinct, recovered=verdicts.recovered,
           violations=len(verdicts.violations), seconds=round(verdicts.seconds, 1),
           simulated_conversations_cut_short=verdicts.cut_short)
    return verdicts


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_power_loss_state_recovers(recorded, tmp_path, scenario):
    verdicts = _explore_and_record(recorded, tmp_path, scenario)
    assert verdicts.recovered >= (60 if not FULL else 200)
    assert not verdicts.violations, "\n".join(verdicts.violations[:10])


def test_a_decision_committed_without_a_sync_is_caught(tmp_path):
    """The deliberate break: the decision's transaction commits with synchronous=NORMAL. A
    power loss after `approve` printed "Approved" and before the next synced commit then loses
    it, and the exploration must say so (only power cuts during `approve` are explored)."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    rec = record_scenario("damaged", tmp_path / "record", broken=True)
    verdicts = explore(rec, tmp_path / "states", limit=30, command=1)
    caught = [v for v in verdicts.violations if "approve printed success" in v]
    record("power_loss_break", scenario="damaged, decision not synced", full=FULL, seed=SEED,
           states_built=verdicts.built, distinct=verdicts.distinct,
           recovered=verdicts.recovered, violations=len(verdicts.violations),
           seconds=round(verdicts.seconds, 1), note=caught[0] if caught else None)
    assert caught, "the break went unnoticed:\n" + "\n".join(verdicts.violations[:5])
