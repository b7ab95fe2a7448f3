"""The embedded default: one SQLite file in ``output/``, shared by every process on the machine.

``BEGIN IMMEDIATE`` takes the file's write lock, so every write transaction runs alone and no
row lock is needed; commits are synced (``synchronous=FULL``) only where an outside effect
depends on them; pages learn of changes from ``PRAGMA data_version``. Only this engine can hold
writers off while a copy is read, and be marked moved (``refund-agent migrate``).
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from ..errors import StoreError
from .base import Store
from .schema import SCHEMA_VERSION, due, parts_due
from .schema_sqlite import SQLITE_SCHEMA_STATEMENTS, SQLITE_STEPS
from .search import glob_pattern


class SQLiteStore(Store):
    """A store in one SQLite file (WAL, ``busy_timeout``, ``BEGIN IMMEDIATE``)."""

    engine = "sqlite"
    shared = False
    # Lease times come from the database's clock, never a process's own: two processes whose
    # clocks disagree still agree on whether a lease has expired. Seconds since 1970.
    now = "((julianday('now') - 2440587.5) * 86400.0)"
    lock_row = ""       # BEGIN IMMEDIATE already excludes every other writer
    skip_locked = ""
    like = "LIKE"       # SQLite's LIKE already ignores the case of ASCII letters
    table_exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    pushes_changes = False

    path: Path

    def _open(self, target: Path | str) -> None:
        self.path = Path(target)
        self._watch: sqlite3.Connection | None = None
        self._watch_lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where the folder should be, no permission, ...
            raise StoreError(
                f"Cannot use {self.path.parent} as the output folder: {exc}") from None

    def _search_condition(self, words: list[str]) -> tuple[str, list[str]]:
        """Runs whose kept text holds every word (schema 16): the FTS5 trigram index narrows
        them to the runs holding each word's plain stretches of three letters or more, the
        text itself is then read for the whole word. (The index is only asked for such
        stretches: FTS5 3.40 finds nothing for a GLOB whose plain stretch is under three
        letters but three bytes, such as ``1É``, or around a ``[?]``.)"""
        exact = [glob_pattern(w) for w in words]
        stretches = [f"*{'*'.join(parts)}*" for w in words
                     if (parts := [p for p in re.split(r"[*?\[\]]", w) if len(p) >= 3])]
        clauses = ["body GLOB ?"] * len(exact)
        if stretches:
            clauses.append("doc IN (SELECT rowid FROM run_search_index WHERE "
                           + " AND ".join(["body GLOB ?"] * len(stretches)) + ")")
        return (f"runs.id IN (SELECT run_id FROM run_search WHERE {' AND '.join(clauses)})",
                exact + stretches)

    # -- connections ---------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            return self._connect_writable()
        except sqlite3.OperationalError:
            if not self.read_only_here():
                raise
        return self._connect_read_only()

    def _adopt(self, db: sqlite3.Connection) -> None:
        self._local.synchronous = "FULL"   # as _connect_writable set it

    def read_only_here(self) -> bool:
        """Whether the store exists but this process may not write it: the file or its folder
        is read-only (permissions, a read-only mount, a backup opened for a look)."""
        return self.path.exists() and not (os.access(self.path, os.W_OK)
                                           and os.access(self.path.parent, os.W_OK))

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection that only reads, for a store nobody may write here.

        A WAL database is read through its ``-shm`` index, which a read-only folder cannot
        hold; with no write-ahead log beside the file there is nothing it would index, so
        the file is opened as immutable. A log that exists but cannot be indexed is refused
        rather than ignored (its transactions would be missing from what is read).
        """
        uri = "file:" + quote(str(self.path.resolve())) + "?mode=ro"
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=10)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            db.close()
            wal = Path(f"{self.path}-wal")
            if wal.exists() and wal.stat().st_size:
                raise
            db = sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None,
                                 timeout=10)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA busy_timeout=10000")
        return db

    def _connect_writable(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        db.row_factory = sqlite3.Row
        for attempt in range(50):
            try:
                db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                # Processes switching a new file to WAL at the same moment are told
                # "locked" at once (SQLite skips its busy handler there): retry briefly.
                if "locked" not in str(exc) or attempt == 49:
                    raise
                time.sleep(0.01 * (1 + attempt % 5))
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=10000")
        db.execute("PRAGMA foreign_keys=ON")
        return db

    def _begin(self, db: sqlite3.Connection, durable: bool) -> None:
        """BEGIN IMMEDIATE, after setting ``synchronous`` to FULL (durable) or NORMAL: in WAL
        mode a process crash (SIGKILL) loses nothing either way, a power loss may lose a
        NORMAL commit. A store that ``migrate`` moved refuses here."""
        level = "FULL" if durable else "NORMAL"
        if getattr(self._local, "synchronous", None) != level:
            # Not allowed inside a transaction, so set before BEGIN; per connection.
            db.execute(f"PRAGMA synchronous={level}")
            self._local.synchronous = level
        db.execute("BEGIN IMMEDIATE")
        moved = db.execute("SELECT target, at FROM store_moved").fetchone()
        if moved is not None:
            raise StoreError(moved_message(self.path, moved["target"], moved["at"]))

    def lock_order(self, db: sqlite3.Connection, order_id: str) -> None:
        """Nothing to do: the transaction holds the whole file's write lock."""

    def explain(self, exc: BaseException) -> str:
        text = str(exc)
        if "database disk image is malformed" in text or "not a database" in text:
            return corrupt_message(self.path, text)
        if "readonly" in text or "read-only" in text:
            return (f"{self.path} is read-only here ({text}): it can be read (queue, show, "
                    "audit --verify), but nothing can be decided or written until the file "
                    "and its folder are writable again.")
        if "locked" in text or "busy" in text:
            return f"{self.path} is locked by another process for too long ({text}); try again."
        return f"Database error in {self.path}: {text}"

    # -- the schema ----------------------------------------------------------------------

    def _version(self) -> int:
        return self._read("PRAGMA user_version")[0][0]

    def _upgrade(self, version: int) -> None:
        """Create the schema, or bring an older store up to date when that is safe."""
        steps = due(SQLITE_STEPS, version)
        if version in (1, 2):
            count = self._read("SELECT COUNT(*) FROM approvals")[0][0]
            if count:
                raise StoreError(
                    f"{self.path} was written by an older refund-agent (schema {version}) that "
                    f"recorded refunds as amounts, not order lines. Its {count} approval(s) "
                    "cannot be turned into lines without guessing, so this version will not "
                    "use it. Move the output folder aside (for example `mv output "
                    "output-old`) to start afresh; nothing in it was changed.")
            # No money was ever proposed there: the runs, replies and audit carry over as they
            # are, and the empty approvals table is made again with its new columns (step 3).
        db = self._db()
        try:
            # One transaction, statement by statement (executescript would commit first): the
            # steps (each reading the tables as they are inside it, so a second process that
            # waited on the lock skips what the first did), the loop's schema, the parts due
            # (the desk's tables, read from schema_parts before the schema makes it), the
            # steps' data, then the agent's store's own refresh (the desk's rows).
            db.execute("BEGIN IMMEDIATE")
            if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                version, steps = SCHEMA_VERSION, []   # another process upgraded it meanwhile
            recorded = self._recorded_parts(db)
            for step in steps:
                for statement in step.statements(self._table_columns):
                    db.execute(statement)
            for statement in SQLITE_SCHEMA_STATEMENTS:
                db.execute(statement)
            self._install_parts(db, version, recorded)
            for step in steps:
                if step.data is not None:
                    step.data(db)
            self._before_commit(db)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            # Two processes may open an old store at once; the second one's ALTER TABLE then
            # finds the column already there. The store is upgraded either way.
            if self._read("PRAGMA user_version")[0][0] == SCHEMA_VERSION and not parts_due(
                    self._parts, self._recorded_parts(db), SCHEMA_VERSION):
                return
            raise StoreError(self.explain(exc)) from None

    def _table_columns(self, table: str) -> set[str]:
        """The table's columns (none: no such table), before the schema runs (inside the
        upgrade's transaction, on its connection)."""
        return {row[1] for row in self._read(f"PRAGMA table_info({table})")}

    # -- what only this engine does ------------------------------------------------------

    def change_counter(self) -> int:
        """A number that changes whenever anyone commits to the store, from any process.

        ``PRAGMA data_version`` on a connection of its own that never writes: it moves with
        every commit made through any other connection, this process's threads included. It
        reads no table, so a page may ask twice a second for nothing.
        """
        with self._watch_lock:
            if self._watch is None:
                self._watch = sqlite3.connect(self.path, isolation_level=None,
                                              check_same_thread=False)
            with self._errors():
                return self._watch.execute("PRAGMA data_version").fetchone()[0]

    def wait_for_change(self, since: int, timeout: float) -> int:
        """The change counter once it differs from ``since``, or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            now = self.change_counter()
            if now != since or time.monotonic() >= deadline:
                return now
            time.sleep(0.02)

    def integrity_problem(self, quick: bool = False) -> str | None:
        """None if SQLite finds the store's pages and indexes sound; else what it found.

        ``integrity_check`` reads every page (``quick``: ``quick_check``, which skips matching
        indexes against their tables); a corrupt page makes it answer with the damage, or
        fail outright.
        """
        pragma = "quick_check" if quick else "integrity_check"
        try:
            rows = self._db().execute(f"PRAGMA {pragma}(20)").fetchall()
        except sqlite3.Error as exc:
            return str(exc)
        found = [str(r[0]) for r in rows]
        return None if found == ["ok"] else "; ".join(found)

    def moved_to(self) -> str | None:
        """Where ``refund-agent migrate`` moved this store (the URL without its password), or
        None while it is the live store."""
        rows = self._read("SELECT target FROM store_moved")
        return rows[0][0] if rows else None

    def moved_message(self) -> str | None:
        rows = self._read("SELECT target, at FROM store_moved")
        return moved_message(self.path, rows[0]["target"], rows[0]["at"]) if rows else None

    @contextmanager
    def writers_held_off(self) -> Iterator[None]:
        """Read a picture of the store that no other process changes meanwhile.

        The file's write lock (BEGIN IMMEDIATE), released without writing. Reads through this
        store on this thread see that picture; other processes' writes wait (up to the busy
        timeout) and then fail, so nobody's decision is lost in between.
        """
        db = self._db()
        with self._errors():
            # Synced, should mark_moved commit: not allowed inside the transaction, so now.
            db.execute("PRAGMA synchronous=FULL")
            self._local.synchronous = "FULL"
            db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            if db.in_transaction:   # mark_moved may have committed it
                self._rollback(db)

    def mark_moved(self, target: str) -> None:
        """Mark this store as moved to ``target`` (shown as is: pass the URL without its
        password), inside :meth:`writers_held_off`, and commit: from then on every write is
        refused with a message naming ``target``, reads still work.

        Written in the held-off transaction, so no write lands between the copy and the mark.
        """
        db = self._db()
        if not db.in_transaction:
            raise StoreError("Only a store held by writers_held_off can be marked moved.")
        try:
            db.execute("INSERT INTO store_moved(id, target, at) VALUES (1, ?, ?)",
                       (target, time.time()))
            db.execute("COMMIT")   # synced: writers_held_off set synchronous=FULL
        except sqlite3.Error as exc:
            self._rollback(db)
            raise StoreError(self.explain(exc)) from None


def moved_message(path: Path | str, target: str, at: float) -> str:
    """Why a moved SQLite store refuses a write, and where the live store is."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
    return (f"{path} was moved to PostgreSQL at {target} by `refund-agent migrate` on {when}, "
            "so nothing is written here any more (a decision or a refund made on both would "
            "count twice). Set REFUND_AGENT_DATABASE_URL to that database (with its password) "
            "and run this again; this file stays readable for reference.")


def corrupt_message(path: Path, detail: str) -> str:
    """What to do about a store SQLite cannot read, in words that lose nothing.

    Moving the file aside is advised only when it truly is not a database (it does not begin
    with SQLite's header): a damaged database still holds pending approvals and the audit, and
    starting afresh beside it would lose them from view.
    """
    try:
        with open(path, "rb") as fh:
            header = fh.read(16)
    except OSError:
        header = b""
    if header and header != b"SQLite format 3\x00":
        return (f"{path} is not a readable refund-agent database ({detail}): it is not an "
                "SQLite file at all. Move it aside to start fresh; nothing in it was changed.")
    return (f"{path} is damaged ({detail}). It still holds the approvals and the audit, so "
            "do not delete or replace it: stop every page and worker, restore it from a "
            "backup, or recover what is readable with `sqlite3 " + str(path) + " .recover`; "
            "`refund-agent audit --verify` says whether it is whole. Nothing was changed.")
