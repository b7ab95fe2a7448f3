"""The notebooks' stored outputs keep the promises the notebooks make about themselves.

Every claim in the notebooks' prose is a cell that prints ``claim: True`` and asserts it
(``check`` in the setup cell). nbval compares outputs strictly, so a check stored as ``False``
would be locked in as the expected output; these tests refuse that, and keep the outputs short
enough to read. They read the .ipynb files only, so they take milliseconds.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {name: ROOT / "notebooks" / f"{name}.ipynb" for name in ("walkthrough", "beyond")}
WIDTH = 100


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _printed(cell: dict) -> str:
    """What a code cell printed, as one text (streamed pieces joined as a reader sees them)."""
    parts = []
    for output in cell.get("outputs", []):
        text = output.get("text") or output.get("data", {}).get("text/plain", "")
        parts.append("".join(text))
    return "".join(parts)


@pytest.mark.parametrize("path", NOTEBOOKS.values(), ids=NOTEBOOKS.keys())
def test_no_stored_output_prints_a_check_as_false(path: Path) -> None:
    bad = [f"code cell {i}: {line}" for i, cell in enumerate(_cells(path))
           if cell["cell_type"] == "code" for line in _printed(cell).splitlines()
           if re.search(r"(^|:\s*)False\s*$", line)]
    assert not bad, "a check is stored as False (fix the notebook, never the output):\n" + \
        "\n".join(bad)


def _shows_nothing(source: str) -> bool:
    """A cell that only defines (functions, constants, imports) or writes a module to disk
    (%%writefile): it runs nothing to check; the cells after it call what it defined."""
    if source.startswith("%%writefile"):
        return True
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return all(isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom
                          | ast.Assign) for node in body)


@pytest.mark.parametrize("path", NOTEBOOKS.values(), ids=NOTEBOOKS.keys())
def test_every_code_cell_after_the_setup_checks_what_it_shows(path: Path) -> None:
    code = [c for c in _cells(path) if c["cell_type"] == "code"][1:]
    shown = [c for c in code if not _shows_nothing("".join(c["source"]))]
    unchecked = [f"code cell: {''.join(c['source'])[:80]!r}" for c in shown
                 if not re.search(r"\bcheck\(|\bassert\b", "".join(c["source"]))]
    assert not unchecked, "cells that show something without checking it:\n" + \
        "\n".join(unchecked)
    assert all(": True" in _printed(c) for c in shown), "a check that printed nothing"
    assert all(not _printed(c).strip() or "wires.py" in _printed(c) for c in code
               if c not in shown), "a cell that only defines printed something"


@pytest.mark.parametrize("path", NOTEBOOKS.values(), ids=NOTEBOOKS.keys())
def test_outputs_fit_the_page(path: Path) -> None:
    long = [f"code cell {i}: {line[:60]}... ({len(line)} characters)"
            for i, cell in enumerate(c for c in _cells(path) if c["cell_type"] == "code")
            for line in _printed(cell).splitlines() if len(line) > WIDTH]
    assert not long, f"output lines over {WIDTH} characters:\n" + "\n".join(long)
    errors = [o for c in _cells(path) for o in c.get("outputs", []) if o.get("output_type")
              == "error"]
    assert not errors, "a stored output is an error"


def test_the_walkthrough_reads_in_twenty_minutes() -> None:
    cells = _cells(NOTEBOOKS["walkthrough"])
    words = sum(len("".join(c["source"]).split()) for c in cells)
    headings = [line for c in cells if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("#")]
    assert len(cells) <= 45, f"{len(cells)} cells"
    # Every word of every cell, code too: a coarse ceiling. The reading estimate (prose, code
    # and output lines counted apart) is scripts/notebook_reading.py's, tested beside this file.
    assert words <= 4500, f"{words} words"
    assert any("idempotency" in h.lower() for h in headings), headings
    assert any("thirty lines" in h.lower() for h in headings), headings


def _private_uses(source: str) -> list[str]:
    """Where ``source`` reaches a private name: ``obj._name``, ``from refund_agent... import
    _name``, a ``refund_agent._module`` path, or a private name given as a string to the calls
    that reach attributes by name (``mock.patch.object(x, "_name")``, ``getattr``, ``setattr``,
    ``mock.patch("refund_agent...._name")``). Dunders (``__file__``) are public."""
    private = re.compile(r"^_(?!_)")
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and private.match(node.attr):
            found.append(f"line {line}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("refund_agent"):
            found += [f"line {line}: import {a.name} from {node.module}" for a in node.names
                      if private.match(a.name)]
            if any(private.match(part) for part in node.module.split(".")):
                found.append(f"line {line}: from {node.module}")
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            strings = [a.value for a in node.args if isinstance(a, ast.Constant)
                       and isinstance(a.value, str)]
            if name.split(".")[-1] in ("object", "getattr", "setattr", "hasattr", "delattr"):
                found += [f"line {line}: {name}(..., {s!r})" for s in strings[:1]
                          if private.match(s)]
            if name in ("mock.patch", "patch"):
                found += [f"line {line}: {name}({s!r})" for s in strings
                          if s.startswith("refund_agent")
                          and any(private.match(part) for part in s.split("."))]
    return found


def _python(cell_source: str) -> str:
    """A code cell as Python: a ``%%writefile`` cell is the module it writes, line magics and
    shell lines are dropped."""
    lines = cell_source.splitlines()
    if lines and lines[0].startswith("%%"):
        lines = lines[1:]
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def test_the_private_scan_sees_each_way_of_reaching_a_private_name() -> None:
    reached = ["store._db()", "from refund_agent.store.core import _row",
               "from refund_agent._x import y", 'mock.patch.object(engine, "_begin", f)',
               'getattr(store, "_local")', 'mock.patch("refund_agent.store._db", f)']
    assert [bool(_private_uses(source)) for source in reached] == [True] * len(reached)
    public = ["store.connection()", "refund_agent.__file__", 'mock.patch("time.time", f)',
              'mock.patch.object(Store, "calls", f)', "from refund_agent import Store"]
    assert [_private_uses(source) for source in public] == [[]] * len(public)


def test_the_notebooks_use_only_the_public_api() -> None:
    """What a reader copies must run on the package's public surface: no notebook cell, and
    nothing of notebooks/tutorial.py that the cells call, reaches a private name."""
    sources = {f"{name}.ipynb code cell {i}": _python("".join(cell["source"]))
               for name, path in NOTEBOOKS.items()
               for i, cell in enumerate(c for c in _cells(path) if c["cell_type"] == "code")}
    sources["notebooks/tutorial.py"] = (ROOT / "notebooks" / "tutorial.py").read_text()
    reached = [f"{where}: {use}" for where, source in sources.items()
               for use in _private_uses(source)]
    assert not reached, "private names of the package reached:\n" + "\n".join(reached)


def test_the_seven_days_default_is_the_settings_constant() -> None:
    """The approval window's default lives in one constant (config.APPROVAL_DAYS): the
    notebooks' "7 days by default" check compares the desk's setting with that constant,
    and every number of days the notebook and the docs give as the default is its value."""
    from refund_agent.config import APPROVAL_DAYS

    days = f"{APPROVAL_DAYS:g}"
    cells = ["".join(c["source"]) for path in NOTEBOOKS.values() for c in _cells(path)]
    [cell] = [c for c in cells if "days by default" in c and "check(" in c]
    tree = ast.parse(cell)
    imported = [a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "refund_agent.config" for a in node.names]
    assert "APPROVAL_DAYS" in imported, "the expiry cell does not read config.APPROVAL_DAYS"
    [claim] = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
               and ast.unparse(node.func) == "check" and "by default" in ast.unparse(node.args[0])]
    compared = ast.unparse(claim.args[1])
    assert re.search(r"settings\.approval_days == APPROVAL_DAYS\b", compared), compared
    stated = re.findall(r"(\d+(?:\.\d+)?) days by default", ast.unparse(claim.args[0]))
    stated += re.findall(r"`approval_days`, (\d+(?:\.\d+)?) by\s+default", "\n".join(cells))
    # The docs: the sentences naming the variable with a number of days, and the settings
    # table's default column (its range, "one second to 365 days", is not a default).
    for doc, pattern in (("DESK.md", r"(\d+) days"), ("TOUR.md", r"(\d+) days"),
                         ("CONFIGURATION.md", r"^\| `REFUND_AGENT_APPROVAL_DAYS` \| `(\d+)` \|")):
        stated += [found for line in (ROOT / "docs" / doc).read_text().splitlines()
                   if "REFUND_AGENT_APPROVAL_DAYS" in line for found in re.findall(pattern, line)]
    assert len(stated) >= 4 and set(stated) == {days}, (
        f"days stated as the default: {stated}; config.APPROVAL_DAYS is {days}")
