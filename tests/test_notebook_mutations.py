"""The walkthrough notebook fails when the pattern it teaches is broken.

Each mutant below is one named break of the package, of the kind a careless change could make:
a reused refund reporting a new id, verification that always answers OK, the policy's line
checks gone, and so on. For each one the package is copied to a temporary folder (the real files
are never touched), the break is applied to the copy, and the notebook runs under strict nbval
with the copy first on PYTHONPATH, so the notebook's kernel and every process it starts import
the broken package. nbval must fail for every mutant; an unbroken copy must pass, which shows
that the copy is what the notebook ran and that a failure comes from the break.

The runs go in parallel, one per CPU. Set REFUND_AGENT_MUTANTS=name,name to run only some, and
REFUND_AGENT_MUTATION_REPORT=path to write which cells caught which mutant (a JSON file).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "walkthrough.ipynb"
PACKAGE = ROOT / "refund_agent"

pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class Mutant:
    """One named break: exact text replacements in files of the package (paths relative to it).

    Each ``old`` text must occur exactly once in its file, so a mutant whose target moved fails
    loudly instead of silently testing nothing.
    """

    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...]


MUTANTS = [
    Mutant("reused_refund_new_id", "a reused refund reports a new refund id", ((
        "payments.py",
        '        return self.log.once(key, request, lambda: {"refund_id": "re_" + '
        'uuid.uuid4().hex[:16]})\n',
        '        record, reused = self.log.once(\n'
        '            key, request, lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})\n'
        '        if reused:  # MUTANT\n'
        '            record = {**record, "refund_id": "re_" + uuid.uuid4().hex[:16]}\n'
        '        return record, reused\n'),)),
    Mutant("verify_always_ok", "verify_audit and reconcile always answer that all is well", (
        ("store/auditlog.py",
         "        entries = self.audit() if entries is None else entries\n",
         "        return None  # MUTANT\n"
         "        entries = self.audit() if entries is None else entries\n"),
        ("reconcile.py",
         "    problem = store.verify_audit(audit, approval_list)\n    if problem:\n"
         "        return problem\n",
         "    return None  # MUTANT\n    problem = store.verify_audit(audit, approval_list)\n"
         "    if problem:\n        return problem\n"),
    )),
    Mutant("policy_line_checks_removed", "final-sale and already-held lines can be refunded", ((
        "policy.py",
        '    if item.final_sale:\n'
        '        return f"{item.name} ({line}) is final sale and is never refunded."\n'
        '    holder = held.get(line)\n',
        '    holder = None  # MUTANT\n'),)),
    Mutant("outbox_not_idempotent", "the outbox sends again for a key it has seen", (
        ("outside/email.py", "import uuid\n", "import json\nimport uuid\n"),
        ("outside/email.py",
         '        return self.log.once(key, request, lambda: {"message_id": "msg_" + '
         'uuid.uuid4().hex[:16]})\n',
         '        record = {"idempotency_key": key, "request": request,  # MUTANT\n'
         '                  "message_id": "msg_" + uuid.uuid4().hex[:16]}\n'
         '        self.log.path.parent.mkdir(parents=True, exist_ok=True)\n'
         '        with open(self.log.path, "a", encoding="utf-8") as fh:\n'
         '            fh.write(json.dumps(record) + "\\n")\n'
         '        return record, False\n'),
    )),
    Mutant("second_approval_accepted", "a decision no longer compares-and-sets on 'pending'", (
        ("store/approvals.py",
         '        if approval.status == "pending":\n            return approval\n',
         "        if True:  # MUTANT\n            return approval\n"),
        ("store/approvals.py",
         "amount_cents = ? WHERE id = ?\"\n                   \" AND status = 'pending'\",",
         'amount_cents = ? WHERE id = ?",  # MUTANT'),
    )),
    Mutant("approval_wrong_response_id",
           "the approval records the response the turn continued from, not the one that "
           "made the call", ((
               "store/approvals.py",
               "            quote = price(self._held(db, order_id))\n",
               "            quote = price(self._held(db, order_id))\n"
               "            row = db.execute(  # MUTANT\n"
               '                "SELECT response_id FROM calls WHERE run_id = ? AND '
               'response_id != ?"\n'
               '                " ORDER BY rowid DESC LIMIT 1", (run_id, response_id)).fetchone()\n'
               "            response_id = row[0] if row else response_id\n"),)),
    Mutant("store_false", "requests are sent with store=False", ((
        "turns.py", '"store": not zero_retention,', '"store": False,'),)),
    Mutant("partial_pays_unticked", "a partial approval pays the lines the person unticked", ((
        "calls.py", "fee_cents=line.fee_cents) for line in approval.kept])",
        "fee_cents=line.fee_cents) for line in approval.lines])  # MUTANT"),)),
    Mutant("fencing_removed", "writes no longer check the lease's epoch", ((
        "store/core.py",
        '        if row is None or (row["lease_token"], row["lease_epoch"]) != '
        "(lease.token, lease.epoch):\n",
        "        if row is None:  # MUTANT\n"),)),
    Mutant("saved_outputs_rerun", "a resumed run runs calls whose output was saved again", ((
        "agent.py", "                if call.output is not None:\n                    output = "
        "call.output\n",
        "                if False:  # MUTANT\n                    output = call.output\n"),)),
]
CONTROL = Mutant("unbroken", "the package as it is", ())


@dataclass
class Outcome:
    mutant: Mutant
    returncode: int
    failed_cells: list[str]
    seconds: float
    output: str
    package: str


def _selected() -> list[Mutant]:
    wanted = {n.strip() for n in os.environ.get("REFUND_AGENT_MUTANTS", "").split(",")
              if n.strip()}
    unknown = wanted - {m.name for m in MUTANTS}
    assert not unknown, f"unknown mutants {sorted(unknown)}"
    return [m for m in MUTANTS if not wanted or m.name in wanted]


def _apply(mutant: Mutant, package: Path) -> None:
    for relative, old, new in mutant.edits:
        path = package / relative
        text = path.read_text()
        count = text.count(old)
        assert count == 1, (f"mutant {mutant.name}: expected the text to replace once in "
                            f"{relative}, found it {count} times; update the mutant:\n{old}")
        path.write_text(text.replace(old, new))


def _run(mutant: Mutant, scratch: Path) -> Outcome:
    """Run the notebook under strict nbval against a copy of the package with ``mutant``."""
    home = scratch / mutant.name
    shutil.copytree(PACKAGE, home / "refund_agent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # config.PROJECT_ROOT is the copy's parent, where the shop's data is looked for.
    (home / "data").symlink_to(ROOT / "data")
    _apply(mutant, home / "refund_agent")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(home), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "PYTHONDONTWRITEBYTECODE": "1"}
    for name in ("REFUND_AGENT_MUTANTS", "REFUND_AGENT_MUTATION_REPORT", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    package = subprocess.run(
        [sys.executable, "-c", "import refund_agent; print(refund_agent.__file__)"],
        env=env, cwd=NOTEBOOK.parent, capture_output=True, text=True, check=True).stdout.strip()
    started = time.monotonic()
    # pyproject.toml's addopts give strict nbval with the sanitize file; -rf lists the failures.
    # A mutant needs only one failing cell, so it stops there, unless a report wants them all.
    stop = [] if mutant is CONTROL or os.environ.get("REFUND_AGENT_MUTATION_REPORT") else [
        "--maxfail=1"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(NOTEBOOK), "-q", "-rf", "--no-header", *stop],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    failed = re.findall(r"^FAILED \S+::(Cell \d+)", done.stdout, re.MULTILINE)
    return Outcome(mutant, done.returncode, failed, time.monotonic() - started,
                   done.stdout[-6000:] + done.stderr[-2000:], package)


def _code_cells() -> dict[str, str]:
    """nbval's cell names ("Cell 12" is the 13th code cell) -> section and first line."""
    names, section, n = {}, "", 0
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            headings = re.findall(r"^#+ (.+)$", source, re.MULTILINE)
            section = headings[-1] if headings else section
        else:
            first = next((line for line in source.splitlines() if line.strip()), "")
            names[f"Cell {n}"] = f"[{section}] {first[:60]}"
            n += 1
    return names


