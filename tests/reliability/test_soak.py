"""Soak: many runs with the process killed at random moments, then the same invariants.

Each run picks a scenario at random and types its commands one by one. Every process (the
command itself, and every ``resume`` that follows a kill) is, at random, killed at a random named
crash point, killed by a real SIGKILL from this test after a random delay (which can land
anywhere: mid-import, mid-stream, mid-write), paused past its lease while ``resume`` takes its
run over and then woken up (a stale owner), or left alone. After a kill the test does what a
user would: ``resume``, and if the command's own effect (the new run, the decision, the reply)
never happened, type the command again. When the chain is done, the run is held to the crash
matrix's invariants and compared with a crash-free run of the same scenario.

Small by default: six runs, more if needed to reach twenty kills (``REFUND_AGENT_SOAK_KILLS``).
Larger, e.g. two hundred runs::

    REFUND_AGENT_SOAK_RUNS=200 python -m pytest tests/reliability/test_soak.py -q -s

It runs on both backends (SQLite, and a database per run on the throwaway PostgreSQL server);
``REFUND_AGENT_SOAK_RUNS`` and ``REFUND_AGENT_SOAK_KILLS`` apply to each.

Reproduce a failure with the seed it prints (``REFUND_AGENT_SOAK_SEED=...``). Each run draws from
its own generator seeded with (seed, run number), so its scenario and its sequence of choices
(crash point or timed kill, which point, what delay) replay exactly; where a timed kill lands
also depends on how busy the machine is, so a timed kill replays only approximately.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.cli import cli_env
from helpers.crash import (
    SCENARIOS,
    Baselines,
    assert_held,
    measure,
    read_outcome,
    record,
)
from helpers.pg import Backend

from refund_agent.config import PROJECT_ROOT
from refund_agent.desk.agent import CRASH_POINTS

RUNS = int(os.environ.get("REFUND_AGENT_SOAK_RUNS", "6"))
# Short chains (a declined request is one command) die less often: keep adding runs until this
# many kills, so even the small CI soak kills about twenty processes.
MIN_KILLS = int(os.environ.get("REFUND_AGENT_SOAK_KILLS", "20"))
SEED = int(os.environ.get("REFUND_AGENT_SOAK_SEED") or random.SystemRandom().randrange(10**9))
MAX_ATTEMPTS = 12       # per command; a chain that needs more is a failure, not a retry loop
KILLS_IN_A_ROW = 4      # then the next processes run alone until the command gets through
KILL_DELAY = (0.25, 0.8)  # seconds after start; a command lives about 0.4 to 1 s
PAUSE_LEASE = 1.0       # seconds: the lease of a process the soak pauses (SIGSTOP) mid-command
STALE = -1000           # the exit "code" of a woken process that found its run taken over


def _counts(output: Path, backend: Backend) -> dict[str, int]:
    """Runs, pending approvals and replies so far (zeros before the store exists)."""
    if backend.postgres:
        from refund_agent.desk.records import DeskStore
        store = DeskStore(backend.url(output))  # makes the schema if no process got that far
        try:
            one = lambda sql: store.query(sql)[0][0]  # noqa: E731
            return {"runs": one("SELECT COUNT(*) FROM runs"),
                    "pending": one("SELECT COUNT(*) FROM approvals WHERE status = 'pending'"),
                    "replies": one("SELECT COUNT(*) FROM replies")}
        finally:
            store.close()
    db_path = output / "refund-agent.sqlite3"
    if not db_path.exists():
        return {"runs": 0, "pending": 0, "replies": 0}
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
        return {"runs": one("SELECT COUNT(*) FROM runs"),
                "pending": one("SELECT COUNT(*) FROM approvals WHERE status = 'pending'"),
                "replies": one("SELECT COUNT(*) FROM replies")}
    except sqlite3.OperationalError:   # killed before the schema was committed
        return {"runs": 0, "pending": 0, "replies": 0}
    finally:
        db.close()


def _took_effect(command: tuple[str, ...], before: dict[str, int], now: dict[str, int]) -> bool:
    name = command[0]
    if name in ("sample", "angry", "send"):
        return now["runs"] > before["runs"]
    if name in ("approve", "reject"):
        return now["pending"] < before["pending"]
    if name == "reply":
        return now["replies"] > before["replies"]
    raise AssertionError(name)


def _attempt(output: Path, args: tuple[str, ...], rng: random.Random, backend: Backend,
             spare: bool = False) -> tuple[str, int, str]:
    """Run one process, maybe killing it (never when ``spare``); returns (how, code, stderr)."""
    how = rng.choices(["point", "timer", "pause", "alone"], weights=[5, 5, 3, 1])[0]
    point = rng.choice(sorted(CRASH_POINTS))
    delay = rng.uniform(*KILL_DELAY)
    if spare:
        how = "alone"
    env = cli_env(output, **backend.env(output))
    if how == "point":
        env["REFUND_AGENT_CRASH_AT"] = point
    if how == "pause":
        env["REFUND_AGENT_LEASE_SECONDS"] = str(PAUSE_LEASE)
    proc = subprocess.Popen([sys.executable, "-m", "refund_agent", *args], env=env,
                            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        _out, err = proc.communicate(timeout=delay if how in ("timer", "pause") else 120)
    except subprocess.TimeoutExpired:
        if how == "pause":
            return _stale_owner(output, proc, delay, backend)
        proc.send_signal(signal.SIGKILL)
        _out, err = proc.communicate()
    label = f"{how}:{point}" if how == "point" else (f"timer:{delay:.2f}s" if how == "timer"
                                                     else "alone")
    return label, proc.returncode, err


def _stale_owner(output: Path, proc: subprocess.Popen[str], delay: float, backend: Backend
                 ) -> tuple[str, int, str]:
    """Pause the process past its lease, let `resume` take the run over, then wake it up.

    The woken process must either find nothing changed under it (it finished, or nobody took
    its run) or stop at its next write with "taken over"; the invariants then show whether it
    did anything twice. A process paused inside a database transaction or the payment log's
    file lock blocks the others until it wakes, as it would for real: the takeover then runs
    after the wake-up.
    """
    proc.send_signal(signal.SIGSTOP)
    time.sleep(PAUSE_LEASE + 0.3)
    takeover = subprocess.Popen([sys.executable, "-m", "refund_agent", "resume"],
                                env=cli_env(output, REFUND_AGENT_LEASE_SECONDS=str(PAUSE_LEASE),
                                            **backend.env(output)),
                                cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        _out, took_err = takeover.communicate(timeout=20)
        blocked = False
    except subprocess.TimeoutExpired:
        blocked = True              # waiting on a lock the paused process holds
    proc.send_signal(signal.SIGCONT)
    _out, err = proc.communicate(timeout=120)
    if blocked:
        _out, took_err = takeover.communicate(timeout=120)
    assert "Traceback" not in took_err, took_err
    assert takeover.returncode in (0, 1), (takeover.returncode, took_err)
    if takeover.returncode == 1:    # it found the run busy after all, or locked: say which
        assert "being advanced" in took_err or "locked" in took_err, took_err
    # The woken owner either finished untouched or stopped at its next write; both are fine,
    # and the chain goes on with `resume` if its command is not done.
    woke = "taken over" if "taken over by" in err else "untouched"
    code = 0 if proc.returncode == 0 else (STALE if woke == "taken over" else proc.returncode)
    return f"pause:{delay:.2f}s:{woke}", code, err


def _chain(output: Path, scenario: str, rng: random.Random, log: list[str], backend: Backend
           ) -> int:
    """Type the scenario's commands, killing and restarting at random; returns the kills."""
    kills = 0
    backend.prepare(output)
    for command in SCENARIOS[scenario]:
        before = _counts(output, backend)
        args = command
        in_a_row = 0
        for _ in range(MAX_ATTEMPTS):
            # After a few kills in a row the processes are left alone until the command has
            # made progress: on a busy machine most timed kills land before a process has
            # even imported its modules, and a chain must finish.
            how, code, err = _attempt(output, args, rng, backend,
                                      spare=in_a_row >= KILLS_IN_A_ROW)
            log.append(f"{' '.join(args[:1])} [{how}] -> {code}")
            assert "Traceback" not in err, err
            if code in (-signal.SIGKILL, STALE):
                kills += 1
                in_a_row += 1
                args = ("resume",)
                continue
            assert code == 0, f"{' '.join(args)} exited {code}: {err}"
            if args == command or _took_effect(command, before, _counts(output, backend)):
                break
            args = command     # the kill came before the command did anything: type it again
        else:
            raise AssertionError(f"{scenario}: {command} did not finish in {MAX_ATTEMPTS} tries")
    return kills


