"""Run a notebook's code cells in one plain Python process, as its kernel would run them.

For the mutation tests (test_notebook_mutations.py), which need to know only which cell failed
first and with which check: a Jupyter kernel and strict nbval (which the real notebooks run under
in CI) add seconds to each of about fifty runs without telling a mutant apart. The cells share one
namespace; a ``%%writefile PATH`` cell writes its body to PATH (``{name}`` expanded from the
namespace, as IPython does). A failing cell prints ``FAILED Cell N: Type: message`` (``Cell N``
is the Nth code cell from 0, as nbval names it); the run stops there unless asked to go on.

    python notebook_runner.py CELLS.json LAST [--keep-going] [--soft-checks]

CELLS.json is the list of the code cells' sources; cells after number LAST are not run.

``--soft-checks``: a ``check`` that fails prints its ``FAILED Cell N: AssertionError: claim``
line and the cell goes on, so a check after it is still reached and judged. This is for a
mutant whose break an earlier check catches first: it shows that the later check fails too, on
its own (see test_notebook_mutations.py). A check inside ``fails(...)`` (a break the notebook
makes on purpose) still raises, as ``fails`` needs; any other exception stops the run as usual.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


class SoftChecks:
    """The notebooks' ``check`` and ``fails`` (notebooks/tutorial.py), put in the cells'
    namespace after each cell: a failed check is reported and the run goes on, except inside
    ``fails``, whose attempt must see the check raise."""

    def __init__(self, namespace: dict[str, object]) -> None:
        self.namespace, self.cell, self.failed, self.inside_fails = namespace, 0, 0, 0
        self.strict: dict[str, Any] = {}

    def install(self, cell: int) -> None:
        self.cell = cell
        for name, soft in (("check", self.check), ("fails", self.fails)):
            found = self.namespace.get(name)
            if found is not None and found != soft:
                self.strict[name], self.namespace[name] = found, soft

    def check(self, claim: str, holds: Any) -> None:
        if self.inside_fails or holds:
            self.strict["check"](claim, holds)
            return
        print(f"{claim}: False", flush=True)
        print(f"FAILED Cell {self.cell}: AssertionError: {claim}".splitlines()[0], flush=True)
        self.failed += 1

    def fails(self, attempt: Callable[[], Any]) -> str:
        self.inside_fails += 1
        try:
            return self.strict["fails"](attempt)
        finally:
            self.inside_fails -= 1


def main(argv: list[str]) -> int:
    cells: list[str] = json.loads(Path(argv[1]).read_text())
    last, keep_going = int(argv[2]), "--keep-going" in argv[3:]
    namespace: dict[str, object] = {"__name__": "__main__"}
    soft = SoftChecks(namespace) if "--soft-checks" in argv[3:] else None
    failed = 0
    for number, source in enumerate(cells[:last + 1]):
        if soft:
            soft.install(number)
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
    failed += soft.failed if soft else 0
    package = sys.modules.get("refund_agent")
    print(f"PACKAGE {getattr(package, '__file__', None)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stderr.flush()
    os._exit(code)   # as a kernel is shut down: threads the cells left running do not hold it
