"""The walkthrough's thirty lines check what they claim: each check fails when its line breaks.

The first cells of walkthrough.ipynb are plain ``openai`` code of the notebook's own (a loop,
two SQLite tables), not the package, so the package mutants (test_notebook_mutations.py) cannot
reach them. Here the cells' source is broken instead: each variant replaces one piece of the
core and runs the setup and core cells as a script in a new process. The unbroken cells must
pass; each break must stop the script at the check written for it (``check`` raises
AssertionError with its claim), or, where the API itself refuses the broken request before any
check runs, with the API's error.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "walkthrough.ipynb"


@dataclass(frozen=True)
class Break:
    name: str
    old: str          # exactly once in the core cells
    new: str
    fails_with: str   # the start of the failed check's claim, or an exception's name


BREAKS = [
    Break("no_gate", 'GATED, EFFECTS = {"issue_refund"}, ', "GATED, EFFECTS = set(), ",
          "three values saved; nothing paid before approval"),
    Break("key_without_run_id", 'key = f"{run_id}-{call_id}"', "key = call_id",
          "paid once, keyed by the run id and the call id"),
    Break("payment_not_idempotent", "INSERT OR IGNORE INTO effects",
          "INSERT OR REPLACE INTO effects", "a retry gets the first refund back"),
    Break("parallel_calls", "parallel_tool_calls=False", "parallel_tool_calls=True",
          "every request: store=True, one call at a time"),
    Break("resume_starts_over", "previous=response_id)", "previous=None)",
          "the resume chains from the response that made the call"),
    # Without stored responses the chain cannot be followed: the API answers 404 at once.
    Break("store_false", "store=True, previous_response_id", "store=False, previous_response_id",
          "NotFoundError"),
]


def _core_script() -> str:
    """The walkthrough's code cells up to the approval (setup, core setup, core, run, approve)."""
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    end = next(i for i, c in enumerate(cells) if 'approve(run_id, "Dana Kim")' in "".join(
        c["source"]))
    return "\n\n".join("".join(c["source"]) for c in cells[:end + 1])


def _run(script: str, scratch: Path) -> subprocess.CompletedProcess[str]:
    scratch.mkdir()
    (scratch / "core.py").write_text(script)
    env = {**os.environ, "TMPDIR": str(scratch), "XAI_API_KEY": "",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "notebooks")])}
    for name in ("REFUND_AGENT_CRASH_AT", "CRASH_AFTER_REFUND", "REFUND_AGENT_OFFLINE_FAULTS",
                 "REFUND_AGENT_MODEL", "REFUND_AGENT_DATA"):
        env.pop(name, None)
    return subprocess.run([sys.executable, str(scratch / "core.py")], cwd=ROOT / "notebooks",
                          env=env, capture_output=True, text=True, timeout=120)


def _failure(done: subprocess.CompletedProcess[str]) -> str:
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    found = re.match(r"(?:\w+\.)*(\w+): (.*)", last)
    if not found:
        return last
    return found.group(2) if found.group(1) == "AssertionError" else found.group(1)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    script = _core_script()
    for b in BREAKS:
        assert script.count(b.old) == 1, f"{b.name}: re-point it, {b.old!r} is not once in the core"
    jobs = {"unbroken": script, **{b.name: script.replace(b.old, b.new) for b in BREAKS}}
    scratch = tmp_path_factory.mktemp("core")
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(jobs, pool.map(lambda n: _run(jobs[n], scratch / n), jobs), strict=True))
    return {name: "" if d.returncode == 0 else _failure(d) or d.stderr[-2000:]
            for name, d in done.items()}


def test_the_core_is_thirty_lines_keyed_by_run_and_call() -> None:
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    core = next("".join(c["source"]) for c in cells if "def advance(" in "".join(c["source"]))
    assert len(core.splitlines()) <= 30, f"the core is {len(core.splitlines())} lines"
    assert 'key = f"{run_id}-{call_id}"' in core
    assert "store=True" in core and "parallel_tool_calls=False" in core
    assert "previous_response_id=previous" in core


def test_the_unbroken_core_passes(outcomes: dict[str, str]) -> None:
    assert outcomes["unbroken"] == "", outcomes["unbroken"]


@pytest.mark.parametrize("broken", BREAKS, ids=lambda b: b.name)
def test_each_break_fails_its_check(broken: Break, outcomes: dict[str, str]) -> None:
    if outcomes["unbroken"]:
        pytest.skip("the unbroken core fails (see test_the_unbroken_core_passes)")
    assert outcomes[broken.name].startswith(broken.fails_with), (
        f"{broken.name}: expected {broken.fails_with!r}, got {outcomes[broken.name]!r}")
