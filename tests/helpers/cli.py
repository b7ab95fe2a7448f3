"""A ``refund-agent`` command as a user runs it: a new process with its own environment."""

from __future__ import annotations

import atexit
import subprocess
import sys
from pathlib import Path

from refund_agent.config import PROJECT_ROOT

from .forkserver import ForkServer
from .process import DATA, process_env

__all__ = ["DATA", "PROJECT_ROOT", "cli_env", "run_cli", "run_forked", "running_on"]


def cli_env(output_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for a ``refund-agent`` subprocess writing into ``output_dir``."""
    return process_env(output_dir, **extra)


def run_cli(output_dir: Path, *args: str, timeout: float = 60, **extra: str
            ) -> subprocess.CompletedProcess[str]:
    """Run ``python -m refund_agent ARGS`` as a new process, as a user would."""
    return subprocess.run([sys.executable, "-m", "refund_agent", *args], capture_output=True,
                          text=True, timeout=timeout, env=cli_env(output_dir, **extra),
                          cwd=PROJECT_ROOT)


_FORK_SERVER: ForkServer | None = None


def run_forked(output_dir: Path, *args: str, timeout: float = 60, **extra: str
               ) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` in a process forked from a warm interpreter (helpers/forkserver.py):
    the same new process, environment, output and return code, without a second of imports.
    For tests that run many commands (the crash matrix, the terminal's tests); a test about how
    the interpreter itself starts or ends (closed terminals, signals) uses :func:`run_cli`.
    A command the warm interpreter cannot stand in for runs as a fresh process after all:
    one whose ``PYTHON*`` settings differ from the server's (a ``sitecustomize`` on
    ``PYTHONPATH`` must run before the imports), or one started while another thread's command
    runs (the server runs one at a time, and the two may wait for each other)."""
    global _FORK_SERVER
    if _FORK_SERVER is None:
        _FORK_SERVER = ForkServer()
        atexit.register(_FORK_SERVER.close)
    env = cli_env(output_dir, **extra)
    if not _FORK_SERVER.fits(env):
        return run_cli(output_dir, *args, timeout=timeout, **extra)
    return _FORK_SERVER.run(list(args), env, PROJECT_ROOT, timeout)


# The backend the current test runs on, for the reliability log (helpers.crash.record); the
# autouse fixture in conftest.py sets it for every test.
_RUNNING_ON = {"backend": "sqlite"}


def note_backend(name: str) -> None:
    _RUNNING_ON["backend"] = name


def running_on() -> str:
    """"sqlite" or "postgresql": the backend of the test running now."""
    return _RUNNING_ON["backend"]
