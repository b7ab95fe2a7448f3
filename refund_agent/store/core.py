"""What every part of the store stands on: a connection per thread, the write transaction, the
error translation, the few helpers used inside transactions (timeline steps, audit entries, the
lease's fence), and the hooks each engine fills in (``sqlite.py``, ``postgres.py``).

SQL is written once, in the spelling both engines accept, with ``?`` and ``:name``
placeholders (the PostgreSQL connection adapts them to psycopg's). The few fragments the engines
spell differently are attributes of the engine's class, named where they are used: the clock
(:attr:`StoreCore.now`), the row lock (:attr:`lock_row`, :attr:`skip_locked`) and
case-insensitive matching (:attr:`like`).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..models import Run
from .audit import GENESIS_HASH, audit_hash
from .schema import (
    PARTS_SINCE,
    RECORD_PART,
    SCHEMA_VERSION,
    TABLES,
    SchemaPart,
    parts_due,
    shipped_version,
)

try:  # the postgres extra: pip install 'refund-agent[postgres]'
    import psycopg
except ImportError:  # pragma: no cover - depends on the installation
    psycopg = None  # type: ignore[assignment]

# Errors any database call may raise (psycopg's join when it is installed).
DB_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error,) + (
    (psycopg.Error,) if psycopg is not None else ())

# A lease whose holder stopped renewing it for this long is treated as abandoned, even if a
# process with the same pid exists (pids are reused after a reboot, and a paused process keeps
# its pid). The holder renews it while it works, model requests included.
LEASE_STALE_SECONDS = 15 * 60


def host_id() -> str:
    """This machine, as leases name it: a pid means something only on the host that wrote it.

    REFUND_AGENT_HOST_ID overrides it (tests use it to make processes stand for other hosts).
    The boot id makes a rebooted machine a new host: its old pids are not its new ones.
    """
    override = os.environ.get("REFUND_AGENT_HOST_ID", "").strip()
    if override:
        return override
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}" if boot else socket.gethostname()


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid exists on this machine."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def no_limit(limit: int) -> int:
    """SQLite reads a negative LIMIT as "no limit"; PostgreSQL refuses it. Both take a huge one."""
    return limit if limit >= 0 else 2**62


class StoreCore:
    """Connections, transactions and errors, shared by every concern and both engines.

    Each thread gets its own connection. Writes that read first take the engine's write lock
    (SQLite's ``BEGIN IMMEDIATE``) or lock the rows they read (PostgreSQL), so two processes
    cannot both read "pending" and both write "approved".
    """

    # -- what each engine spells its own way (class attributes of SQLiteStore, PostgresStore)
    engine: str                   # "sqlite" or "postgresql"
    shared: bool                  # several hosts may share it (PostgreSQL)
    now: str                      # the database's clock, seconds since 1970, as SQL
    lock_row: str                 # appended to a SELECT that reads rows it will change
    skip_locked: str              # appended after lock_row by claim: skip rows others hold
    like: str                     # case-insensitive LIKE for ASCII letters
    table_exists: str             # a row where the table named by the one ``?`` exists
    pushes_changes: bool = False  # change_counter moves by itself (NOTIFY): reading it is free

    path: Any                     # where the store is, for messages (file, or URL w/o password)
    # What kind of process this is, as a run's lease records it (runs.last_front): "terminal"
    # (one command), "page" (the page's server sets it) or "worker" (`refund-agent work`).
    front: str = "terminal"

    def __init__(self, target: Path | str, lease_seconds: float = LEASE_STALE_SECONDS) -> None:
        self.pid = os.getpid()
        self.host = host_id()
        self.lease_seconds = lease_seconds
        self._local = threading.local()
        self._open(target)
        version = self._version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer version of refund-agent.")
        if version == 7:  # shipped once without schema 6 (see schema.shipped_version)
            version = shipped_version(version, self.columns("calls"))
        # A store with parts (the desk's) installs them as it opens; the loop's alone reads
        # nothing more.
        if version < SCHEMA_VERSION or (self._parts and parts_due(
                self._parts, self._recorded_parts(self._db()), version)):
            self._upgrade(version)

    # -- engine hooks --------------------------------------------------------------------

    def _open(self, target: Path | str) -> None:
        """Take the target (a file, a URL) and prepare to connect; connect nothing yet."""
        raise NotImplementedError

    def _connect(self) -> Any:
        """A new connection for this thread, taking the store's SQL as written."""
        raise NotImplementedError

    def _adopt(self, db: Any) -> None:
        """``db`` became this thread's connection (new, or handed over by an ended thread)."""

    def _reuse(self) -> Any | None:
        """A connection an ended thread left behind, if the engine keeps them."""
        return None

    def _begin(self, db: Any, durable: bool) -> None:
        """Start a write transaction (see :meth:`_tx` for ``durable``)."""
        raise NotImplementedError

    def _commit(self, db: Any) -> None:
        db.execute("COMMIT")

    def _desk_may_be_stale(self, db: Any) -> bool:
        """Whether this transaction wrote what the schema's triggers mark a run's row stale
        for (``runs.desk_dirty``); an engine that cannot tell says yes. Read only by a store
        that keeps such rows (the desk's, desk/records/inbox.py)."""
        return True

    # -- what a store adding an agent's records fills in (the loop's store: nothing) --------

    #: The parts of the schema this store adds on the loop's tables (the desk's store: its
    #: tables), installed or upgraded by :meth:`_upgrade` as the store opens (schema.py).
    _parts: tuple[SchemaPart, ...] = ()

    #: More columns for the ``RETURNING *`` of a write that gives a run's lease up
    #: (``", expr AS name, ..."``), read by :meth:`_released_run`.
    _released_columns: str = ""

    def _before_commit(self, db: Any) -> None:
        """Run in every write transaction just before it commits (the schema's upgrade
        included), in that transaction: an agent's store keeps its derived rows up to date
        here (the desk refreshes its inbox rows). The loop's store does nothing."""

    def _raised_by(self, db: Any, run_id: str, account: str) -> None:
        """A run was typed in by ``account`` (a person at an agent's desk), in ``db``'s
        transaction: an agent whose store keeps accounts records it (the desk, so nobody
        approves a refund on a ticket they opened). The loop's store keeps no accounts, so it
        refuses rather than drop the name."""
        raise TypeError(f"This store keeps no record of who typed a run in ({account!r}): "
                        "start runs without raised_by, or give the agent a store_class that "
                        "records it.")

    def _output_kept(self, db: Any, run_id: str, steps: list[tuple[str, dict[str, Any]]]
                     ) -> None:
        """A call's output and its timeline ``steps`` were saved in ``db``'s transaction: an
        agent's store records what it keeps of them (the desk raises its escalations)."""

    def _released_run(self, row: dict[str, Any]) -> Run:
        """The run as a transaction that gave up its lease left it: ``row`` is its
        ``RETURNING *`` with :attr:`_released_columns`, read by the same UPDATE."""
        return Run.model_validate(row)

    def _version(self) -> int:
        """The schema version the store records (0: a new, empty store)."""
        raise NotImplementedError

    def _upgrade(self, version: int) -> None:
        """Create the schema, or bring a store at ``version`` up to date when that is safe,
        with the parts :attr:`_parts` names that are due, in one transaction."""
        raise NotImplementedError

    def _recorded_parts(self, db: Any) -> dict[str, int] | None:
        """The versions of the parts the store records (``schema_parts``), read through
        ``db``; None where it has no such table (new, or made before parts)."""
        if db.execute(self.table_exists, ("schema_parts",)).fetchone() is None:
            return None
        return {row[0]: row[1] for row in
                db.execute("SELECT part, version FROM schema_parts").fetchall()}

    def _install_parts(self, db: Any, version: int, recorded: dict[str, int] | None) -> None:
        """Install or upgrade the parts due on a store at ``version`` that records
        ``recorded`` (read before the loop's schema ran), in ``db``'s transaction, after the
        loop's schema; record their versions."""
        due = parts_due(self._parts, recorded, version)
        for part, since in due:
            part.install(self, db, since)
            db.execute(RECORD_PART, (part.name, part.version))
        if recorded is None and version >= PARTS_SINCE:
            # A store of the one history, upgraded (16 to 17 on): the loop's schema just made
            # schema_parts, so it now says which parts the store holds, each at its legacy
            # version; left empty, the next opening would read the store as holding none.
            installed = {part.name for part, _ in due}
            for part in self._parts:
                if part.name not in installed and part.legacy:
                    db.execute(RECORD_PART, (part.name, part.legacy))

    def _search_condition(self, words: list[str]) -> tuple[str, list[str]]:
        """The condition on runs (and its ``?`` values) that keeps the runs whose kept search
        text (run_search, schema 16) holds every one of ``words`` (lower-cased, not empty)."""
        raise NotImplementedError

    def lock_order(self, db: Any, order_id: str) -> None:
        """Serialise, until commit, the transactions that reserve lines of one order (or read
        what one person approved on it), so two cannot both count the old state."""
        raise NotImplementedError

    def explain(self, exc: BaseException) -> str:
        """The engine's error in words for people, naming the store."""
        raise NotImplementedError

    def moved_message(self) -> str | None:
        """Why this store refuses writes, if ``migrate`` moved it: a sentence for people."""
        return None

    # -- connections ---------------------------------------------------------------------

    def _db(self) -> Any:
        db = getattr(self._local, "db", None)
        if db is not None and getattr(db, "closed", False):
            db = None  # PostgreSQL dropped it (a restart, a network cut): connect again
        if db is None:
            db = self._reuse()
        if db is None:
            with self._errors():
                db = self._connect()
        if getattr(self._local, "db", None) is not db:
            self._local.db = db
            self._adopt(db)
        return db

    @contextmanager
    def _errors(self, prefix: str = "") -> Iterator[None]:
        """The one place the engines' errors become a StoreError, explained for people: a
        read-only folder, a full disk, a corrupt page, a server gone."""
        try:
            yield
        except DB_ERRORS as exc:
            raise StoreError(prefix + self.explain(exc)) from None

    @contextmanager
    def _tx(self, durable: bool = True) -> Iterator[Any]:
        """One write transaction, committed on success, rolled back on any error.

        ``durable`` commits synced: on SQLite ``synchronous=FULL`` (the write-ahead log is
        fsynced before COMMIT returns, so the transaction, and every one before it, survives a
        power loss), on PostgreSQL ``synchronous_commit`` on. It is for the boundaries an
        outside effect depends on (docs/HOW-IT-WORKS.md, "Durability, boundary by boundary").
        The others may be lost with the power, never half of one, and each is re-done safely
        on resume.
        """
        db = self._db()
        try:
            self._begin(db, durable)
            yield db
            self._before_commit(db)   # an agent's store's own (the desk's inbox rows)
            self._commit(db)
        except DB_ERRORS as exc:
            self._rollback(db)
            raise StoreError(self.explain(exc)) from None
        except BaseException:
            self._rollback(db)
            raise

    @staticmethod
    def _rollback(db: Any) -> None:
        try:
            db.execute("ROLLBACK")
        except DB_ERRORS:
            pass  # the connection is gone, or no transaction was open

    def _read(self, sql: str, args: tuple = ()) -> list[Any]:
        with self._errors():
            return self._db().execute(sql, args).fetchall()

    # -- direct access, for tools and tests that look past the typed views ----------------

    def query(self, sql: str, args: tuple = ()) -> list[Any]:
        """The rows of one read (the store's SQL, ``?`` placeholders), outside any transaction.

        For reports and tests that look at what is stored beyond the typed views; each row
        reads by position and by column name on both engines.
        """
        return self._read(sql, args)

    def execute(self, sql: str, args: tuple = ()) -> int:
        """One statement in its own write transaction (committed synced); returns the rows it
        changed. For tests and repair tools that change rows directly (ageing a proposal,
        tampering on purpose): every write the agent makes goes through a typed method."""
        with self._tx() as db:
            return db.execute(sql, args).rowcount

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A write transaction on this thread's connection for several statements, as
        :meth:`execute` runs one (``db.execute(sql, args)`` inside it), committed at the end."""
        with self._tx() as db:
            yield db

    def connection(self) -> Any:
        """This thread's connection (made on first use): for reading the tables directly, as the
        tutorial's transaction checks do, and for tests of connection handling.

        Statements through it commit on their own unless it is inside a transaction; one
        left open holds other writers off, as any open transaction does.
        """
        return self._db()

    def schema_version(self) -> int:
        """The schema version this store records (SCHEMA_VERSION once it is open)."""
        return self._version()

    def columns(self, table: str) -> list[str]:
        """The table's column names, in this store's order (an upgraded SQLite store has the
        columns later versions added at the end)."""
        with self._errors():
            cursor = self._db().execute(f"SELECT * FROM {table} LIMIT 0")
            return [column[0] for column in cursor.description]

    def tables(self) -> dict[str, str]:
        """:data:`~.schema.TABLES` (each table with the columns its rows are ordered by), those
        this store has: a loop store alone has none of the desk's."""
        with self._errors():
            db = self._db()
            return {table: key for table, key in TABLES.items()
                    if db.execute(self.table_exists, (table,)).fetchone() is not None}

    def close(self) -> None:
        """Close this thread's connection (another call opens a new one)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- small helpers used inside transactions -----------------------------------------

    def _step(self, db: Any, run_id: str, kind: str, data: dict[str, Any]) -> None:
        self._steps(db, run_id, [(kind, data)])

    def _steps(self, db: Any, run_id: str, steps: list[tuple[str, dict[str, Any]]]) -> None:
        """Timeline steps, in order, as one statement (one round trip on PostgreSQL)."""
        now = time.time()
        for chunk in (steps[i:i + 100] for i in range(0, len(steps), 100)):
            db.execute("INSERT INTO steps(run_id, at, pid, kind, data) VALUES "
                       + ",".join(["(?,?,?,?,?)"] * len(chunk)),
                       tuple(v for kind, data in chunk
                             for v in (run_id, now, self.pid, kind, json.dumps(data))))

    def _touch(self, db: Any, run_id: str, **fields: Any) -> None:
        fields["updated_at"] = time.time()
        assignments = ", ".join(f"{k} = :{k}" for k in fields)
        db.execute(f"UPDATE runs SET {assignments} WHERE id = :id", {**fields, "id": run_id})

    def _audit(self, db: Any, event: str, actor: str, *, run_id: str | None = None,
               approval_id: str | None = None, order_id: str | None = None,
               amount: float | None = None, note: str | None = None,
               lines: list[dict[str, Any]] | None = None) -> None:
        """Append one entry to the audit chain, and move its anchor, in ``db``'s transaction."""
        # The anchor first, locked: on PostgreSQL this is what makes appends to the chain take
        # turns (each reads the head the previous one committed); SQLite's write lock already
        # does, and the lock clause is empty there.
        anchor = db.execute("SELECT entries, head FROM audit_anchor" + self.lock_row).fetchone()
        if anchor is None:   # no anchor (a store before it): the chain's own end
            row = db.execute("SELECT hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
            prev = row[0] if row else GENESIS_HASH
        else:
            # Chained on the anchor's head; the anchor's move below checks that the log
            # really ended there (one statement fewer than reading the log's end first).
            prev = anchor["head"]
        if amount is not None and amount != amount:
            amount = None  # SQLite stores NaN as NULL; hash what is stored, or it looks edited
        entry = {"at": time.time(), "event": event, "actor": actor, "pid": self.pid,
                 "run_id": run_id, "approval_id": approval_id, "order_id": order_id,
                 "amount": amount, "note": note, "lines": lines}
        digest = audit_hash(prev, entry)
        db.execute(
            "INSERT INTO audit(at, event, actor, pid, run_id, approval_id, order_id, amount, note,"
            " lines, prev_hash, hash) VALUES (:at,:event,:actor,:pid,:run_id,:approval_id,"
            ":order_id,:amount,:note,:lines_json,:prev,:hash)",
            {**entry, "lines_json": None if lines is None else json.dumps(lines), "prev": prev,
             "hash": digest})
        if anchor is None:
            db.execute("UPDATE audit_anchor SET entries = entries + 1, head = ?", (digest,))
            return
        # The entry before the new one must be the one the anchor named: if someone removed or
        # rewrote the newest entries, writing on top would bury that. Checked after the insert
        # (the anchor's lock keeps every other append out meanwhile); refused, the whole
        # transaction rolls back.
        moved = db.execute(
            "UPDATE audit_anchor SET entries = entries + 1, head = ? WHERE head = COALESCE("
            "(SELECT hash FROM audit ORDER BY id DESC LIMIT 1 OFFSET 1), ?)",
            (digest, GENESIS_HASH)).rowcount
        if moved != 1:
            raise StoreError(
                f"The audit log in {self.path} does not end where its anchor says (entry "
                f"{anchor['entries']}): entries were removed or edited. Nothing was written; "
                "run `refund-agent audit --verify` and restore the store from a backup.")