@pytest.fixture(scope="module")
def outcomes() -> Iterator[dict[str, Outcome]]:
    scratch = Path(tempfile.mkdtemp(prefix="refund-agent-mutants-"))
    try:
        todo = [CONTROL, *_selected()]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            results = {o.mutant.name: o for o in pool.map(lambda m: _run(m, scratch), todo)}
        report = os.environ.get("REFUND_AGENT_MUTATION_REPORT")
        if report:
            where = _code_cells()
            Path(report).write_text(json.dumps({
                "seconds": round(time.monotonic() - started, 1),
                "runs": {name: {"what": o.mutant.what, "returncode": o.returncode,
                                "seconds": round(o.seconds, 1),
                                "failed_cells": [f"{c}: {where.get(c, '?')}"
                                                 for c in o.failed_cells]}
                         for name, o in results.items()}}, indent=1) + "\n")
        yield results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_unbroken_copy_passes(outcomes: dict[str, Outcome]) -> None:
    control = outcomes[CONTROL.name]
    assert "refund-agent-mutants-" in control.package, control.package
    assert control.returncode == 0, f"the notebook fails without any break:\n{control.output}"


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_the_notebook_catches(mutant: Mutant, outcomes: dict[str, Outcome]) -> None:
    if mutant.name not in outcomes:
        pytest.skip("not selected in REFUND_AGENT_MUTANTS")
    if outcomes[CONTROL.name].returncode != 0:
        pytest.skip("the notebook fails without any break (see test_the_unbroken_copy_passes), "
                    "so its failing here would prove nothing")
    outcome = outcomes[mutant.name]
    assert "refund-agent-mutants-" in outcome.package, outcome.package
    # Exit code 1 with failed cells: the notebook ran and its outputs differed. Anything else
    # (a usage error, a kernel that never started) would not be the notebook catching the break.
    assert outcome.returncode == 1 and outcome.failed_cells, (
        f"{mutant.name} ({mutant.what}) was not caught by the notebook:\n{outcome.output}")


def test_markdown_has_no_bare_dollars() -> None:
    """Two $ in a markdown cell render as LaTeX in JupyterLab ("the $7.50 fee, so $18.50").

    Escaping with a backslash is not enough there: JupyterLab still pairs \\$ signs
    (jupyterlab/jupyterlab#8645), and a double backslash shows up in other viewers. Amounts go in
    code spans instead (`$7.50`), which every viewer renders as written.
    """
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    bare = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # fenced code renders as code
        text = re.sub(r"`[^`]*`", "", text)                     # and so do code spans
        bare += [f"cell {i}: ...{text[max(0, m.start() - 30):m.end() + 10]}..."
                 for m in re.finditer(r"\$", text)]
    assert not bare, "a $ outside code in markdown (write `$7.50`):\n" + "\n".join(bare)
