"""scripts/notebook_reading.py counts what a reader of a notebook reads, and the figures the
README quotes about the walkthrough's length are its counts of the notebook as stored.

The reading time is an estimate from those counts (200 words, 15 lines of code, 30 lines of
output a minute, calibrated on the timed read issue 45 reports), never a measured duration;
what is tested is the counting, and that the walkthrough stays inside the length issue 45 set
for it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("notebook_reading",
                                               ROOT / "scripts" / "notebook_reading.py")
assert _spec and _spec.loader
counting = importlib.util.module_from_spec(_spec)
sys.modules.setdefault(_spec.name, counting)   # its dataclass looks its module up there
_spec.loader.exec_module(counting)

WALKTHROUGH = ROOT / "notebooks" / "walkthrough.ipynb"


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "source": text}


def _code(lines: list[str], outputs: list[dict] | None = None) -> dict:
    return {"cell_type": "code", "source": [line + "\n" for line in lines],
            "outputs": outputs or []}


def test_it_counts_prose_words_code_lines_and_output_lines() -> None:
    notebook = {"cells": [
        _md("# A title\n\nTwo short   sentences here. `code` counts as a word."),
        _code(["x = 1", "", "   ", "print(x)"],
              [{"output_type": "stream", "name": "stdout", "text": ["1\n", "2\n"]}]),
        _code(["x"], [{"output_type": "execute_result", "data": {"text/plain": "1\n2\n3"}}]),
        {"cell_type": "raw", "source": "not read"},
    ]}
    found = counting.reading(notebook)
    assert (found.words, found.code_lines, found.output_lines, found.cells) == (12, 3, 5, 4)
    assert found.minutes == 12 / 200 + 3 / 15 + 5 / 30


def test_an_empty_notebook_reads_in_no_time() -> None:
    assert counting.reading({"cells": []}) == counting.Reading(0, 0, 0, 0)
    assert counting.reading({"cells": []}).minutes == 0


_words = st.lists(st.text(alphabet="ab `#", min_size=1, max_size=6), max_size=8)
_cells = st.lists(st.one_of(
    _words.map(lambda ws: _md(" ".join(ws))),
    st.tuples(st.lists(st.text(alphabet="xy =\t", max_size=6), max_size=5),
              st.lists(st.text(alphabet="ab\n", max_size=8), max_size=3)).map(
        lambda c: _code(c[0], [{"output_type": "stream", "name": "stdout", "text": t}
                               for t in c[1]]))), max_size=8)


@given(_cells, _cells)
def test_counts_add_up_over_the_cells(first: list[dict], second: list[dict]) -> None:
    """Each cell is counted on its own: a notebook's counts are the sums of its parts', so
    moving a cell from one notebook to another moves exactly its share."""
    a, b = counting.reading({"cells": first}), counting.reading({"cells": second})
    both = counting.reading({"cells": first + second})
    assert both == counting.Reading(a.words + b.words, a.code_lines + b.code_lines,
                                    a.output_lines + b.output_lines, a.cells + b.cells)


def test_the_readme_quotes_the_walkthrough_as_measured() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    quoted = re.search(r"the walkthrough is ([\d,]+) words of prose, (\d+) lines of code and "
                       r"(\d+) lines of output", readme)
    assert quoted, "README.md no longer quotes the walkthrough's length"
    measured = counting.reading(json.loads(WALKTHROUGH.read_text()))
    assert [int(n.replace(",", "")) for n in quoted.groups()] == [
        measured.words, measured.code_lines, measured.output_lines], (
        "README.md's figures for the walkthrough are not the notebook's: run "
        "scripts/notebook_reading.py and quote what it prints")


def test_the_walkthrough_stays_inside_its_length() -> None:
    """Issue 45's length for a first read: about 1,100 words of prose, 230 lines of code and
    60 lines of output (a few over is "about"; growing past this needs a cut elsewhere)."""
    measured = counting.reading(json.loads(WALKTHROUGH.read_text()))
    assert measured.words <= 1150, measured
    assert measured.code_lines <= 235, measured
    assert measured.output_lines <= 60, measured


def test_the_command_reports_each_notebook_or_says_what_is_wrong(tmp_path: Path,
                                                                 capsys) -> None:
    assert counting.main([]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == ["walkthrough.ipynb", "beyond.ipynb"]
    assert all(re.search(r"about \d+ minutes", line) for line in printed)
    assert counting.main([str(tmp_path / "missing.ipynb")]) == 2
    assert capsys.readouterr().err.strip() == f"no such notebook: {tmp_path / 'missing.ipynb'}"
    (tmp_path / "broken.ipynb").write_text("{not json")
    assert counting.main([str(tmp_path / "broken.ipynb")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("not a notebook (.ipynb JSON):") and "\n" not in err


def test_the_rates_reproduce_the_one_timed_read() -> None:
    """Issue 45 timed a careful read of the old walkthrough (1,993 words, 375 lines of code,
    218 lines of output) at 40 to 45 minutes; the estimate must agree with it."""
    assert 40 <= counting.Reading(1993, 375, 218, 0).minutes <= 45
