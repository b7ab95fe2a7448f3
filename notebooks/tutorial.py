"""What the notebooks print with, kept out of their first cells: ``check``, the trace printer
cut to the page, ``cli`` (the terminal command in a new process), and the helpers of the
"break it on purpose" cells: ``transactions`` (the SQL the store commits, grouped by
transaction), ``no_transactions`` (stores opened inside commit each statement alone) and
``fails`` (run a check that must fail, and show how it failed); ``refused`` (the message of a
call that must be refused) and ``module_of`` (import the module a notebook writes). Only the package's public API is
used here and in the notebooks (tests/docs/test_notebook_checks.py checks it).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

from refund_agent.cli import Printer   # the terminal's own trace printer


def check(claim: str, holds: Any) -> None:
    "Print a claim with whether it holds, and stop the notebook if it does not."
    print(f"{claim}: {bool(holds)}")
    assert holds, claim


def refused(attempt: Callable[[], Any], *errors: type[BaseException]) -> str:
    """Run ``attempt``, which should be refused with one of ``errors``: the refusal's message,
    or "accepted" if it went through (a check on the answer then fails, saying so)."""
    try:
        attempt()
    except errors as exc:
        return str(exc)
    return "accepted"


def module_of(notebook: str, folder: Path) -> ModuleType:
    """Write the module of ``notebook``'s ``%%writefile`` cell into ``folder`` and import it:
    beyond.ipynb uses the wire desk walkthrough.ipynb writes, without copying its code."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    [source] = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"
                and "".join(c["source"]).startswith("%%writefile")]
    first, body = source.split("\n", 1)
    path = folder / Path(first.split(None, 1)[1]).name
    path.write_text(body + "\n")
    sys.path.insert(0, str(folder))   # as the walkthrough does, so other processes find it too
    return importlib.import_module(path.stem)