# The suite's per-test timeout is for ordinary tests; a soak's budget grows with its size.
@pytest.mark.timeout(120 + 60 * 5 * RUNS)
def test_soak_random_kills(baselines: Baselines, tmp_path: Path, capsys):  # noqa: F811
    with capsys.disabled():
        print(f"\nsoak: REFUND_AGENT_SOAK_SEED={SEED} REFUND_AGENT_SOAK_RUNS={RUNS}",
              file=sys.stderr)
    started = time.monotonic()
    total_kills, held, scenarios = 0, Counter(), Counter()
    i = -1
    while (i := i + 1) < RUNS or (total_kills < MIN_KILLS and i < 5 * RUNS):
        # Each run has its own generator, so how long one run's kills took to land (which
        # changes how many choices it uses) cannot shift what the later runs do.
        rng = random.Random(f"{SEED}:{i}")
        scenario = rng.choice(sorted(SCENARIOS))
        base = baselines.get(scenario)
        output = tmp_path / f"run-{i}"
        log: list[str] = []
        context = (f"soak run {i} ({scenario}), REFUND_AGENT_SOAK_SEED={SEED} "
                   f"REFUND_AGENT_SOAK_RUNS={RUNS}")
        try:
            kills = _chain(output, scenario, rng, log, baselines.backend)
        except AssertionError as exc:
            raise AssertionError(f"{context}: {exc}\n" + "\n".join(log)) from None
        outcome = read_outcome(output, baselines.backend)
        metrics = measure(outcome, base.outcome)
        # A model request repeated after a kill (a stream cut short, or the simulated customer's
        # reply asked again) costs a request but does nothing twice; fewer would mean a lost turn.
        metrics.pop("requests_differ_from_baseline")
        extra = [r["requests"] - b["requests"]
                 for r, b in zip(outcome.runs, base.outcome.runs, strict=False)]
        metrics["fewer_requests_than_baseline"] = sum(1 for x in extra if x < 0)
        record("soak", backend=baselines.backend.name, seed=SEED, run=i, scenario=scenario,
               kills=kills,
               point_kills=sum(1 for e in log if "[point:" in e and e.endswith("-> -9")),
               timer_kills=sum(1 for e in log if "[timer:" in e and e.endswith("-> -9")),
               stale_owners=sum(1 for e in log if "[pause:" in e),
               stale_owners_fenced=sum(1 for e in log if ":taken over]" in e),
               processes=len(log), repeated_requests=sum(x for x in extra if x > 0), **metrics)
        assert_held(metrics, context + "\n" + "\n".join(log))
        total_kills += kills
        scenarios[scenario] += 1
        held.update(k for k, v in metrics.items() if not v)
    seconds = time.monotonic() - started
    record("soak_total", backend=baselines.backend.name, seed=SEED, runs=i, kills=total_kills,
           seconds=round(seconds, 1))
    with capsys.disabled():
        print(f"soak ({baselines.backend.name}): {i} runs ({dict(scenarios)}), {total_kills} "
              f"kills, all invariants held, {seconds:.0f} s", file=sys.stderr)
    assert total_kills > 0, "nothing was killed: the soak tested nothing"
