"""``refund-agent work --concurrency N``: many runs in flight in one process, a progress line,
and a stop (Ctrl+C, SIGTERM) that lets the runs in flight end and leaves nothing half done.

Before issue #46 the worker advanced one run after another, printed no progress, and a SIGTERM
killed it where it stood (its runs waited for their leases to expire).
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchlib import bench_settings, clone_id, make_bench_shop, start_ticket
from helpers.cli import PROJECT_ROOT, cli_env, run_forked

from refund_agent.cli import build_parser
from refund_agent.cli.work import Progress, Tally
from refund_agent.desk import Agent
from refund_agent.models import RunStatus


class Terminal(io.StringIO):
    """A terminal's stream as the CLI wraps it: ``redraw`` draws over the current line."""

    def isatty(self) -> bool:
        return True

    def redraw(self, line: str) -> None:
        self.write("\r" + line)


def test_the_progress_line_redraws_on_a_terminal():
    out = Terminal()
    progress = Progress(out)
    progress.show(Tally(in_flight=3))
    progress.show(Tally(in_flight=2, done=1))
    progress.say("run_1: done")
    progress.show(Tally(in_flight=2, done=1, waiting=1, rate_limited=4))
    progress.end()
    text = out.getvalue()
    # One line redrawn in place; a run's line replaces it (padded over the longer line), then
    # the progress line comes back below it.
    assert "\n" not in text.split("run_1: done")[0]
    lines = text.split("\n")
    assert lines[0].split("\r")[-1].rstrip() == "run_1: done"
    assert lines[1].split("\r")[-1] == ("Working: 2 in flight, 1 done, 1 waiting on a person, "
                                        "0 failed or stopped, 4 rate-limited (429) answers")


def test_the_progress_line_is_a_plain_line_now_and_then_when_piped():
    out, now = io.StringIO(), [0.0]
    progress = Progress(out, every=10, clock=lambda: now[0])
    progress.show(Tally(in_flight=3))
    now[0] = 5
    progress.show(Tally(in_flight=2, done=1))      # within 10 s: not printed
    progress.say("run_1: done")
    now[0] = 11
    progress.show(Tally(in_flight=2, done=1))
    progress.show(Tally(in_flight=2, done=1), force=True)   # unchanged: not printed twice
    assert "\r" not in out.getvalue()
    assert out.getvalue().splitlines() == [
        "Working: 3 in flight, 0 done, 0 waiting on a person, 0 failed or stopped",
        "run_1: done",
        "Working: 2 in flight, 1 done, 0 waiting on a person, 0 failed or stopped"]


@pytest.mark.parametrize("raw", ["0", "-1", "2.5", "x", "257"])
def test_a_wrong_concurrency_is_a_usage_mistake(raw, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["work", "--concurrency", raw])
    assert exited.value.code == 2
    assert "must be a whole number of runs from 1 to 256" in capsys.readouterr().err


def _tickets(root: Path, n: int) -> tuple[Path, Path, list[str]]:
    data = make_bench_shop(root / "data", n)
    output = root / "output"
    agent = Agent(bench_settings(output, data))
    ids = [start_ticket(agent, clone_id(i + 1)).id for i in range(n)]
    agent.store.close()
    return output, data, ids


def _runs(output: Path, data: Path) -> dict[str, tuple[RunStatus, list[str], int]]:
    agent = Agent(bench_settings(output, data))
    try:
        return {r.id: (r.status, [s.kind for s in agent.store.steps(r.id)],
                       len([a for a in agent.store.approvals("pending", limit=-1)
                            if a.run_id == r.id]))
                for r in agent.store.runs(limit=-1)}
    finally:
        agent.store.close()


def test_work_advances_up_to_n_runs_at_once(tmp_path: Path):
    output, data, ids = _tickets(tmp_path, 6)
    done = run_forked(output, "work", "--concurrency", "6", "--idle-exit", "0", timeout=120,
                      REFUND_AGENT_DATA=str(data), REFUND_AGENT_OFFLINE_LATENCY="0.5")
    assert done.returncode == 0, done.stderr
    assert "6 runs at a time" in done.stdout
    # Piped: plain progress lines; the first is drawn once the six are claimed (none can end
    # before its first reply, half a second later).
    assert "Working: 6 in flight, 0 done" in done.stdout
    assert "\r" not in done.stdout
    runs = _runs(output, data)
    assert {run_id: (s, pending) for run_id, (s, _k, pending) in runs.items()} == {
        run_id: (RunStatus.WAITING, 1) for run_id in ids}
    assert all(f"{run_id}: waiting" in done.stdout for run_id in ids)


def _worker(output: Path, data: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "refund_agent", "work", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=PROJECT_ROOT,
                            env=cli_env(output, REFUND_AGENT_DATA=str(data),
                                        REFUND_AGENT_OFFLINE_LATENCY="1.5"))


def _wait_for(proc: subprocess.Popen[str], text: str, timeout: float = 60) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"never printed {text!r}: {''.join(seen)}{proc.stderr.read()}")


def test_sigterm_stops_taking_runs_and_lets_those_in_flight_finish(tmp_path: Path):
    output, data, ids = _tickets(tmp_path, 4)
    proc = _worker(output, data, "--concurrency", "2", "--grace", "60")
    try:
        _wait_for(proc, "Working: 2 in flight")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Stopping: no new runs; 2 in flight get up to 60 s to finish" in out
    runs = _runs(output, data)
    finished = [r for r, (s, _k, _p) in runs.items() if s == RunStatus.WAITING]
    untouched = [r for r, (s, kinds, _p) in runs.items() if s == RunStatus.WORKING]
    # The two in flight reached their end (a proposal waiting on a person), no stop in their
    # timelines; the other two were never taken, and the next worker takes them.
    assert len(finished) == 2 and len(untouched) == 2
    assert not any("stopped" in kinds for _s, kinds, _p in runs.values())
    assert all(runs[r][1] == ["email"] for r in untouched)


def test_past_the_grace_runs_stop_at_a_boundary_and_are_handed_back(tmp_path: Path):
    output, data, ids = _tickets(tmp_path, 3)
    proc = _worker(output, data, "--concurrency", "3", "--grace", "0")
    try:
        _wait_for(proc, "Working: 3 in flight")
        proc.send_signal(signal.SIGINT)   # Ctrl+C
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "Handed back 3 run(s) stopped at their last stored response" in out
    runs = _runs(output, data)
    # Stopped mid-request, then handed back: working again, no lease, claimable.
    assert all(s == RunStatus.WORKING and "stopped" in kinds for s, kinds, _p in runs.values())
    agent = Agent(bench_settings(output, data))
    assert all(agent.store.run(r).lease_pid is None for r in ids)
    agent.store.close()
    # The next worker finishes them, each with one proposal, as if nothing had happened.
    again = run_forked(output, "work", "--concurrency", "3", "--idle-exit", "0", timeout=120,
                       REFUND_AGENT_DATA=str(data))
    assert again.returncode == 0, again.stderr
    assert {r: (s, p) for r, (s, _k, p) in _runs(output, data).items()} == {
        r: (RunStatus.WAITING, 1) for r in ids}
