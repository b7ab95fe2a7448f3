"""The fork server the crash helpers run their commands with (tests/helpers/forkserver.py):
each command is a real process of its own, and looks to the test exactly as a fresh one does."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers.cli import cli_env, run_cli
from helpers.forkserver import PROJECT_ROOT, ForkServer


@pytest.fixture(scope="module")
def forks():
    server = ForkServer()
    yield server
    server.close()


def _same(text: str) -> str:
    """Output with the ids every run draws afresh masked."""
    return re.sub(r"\b(run|msg)_[0-9a-f]{12,16}\b", r"\1_<id>", text)


def test_a_forked_command_answers_as_a_fresh_process_does(forks, tmp_path: Path):
    for args in (["sample", "past-window"], ["approve", "--as"]):  # a run; a usage error (2)
        fresh = run_cli(tmp_path / "fresh", *args)
        forked = forks.run(args, cli_env(tmp_path / "forked"), PROJECT_ROOT, 60)
        assert (forked.returncode, _same(forked.stdout), _same(forked.stderr)) == (
            fresh.returncode, _same(fresh.stdout), _same(fresh.stderr)), args
    assert (tmp_path / "forked" / "refund-agent.sqlite3").exists()  # its own environment


def test_a_crash_point_kills_a_process_of_its_own_with_sigkill(forks, tmp_path: Path):
    env = cli_env(tmp_path / "output", REFUND_AGENT_CRASH_AT="after_run_created")
    pids = set()
    for _ in range(2):
        crashed = forks.run(["sample", "damaged"], env, PROJECT_ROOT, 60)
        assert crashed.returncode == -9, crashed.stderr
        pid = int(crashed.stderr.split("killing process ")[1].split("]")[0])
        pids.add(pid)
    assert len(pids) == 2 and os.getpid() not in pids
    assert forks._proc is not None and forks._proc.pid not in pids  # noqa: SLF001
    assert forks._proc.poll() is None  # the server lives on  # noqa: SLF001


def test_a_command_over_its_time_is_killed_and_raises_as_subprocess_does(forks, tmp_path: Path):
    env = cli_env(tmp_path / "output", REFUND_AGENT_OFFLINE_LATENCY="30")
    with pytest.raises(subprocess.TimeoutExpired):
        forks.run(["sample", "damaged"], env, PROJECT_ROOT, 1.0)
    # The server answers the next command (the timed-out one was reaped, not left running).
    assert forks.run(["queue"], cli_env(tmp_path / "other"), PROJECT_ROOT, 60).returncode == 0
