"""The notebooks' stored outputs keep the promises the notebooks make about themselves.

Every claim in the notebooks' prose is a cell that prints ``claim: True`` and asserts it
(``check`` in the setup cell). nbval compares outputs strictly, so a check stored as ``False``
would be locked in as the expected output; these tests refuse that, and keep the outputs short
enough to read. They read the .ipynb files only, so they take milliseconds.
"""

from __future__ import annotations

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


@pytest.mark.parametrize("path", NOTEBOOKS.values(), ids=NOTEBOOKS.keys())
def test_every_code_cell_after_the_setup_checks_what_it_shows(path: Path) -> None:
    code = [c for c in _cells(path) if c["cell_type"] == "code"]
    unchecked = [f"code cell {i}: {''.join(c['source'])[:80]!r}" for i, c in enumerate(code)
                 if i > 0 and not re.search(r"\bcheck\(|\bassert\b", "".join(c["source"]))]
    assert not unchecked, "cells that show something without checking it:\n" + \
        "\n".join(unchecked)
    assert all(": True" in _printed(c) for c in code[1:]), "a check that printed nothing"


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
    assert words <= 4500, f"{words} words (about 200 a minute: 20 minutes is about 4,000)"
    assert any("idempotency" in h.lower() for h in headings), headings
    assert any("thirty lines" in h.lower() for h in headings), headings
