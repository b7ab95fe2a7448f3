"""Run a notebook's code cells in one plain Python process, as its kernel would run them.

For the mutation tests (test_notebook_mutations.py), which need to know only which cell failed
first and with which check: a Jupyter kernel and strict nbval (which the real notebooks run under
in CI) add seconds to each of about fifty runs without telling a mutant apart. The cells share one
namespace; a ``%%writefile PATH`` cell writes its body to PATH (``{name}`` expanded from the
namespace, as IPython does). A failing cell prints ``FAILED Cell N: Type: message`` (``Cell N``
is the Nth code cell from 0, as nbval names it); the run stops there unless asked to go on.

    python notebook_runner.py CELLS.json LAST [--keep-going]

CELLS.json is the list of the code cells' sources; cells after number LAST are not run.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    cells: list[str] = json.loads(Path(argv[1]).read_text())
    last, keep_going = int(argv[2]), "--keep-going" in argv[3:]
    namespace: dict[str, object] = {"__name__": "__main__"}
    failed = 0
    for number, source in enumerate(cells[:last + 1]):
        try:
            if source.startswith("%%writefile"):
                first, body = source.split("\n", 1)
                Path(first.split(None, 1)[1].format(**namespace)).write_text(body + "\n")
            else:
                exec(compile(source, f"<Cell {number}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001 - every failure is reported, as nbval does
            sys.stdout.flush()
            traceback.print_exc()
            print(f"FAILED Cell {number}: {type(exc).__name__}: {exc}".splitlines()[0],
                  flush=True)
            failed += 1
            if not keep_going:
                break
    package = sys.modules.get("refund_agent")
    print(f"PACKAGE {getattr(package, '__file__', None)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stderr.flush()
    os._exit(code)   # as a kernel is shut down: threads the cells left running do not hold it
