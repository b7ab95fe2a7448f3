"""A new process of any agent, and killing it at a named crash point: what the desk's terminal
tests (helpers.cli, helpers.crash) and the loop's own tests on a small agent share.

Nothing here knows the refund desk (tests/loop/test_layout.py checks that this module and what
it imports stay so): an environment for a process writing into a test's output folder
(:func:`process_env`), a Python snippet run as one (:func:`run_python`), its clean exit
(:func:`expect_ok`), and the second kills a crash point's case needs (:func:`crash_again`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Collection
from pathlib import Path

from refund_agent.config import PROJECT_ROOT

DATA = PROJECT_ROOT / "data"
TESTS = PROJECT_ROOT / "tests"
KILLED = -signal.SIGKILL


def process_env(output_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for a new process writing into ``output_dir`` (no crash point, no key)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("REFUND_AGENT_CRASH_AT", "CRASH_AFTER_REFUND", "XAI_API_KEY")}
    env.update({"REFUND_AGENT_OUTPUT": str(output_dir), "REFUND_AGENT_DATA": str(DATA),
                "XAI_API_KEY": "", "REFUND_AGENT_MAX_RETRIES": "2", "PYTHONUNBUFFERED": "1",
                **extra})   # extra may name another shop's data
    return env


def run_python(code: str, output_dir: Path, *args: str, timeout: float = 90,
               **extra: str) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` as a new process on ``output_dir``, with tests/ importable (so
    ``code`` may use ``helpers.*``, as an agent's own script imports its module)."""
    path = os.pathsep.join(filter(None, [str(TESTS), str(PROJECT_ROOT),
                                         os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=PROJECT_ROOT,
                          env=process_env(output_dir, **{"PYTHONPATH": path, **extra}))


def expect_ok(proc: subprocess.CompletedProcess[str], what: str) -> None:
    assert proc.returncode == 0, (f"{what} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                                  f"stderr:\n{proc.stderr}")
    assert "Traceback" not in proc.stderr, proc.stderr


def expect_killed(proc: subprocess.CompletedProcess[str], point: str, what: str) -> None:
    """``proc`` died by SIGKILL at ``point``, as crash.py kills, and nothing else went wrong."""
    assert proc.returncode == KILLED, (
        f"{what} was meant to die at {point} but exited {proc.returncode}:\n"
        f"{proc.stdout}\n{proc.stderr}")
    assert f"[crash point {point}:" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def crash_again(resume: Callable[..., subprocess.CompletedProcess[str]], point: str, *,
                repeating: Collection[str], progressing: Collection[str]) -> int:
    """After a kill at ``point``, resume with the same point enabled (``resume(**env)``): a
    ``repeating`` point (the work before it is not recorded yet) must kill the resume once
    more, at the same spot; a ``progressing`` one (the step it follows is saved) kills at each
    later occurrence until the resume gets through. Returns the extra kills."""
    kills = 0
    if point in repeating:
        again = resume(REFUND_AGENT_CRASH_AT=point)
        assert again.returncode == KILLED, f"resume did not reach {point} again:\n{again.stdout}"
        kills += 1
    elif point in progressing:
        for _ in range(20):
            again = resume(REFUND_AGENT_CRASH_AT=point)
            if again.returncode != KILLED:
                expect_ok(again, f"resume with {point}")
                break
            kills += 1
        else:
            raise AssertionError(f"{point} never stopped firing: no progress between kills")
    return kills
