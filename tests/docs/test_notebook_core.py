"""The walkthrough's own code checks what it claims: each check fails when its line breaks.

Two parts of walkthrough.ipynb are code of the notebook's own, not the package: the thirty lines
of plain ``openai`` calls (a loop, two SQLite tables) and the wire-transfer desk of "Your own
agent" (whose scripted-model test is in beyond.ipynb). The package mutants
(test_notebook_mutations.py) cannot reach them. Here the cells' source is broken instead: each
variant replaces one piece and runs the cells as a script in a new process. The unbroken cells
must pass; each break must stop the script at the check written for it (``check`` raises
AssertionError with its claim), or, where the API itself refuses the broken request before any
check runs, with the API's error.
"""

from __future__ import annotations

import importlib.util
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
BEYOND = ROOT / "notebooks" / "beyond.ipynb"


@dataclass(frozen=True)
class Break:
    name: str
    old: str          # exactly once in the core cells
    new: str
    fails_with: str   # the start of the failed check's claim, or an exception's name
    part: str = "core"


BREAKS = [
    Break("no_gate", 'GATED, EFFECTS = {"issue_refund"}, ', "GATED, EFFECTS = set(), ",
          "three values saved; nothing paid before approval"),
    Break("key_without_run_id", 'key = f"{run_id}-{call_id}"', "key = call_id",
          "paid once, keyed by the run id and the call id"),
    Break("effects_without_key", "CREATE TABLE effects(key PRIMARY KEY,",
          "CREATE TABLE effects(key,", "effects: one row per idempotency key"),
    Break("payment_not_idempotent", "INSERT OR IGNORE INTO effects",
          "INSERT OR REPLACE INTO effects", "a retry gets the first refund back"),
    Break("parallel_calls", "parallel_tool_calls=False", "parallel_tool_calls=True",
          "every request: store=True, one call at a time"),
    Break("resume_starts_over", "previous=response_id)", "previous=None)",
          "the resume chains from the response that made the call"),
    # Without stored responses the chain cannot be followed: the API answers 404 at once.
    Break("store_false", "store=True, previous_response_id", "store=False, previous_response_id",
          "NotFoundError"),
    # The double click: approve reads the waiting row instead of claiming it, so a second
    # approve resumes again from the same response (the "--" comments out the rest).
    Break("approve_reads_without_claiming",
          '"DELETE FROM waiting WHERE run_id = ? RETURNING response_id, call_id, "',
          '"SELECT response_id, call_id, arguments FROM waiting WHERE run_id = ? --"',
          "a second approve sends nothing"),
    # The wire-transfer desk: the rules its prose states, each removed.
    Break("approval_taken_as_authorization", "args.amount_cents > balance:", "False:",
          "approved, but refused when it ran", part="wires"),
    # ctx.once keys the wire by the call; the break keys it by a fresh id each time.
    Break("wire_not_keyed", "ctx.once(args.model_dump(),",
          "ctx._effects.once(uuid.uuid4().hex, args.model_dump(),",
          "resumed: send_wire ran again from its first line, the wire left once", part="wires"),
    Break("no_crash_point", '    ctx.crash("after_wire")\n', "",
          "killed after the wire left", part="wires"),
    # The wire's amount is no longer compared with the request's when it runs: a scripted
    # model's wrong amount goes out.
    Break("wire_amount_unchecked", '.get("amount_cents") != args.amount_cents or',
          '.get("amount_cents") != args.amount_cents and False or',
          "a scripted model asks $950.00 for a $900.00 wire", part="wires"),
]


def _code_cells(notebook: Path = NOTEBOOK) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
            if c["cell_type"] == "code"]


