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


# The setup both notebooks share: a scratch folder, the stand-in answering at once, and the
# helpers of notebooks/tutorial.py (`check` prints a claim and asserts it).
SETUP = '''
import json, os, signal, tempfile
from pathlib import Path

OUTPUT = Path(tempfile.mkdtemp(prefix="refund-agent-{name}-"))
os.environ["REFUND_AGENT_OUTPUT"] = str(OUTPUT)      # read here and by every process we start
os.environ["REFUND_AGENT_OFFLINE_LATENCY"] = "0"     # the stand-in answers at once
for name in ("CRASH_AFTER_REFUND", "REFUND_AGENT_CRASH_AT", "REFUND_AGENT_OFFLINE_FAULTS"):
    os.environ.pop(name, None)                       # crash and fail only where we ask to

from refund_agent import load_settings
from refund_agent.desk import Agent
from tutorial import check, cli, fails, refused, show, trace, wrap  # notebooks/tutorial.py

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