def fails(attempt: Callable[[], Any]) -> str:
    """Run ``attempt`` (checks on a system broken on purpose) and return the claim of the
    check that failed, "" if every check held. What the attempt prints is not shown; one line
    says which check caught the break."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            attempt()
    except AssertionError as exc:
        print(f"broken on purpose, this check fails: {exc}")
        return str(exc)
    print("broken on purpose, and no check failed")
    return ""


class Page:
    "Standard output with every line cut to 100 characters, so traces fit the page."

    def __init__(self, width: int = 100) -> None:
        self.width, self.column = width, 0

    def write(self, text: str) -> None:
        for part in re.split(r"(\n)", text):
            if part == "\n":
                sys.stdout.write("\n")
                self.column = 0
            elif part and self.column <= self.width - 3:
                room = self.width - 3 - self.column       # what is left, less "..."
                # Cut at a space, so an id is shown whole or not at all (the stored outputs
                # mask ids, which only works on whole ones).
                head = part[:room + 1]
                cut = head[:head.rfind(" ")] if " " in head else ""
                sys.stdout.write(part if len(part) <= room else cut + "...")
                self.column += len(part) if len(part) <= room else self.width

    def flush(self) -> None:
        sys.stdout.flush()


class Lines:
    """A stream that passes on whole lines only (then cut to the page).

    The trace streams the model's thinking a few words at a time; a notebook stores each
    write as its own piece, and renderers built on nbconvert show each piece on a line of its
    own. Holding the words until the line ends prints them as a reader expects."""

    def __init__(self) -> None:
        self.page, self.held = Page(), ""

    def write(self, text: str) -> None:
        self.held += text
        if "\n" in self.held:
            done, self.held = self.held.rsplit("\n", 1)
            self.page.write(done + "\n")

    def flush(self) -> None:
        pass   # a line is written when it ends (the printer flushes after every word)

    def close(self) -> None:
        if self.held:
            self.page.write(self.held + "\n")
            self.held = ""


def wrap(text: str, width: int = 96) -> str:
    "Text with each paragraph wrapped to the page (an email's lines can be long)."
    return "\n".join(textwrap.fill(line, width) if line.strip() else ""
                     for line in text.strip().splitlines())


def show(text: str) -> None:
    "Print text with every line cut to the page."
    Page().write(text + "\n")


def trace() -> Printer:
    "The terminal's printer, on the page, a whole line at a time."
    return Printer(Lines())


def cli(*args: str, only: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    """Run `refund-agent ARGS` in a new process sharing OUTPUT; print its output, cut to the
    page (with ``only``, just the lines holding one of those texts: what the reader needs)."""
    done = subprocess.run([sys.executable, "-m", "refund_agent", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})
    page = Page()
    for line in (done.stdout + done.stderr).splitlines():
        if line.strip() and not line.startswith(("Model:", "Single-user demo mode")) and (
                not only or any(text in line for text in only)):
            page.write(line + "\n")
    return done


@contextmanager
def transactions(store: Any) -> Iterator[list[list[str]]]:
    """The SQL statements this thread sends to a SQLite store, one list per transaction.

    Read from SQLite's own trace of the connection (``sqlite3.Connection.set_trace_callback``):
    a statement outside BEGIN ... COMMIT is a transaction of its own (autocommit)."""
    found: list[list[str]] = []
    current: list[str] | None = None

    def seen(sql: str) -> None:
        nonlocal current
        words = sql.strip().upper()
        if words.startswith("BEGIN"):
            current = []
        elif words.startswith(("COMMIT", "ROLLBACK")) and current is not None:
            found.append(current)
            current = None
        elif not words.startswith(("SELECT", "PRAGMA")):
            if current is None:
                found.append([sql])
            else:
                current.append(sql)

    db = store.connection()   # the store's connection for this thread (public: Store API)
    db.set_trace_callback(seen)
    try:
        yield found
    finally:
        db.set_trace_callback(None)


class Autocommit(sqlite3.Connection):
    "A SQLite connection that ignores BEGIN, COMMIT and ROLLBACK: each statement commits alone."

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.split(None, 1)[0].upper() in ("BEGIN", "COMMIT", "ROLLBACK"):
            return self.cursor()
        return super().execute(sql, *args)


@contextmanager
def no_transactions() -> Iterator[None]:
    """The break of the boundaries cell: SQLite connections opened inside (a new store's) drop
    their transactions, as a store written without them would. Only ``sqlite3`` is patched,
    not the package: the store is broken from the outside, through the library it uses."""
    connect = sqlite3.connect
    with mock.patch("sqlite3.connect", lambda *args, **kwargs: connect(
            *args, factory=Autocommit, **kwargs)):
        yield


def one_transaction(found: list[list[str]], first: str, *others: str) -> bool:
    """Whether every transaction that wrote ``first`` (a piece of SQL) also wrote each of
    ``others``, and there was at least one."""
    with_first = [tx for tx in found if any(first in sql for sql in tx)]
    return bool(with_first) and all(any(o in sql for sql in tx) for tx in with_first
                                    for o in others)


def emails(desk: Any, run_id: str, last: int = 0) -> list[tuple[str, str, str, str]]:
    """A run's emails in order, as (from, to, subject, body): what the customer wrote (their
    first email and every reply) and what the desk sent them. Printed as a person reads them
    (with ``last``, only the last that many)."""
    run = desk.store.run(run_id)
    shop = getattr(desk, "shop", None)
    desk_address = f"{shop.info.name} support" if shop else "the desk"
    found = []
    for step in desk.store.steps(run_id):
        if step.kind in ("email", "reply"):
            found.append((f"{run.sender_name} <{run.sender}>", desk_address,
                          run.subject if step.kind == "email" else f"Re: {run.subject}",
                          step.data.get("body") or step.data.get("text") or ""))
        elif step.kind == "message":
            found.append((desk_address, run.sender, f"Re: {run.subject}",
                          step.data.get("body") or ""))
    for sender, to, subject, body in found[-last:] if last else found:
        show(f"From: {sender}\nTo: {to}\nSubject: {subject}\n\n{wrap(body)}\n" + "-" * 60)
    return found
