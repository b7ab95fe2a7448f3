"""How long a careful read of each notebook takes, from counts of what it shows.

    python scripts/notebook_reading.py [NOTEBOOK.ipynb ...]   (default: both notebooks)

A careful read is estimated as prose at 200 words a minute, code at 15 lines a minute and
output at 30 lines a minute. The rates are calibrated on the one timed read we have: issue #45
found the walkthrough of 1,993 words, 375 lines of code and 218 lines of output took 40–45
minutes to read carefully, and these rates give 42 for it. The counts are measured, so the
figures quoted in the docs are too:

- prose: the words (whitespace-separated) of the markdown cells;
- code: the non-blank lines of the code cells;
- output: the lines of the stored outputs (printed text, or a value's plain-text form);
- cells: every cell, markdown and code.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = (ROOT / "notebooks" / "walkthrough.ipynb", ROOT / "notebooks" / "beyond.ipynb")

WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 15
OUTPUT_LINES_PER_MINUTE = 30


@dataclass(frozen=True)
class Reading:
    words: int
    code_lines: int
    output_lines: int
    cells: int

    @property
    def minutes(self) -> float:
        return (self.words / WORDS_PER_MINUTE + self.code_lines / CODE_LINES_PER_MINUTE
                + self.output_lines / OUTPUT_LINES_PER_MINUTE)


def _text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)   # nbformat allows both


def reading(notebook: dict) -> Reading:
    """Count a notebook (its parsed .ipynb JSON): pure, no files read."""
    cells = notebook.get("cells", [])
    words = code_lines = output_lines = 0
    for cell in cells:
        source = _text(cell.get("source", ""))
        if cell["cell_type"] == "markdown":
            words += len(source.split())
        elif cell["cell_type"] == "code":
            code_lines += sum(1 for line in source.splitlines() if line.strip())
            for output in cell.get("outputs", []):
                shown = output.get("text") or output.get("data", {}).get("text/plain", "")
                output_lines += len(_text(shown).splitlines())
    return Reading(words, code_lines, output_lines, len(cells))


def report(path: Path) -> str:
    r = reading(json.loads(path.read_text()))
    return (f"{path.name}: {r.words:,} words of prose, {r.code_lines} lines of code, "
            f"{r.output_lines} lines of output, {r.cells} cells: about {r.minutes:.0f} minutes "
            f"({r.words / WORDS_PER_MINUTE:.1f} prose + {r.code_lines / CODE_LINES_PER_MINUTE:.1f}"
            f" code + {r.output_lines / OUTPUT_LINES_PER_MINUTE:.1f} output)")


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or list(NOTEBOOKS)
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        lines = [report(p) for p in paths]
    except (ValueError, KeyError) as exc:
        print(f"not a notebook (.ipynb JSON): {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