def _script(part: str, broken: Break | None = None) -> str:
    """``core``: the code cells up to the approval (setup, core setup, core, run, approve).
    ``wires``: the setup cell and the wire-transfer desk's cells, its module written by Python
    instead of %%writefile, then beyond.ipynb's scripted-model cell (which runs that desk).
    ``broken``: its text replaced first (it must be there once)."""
    cells = _code_cells()
    if part == "core":
        cells = cells[:next(i for i, c in enumerate(cells) if 'approve(run_id, "Dana Kim")' in c)
                      + 1]
    else:
        start = next(i for i, c in enumerate(cells) if c.startswith("%%writefile"))
        end = next(i for i, c in enumerate(cells) if i > start and "desk.expire()" in c)
        scripted = [c for c in _code_cells(BEYOND) if "ScriptedBrain(" in c]
        assert len(scripted) == 1, "beyond.ipynb has no one scripted-model cell to re-point"
        cells = [cells[0], *cells[start:end + 1], *scripted]
    if broken is not None:
        found = sum(c.count(broken.old) for c in cells)
        assert found == 1, f"{broken.name}: re-point it, {broken.old!r} is in the {part} cells " \
            f"{found} times"
        cells = [c.replace(broken.old, broken.new) for c in cells]
    if part == "core":
        return "\n\n".join(cells)
    written = f"(OUTPUT / 'wires.py').write_text({cells[1].split(chr(10), 1)[1]!r})"
    return "\n\n".join([cells[0], "from refund_agent import AlreadyDecided", written, *cells[2:]])


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
    jobs = {**{f"unbroken {part}": _script(part) for part in ("core", "wires")},
            **{b.name: _script(b.part, b) for b in BREAKS}}
    scratch = tmp_path_factory.mktemp("core")
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(jobs, pool.map(lambda n: _run(jobs[n], scratch / n.replace(" ", "-")),
                                       jobs), strict=True))
    return {name: "" if d.returncode == 0 else _failure(d) or d.stderr[-2000:]
            for name, d in done.items()}


def test_the_core_is_thirty_lines_keyed_by_run_and_call() -> None:
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    core = next("".join(c["source"]) for c in cells if "def advance(" in "".join(c["source"]))
    assert len(core.splitlines()) <= 30, f"the core is {len(core.splitlines())} lines"
    assert 'key = f"{run_id}-{call_id}"' in core
    assert "store=True" in core and "parallel_tool_calls=False" in core
    assert "previous_response_id=previous" in core


@pytest.mark.parametrize("part", ["core", "wires"])
def test_the_unbroken_cells_pass(part: str, outcomes: dict[str, str]) -> None:
    assert outcomes[f"unbroken {part}"] == "", outcomes[f"unbroken {part}"]


@pytest.mark.parametrize("broken", BREAKS, ids=lambda b: b.name)
def test_each_break_fails_its_check(broken: Break, outcomes: dict[str, str]) -> None:
    if outcomes[f"unbroken {broken.part}"]:
        pytest.skip("the unbroken cells fail (see test_the_unbroken_cells_pass)")
    assert outcomes[broken.name].startswith(broken.fails_with), (
        f"{broken.name}: expected {broken.fails_with!r}, got {outcomes[broken.name]!r}")


# Checks no break fails yet: each needs a mutant (test_notebook_mutations.py) or a break here.
# Empty since issue 35: a check at the end of a scenario, which an earlier check catches first,
# has a mutant run with soft checks (Mutant.first) showing it fails too. The list may only
# stay empty: a new check must come with its break.
NOT_YET_BROKEN: dict[str, list[str]] = {"walkthrough": [], "beyond": []}


def test_every_check_has_a_break_or_is_listed() -> None:
    """Every check the notebooks print is failed by some break: a package mutant, a break of
    the notebook's own cells above, or a break the notebook makes itself (``fails``)."""
    spec = importlib.util.spec_from_file_location(
        "notebook_mutations", Path(__file__).with_name("test_notebook_mutations.py"))
    assert spec and spec.loader
    mutations = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mutations)   # its dataclasses look themselves up there
    spec.loader.exec_module(mutations)
    for name in ("walkthrough", "beyond"):
        printed = "".join("".join(o.get("text", "")) for c in json.loads(
            (ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
            for o in c.get("outputs", []))
        claims = re.findall(r"^(.*): True$", printed, re.MULTILINE)
        broken = [m.claim for m in mutations.MUTANTS if m.notebook == name]
        broken += re.findall(r"^broken on purpose, this check fails: (.*)$", printed, re.MULTILINE)
        broken += [b.fails_with for b in BREAKS]   # the wires part ends in beyond's cell
        unbroken = [c for c in claims if not any(c.startswith(b) for b in broken)]
        assert unbroken == NOT_YET_BROKEN[name], (
            f"{name}: checks without a break changed; unbroken now: {unbroken}")
