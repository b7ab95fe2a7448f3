"""Writes walkthrough.ipynb and beyond.ipynb from the cells below (outputs empty).

The notebooks are easier to review, merge and re-point as plain Python; run this, then execute
each notebook in place so its outputs are stored (nbval compares them):

    cd notebooks && ../.venv/bin/python build.py [walkthrough] [beyond]
    ../.venv/bin/jupyter nbconvert --to notebook --execute --inplace walkthrough.ipynb beyond.ipynb
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _cell(kind: str, text: str) -> dict:
    lines = text.strip("\n").splitlines(keepends=True)
    cell = {"cell_type": kind, "metadata": {}, "source": lines}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def notebook(cells: list[tuple[str, str]]) -> dict:
    cells = [_cell(kind, text) for kind, text in cells]
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i:02d}"   # stable ids: a rebuild changes only what changed
    return {"cells": cells,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                        "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def md(text: str) -> tuple[str, str]:
    return ("markdown", text)


def code(text: str) -> tuple[str, str]:
    return ("code", text)


# The setup both notebooks share: a scratch folder, the stand-in answering at once, the
# terminal's trace printer cut to the page, and `check`, which prints a claim and asserts it.
SETUP = '''
import json, os, re, signal, subprocess, sys, tempfile
from pathlib import Path

OUTPUT = Path(tempfile.mkdtemp(prefix="refund-agent-{name}-"))
os.environ["REFUND_AGENT_OUTPUT"] = str(OUTPUT)      # read here and by every process we start
os.environ["REFUND_AGENT_OFFLINE_LATENCY"] = "0"     # the stand-in answers at once
for name in ("CRASH_AFTER_REFUND", "REFUND_AGENT_CRASH_AT", "REFUND_AGENT_OFFLINE_FAULTS"):
    os.environ.pop(name, None)                       # crash and fail only where we ask to

from refund_agent import Agent, load_settings
from refund_agent.cli import Printer                 # the terminal's own trace printer

class Page:
    "Standard output with every line cut to 100 characters, so traces fit the page."
    def __init__(self, width=100):
        self.width, self.column = width, 0
    def write(self, text):
        for part in re.split(r"(\\n)", text):
            if part == "\\n":
                sys.stdout.write("\\n"); self.column = 0
            elif part and self.column <= self.width - 3:
                room = self.width - 3 - self.column       # what is left, less "..."
                # Cut at a space, so an id is shown whole or not at all (the stored outputs
                # mask ids, which only works on whole ones).
                head = part[:room + 1]
                cut = head[:head.rfind(" ")] if " " in head else ""
                sys.stdout.write(part if len(part) <= room else cut + "...")
                self.column += len(part) if len(part) <= room else self.width
    def flush(self):
        sys.stdout.flush()

def show(text):
    "Print text with every line cut to the page."
    Page().write(text + "\\n")

def trace():
    "The terminal's printer, on the page."
    return Printer(Page())

def cli(*args, **env):
    "Run `refund-agent ARGS` in a new process sharing OUTPUT; print its output, cut to the page."
    done = subprocess.run([sys.executable, "-m", "refund_agent", *args], capture_output=True,
                          text=True, timeout=120, env={{**os.environ, **env}})
    page = Page()
    for line in (done.stdout + done.stderr).splitlines():
        if line.strip() and not line.startswith(("Model:", "Single-user demo mode")):
            page.write(line + "\\n")
    return done

def check(claim, holds):
    "Print a claim with whether it holds, and stop the notebook if it does not."
    print(f"{{claim}}: {{bool(holds)}}")
    assert holds, claim

agent = Agent(load_settings())
print("model:", agent.settings.model_label)
'''

exec((HERE / "cells_walkthrough.py").read_text())  # defines WALKTHROUGH
exec((HERE / "cells_beyond.py").read_text())       # defines BEYOND

if __name__ == "__main__":
    wanted = sys.argv[1:] or ["walkthrough", "beyond"]   # e.g. `build.py beyond`
    for name, cells in (("walkthrough", WALKTHROUGH), ("beyond", BEYOND)):
        if name not in wanted:
            continue
        path = HERE / f"{name}.ipynb"
        path.write_text(json.dumps(notebook(cells), indent=1, ensure_ascii=False) + "\n")
        print("wrote", path)
