"""The durable store: one SQLite file shared by every process (terminal, web, notebook), or one
PostgreSQL database shared by every host (``REFUND_AGENT_DATABASE_URL``).

Each public write method is one transaction, and each is one of the durable boundaries the
agent relies on: a process killed between two of them leaves the store consistent, and the run
can be picked up from what was committed. SQL stays in this module and ``dialects.py``, which
holds the few things the two engines spell differently.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .approving import PAY, SIGN_OFF, four_eyes, limit_problem, overpaid_line, own_ticket_problem
from .callrecords import call_key, order_id_in
from .dialects import CHANNEL, DB_ERRORS, SQLITE_NOW, Postgres, SQLite, host_id, is_postgres_url
from .errors import (
    AlreadyDecided,
    DecisionRefused,
    IdempotencyConflict,
    LeaseLost,
    NotFound,
    RunBusy,
    RunNotReady,
    StoreError,
)
from .escalations import SCHEMA_9, DeskInbox, DeskRecords
from .identity import name_key
from .models import (
    Approval,
    AuditEntry,
    Call,
    InboxRow,
    Reply,
    Run,
    RunStatus,
    Step,
    TranscriptEntry,
)
from .policy import SHIPPING, Held, Quote

# What each schema version added, oldest first. Every bump adds a line here and, when existing
# tables change, a numbered step in _STEPS that runs while the store's user_version is below it.
SCHEMA_HISTORY: dict[int, str] = {
    1: "runs, steps, calls, approvals, replies and the chained audit log.",
    2: "approvals_by_run and approvals_by_order indexes.",
    3: "Itemized refunds: approvals hold order lines (approval_lines), money in cents, audit "
       "entries record the lines; leases carry a fencing epoch; the audit anchor; accounts. "
       "Stores from 1 and 2 that hold approvals cannot be mapped to lines without guessing, "
       "so they are refused (see _upgrade); empty ones are upgraded.",
    4: "The transcript: every item each request sent and each response returned (encrypted "
       "reasoning included), in order, so a run can continue without the provider's stored "
       "response; runs count its items and bytes and say whether it goes back to the start.",
    5: "Leases name their host (a pid means something only on the machine that wrote it), for "
       "several hosts on one PostgreSQL database; the ledger table holds the payment and email "
       "stand-ins' idempotency records there (on SQLite they stay in output/'s JSONL logs).",
    6: "Calls are keyed by their run and response (provider call ids are not unique across "
       "runs) and carry their key (the approval id and idempotency key, with the run in it; "
       "calls saved before keep their call id as key) and the order id their arguments name, "
       "read in Python when the call is saved, so no query parses model-written JSON; "
       "approvals are requested by the database's clock; an SQLite store that `migrate` "
       "moved says where (store_moved) and refuses writes.",
    7: "sign_in_failures: recent failed sign-ins by canonical name and client, so the "
       "throttle is shared by every process and survives a restart (a new table only).",
    8: "Units: approval_lines say how many of the line's units they refund (units) out of how "
       "many it has (quantity); both NULL on rows from before, which refunded whole lines and "
       "so read as all units. A line may now be held by several refunds, so the unique index "
       "lines_held_once gives way to a trigger that refuses holding more units than the line "
       "has (on SQLite; the code checks the same under the order's lock on both engines).",
    9: "The desk: escalations (raised by the agent's escalate tool or by an approver sending a "
       "refund to a lead; who took each and when), signoffs (the first of two approvals above "
       "the shop's two-person amount) and raised_by (the desk account that typed a ticket "
       "in, so nobody approves a refund on their own ticket); new tables only.",
    10: "provider_events: what an outside system reported later (Stripe's refund.updated and "
        "refund.failed webhooks), one row per event id, so a redelivered event is recorded "
        "once and reconcile knows which failed refunds the desk was told of (a new table).",
}
SCHEMA_VERSION = max(SCHEMA_HISTORY)
# The steps that change tables an older store already has (CREATE TABLE IF NOT EXISTS never adds
# a column). New tables and indexes come from _SCHEMA, which runs after the steps.
_STEPS: dict[int, str] = {
    3: "DROP TABLE approvals; ALTER TABLE audit ADD COLUMN lines TEXT; "
       "ALTER TABLE runs ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;",
    # Runs that already made a request have no transcript of it, so theirs is incomplete; a run
    # that has not started yet will keep one from its first request.
    4: "ALTER TABLE runs ADD COLUMN transcript_items INTEGER NOT NULL DEFAULT 0; "
       "ALTER TABLE runs ADD COLUMN transcript_bytes INTEGER NOT NULL DEFAULT 0; "
       "ALTER TABLE runs ADD COLUMN transcript_complete INTEGER NOT NULL DEFAULT 0; "
       "UPDATE runs SET transcript_complete = 1 WHERE last_response_id IS NULL;",
    5: "ALTER TABLE runs ADD COLUMN lease_host TEXT;",
    # The calls table gets a new primary key, which SQLite cannot alter: the old one is set
    # aside (with its indexes, whose names the new table's take) and copied over in Python by
    # _calls_v6, in the same transaction, reading each call's order id without the database.
    6: "DROP INDEX IF EXISTS calls_by_response; DROP INDEX IF EXISTS calls_by_run; "
       "ALTER TABLE calls RENAME TO calls_v5;",
    # Old rows keep NULL units: a line refunded before units were counted is all its units.
    8: "DROP INDEX IF EXISTS lines_held_once; "
       "ALTER TABLE approval_lines ADD COLUMN units INTEGER; "
       "ALTER TABLE approval_lines ADD COLUMN quantity INTEGER;",
}
# The same step on PostgreSQL, whose tables can change their key in place.
_PG_STEPS: dict[int, tuple[str, ...]] = {
    6: ("ALTER TABLE calls DROP CONSTRAINT calls_pkey",
        "ALTER TABLE calls ADD COLUMN key TEXT", "ALTER TABLE calls ADD COLUMN order_id TEXT",
        "ALTER TABLE calls ADD PRIMARY KEY (run_id, response_id, seq)"),
    8: ("DROP INDEX IF EXISTS lines_held_once",
        "ALTER TABLE approval_lines ADD COLUMN IF NOT EXISTS units BIGINT",
        "ALTER TABLE approval_lines ADD COLUMN IF NOT EXISTS quantity BIGINT"),
}
GENESIS_HASH = "0" * 64
# A lease whose holder stopped renewing it for this long is treated as abandoned, even if a
# process with the same pid exists (pids are reused after a reboot, and a paused process keeps
# its pid). The holder renews it while it works, model requests included.
LEASE_STALE_SECONDS = 15 * 60
# Lease times come from the database's clock, never a process's own: two processes whose clocks
# disagree still agree on whether a lease has expired.
# Written in SQLite's spelling; on PostgreSQL dialects.pg_sql swaps in clock_timestamp().
_DB_NOW = SQLITE_NOW


class _Handback:
    """Gives a thread's PostgreSQL connection to the next thread once this one ends.

    Streamlit draws every page on a new thread; without this, each draw would open a connection
    (about 10 ms, and a server process) and leave the old one to be dropped. Lives in the
    thread's local storage, which Python clears when the thread ends; a connection left
    mid-transaction is closed instead (its transaction rolls back with it).
    """

    IDLE_MAX = 8

    def __init__(self, db: Any, idle: list[Any]) -> None:
        weakref.finalize(self, _Handback._park, db, idle)

    @staticmethod
    def _park(db: Any, idle: list[Any]) -> None:
        if not db.closed and db.idle and len(idle) < _Handback.IDLE_MAX:
            idle.append(db)
        else:
            db.close()


@dataclass(frozen=True)
class Lease:
    """The right to advance one run, held by one process at a time.

    ``epoch`` is a fencing token: it grows with every acquisition, and every write made on
    behalf of the run checks it in the write's own transaction. A process that lost the run
    (paused past its lease, slow, or taken over by ``resume``) is refused at its next write.
    """

    run_id: str
    token: str
    epoch: int

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, kind TEXT NOT NULL,
    sender TEXT NOT NULL, sender_name TEXT NOT NULL, subject TEXT NOT NULL, email TEXT NOT NULL,
    status TEXT NOT NULL, last_response_id TEXT,
    requests INTEGER NOT NULL DEFAULT 0, cost_ticks INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, simulated_replies INTEGER NOT NULL DEFAULT 0,
    error TEXT, lease_pid INTEGER, lease_token TEXT, lease_at REAL, last_pid INTEGER,
    lease_epoch INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    transcript_items INTEGER NOT NULL DEFAULT 0, transcript_bytes INTEGER NOT NULL DEFAULT 0,
    transcript_complete INTEGER NOT NULL DEFAULT 0, lease_host TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, updated_at);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created_at);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL, pid INTEGER NOT NULL,
    kind TEXT NOT NULL, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps(run_id, id);
-- A call is its run's, its response's, at its place in the response: provider call ids are not
-- unique across runs, and a model may even repeat one. ``key`` (see callrecords.py) is what
-- outlives the request, unique: the approval's id, the payment's or email's idempotency key;
-- NULL for a repeated call, which is answered without running. ``order_id`` is the one the
-- arguments name, read in Python when the call is saved (no query parses the arguments).
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT NOT NULL, run_id TEXT NOT NULL, response_id TEXT NOT NULL,
    seq INTEGER NOT NULL, name TEXT NOT NULL, arguments TEXT NOT NULL, output TEXT,
    key TEXT, order_id TEXT,
    PRIMARY KEY (run_id, response_id, seq)
);
CREATE INDEX IF NOT EXISTS calls_by_response ON calls(response_id, seq);
CREATE INDEX IF NOT EXISTS calls_by_run ON calls(run_id, name);
CREATE INDEX IF NOT EXISTS calls_by_call_id ON calls(run_id, call_id);
CREATE UNIQUE INDEX IF NOT EXISTS calls_by_key ON calls(key);
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL, response_id TEXT NOT NULL, call_id TEXT NOT NULL,
    order_id TEXT NOT NULL, amount_cents INTEGER NOT NULL, proposed_cents INTEGER NOT NULL,
    summary TEXT NOT NULL, customer TEXT NOT NULL,
    status TEXT NOT NULL, requested_at REAL NOT NULL, requested_pid INTEGER NOT NULL,
    decided_by TEXT, decided_at REAL, decided_pid INTEGER, note TEXT
);
CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals(status, requested_at);
CREATE INDEX IF NOT EXISTS approvals_by_run ON approvals(run_id);
CREATE INDEX IF NOT EXISTS approvals_by_order ON approvals(order_id);
-- The ledger: one row per order line of a proposed refund, with how many of the line's units
-- it refunds (units, of quantity; NULL on rows from before schema 8: all the line's units). A
-- row that is pending or approved is held; several refunds may hold one line, never more
-- units than it has (the code checks under the order's lock; on SQLite a trigger as well).
CREATE TABLE IF NOT EXISTS approval_lines (
    approval_id TEXT NOT NULL, order_id TEXT NOT NULL, seq INTEGER NOT NULL, line TEXT NOT NULL,
    name TEXT NOT NULL, reason TEXT NOT NULL, amount_cents INTEGER NOT NULL,
    allowed_cents INTEGER NOT NULL, fee_cents INTEGER NOT NULL, held INTEGER NOT NULL,
    decision TEXT, units INTEGER, quantity INTEGER, PRIMARY KEY (approval_id, line)
);
CREATE INDEX IF NOT EXISTS lines_held ON approval_lines(order_id, line) WHERE held = 1;
-- The run's transcript: each request's new input items, then its response's output items exactly
-- as they arrived (reasoning with its encrypted_content), in order. Replayed as one input list it
-- is the conversation the model saw, which is what a request without previous_response_id needs.
CREATE TABLE IF NOT EXISTS transcript (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, response_id TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('input', 'output')), item TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS replies (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL, text TEXT NOT NULL,
    simulated INTEGER NOT NULL, response_id TEXT
);
CREATE INDEX IF NOT EXISTS replies_by_run ON replies(run_id, id);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, event TEXT NOT NULL, actor TEXT NOT NULL,
    pid INTEGER NOT NULL, run_id TEXT, approval_id TEXT, order_id TEXT, amount REAL, note TEXT,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL, lines TEXT
);
-- The chain's head, written with every audit entry: removing the newest entries (which the
-- chain alone cannot notice) leaves a head that no longer matches.
CREATE TABLE IF NOT EXISTS audit_anchor (
    id INTEGER PRIMARY KEY CHECK (id = 1), entries INTEGER NOT NULL, head TEXT NOT NULL
);
-- The people who may decide (see accounts.py). The password is never stored: only a salted
-- scrypt hash and the parameters that made it, so stronger parameters can come later.
CREATE TABLE IF NOT EXISTS accounts (
    name TEXT PRIMARY KEY, role TEXT NOT NULL, limit_cents INTEGER, password TEXT NOT NULL,
    created_at REAL NOT NULL
);
-- Failed sign-ins within the throttle's window (see accounts.py), by the name's canonical key
-- and the client that tried: shared by every page and terminal on this store, so a restart or
-- another tab does not reset it, and one client's failures never lock out another client.
CREATE TABLE IF NOT EXISTS sign_in_failures (
    id INTEGER PRIMARY KEY, name_key TEXT NOT NULL, client TEXT NOT NULL, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sign_in_failures_by_name ON sign_in_failures(name_key, client, at);
-- The payment and email stand-ins' idempotency records when the store is shared by several
-- hosts (PostgreSQL): one row per (log, key), the whole record as JSON, in the order written.
-- On SQLite the JSONL logs in output/ hold them instead and this table stays empty.
CREATE TABLE IF NOT EXISTS ledger (
    id INTEGER PRIMARY KEY, log TEXT NOT NULL, key TEXT NOT NULL, record TEXT NOT NULL,
    UNIQUE (log, key)
);
-- What an outside system reported after the fact (outside/webhooks.py): one row per provider
-- event id (a redelivery is a no-op), with the refund it is about and the status it reports.
CREATE TABLE IF NOT EXISTS provider_events (
    id TEXT PRIMARY KEY, at REAL NOT NULL, provider TEXT NOT NULL, type TEXT NOT NULL,
    refund_id TEXT NOT NULL, status TEXT, approval_id TEXT, data TEXT NOT NULL
);
-- Written by `refund-agent migrate` once the store was copied to PostgreSQL (SQLite only): the
-- store then refuses every write, naming the database it moved to (its URL without password).
CREATE TABLE IF NOT EXISTS store_moved (
    id INTEGER PRIMARY KEY CHECK (id = 1), target TEXT NOT NULL, at REAL NOT NULL
);
INSERT OR IGNORE INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '""" + "0" * 64 + """') FROM audit;
""" + SCHEMA_9

# The database's own last guard on units (SQLite; its body's semicolons keep it out of _SCHEMA,
# which pg_schema splits on them): a held row may not bring a line's held units past its
# quantity. A row without units (before schema 8, or shipping) holds the whole line, so
# nothing else may hold that line beside it.
_UNITS_GUARD = """
CREATE TRIGGER IF NOT EXISTS units_held_within_quantity
BEFORE INSERT ON approval_lines WHEN NEW.held = 1
BEGIN
    SELECT RAISE(ABORT, 'units held beyond the line quantity in approval_lines')
    WHERE (SELECT COUNT(*) FROM approval_lines WHERE order_id = NEW.order_id
               AND line = NEW.line AND held = 1 AND (units IS NULL OR NEW.units IS NULL)) > 0
       OR COALESCE((SELECT SUM(units) FROM approval_lines WHERE order_id = NEW.order_id
               AND line = NEW.line AND held = 1), 0) + COALESCE(NEW.units, 0)
          > COALESCE(NEW.quantity, 1);
END;
"""

_AUDIT_FIELDS = ("at", "event", "actor", "pid", "run_id", "approval_id", "order_id", "amount",
                 "note")


def audit_hash(prev_hash: str, entry: dict[str, Any]) -> str:
    """The chained hash of one audit entry: editing, removing or reordering breaks the chain.

    ``lines`` joins the hashed fields only when an entry has them, so entries written before
    refunds were itemized keep verifying.
    """
    fields = {k: entry.get(k) for k in _AUDIT_FIELDS}
    if entry.get("lines") is not None:
        fields["lines"] = entry["lines"]
    body = json.dumps(fields, sort_keys=True)
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()


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


# Every table of a store, with the columns its rows are ordered by (its primary key): what a
# copy of the whole store (migrate.py) reads and fills, in this order.
TABLES: dict[str, str] = {
    "runs": "id", "steps": "id", "calls": "run_id, response_id, seq", "approvals": "id",
    "approval_lines": "approval_id, line", "transcript": "run_id, seq", "replies": "id",
    "audit": "id", "audit_anchor": "id", "accounts": "name", "ledger": "id",
    "sign_in_failures": "id", "provider_events": "id", "escalations": "id",
    "signoffs": "approval_id", "raised_by": "run_id",
}


# Calls whose effect leaves the system as soon as they run (see Store.record_response).
# issue_refund is not one: it only queues an approval, itself a durable commit.
_EFFECT_CALLS = frozenset({"send_customer_message"})


class Store(DeskRecords, DeskInbox):
    """Typed access to the SQLite file at ``target``, or to the PostgreSQL database when
    ``target`` is a ``postgresql://`` URL; safe to share between threads.

    Each thread gets its own connection. Writes that read first use ``BEGIN IMMEDIATE`` on
    SQLite, and lock the rows they read on PostgreSQL (see dialects.py), so two processes
    cannot both read "pending" and both write "approved".
    """

    def __init__(self, target: Path | str, lease_seconds: float = LEASE_STALE_SECONDS) -> None:
        self.dialect: SQLite | Postgres = (Postgres(target) if is_postgres_url(target)
                                           else SQLite(Path(target)))
        self.shared = isinstance(self.dialect, Postgres)
        # Where the store is, for messages: the file, or the URL without its password.
        self.path = self.dialect.path if isinstance(self.dialect, SQLite) else self.dialect.where
        self.pid = os.getpid()
        self.host = host_id()
        self.lease_seconds = lease_seconds
        self._local = threading.local()
        self._idle: list[Any] = []   # PostgreSQL connections whose threads ended, for reuse
        self._watch: sqlite3.Connection | None = None
        self._watch_lock = threading.Lock()
        if isinstance(self.dialect, SQLite):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file where the folder should be, no permission, ...
                raise StoreError(
                    f"Cannot use {self.path.parent} as the output folder: {exc}") from None
        version = self._version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer version of refund-agent.")
        if version < SCHEMA_VERSION:
            # (A store from an unreleased build of schema 3 without accounts is upgraded here
            # too: the schema script adds whatever table is missing.)
            self._upgrade(version)

    def _version(self) -> int:
        if isinstance(self.dialect, SQLite):
            return self._read("PRAGMA user_version")[0][0]
        # PostgreSQL has no user_version: a one-row table keeps it (absent: an empty database).
        rows = self._read("SELECT to_regclass('refund_agent_schema') IS NOT NULL")
        if not rows[0][0]:
            return 0
        rows = self._read("SELECT version FROM refund_agent_schema")
        return rows[0][0] if rows else 0

    def _upgrade(self, version: int) -> None:
        """Create the schema, or bring an older store up to date when that is safe."""
        if isinstance(self.dialect, Postgres):
            self._create_pg()
            return
        steps = "".join(step for number, step in sorted(_STEPS.items())
                        if version and version < number)
        if version and version < 8:
            # Step 8 adds its columns only to a table that exists without them (stores from
            # 1 and 2 get approval_lines whole from _SCHEMA).
            columns = {row[1] for row in self._read("PRAGMA table_info(approval_lines)")}
            if not columns or "units" in columns:
                steps = steps.replace(_STEPS[8], "DROP INDEX IF EXISTS lines_held_once; ")
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
        script = steps + _SCHEMA + _UNITS_GUARD
        db = self._db()
        try:  # executescript commits on its own, so the schema gets its own transaction
            db.executescript(f"BEGIN IMMEDIATE; {script}")
            if version and version < 6:
                _calls_v6(db, "calls_v5")
                db.execute("DROP TABLE calls_v5")
            db.executescript(f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            # Two processes may open an old store at once; the second one's ALTER TABLE then
            # finds the column already there. The store is upgraded either way.
            if self._read("PRAGMA user_version")[0][0] == SCHEMA_VERSION:
                return
            raise StoreError(self._explain(exc)) from None

    def _create_pg(self) -> None:
        """The schema on an empty PostgreSQL database (there is no older PostgreSQL store).

        Under an advisory lock: several hosts starting on a new database at once make it once.
        """
        from .dialects import pg_schema
        assert isinstance(self.dialect, Postgres)
        with self._tx() as db:
            self.dialect.lock_schema(db)
            db.execute("CREATE TABLE IF NOT EXISTS refund_agent_schema ("
                       "id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM refund_agent_schema").fetchone()
            if row is not None and row[0] >= SCHEMA_VERSION:
                return
            if row is not None:   # an older store: its steps, then whatever is new
                for number, statements in sorted(_PG_STEPS.items()):
                    if row[0] < number:
                        for statement in statements:
                            db.execute(statement)
                if row[0] < 6:
                    _calls_v6(db, None)
            for statement in pg_schema(_SCHEMA):
                db.execute(statement)
            db.execute("INSERT INTO refund_agent_schema(id, version) VALUES (1, ?)"
                       " ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                       (SCHEMA_VERSION,))

    # -- connection handling -------------------------------------------------------------

    def _db(self) -> Any:
        db = getattr(self._local, "db", None)
        if db is not None and getattr(db, "closed", False):
            db = None  # PostgreSQL dropped it (a restart, a network cut): connect again
        if db is None:
            db = self._reuse()
        if db is None:
            try:
                db = self.dialect.connect()
            except DB_ERRORS as exc:
                raise StoreError(self._explain(exc)) from None
            self._local.synchronous = "FULL" if isinstance(self.dialect, SQLite) else None
        if getattr(self._local, "db", None) is not db:
            self._local.db = db
            if isinstance(self.dialect, Postgres):
                self._local.handback = _Handback(db, self._idle)
        return db

    def _reuse(self) -> Any | None:
        """An idle PostgreSQL connection an ended thread left behind, if any."""
        while True:
            try:
                db = self._idle.pop()   # atomic: two threads never get the same one
            except IndexError:
                return None
            if not db.closed:
                return db

    def _explain(self, exc: BaseException) -> str:
        return self.dialect.explain(exc)

    @contextmanager
    def _tx(self, durable: bool = True) -> Iterator[Any]:
        """One write transaction, committed on success.

        On SQLite it is taken with BEGIN IMMEDIATE. ``durable`` commits with
        ``synchronous=FULL``: the write-ahead log is fsynced before COMMIT returns, so the
        transaction (and every one before it, the log being one file written in order)
        survives a power loss. It is for the boundaries an outside effect depends on (README,
        "Durability, boundary by boundary"). The others commit with ``synchronous=NORMAL``: in
        WAL mode a process crash (SIGKILL) still loses nothing, a power loss may lose them,
        and each is re-done safely on resume.

        On PostgreSQL the same choice is ``synchronous_commit`` (off: the commit returns before
        its WAL reaches the disk; a server crash may lose it, never half of it), and every
        commit notifies the listening pages (LISTEN/NOTIFY, see change_counter). Each pair of
        control statements there goes as one string, one round trip: ``BEGIN`` with the
        ``SET LOCAL``, and ``NOTIFY`` with ``COMMIT``.
        """
        db = self._db()
        postgres = isinstance(self.dialect, Postgres)
        level = "FULL" if durable else "NORMAL"
        try:
            if postgres:
                db.execute("BEGIN" if durable else "BEGIN; SET LOCAL synchronous_commit = off")
            else:
                if getattr(self._local, "synchronous", None) != level:
                    # Not allowed inside a transaction, so set before BEGIN; per connection.
                    db.execute(f"PRAGMA synchronous={level}")
                    self._local.synchronous = level
                db.execute("BEGIN IMMEDIATE")
                moved = db.execute("SELECT target, at FROM store_moved").fetchone()
                if moved is not None:
                    self._rollback(db)
                    raise StoreError(_moved_message(self.path, moved["target"], moved["at"]))
        except DB_ERRORS as exc:
            self._rollback(db)
            raise StoreError(self._explain(exc)) from None
        try:
            yield db
        except DB_ERRORS as exc:  # a read-only folder, a full disk, a corrupt page
            self._rollback(db)
            raise StoreError(self._explain(exc)) from None
        except BaseException:
            self._rollback(db)
            raise
        try:
            # NOTIFY is delivered to listeners at COMMIT, not before.
            db.execute(f"NOTIFY {CHANNEL}; COMMIT" if postgres else "COMMIT")
        except DB_ERRORS as exc:
            if postgres:  # a failed NOTIFY leaves the transaction open: the COMMIT never ran
                self._rollback(db)
            raise StoreError(self._explain(exc)) from None

    @staticmethod
    def _rollback(db: Any) -> None:
        try:
            db.execute("ROLLBACK")
        except DB_ERRORS:
            pass  # the connection is gone, and its transaction with it

    def _read(self, sql: str, args: tuple = ()) -> list[Any]:
        try:
            return self._db().execute(sql, args).fetchall()
        except DB_ERRORS as exc:
            raise StoreError(self._explain(exc)) from None

    def change_counter(self) -> int:
        """A number that changes whenever anyone commits to the store, from any process.

        On SQLite, ``PRAGMA data_version`` on a connection of its own that never writes: it
        moves with every commit made through any other connection, this process's threads
        included. It reads no table, so a page may ask twice a second for nothing. On
        PostgreSQL, a counter in memory that a LISTEN thread bumps at every NOTIFY, which every
        committing write transaction sends, from any host.
        """
        if isinstance(self.dialect, Postgres):
            return self.dialect.change_counter()
        with self._watch_lock:
            if self._watch is None:
                self._watch = sqlite3.connect(self.path, isolation_level=None,
                                              check_same_thread=False)
            try:
                return self._watch.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error as exc:
                raise StoreError(self._explain(exc)) from None

    @property
    def pushes_changes(self) -> bool:
        """True when change_counter moves by itself (NOTIFY), so reading it often is free."""
        return isinstance(self.dialect, Postgres)

    def wait_for_change(self, since: int, timeout: float) -> int:
        """The change counter once it differs from ``since``, or after ``timeout`` seconds."""
        if isinstance(self.dialect, Postgres):
            return self.dialect.wait_for_change(since, timeout)
        deadline = time.monotonic() + timeout
        while True:
            now = self.change_counter()
            if now != since or time.monotonic() >= deadline:
                return now
            time.sleep(0.02)

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
        if isinstance(self.dialect, Postgres):
            self.dialect.close()
            while self._idle:
                self._idle.pop().close()

    def integrity_ok(self) -> bool:
        return self.integrity_problem() is None

    def integrity_problem(self, quick: bool = False) -> str | None:
        """None if the engine finds the store's pages and indexes sound; else what it found.

        SQLite's ``integrity_check`` reads every page (``quick``: ``quick_check``, which skips
        matching indexes against their tables); a corrupt page makes it answer with the
        damage, or fail outright. PostgreSQL checks its own pages (data checksums): nothing
        to ask.
        """
        if isinstance(self.dialect, Postgres):
            return None
        pragma = "quick_check" if quick else "integrity_check"
        try:
            rows = self._db().execute(f"PRAGMA {pragma}(20)").fetchall()
        except DB_ERRORS as exc:
            return str(exc)
        found = [str(r[0]) for r in rows]
        return None if found == ["ok"] else "; ".join(found)

    def moved_to(self) -> str | None:
        """Where ``refund-agent migrate`` moved this SQLite store (the URL without its
        password), or None while it is the live store."""
        if isinstance(self.dialect, Postgres):
            return None
        rows = self._read("SELECT target FROM store_moved")
        return rows[0][0] if rows else None

    def moved_message(self) -> str | None:
        """Why this store refuses writes, if ``migrate`` moved it: a sentence for people."""
        if isinstance(self.dialect, Postgres):
            return None
        rows = self._read("SELECT target, at FROM store_moved")
        return _moved_message(self.path, rows[0]["target"], rows[0]["at"]) if rows else None

    # -- small helpers used inside transactions -----------------------------------------

    def _step(self, db: Any, run_id: str, kind: str, data: dict[str, Any]) -> None:
        db.execute("INSERT INTO steps(run_id, at, pid, kind, data) VALUES (?,?,?,?,?)",
                   (run_id, time.time(), self.pid, kind, json.dumps(data)))

    def _audit(self, db: Any, event: str, actor: str, *, run_id: str | None = None,
               approval_id: str | None = None, order_id: str | None = None,
               amount: float | None = None, note: str | None = None,
               lines: list[dict[str, Any]] | None = None) -> None:
        # The anchor first, locked: on PostgreSQL this is what makes appends to the chain take
        # turns (each reads the head the previous one committed); SQLite's write lock already
        # does, and the lock clause is empty there.
        anchor = db.execute("SELECT entries, head FROM audit_anchor"
                            + self.dialect.lock_row).fetchone()
        row = db.execute("SELECT hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
        prev = row[0] if row else GENESIS_HASH
        if anchor is not None and anchor["head"] != prev:
            # Someone removed or rewrote the newest entries. Writing on top would bury that.
            raise StoreError(
                f"The audit log in {self.path} does not end where its anchor says (entry "
                f"{anchor['entries']}): entries were removed or edited. Nothing was written; "
                "run `refund-agent audit --verify` and restore the store from a backup.")
        if amount is not None and amount != amount:
            amount = None  # SQLite stores NaN as NULL; hash what is stored, or it looks edited
        entry = {"at": time.time(), "event": event, "actor": actor, "pid": self.pid,
                 "run_id": run_id, "approval_id": approval_id, "order_id": order_id,
                 "amount": amount, "note": note, "lines": lines}
        db.execute(
            "INSERT INTO audit(at, event, actor, pid, run_id, approval_id, order_id, amount, note,"
            " lines, prev_hash, hash) VALUES (:at,:event,:actor,:pid,:run_id,:approval_id,"
            ":order_id,:amount,:note,:lines_json,:prev,:hash)",
            {**entry, "lines_json": None if lines is None else json.dumps(lines), "prev": prev,
             "hash": audit_hash(prev, entry)})
        db.execute("UPDATE audit_anchor SET entries = entries + 1, head = ?",
                   (audit_hash(prev, entry),))

    def _touch(self, db: Any, run_id: str, **fields: Any) -> None:
        fields["updated_at"] = time.time()
        assignments = ", ".join(f"{k} = :{k}" for k in fields)
        db.execute(f"UPDATE runs SET {assignments} WHERE id = :id", {**fields, "id": run_id})

    # -- runs ----------------------------------------------------------------------------

    def create_run(self, *, sender: str, sender_name: str, subject: str, email: str,
                   kind: str = "custom", raised_by: str | None = None) -> Run:
        """Boundary 1: the run and the customer's email exist before any model request.

        ``raised_by`` is the desk account that typed the ticket in, if any.
        """
        run_id = "run_" + uuid.uuid4().hex[:12]
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs(id, created_at, kind, sender, sender_name, subject, email,"
                " status, updated_at, last_pid, transcript_complete)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,1)",
                (run_id, now, kind, sender, sender_name, subject, email, RunStatus.WORKING, now,
                 self.pid))
            if raised_by:
                db.execute("INSERT INTO raised_by(run_id, account) VALUES (?,?)",
                           (run_id, raised_by))
            self._step(db, run_id, "email", {"from": sender, "name": sender_name,
                                             "subject": subject, "body": email})
        return self.run(run_id)

    def run(self, run_id: str) -> Run:
        rows = self._read("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise NotFound(f"No run with id {run_id!r}.")
        return Run.model_validate(dict(rows[0]))

    def runs(self, limit: int = 100) -> list[Run]:
        rows = self._read("SELECT * FROM runs ORDER BY created_at DESC LIMIT ?",
                          (_no_limit(limit),))
        return [Run.model_validate(dict(r)) for r in rows]

    def inbox(self, search: str = "", statuses: Collection[RunStatus] = (), limit: int = 50,
              offset: int = 0) -> list[InboxRow]:
        """Runs newest first, matching ``search`` (name, address, subject, email text, order,
        run id) and, if given, one of ``statuses``; with their latest proposal's order and
        amount."""
        where, args = self._inbox_filter(search, statuses)
        rows = self._read(
            "SELECT runs.*,"
            " (SELECT order_id FROM approvals a WHERE a.run_id = runs.id"
            "  ORDER BY a.requested_at DESC LIMIT 1) AS inbox_order,"
            " (SELECT amount_cents FROM approvals a WHERE a.run_id = runs.id"
            "  ORDER BY a.requested_at DESC LIMIT 1) AS inbox_amount,"
            " (SELECT c.order_id FROM calls c WHERE c.run_id = runs.id"
            "  AND c.name = 'lookup_order' AND c.order_id IS NOT NULL LIMIT 1) AS looked_up"
            f" FROM runs {where} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (*args, limit, offset))
        found = []
        for row in rows:
            data = dict(row)
            order, amount, looked = (data.pop("inbox_order"), data.pop("inbox_amount"),
                                     data.pop("looked_up"))
            found.append(InboxRow(run=Run.model_validate(data),
                                  order_id=order or (str(looked) if looked else None),
                                  amount_cents=amount))
        return found

    def inbox_counts(self, search: str = "") -> dict[RunStatus, int]:
        """How many runs match ``search``, by status (every status present, zeros included)."""
        where, args = self._inbox_filter(search, ())
        counts = dict.fromkeys(RunStatus, 0)
        for status, n in self._read(f"SELECT status, COUNT(*) FROM runs {where} GROUP BY status",
                                    args):
            counts[RunStatus(status)] = n
        return counts

    @staticmethod
    def _inbox_filter(search: str, statuses: Collection[RunStatus]) -> tuple[str, tuple]:
        clauses, args = [], []
        words = search.split()
        for word in words:   # every word must match somewhere
            like = "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            clauses.append("(sender LIKE ? ESCAPE '\\' OR sender_name LIKE ? ESCAPE '\\'"
                           " OR subject LIKE ? ESCAPE '\\' OR email LIKE ? ESCAPE '\\'"
                           " OR id LIKE ? ESCAPE '\\' OR id IN (SELECT run_id FROM approvals"
                           " WHERE order_id LIKE ? ESCAPE '\\'))")
            args += [like] * 6
        if statuses:
            clauses.append(f"status IN ({','.join('?' * len(statuses))})")
            args += [str(s) for s in statuses]
        return ("WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)

    def latest_run(self, statuses: set[RunStatus]) -> Run | None:
        marks = ",".join("?" * len(statuses))
        rows = self._read(f"SELECT * FROM runs WHERE status IN ({marks})"
                          " ORDER BY updated_at DESC LIMIT 1", tuple(statuses))
        return Run.model_validate(dict(rows[0])) if rows else None

    def orphaned_runs(self) -> list[Run]:
        """Runs marked working whose process is gone: a crash cut them off mid-turn."""
        rows = self._read("SELECT * FROM runs WHERE status = ? ORDER BY updated_at",
                          (RunStatus.WORKING,))
        db = self._db()
        return [Run.model_validate(dict(r)) for r in rows if not self._lease_live(db, dict(r))]

    def decided_but_waiting(self) -> list[Run]:
        """Runs still marked waiting although their refund was decided (a crash in between)."""
        rows = self._read("SELECT DISTINCT runs.* FROM runs JOIN approvals a ON a.run_id = runs.id"
                          " WHERE runs.status = ? AND a.status != 'pending'"
                          " AND NOT EXISTS (SELECT 1 FROM approvals p WHERE p.run_id = runs.id"
                          " AND p.status = 'pending')", (RunStatus.WAITING,))
        return [Run.model_validate(dict(r)) for r in rows]

    def _lease_live(self, db: Any, row: dict[str, Any]) -> bool:
        """Whether someone holds this run: a live process that renewed its lease recently."""
        if row.get("lease_token") is None:
            return False
        age = db.execute(f"SELECT {_DB_NOW} - ?", (row.get("lease_at") or 0,)).fetchone()[0]
        if age >= self.lease_seconds:
            return False
        if row.get("lease_host") not in (None, self.host):
            # Another host's pid cannot be looked up from here: its lease holds until it
            # expires by the database's clock (its holder renews it while it works).
            return True
        return pid_alive(row.get("lease_pid"))

    def acquire(self, run_id: str, token: str) -> Lease:
        """Take the run's lease for this process, with a fencing token one higher than before.

        Raises:
            RunBusy: another live process (or thread) holds the lease.
        """
        with self._tx(durable=False) as db:  # lost with the power, so were its holders
            row = db.execute("SELECT * FROM runs WHERE id = ?" + self.dialect.lock_row,
                             (run_id,)).fetchone()
            if row is None:
                raise NotFound(f"No run with id {run_id!r}.")
            row = dict(row)
            if row["lease_token"] not in (None, token) and self._lease_live(db, row):
                raise RunBusy(run_id, row["lease_pid"])
            return self._take(db, row, token)

    def _take(self, db: Any, row: dict[str, Any], token: str) -> Lease:
        """Give this process the run's lease (the caller checked that nobody live holds it)."""
        run_id = row["id"]
        if row["last_pid"] is not None and (row["last_pid"] != self.pid
                                            or row.get("lease_host") not in (None, self.host)):
            self._step(db, run_id, "restart", {"previous_pid": row["last_pid"],
                                               "pid": self.pid})
        epoch = row["lease_epoch"] + 1
        db.execute(f"UPDATE runs SET lease_pid = ?, lease_token = ?, lease_at = {_DB_NOW},"
                   " lease_epoch = ?, last_pid = ?, status = ?, error = NULL,"
                   " updated_at = ?, lease_host = ? WHERE id = ?",
                   (self.pid, token, epoch, self.pid, RunStatus.WORKING, time.time(), self.host,
                    run_id))
        return Lease(run_id, token, epoch)

    def claim(self, token: str) -> Lease | None:
        """Take one run that needs a worker and that nobody live holds, or None.

        A run needs a worker when it is marked working (new, or cut off mid-turn by a crash
        anywhere) or still waiting although its refund was decided. On PostgreSQL the candidate
        rows are read ``FOR UPDATE SKIP LOCKED``: workers on several hosts asking at once each
        get a different run, without waiting for one another; the lease and its fencing token
        then guard every later write. Leases that expired by the database's clock are taken,
        so any host recovers the runs of a host that died.
        """
        skip = self.dialect.lock_row + (" SKIP LOCKED" if self.dialect.lock_row else "")
        with self._tx(durable=False) as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE (status = ? OR (status = ? AND EXISTS (SELECT 1 FROM"
                " approvals a WHERE a.run_id = runs.id AND a.status != 'pending') AND NOT EXISTS"
                " (SELECT 1 FROM approvals p WHERE p.run_id = runs.id AND p.status = 'pending')))"
                f" AND (lease_token IS NULL OR lease_host = ? OR lease_at < {_DB_NOW} - ?)"
                " ORDER BY updated_at LIMIT 20" + skip,
                (RunStatus.WORKING, RunStatus.WAITING, self.host,
                 self.lease_seconds)).fetchall()
            for row in map(dict, rows):
                if row["lease_token"] is None or not self._lease_live(db, row):
                    return self._take(db, row, token)
        return None

    def _fence(self, db: Any, lease: Lease) -> None:
        """Refuse a write made on behalf of a run by a process that no longer holds it."""
        # Locked until the write commits: the lease cannot change hands in between.
        row = db.execute("SELECT lease_token, lease_epoch, lease_pid FROM runs WHERE id = ?"
                         + self.dialect.lock_row, (lease.run_id,)).fetchone()
        if row is None or (row["lease_token"], row["lease_epoch"]) != (lease.token, lease.epoch):
            raise LeaseLost(lease.run_id, row["lease_pid"] if row else None)

    def check_lease(self, lease: Lease) -> None:
        """Raise LeaseLost unless ``lease`` still holds its run (before an outside effect)."""
        try:
            self._fence(self._db(), lease)
        except DB_ERRORS as exc:
            raise StoreError(self._explain(exc)) from None

    def renew(self, lease: Lease) -> None:
        """The heartbeat: push the lease's expiry forward, if it is still ours."""
        with self._tx(durable=False) as db:
            self._fence(db, lease)
            db.execute(f"UPDATE runs SET lease_at = {_DB_NOW} WHERE id = ?", (lease.run_id,))

    def release(self, lease: Lease, status: RunStatus, error: str | None = None,
                step: tuple[str, dict[str, Any]] | None = None) -> None:
        """Give up the lease and set the run's status (with an optional timeline step)."""
        # The run's end (and a person's Stop) is reported to people: durable. A pause or a
        # failure lost with the power leaves an orphaned run that resume continues.
        with self._tx(durable=status in (RunStatus.DONE, RunStatus.ASKED, RunStatus.STOPPED)) as db:
            self._fence(db, lease)
            db.execute("UPDATE runs SET lease_pid = NULL, lease_token = NULL, lease_at = NULL,"
                       " status = ?, error = ?, updated_at = ? WHERE id = ?",
                       (status, error, time.time(), lease.run_id))
            if step:
                self._step(db, lease.run_id, *step)

    # -- the model's responses and calls ---------------------------------------------------

    def record_response(self, lease: Lease, *, response_id: str,
                        calls: list[tuple[str, str, str]], steps: list[tuple[str, dict[str, Any]]],
                        usage: dict[str, int], replies_sent: list[int],
                        transcript: Sequence[tuple[str, dict[str, Any]]] = (),
                        resent: dict[str, Any] | None = None) -> None:
        """Boundary 2: a response, its calls and its timeline steps, before any call runs.

        Args:
            transcript: ("input" or "output", item) pairs to append to the run's transcript:
                the items this request sent that were new, then the response's output items.
            resent: set when the run's stored response was gone and the transcript was sent
                instead: ``missing`` (the response id), ``items`` and ``bytes`` sent. The
                timeline and the audit log record it with the response, in this transaction.
        """
        run_id = lease.run_id
        # Durable only before an email: its call id is the outbox's idempotency key, and a
        # response lost with the power would be asked for again and bring a new call id.
        # Anything else is re-done safely (the request sent again, read-only calls re-run).
        durable = any(name in _EFFECT_CALLS for _, name, _ in calls)
        with self._tx(durable=durable) as db:
            self._fence(db, lease)
            if resent is not None:
                self._step(db, run_id, "resent", {**resent, "response_id": response_id})
                self._audit(db, "resent", "agent", run_id=run_id,
                            note=f"stored response {resent['missing']} was not found (expired "
                                 f"or deleted); sent the run's transcript instead "
                                 f"({resent['items']} items, {resent['bytes']:,} bytes), "
                                 f"continuing as {response_id}")
            self._append_transcript(db, run_id, response_id, transcript)
            answered = self._save_calls(db, run_id, response_id, calls)
            for kind, data in [*steps, *answered]:
                self._step(db, run_id, kind, data)
            for reply_id in replies_sent:
                db.execute("UPDATE replies SET response_id = ? WHERE id = ?",
                           (response_id, reply_id))
            db.execute(
                "UPDATE runs SET last_response_id = ?, requests = requests + 1,"
                " cost_ticks = cost_ticks + ?, input_tokens = input_tokens + ?,"
                " cached_tokens = cached_tokens + ?, output_tokens = output_tokens + ?,"
                f" lease_at = {_DB_NOW}, updated_at = ? WHERE id = ?",
                (response_id, usage.get("cost_ticks", 0), usage.get("input_tokens", 0),
                 usage.get("cached_tokens", 0), usage.get("output_tokens", 0), time.time(),
                 run_id))

    def _save_calls(self, db: Any, run_id: str, response_id: str,
                    calls: list[tuple[str, str, str]]) -> list[tuple[str, dict[str, Any]]]:
        """Insert a response's calls, each with its key and the order id its arguments name;
        returns the timeline steps of the calls answered at once.

        A call whose id the run already used (in an earlier response, or earlier in this one)
        is saved with an error for its output and no key, so it never runs: running it would
        reach the approval, refund or email of the call that had the id first.
        """
        ids = list({call_id for call_id, _, _ in calls})
        used: set[str] = set()
        for chunk in (ids[i:i + 500] for i in range(0, len(ids), 500)):
            marks = ",".join("?" * len(chunk))
            used.update(r[0] for r in db.execute(
                f"SELECT call_id FROM calls WHERE run_id = ? AND call_id IN ({marks})",
                (run_id, *chunk)))
        answered = []
        for seq, (call_id, name, arguments) in enumerate(calls):
            key, output = call_key(run_id, call_id), None
            if call_id in used:
                key, error = None, (f"This call repeats call id {call_id!r} of an earlier call "
                                    "in this run, so it was not run. Make the call again.")
                output = json.dumps({"error": error})
                answered.append(("result", {"call_id": call_id, "name": name,
                                            "output": {"error": error}}))
            used.add(call_id)
            db.execute("INSERT INTO calls(call_id, run_id, response_id, seq, name, arguments,"
                       " output, key, order_id) VALUES (?,?,?,?,?,?,?,?,?)",
                       (call_id, run_id, response_id, seq, name, arguments, output, key,
                        order_id_in(arguments)))
        return answered

    def _append_transcript(self, db: Any, run_id: str, response_id: str,
                           entries: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Append items to a run's transcript and count them on the run."""
        if not entries:
            return
        seq = db.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM transcript WHERE run_id = ?",
                         (run_id,)).fetchone()[0]
        total = 0
        for offset, (origin, item) in enumerate(entries):
            text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
            total += len(text.encode())
            db.execute("INSERT INTO transcript(run_id, seq, response_id, origin, item)"
                       " VALUES (?,?,?,?,?)", (run_id, seq + offset, response_id, origin, text))
        db.execute("UPDATE runs SET transcript_items = transcript_items + ?,"
                   " transcript_bytes = transcript_bytes + ? WHERE id = ?",
                   (len(entries), total, run_id))

    def transcript(self, run_id: str) -> list[TranscriptEntry]:
        """A run's transcript, oldest first (empty for a run that has made no request)."""
        rows = self._read("SELECT seq, response_id, origin, item FROM transcript"
                          " WHERE run_id = ? ORDER BY seq", (run_id,))
        return [TranscriptEntry(seq=r["seq"], response_id=r["response_id"], origin=r["origin"],
                                item=json.loads(r["item"])) for r in rows]

    def add_cost(self, lease: Lease, usage: dict[str, int], step: tuple[str, dict] | None
                 ) -> None:
        """Count a side request (the simulated customer) toward the run's requests and cost."""
        run_id = lease.run_id
        with self._tx(durable=False) as db:
            self._fence(db, lease)
            db.execute(
                "UPDATE runs SET requests = requests + 1, cost_ticks = cost_ticks + ?,"
                " input_tokens = input_tokens + ?, cached_tokens = cached_tokens + ?,"
                " output_tokens = output_tokens + ?, updated_at = ? WHERE id = ?",
                (usage.get("cost_ticks", 0), usage.get("input_tokens", 0),
                 usage.get("cached_tokens", 0), usage.get("output_tokens", 0), time.time(),
                 run_id))
            if step:
                self._step(db, run_id, *step)

    def calls(self, response_id: str) -> list[Call]:
        rows = self._read("SELECT call_id, run_id, response_id, name, arguments, output, key,"
                          " order_id FROM calls WHERE response_id = ? ORDER BY seq",
                          (response_id,))
        return [Call.model_validate(dict(r)) for r in rows]

    def calls_named(self, name: str) -> list[Call]:
        """Every call to one tool, across all runs, oldest response first (one query)."""
        rows = self._read("SELECT call_id, run_id, response_id, name, arguments, output, key,"
                          " order_id FROM calls WHERE name = ? ORDER BY run_id, response_id, seq",
                          (name,))
        return [Call.model_validate(dict(r)) for r in rows]

    def record_output(self, lease: Lease, call_id: str, output: str,
                      steps: list[tuple[str, dict[str, Any]]],
                      audit: dict[str, Any] | None = None) -> None:
        """Boundary 3: a call's output is saved the moment the call returns."""
        run_id = lease.run_id
        # Not durable: lost with the power, the call runs again and its stand-in hands back
        # what it did the first time (same idempotency key); read-only calls just re-run.
        with self._tx(durable=False) as db:
            self._fence(db, lease)
            db.execute("UPDATE calls SET output = ? WHERE run_id = ? AND call_id = ?"
                       " AND output IS NULL", (output, run_id, call_id))
            for kind, data in steps:
                self._step(db, run_id, kind, data)
            self._raise_escalations(db, run_id, steps)
            if audit:
                self._audit(db, run_id=run_id, **audit)
            db.execute(f"UPDATE runs SET lease_at = {_DB_NOW}, updated_at = ? WHERE id = ?",
                       (time.time(), run_id))

    # -- approvals -------------------------------------------------------------------------

    def queue_approval(self, lease: Lease, *, response_id: str, call_id: str, order_id: str,
                       summary: str, customer: str,
                       price: Callable[[dict[str, Held]], Quote | str]) -> Approval | str:
        """Boundary 4: a pending approval, its lines, its audit line and the run's pause.

        ``price`` is called inside the transaction with the lines other refunds hold on the
        order, so two tickets cannot both reserve the same line. Returns the approval, or the
        reason ``price`` gave (nothing is written then: the caller records the refusal).
        """
        run_id = lease.run_id
        with self._tx() as db:
            self._fence(db, lease)
            # The approval's id is the call's key (see callrecords.py): calls saved before
            # schema 6 keep their call id as key, so their approvals keep their ids.
            row = db.execute("SELECT key FROM calls WHERE run_id = ? AND response_id = ?"
                             " AND call_id = ? AND key IS NOT NULL",
                             (run_id, response_id, call_id)).fetchone()
            approval_id = row[0] if row else call_key(run_id, call_id)
            if db.execute("SELECT 1 FROM approvals WHERE id = ?", (approval_id,)).fetchone():
                return self.approval(approval_id, db)
            quote = price(self._held(db, order_id))
            if isinstance(quote, str):
                return quote
            # Requested by the database's clock, as expiry reads it: a host whose clock runs
            # ahead (or behind) neither expires a fresh proposal nor keeps a stale one.
            db.execute(
                "INSERT INTO approvals(id, run_id, response_id, call_id, order_id, amount_cents,"
                " proposed_cents, summary, customer, status, requested_at, requested_pid)"
                f" VALUES (?,?,?,?,?,?,?,?,?, 'pending', {_DB_NOW}, ?)",
                (approval_id, run_id, response_id, call_id, quote.order_id, quote.total_cents,
                 quote.total_cents, summary, customer, self.pid))
            for seq, q in enumerate(quote.lines):
                db.execute(
                    "INSERT INTO approval_lines(approval_id, order_id, seq, line, name, reason,"
                    " amount_cents, allowed_cents, fee_cents, held, units, quantity)"
                    " VALUES (?,?,?,?,?,?,?,?,?,1,?,?)",
                    (approval_id, quote.order_id, seq, q.line, q.name, q.reason, q.amount_cents,
                     q.allowed_cents, q.fee_cents, q.units, q.quantity))
            lines = _audit_lines(quote.lines)
            self._audit(db, "requested", "agent", run_id=run_id, approval_id=approval_id,
                        order_id=quote.order_id, amount=quote.amount, note=summary, lines=lines)
            self._step(db, run_id, "approval", {"approval_id": approval_id,
                                                "order_id": quote.order_id,
                                                "amount": quote.amount, "summary": summary,
                                                "lines": lines})
            self._touch(db, run_id, status=RunStatus.WAITING)
        return self.approval(approval_id)

    def _held(self, db: Any, order_id: str, except_id: str | None = None,
              lock: bool = True) -> dict[str, list[Held]]:
        """The units of an order that refunds hold, by line: approved ones as refunded, pending.

        A line may be held by several refunds (one glass refunded, another waiting), so each
        line maps to its holds, oldest first; a row without units (from before schema 8)
        holds all the line's units. ``lock`` (inside a write transaction) keeps other
        transactions from reserving units of this order until this one commits.
        """
        if lock:
            self.dialect.lock_order(db, order_id)
        rows = db.execute(
            "SELECT l.line, l.reason, l.amount_cents, l.units, l.approval_id, a.status"
            " FROM approval_lines l JOIN approvals a ON a.id = l.approval_id"
            " WHERE l.order_id = ? AND l.held = 1 ORDER BY a.requested_at, l.approval_id",
            (order_id,)).fetchall()
        held: dict[str, list[Held]] = {}
        for r in rows:
            if r["approval_id"] != except_id:
                held.setdefault(r["line"], []).append(Held(
                    r["reason"], "refunded" if r["status"] == "approved" else "pending",
                    f"approval {r['approval_id']}", r["amount_cents"], r["units"]))
        return held

    def held_lines(self, order_id: str, except_id: str | None = None
                   ) -> dict[str, list[Held]]:
        """The units of an order held by refunds in this store (made, approved or pending)."""
        try:
            return self._held(self._db(), order_id, except_id, lock=False)
        except DB_ERRORS as exc:
            raise StoreError(self._explain(exc)) from None

    def approval(self, approval_id: str, db: Any | None = None) -> Approval:
        found = self._approvals("WHERE id = ?", (approval_id,), db)
        if not found:
            raise NotFound(f"No refund approval with id {approval_id!r}.")
        return found[0]

    def find_approval(self, key: str) -> Approval | None:
        """The approval an issue_refund call queued, by the call's key (Call.key), or None."""
        found = self._approvals("WHERE id = ?", (key,))
        return found[0] if found else None

    def approvals(self, status: str | None = "pending", limit: int = 200) -> list[Approval]:
        if status is None:
            return self._approvals("ORDER BY requested_at DESC LIMIT ?", (_no_limit(limit),))
        return self._approvals("WHERE status = ? ORDER BY requested_at LIMIT ?",
                               (status, _no_limit(limit)))

    def pending_count(self) -> int:
        """How many refunds wait for a decision."""
        return self._read("SELECT COUNT(*) FROM approvals WHERE status = 'pending'")[0][0]

    def run_approvals(self, run_id: str) -> list[Approval]:
        """The run's proposals, oldest first."""
        return self._approvals("WHERE run_id = ? ORDER BY requested_at", (run_id,))

    def _approvals(self, where: str, args: tuple, db: Any | None = None,
                   lock: bool = False) -> list[Approval]:
        try:
            db = db or self._db()
            rows = [dict(r) for r in db.execute(
                f"SELECT * FROM approvals {where}" + (self.dialect.lock_row if lock else ""),
                args)]
            lines: dict[str, list[dict[str, Any]]] = {r["id"]: [] for r in rows}
            ids = list(lines)
            for chunk in (ids[i:i + 500] for i in range(0, len(ids), 500)):
                marks = ",".join("?" * len(chunk))
                for line in db.execute(f"SELECT * FROM approval_lines WHERE approval_id IN"
                                       f" ({marks}) ORDER BY approval_id, seq", chunk):
                    lines[line["approval_id"]].append(dict(line))
        except DB_ERRORS as exc:
            raise StoreError(self._explain(exc)) from None
        return [Approval.model_validate({**r, "lines": lines[r["id"]]}) for r in rows]

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None,
               keep: list[str] | None = None,
               requote: Callable[[Approval, list[str], dict[str, Held]], Quote | str] | None
               = None, limit_cents: int | None = None,
               two_person_above_cents: int | None = None) -> Approval:
        """Boundary 5: compare-and-set on 'pending', with its audit line, in one transaction.

        Above ``two_person_above_cents`` the first approval only records a sign-off (the
        approval stays pending; see approving.four_eyes) and a second, different person
        completes it; nobody approves a refund on a ticket they opened (runs.raised_by).

        An approval may keep only some of the proposed lines (``keep``, skus); the others are
        declined and their lines freed. ``requote`` prices the kept lines inside the same
        transaction, against the lines other refunds hold right now, so nothing the policy
        forbids can be approved, however the store changed since the proposal. ``limit_cents``
        is the most the deciding person may approve on the order (None: no limit); what the
        kept lines pay plus what that person approved on the order before (any ticket, any run)
        is compared with it, in the same transaction.

        Raises:
            NotFound: no such approval.
            AlreadyDecided: someone decided first; the late attempt is audited as 'ignored'.
            DecisionRefused: the kept lines are not the proposal's, ``requote`` gave a
                reason, or the amount is above ``limit_cents`` (audited as 'refused'; the
                approval stays pending).
        """
        with self._tx() as db:
            approval = self._pending(db, approval_id, "approve" if approve else "reject", by)
            if isinstance(approval, AlreadyDecided):
                late: Exception | None = approval
            elif approve:
                late = self._approve(db, approval, by, note, keep, requote, limit_cents,
                                     two_person_above_cents)
            else:
                late = self._close(db, approval, "rejected", by, note)
        if late:
            raise late
        return self.approval(approval_id)

    def ask(self, approval_id: str, by: str, question: str) -> Approval:
        """Send a proposal back to the customer with ``question``, paying nothing (yet).

        The approval closes as 'asked' and frees its lines; the run tells the customer, waits
        for their reply, and may propose again then. Same compare-and-set as :meth:`decide`.

        Raises:
            NotFound, AlreadyDecided: as for :meth:`decide`.
        """
        with self._tx() as db:
            approval = self._pending(db, approval_id, "ask the customer about", by)
            late = approval if isinstance(approval, AlreadyDecided) else \
                self._close(db, approval, "asked", by, question)
        if late:
            raise late
        return self.approval(approval_id)

    def expire(self, older_than: float, by: str = "expiry") -> list[Approval]:
        """Close every approval pending for more than ``older_than`` seconds as 'expired'.

        Each is its own compare-and-set, so a person deciding at the same moment wins or loses
        cleanly. Returns the approvals this call expired.
        """
        moved = self.moved_message()
        if moved:   # even with nothing due: a cron job on the old settings must hear of it
            raise StoreError(moved)
        # By the database's clock, which wrote requested_at: not this process's own.
        due = [a.id for a in self._approvals(
            f"WHERE status = 'pending' AND requested_at < {_DB_NOW} - ?", (older_than,))]
        expired = []
        for approval_id in due:
            with self._tx() as db:
                approval = self._pending(db, approval_id, "expire", by, audit_late=False)
                if isinstance(approval, AlreadyDecided):
                    continue
                self._close(db, approval, "expired", by,
                            f"Not decided within {_span(older_than)}.")
            expired.append(self.approval(approval_id))
        return expired

    def _pending(self, db: Any, approval_id: str, attempt: str, by: str,
                 audit_late: bool = True) -> Approval | AlreadyDecided:
        """The approval if it is still pending; else the late attempt, audited as 'ignored'."""
        # Locked until the decision commits: this is the compare half of compare-and-set.
        found = self._approvals("WHERE id = ?", (approval_id,), db, lock=True)
        if not found:
            raise NotFound(f"No refund approval with id {approval_id!r}.")
        approval = found[0]
        if approval.status == "pending":
            return approval
        if audit_late:
            self._audit(db, "ignored", by, run_id=approval.run_id, approval_id=approval_id,
                        order_id=approval.order_id, amount=approval.amount,
                        note=f"tried to {attempt} it; already {approval.status} by "
                             f"{approval.decided_by}")
        return AlreadyDecided(approval_id, approval.status, approval.decided_by or "",
                              approval.decided_at, tried_by=by)

    def _close(self, db: Any, approval: Approval, status: str, by: str,
               note: str | None) -> None:
        """A decision that pays nothing (rejected, asked, expired): every line is freed."""
        db.execute("UPDATE approval_lines SET held = 0, decision = ? WHERE approval_id = ?",
                   (status, approval.id))
        self._set_decision(db, approval, status, by, note, approval.amount_cents)
        self._audit(db, status, by, run_id=approval.run_id, approval_id=approval.id,
                    order_id=approval.order_id, amount=approval.amount, note=note,
                    lines=_audit_lines(approval.lines))
        self._step(db, approval.run_id, "decision",
                   {"approval_id": approval.id, "decision": status, "by": by, "note": note})

    def _approve(self, db: Any, approval: Approval, by: str, note: str | None,
                 keep: list[str] | None, requote: Callable | None,
                 limit_cents: int | None = None,
                 two_person_above_cents: int | None = None) -> Exception | None:
        proposed = [line.line for line in approval.item_lines]
        kept = proposed if keep is None else [line.strip() for line in keep]
        if not proposed:
            # A refund of the shipping alone (owed once every item was refunded as damaged by
            # refunds proposed side by side) has no line to tick: it is approved as it is.
            strangers = sorted(set(kept) - {SHIPPING})
            if strangers:
                return DecisionRefused(
                    f"This refund pays only the shipping ({SHIPPING}); approve it as it is, or "
                    f"reject it with a note. {', '.join(strangers)} is not one of its lines.")
            kept = []
        else:
            strangers = sorted(set(kept) - set(proposed))
            if strangers or not kept:
                return DecisionRefused(
                    f"Keep at least one of the proposed lines ({', '.join(proposed)}); "
                    + (f"{', '.join(strangers)} is not one of them." if strangers else
                       "to refund nothing, reject with a note instead."))
        where = {"run_id": approval.run_id, "approval_id": approval.id,
                 "order_id": approval.order_id}
        quote: Quote | str | None = None
        if requote is not None:
            quote = requote(approval, kept, self._held(db, approval.order_id, approval.id))
            if isinstance(quote, Quote) and quote.total_cents > approval.proposed_cents:
                quote = (f"the kept lines now come to ${quote.amount:.2f}, more than the "
                         f"${approval.amount:.2f} proposed; ask the agent to propose again.")
            elif isinstance(quote, Quote):
                # Line by line too: one line's rise can hide behind another line's removal.
                quote = overpaid_line(approval.lines, quote) or quote
        if isinstance(quote, str):
            self._audit(db, "refused", by, **where, amount=approval.amount, note=quote)
            return DecisionRefused(f"Cannot approve: {quote}")
        amounts = ({q.line: q for q in quote.lines} if quote is not None else
                   {line.line: line for line in approval.lines if line.line in kept
                    or line.reason == "shipping"})
        total = sum(q.amount_cents for q in amounts.values())
        # Checked here, not only on the card: the amount is what the kept lines pay now, and
        # the limit covers all this person approved on the order (every ticket, every run),
        # read under the order's lock so two decisions cannot both count the old total.
        # Before any line changes: a refusal leaves the proposal exactly as it was.
        reason = None if limit_cents is None else limit_problem(
            by, limit_cents, approval.order_id, total,
            self._approved_by(db, approval.order_id, by))
        raised = db.execute("SELECT account FROM raised_by WHERE run_id = ?",
                            (approval.run_id,)).fetchone()
        reason = reason or own_ticket_problem(by, raised[0] if raised else None)
        step, why = four_eyes(by, total, [k for k in kept if k != SHIPPING],
                              two_person_above_cents, self.signoff(approval.id, db))
        reason = reason or why
        if reason:
            self._audit(db, "refused", by, **where, amount=total / 100, note=reason)
            return DecisionRefused(f"Cannot approve: {reason}")
        if step == SIGN_OFF:   # the refund stays pending, its lines held, for a second person
            self._sign_off(db, approval, by, total, [k for k in kept if k != SHIPPING], note)
            return None
        assert step == PAY
        for line in approval.lines:
            if line.line in amounts:
                # Units only ever go down here (the approver lowered them; the re-quote
                # refuses more than proposed), so the row still fits inside its line.
                kept_units = getattr(amounts[line.line], "units", None)
                db.execute("UPDATE approval_lines SET decision = 'approved', amount_cents = ?,"
                           " fee_cents = ?, units = COALESCE(?, units)"
                           " WHERE approval_id = ? AND line = ?",
                           (amounts[line.line].amount_cents, amounts[line.line].fee_cents,
                            kept_units, approval.id, line.line))
            else:
                db.execute("UPDATE approval_lines SET held = 0, decision = 'declined'"
                           " WHERE approval_id = ? AND line = ?", (approval.id, line.line))
        self._set_decision(db, approval, "approved", by, note, total)
        declined = [line for line in approval.lines if line.line not in amounts]
        edit = ""
        if declined:
            edit = (f"Approved {len(amounts)} of {len(approval.lines)} lines; declined "
                    + ", ".join(f"{line.line} ({line.name})" for line in declined) + ".")
        fewer = [f"{line.line} ({line.name}) {units} of the {line.units} units proposed"
                 for line in approval.lines if line.line in amounts and line.units is not None
                 and (units := getattr(amounts[line.line], "units", None)) is not None
                 and units < line.units]
        if fewer:
            edit = " ".join(filter(None, [edit, "Approved " + ", ".join(fewer) + "."]))
        kept_lines = [{**line.model_dump(), "amount_cents": amounts[line.line].amount_cents,
                       "units": getattr(amounts[line.line], "units", None) or line.units}
                      for line in approval.lines if line.line in amounts]
        self._audit(db, "approved", by, **where, amount=total / 100,
                    note=" ".join(filter(None, [edit, note])) or None,
                    lines=_audit_lines(kept_lines))
        self._step(db, approval.run_id, "decision",
                   {"approval_id": approval.id, "decision": "approved", "by": by, "note": note,
                    "amount": total / 100, "declined": [line.line for line in declined]})
        return None

    def _approved_by(self, db: Any, order_id: str, by: str) -> int:
        """What ``by`` has approved on this order so far, in cents (locks the order)."""
        self.dialect.lock_order(db, order_id)
        row = db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM approvals WHERE"
                         " order_id = ? AND status = 'approved' AND decided_by = ?",
                         (order_id, by)).fetchone()
        return int(row[0])

    def _set_decision(self, db: Any, approval: Approval, status: str, by: str,
                      note: str | None, amount_cents: int) -> None:
        db.execute("UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?,"
                   " decided_pid = ?, note = ?, amount_cents = ? WHERE id = ?"
                   " AND status = 'pending'",
                   (status, by, time.time(), self.pid, note, amount_cents, approval.id))
        # A refund sent to a lead is the lead's no more once anyone decided it.
        db.execute("UPDATE escalations SET taken_by = ?, taken_at = ? WHERE approval_id = ?"
                   " AND taken_by IS NULL", (by, time.time(), approval.id))

    # -- accounts -------------------------------------------------------------------------

    def add_account(self, name: str, role: str, limit_cents: int | None, password: str,
                    by: str) -> None:
        """Create an account; ``password`` is the encoded hash (see accounts.py).

        Who may sign decisions is part of the record: the change is audited, by ``by``.
        """
        with self._tx() as db:
            # Names are unique by their canonical key (case, width, look-alike letters), which
            # SQL cannot compute: the check reads every name under the write lock (SQLite's
            # BEGIN IMMEDIATE; on PostgreSQL an advisory lock that no order id can take).
            self.dialect.lock_order(db, "accounts (names)")
            key = name_key(name)
            for (existing,) in db.execute("SELECT name FROM accounts").fetchall():
                if name_key(existing) == key:
                    raise DecisionRefused(
                        f"An account named {existing!r} already exists ({name!r} is the same "
                        "name: names are compared ignoring case, spacing and look-alike "
                        "letters).")
            added = db.execute("INSERT INTO accounts(name, role, limit_cents, password,"
                               " created_at) VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
                               (name, role, limit_cents, password, time.time())).rowcount
            if not added:
                raise DecisionRefused(f"An account named {name!r} already exists.")
            limit = "no limit" if limit_cents is None else f"up to ${limit_cents / 100:,.2f}"
            self._audit(db, "account_added", by, note=f"{name}: {role}, {limit}")

    def remove_account(self, name: str, by: str) -> None:
        with self._tx() as db:
            if not db.execute("DELETE FROM accounts WHERE name = ?", (name,)).rowcount:
                raise NotFound(f"No account named {name!r}.")
            self._audit(db, "account_removed", by, note=name)

    def account_rows(self, name: str | None = None) -> list[dict[str, Any]]:
        """Accounts as plain rows (name, role, limit_cents, password, created_at), by name."""
        if name is None:
            return [dict(r) for r in self._read("SELECT * FROM accounts ORDER BY name")]
        return [dict(r) for r in self._read("SELECT * FROM accounts WHERE name = ?", (name,))]

    def has_accounts(self) -> bool:
        return bool(self._read("SELECT 1 FROM accounts LIMIT 1"))

    # -- the sign-in throttle, shared by every process on this store (see accounts.py) ------

    def sign_in_failures(self, key: str, client: str, window: float) -> tuple[int, float]:
        """(failed sign-ins of ``key`` from ``client`` in the last ``window`` seconds, seconds
        since the oldest of them), by the database's clock."""
        count, oldest, now = self._read(
            f"SELECT COUNT(*), MIN(at), {_DB_NOW} FROM sign_in_failures"
            f" WHERE name_key = ? AND client = ? AND at > {_DB_NOW} - ?",
            (key, client, window))[0]
        return count, (now - oldest) if count else 0.0

    def sign_in_failed(self, key: str, client: str, window: float, actor: str, note: str
                       ) -> None:
        """Count one failed sign-in under ``key`` and audit it as by ``actor`` (the name as
        tried, in canonical form; never the password).

        Entries older than the window are dropped here, so the table holds one window's worth.
        """
        with self._tx() as db:
            db.execute(f"DELETE FROM sign_in_failures WHERE at <= {_DB_NOW} - ?", (window,))
            db.execute("INSERT INTO sign_in_failures(name_key, client, at)"
                       f" VALUES (?, ?, {_DB_NOW})", (key, client))
            self._audit(db, "sign_in_failed", actor, note=note)

    def sign_in_succeeded(self, key: str, client: str) -> None:
        """Forget ``client``'s failures for ``key`` (a write only when there are some)."""
        if self._read("SELECT 1 FROM sign_in_failures WHERE name_key = ? AND client = ?"
                      " LIMIT 1", (key, client)):
            with self._tx(durable=False) as db:
                db.execute("DELETE FROM sign_in_failures WHERE name_key = ? AND client = ?",
                           (key, client))

    def audit_head(self) -> tuple[int, int]:
        """(number of entries, id of the newest): cheap, to notice that the log changed."""
        count, last = self._read("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM audit")[0]
        return count, last

    # -- the stand-ins' idempotency records, shared by every host (see payments, outbox) ----

    def ledger_once(self, log: str, key: str, request: dict[str, Any],
                    make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """Do ``make`` once per (log, key), as ledger.IdempotentLog does in a file; returns
        (record, reused). The unique key makes it once across hosts: of two first requests at
        the same moment, the second waits for the first to commit and gets its record back.

        Raises:
            IdempotencyConflict: the key was used before with a different ``request``.
        """
        find = "SELECT record FROM ledger WHERE log = ? AND key = ?"
        with self._tx() as db:  # durable: the record stands for money paid or an email sent
            row = db.execute(find, (log, key)).fetchone()
            if row is None:
                record = {"idempotency_key": key, "request": request, **make(),
                          "created_at": time.time(), "pid": self.pid, "host": self.host}
                if db.execute("INSERT INTO ledger(log, key, record) VALUES (?,?,?)"
                              " ON CONFLICT DO NOTHING",
                              (log, key, json.dumps(record))).rowcount:
                    return record, False
                row = db.execute(find, (log, key)).fetchone()
            record = json.loads(row[0])
            if record.get("request") != request:
                raise IdempotencyConflict(
                    f"Idempotency key {key} was already used with other arguments.")
            return record, True

    def ledger_find(self, log: str, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT record FROM ledger WHERE log = ? AND key = ?", (log, key))
        return json.loads(rows[0][0]) if rows else None

    def ledger_rows(self, log: str) -> list[tuple[int, str]]:
        """(row id, record as stored JSON) of one log, oldest first: for reconciling."""
        return [(r[0], r[1]) for r in
                self._read("SELECT id, record FROM ledger WHERE log = ? ORDER BY id", (log,))]

    # -- what outside systems report later (see outside/webhooks.py) -----------------------

    def record_provider_event(self, event_id: str, provider: str, kind: str, refund_id: str,
                              status: str | None, approval_id: str | None, note: str,
                              data: dict[str, Any], needs_person: bool) -> bool:
        """Record a provider's event once; False when this event id was recorded before.

        In one transaction: the event's row, an audit line (``provider_failed`` when the
        refund failed or was cancelled, else ``provider_update``), and, when ``needs_person``,
        the ticket marked for a person (an error step on its timeline and, unless a process
        is working on it right now, the run failed with ``note``, which the desk lists under
        "Failed or stopped").
        """
        approval = None
        with self._tx() as db:
            if not db.execute("INSERT INTO provider_events(id, at, provider, type, refund_id,"
                              " status, approval_id, data) VALUES (?,?,?,?,?,?,?,?)"
                              " ON CONFLICT DO NOTHING",
                              (event_id, time.time(), provider, kind, refund_id, status,
                               approval_id, json.dumps(data))).rowcount:
                return False
            if approval_id:
                rows = self._approvals("WHERE id = ?", (approval_id,), db)
                approval = rows[0] if rows else None
            run_id = approval.run_id if approval else None
            self._audit(db, "provider_failed" if needs_person else "provider_update", provider,
                        run_id=run_id, approval_id=approval.id if approval else None,
                        order_id=approval.order_id if approval else None,
                        amount=approval.amount if approval else None, note=note)
            if needs_person and run_id:
                self._step(db, run_id, "error", {"message": note})
                db.execute("UPDATE runs SET status = ?, error = ?, updated_at = ?"
                           " WHERE id = ? AND lease_token IS NULL",
                           (RunStatus.FAILED, note, time.time(), run_id))
            return True

    def record_uncertain(self, lease: Lease, approval: Approval, note: str) -> None:
        """A refund whose request left but whose answer never came (outside/stripe.py): an
        audit line ``uncertain`` (actor ``payments``) in the run's name, durable, so the team
        sees that money may have moved before the run is resumed and settles it."""
        with self._tx() as db:
            self._fence(db, lease)
            self._audit(db, "uncertain", "payments", run_id=lease.run_id,
                        approval_id=approval.id, order_id=approval.order_id,
                        amount=approval.amount, note=note)

    def provider_events(self) -> list[dict[str, Any]]:
        """Every provider event recorded, oldest first (for reconciling)."""
        return [dict(r) for r in self._read(
            "SELECT id, at, provider, type, refund_id, status, approval_id FROM provider_events"
            " ORDER BY at, id")]

    # -- moving a whole store (see migrate.py) ---------------------------------------------

    def row_counts(self) -> dict[str, int]:
        """How many rows each table holds."""
        return {table: self._read(f"SELECT COUNT(*) FROM {table}")[0][0] for table in TABLES}

    def columns(self, table: str) -> list[str]:
        """The table's column names, in this store's order (an upgraded SQLite store has the
        columns later versions added at the end)."""
        try:
            cursor = self._db().execute(f"SELECT * FROM {table} LIMIT 0")
            return [column[0] for column in cursor.description]
        except DB_ERRORS as exc:
            raise StoreError(self._explain(exc)) from None

    def table_rows(self, table: str, columns: Sequence[str], batch: int = 5000
                   ) -> Iterator[list[tuple[Any, ...]]]:
        """The table's rows (those ``columns``) in primary key order, ``batch`` at a time."""
        try:
            cursor = self._db().execute(f"SELECT {', '.join(columns)} FROM {table}"
                                        f" ORDER BY {TABLES[table]}")
            while rows := cursor.fetchmany(batch):
                yield [tuple(row) for row in rows]
        except DB_ERRORS as exc:
            raise StoreError(self._explain(exc)) from None

    def leased_runs(self, live: bool = True) -> list[Run]:
        """Runs that a live process holds right now (see _lease_live); with ``live`` False,
        every run with a lease, abandoned ones included."""
        rows = self._read("SELECT * FROM runs WHERE lease_token IS NOT NULL ORDER BY updated_at")
        db = self._db()
        return [Run.model_validate(dict(r)) for r in rows
                if not live or self._lease_live(db, dict(r))]

    def runs_without_transcript(self) -> list[Run]:
        """Runs that made a request but whose transcript does not reach their last response
        (started before transcripts were kept, or edited): they can continue only from the
        provider's stored response, never from their own transcript (see Agent._history)."""
        rows = self._read(
            "SELECT * FROM runs WHERE last_response_id IS NOT NULL AND (transcript_complete = 0"
            " OR COALESCE((SELECT t.response_id FROM transcript t WHERE t.run_id = runs.id"
            " ORDER BY t.seq DESC LIMIT 1), '') != last_response_id) ORDER BY created_at")
        return [Run.model_validate(dict(r)) for r in rows]

    @contextmanager
    def writers_held_off(self) -> Iterator[None]:
        """Read a picture of the store that no other process changes meanwhile.

        SQLite only: the file's write lock (BEGIN IMMEDIATE), released without writing. Reads
        through this store on this thread see that picture; other processes' writes wait (up
        to the busy timeout) and then fail, so nobody's decision is lost in between.
        """
        if not isinstance(self.dialect, SQLite):
            raise StoreError("Only an SQLite store can be held this way.")
        db = self._db()
        try:
            # Synced, should mark_moved commit: not allowed inside the transaction, so now.
            db.execute("PRAGMA synchronous=FULL")
            self._local.synchronous = "FULL"
            db.execute("BEGIN IMMEDIATE")
        except DB_ERRORS as exc:
            raise StoreError(self._explain(exc)) from None
        try:
            yield
        finally:
            if db.in_transaction:   # mark_moved may have committed it
                self._rollback(db)

    def mark_moved(self, target: str) -> None:
        """Mark this SQLite store as moved to ``target`` (shown as is: pass the URL without
        its password), inside :meth:`writers_held_off`, and commit: from then on every write
        is refused with a message naming ``target``, reads still work.

        Written in the held-off transaction, so no write lands between the copy and the mark.
        """
        db = self._db()
        if not isinstance(self.dialect, SQLite) or not db.in_transaction:
            raise StoreError("Only an SQLite store held by writers_held_off can be marked moved.")
        try:
            db.execute("INSERT INTO store_moved(id, target, at) VALUES (1, ?, ?)",
                       (target, time.time()))
            db.execute("COMMIT")   # synced: writers_held_off set synchronous=FULL
        except DB_ERRORS as exc:
            self._rollback(db)
            raise StoreError(self._explain(exc)) from None

    @contextmanager
    def bulk_load(self) -> Iterator[BulkLoad]:
        """One write transaction that fills tables with COPY (PostgreSQL only).

        Every table is locked against other writers (readers go on) until it commits; if the
        body raises, nothing of it stays. Reads through this store on this thread, such as
        ``reconcile``, see the rows loaded so far.
        """
        if not isinstance(self.dialect, Postgres):
            raise StoreError("Only a PostgreSQL store is filled in bulk.")
        with self._tx() as db:
            db.execute(f"LOCK TABLE {', '.join(TABLES)} IN EXCLUSIVE MODE")
            yield BulkLoad(self, db)

    # -- replies ---------------------------------------------------------------------------

    def add_reply(self, run_id: str, text: str, simulated: bool, lease: Lease | None = None
                  ) -> Reply:
        """Save a customer's reply and mark the run as having work again, or refuse it.

        A reply from a person is accepted only while the run is finished and nobody advances
        it, checked in the same transaction as the insert: a refused reply is never stored. A
        simulated reply is written by the run's owner, under its ``lease``.

        Raises:
            RunNotReady: the run is not finished, or a process is working on it.
        """
        with self._tx() as db:
            if lease is not None:
                self._fence(db, lease)
            else:
                row = db.execute("SELECT * FROM runs WHERE id = ?" + self.dialect.lock_row,
                                 (run_id,)).fetchone()
                if row is None:
                    raise NotFound(f"No run with id {run_id!r}.")
                if row["status"] not in (RunStatus.DONE, RunStatus.ASKED) or \
                        self._lease_live(db, dict(row)):
                    raise RunNotReady(
                        f"Run {run_id} is {row['status']}; a customer can write back once the "
                        "agent has finished. The reply was not saved; send it again then.")
            cur = db.execute("INSERT INTO replies(run_id, at, text, simulated) VALUES (?,?,?,?)"
                             " RETURNING id", (run_id, time.time(), text, int(simulated)))
            reply_id = cur.fetchone()[0]
            self._step(db, run_id, "reply", {"text": text, "simulated": simulated})
            # The run has work again; marking it working lets a resume find it after a crash.
            self._touch(db, run_id, status=RunStatus.WORKING)
            if simulated:
                db.execute("UPDATE runs SET simulated_replies = simulated_replies + 1"
                           " WHERE id = ?", (run_id,))
        return self.replies(run_id, reply_id=reply_id)[0]

    def replies(self, run_id: str, unsent_only: bool = False,
                reply_id: int | None = None) -> list[Reply]:
        sql = "SELECT * FROM replies WHERE run_id = ?"
        args: tuple = (run_id,)
        if unsent_only:
            sql += " AND response_id IS NULL"
        if reply_id is not None:
            sql += " AND id = ?"
            args += (reply_id,)
        rows = self._read(sql + " ORDER BY id", args)
        return [Reply.model_validate({**dict(r), "simulated": bool(r["simulated"])})
                for r in rows]

    # -- timeline and audit ---------------------------------------------------------------

    def steps(self, run_id: str, after: int = 0) -> list[Step]:
        rows = self._read("SELECT * FROM steps WHERE run_id = ? AND id > ? ORDER BY id",
                          (run_id, after))
        return [Step.model_validate({**dict(r), "data": json.loads(r["data"])}) for r in rows]

    def last_step_id(self, run_id: str) -> int:
        return self._read("SELECT COALESCE(MAX(id), 0) FROM steps WHERE run_id = ?",
                          (run_id,))[0][0]

    def audit(self, limit: int | None = None) -> list[AuditEntry]:
        sql = "SELECT * FROM audit ORDER BY id"
        rows = self._read(sql) if limit is None else self._read(
            "SELECT * FROM (SELECT * FROM audit ORDER BY id DESC LIMIT ?) AS recent ORDER BY id",
            (limit,))
        return [AuditEntry.model_validate({**dict(r), "lines": json.loads(r["lines"])
                                           if r["lines"] else None}) for r in rows]

    def verify_audit(self, entries: list[AuditEntry] | None = None,
                     approvals: list[Approval] | None = None) -> str | None:
        """Check the audit chain; None if intact, else a sentence naming the first bad entry.

        The chain catches an edited, reordered or removed entry anywhere but at the end. The
        facts the log records (approvals, their decisions, refunds in the timeline) are then
        checked against it, which catches a removed last entry, or an edit whose hashes were
        recomputed, as long as the other tables were left alone.

        ``entries`` and ``approvals``: the whole audit and every approval, when the caller has
        already read them (reconcile does), so a large store is not read twice.
        """
        prev = GENESIS_HASH
        entries = self.audit() if entries is None else entries
        for entry in entries:
            if entry.prev_hash != prev:
                return (f"Audit entry {entry.id} does not follow the entry before it: an entry "
                        "was removed or reordered just before it.")
            if audit_hash(prev, entry.model_dump()) != entry.hash:
                return f"Audit entry {entry.id} ({entry.event}) was edited after it was written."
            prev = entry.hash
        anchor = self._read("SELECT entries, head FROM audit_anchor")
        if anchor and (anchor[0]["entries"], anchor[0]["head"]) != (len(entries), prev):
            return (f"The audit log has {len(entries)} entries ending in {prev[:12]}, but its "
                    f"anchor says {anchor[0]['entries']} ending in {anchor[0]['head'][:12]}: "
                    "the newest entries were removed or edited.")
        lines = {(e.event, e.approval_id, e.actor) for e in entries}
        requested = {e.approval_id for e in entries if e.event == "requested"}
        for a in self.approvals(status=None, limit=-1) if approvals is None else approvals:
            if a.id not in requested:
                return (f"Approval {a.id} ({a.order_id}, ${a.amount:.2f}) has no 'requested' "
                        "entry in the audit log: an entry was removed.")
            if a.status != "pending" and (a.status, a.id, a.decided_by) not in lines:
                return (f"Approval {a.id} was {a.status} by {a.decided_by}, but the audit log has "
                        f"no '{a.status}' entry by {a.decided_by}: an entry was removed or edited.")
        paid = {e.note for e in entries if e.event in ("issued", "reused")}
        for row in self._read("SELECT run_id, data FROM steps WHERE kind = 'refund' ORDER BY id"):
            refund_id = json.loads(row["data"]).get("refund_id")
            if refund_id not in paid:
                return (f"Refund {refund_id} is in run {row['run_id']}'s timeline, but the audit "
                        "log has no 'issued' or 'reused' entry for it: an entry was removed or "
                        "edited.")
        return None


class BulkLoad:
    """The tables of a PostgreSQL store, being filled in one transaction (Store.bulk_load)."""

    def __init__(self, store: Store, db: Any) -> None:
        self.store, self.db = store, db

    def clear(self, table: str) -> None:
        self.db.execute(f"DELETE FROM {table}")

    def copy(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
        """COPY ``rows`` (values for ``columns``) into ``table``; returns how many."""
        count = 0
        try:
            with self.db.conn.cursor() as cursor, cursor.copy(
                    f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
                    count += 1
        except DB_ERRORS as exc:
            raise StoreError(f"Could not copy the {table} table: "
                             f"{self.store._explain(exc)}") from None
        return count

    def analyze(self) -> None:
        """Give the planner the new tables' statistics now, not at autovacuum's next pass."""
        self.db.execute(f"ANALYZE {', '.join(TABLES)}")

    def reset_sequences(self) -> None:
        """Move each ``id`` sequence past the highest id copied in, so new rows never collide
        with copied ones (the schema's ``INTEGER PRIMARY KEY`` is a BIGSERIAL here)."""
        for table, key in TABLES.items():
            if key != "id":
                continue
            sequence = self.db.execute("SELECT pg_get_serial_sequence(?, 'id')",
                                       (table,)).fetchone()[0]
            if sequence is not None:  # text ids (runs, approvals) and the anchor have none
                self.db.execute(f"SELECT setval(?, (SELECT COALESCE(MAX(id), 0) + 1 FROM"
                                f" {table}), false)", (sequence,))


def _calls_v6(db: Any, old_table: str | None) -> None:
    """Step 6 for the calls a store already has: each keeps its call id as its key (the id its
    approval and its payment or email record already carry) and gets the order id its
    arguments name, read here, in Python, so bad JSON in one call cannot stop the upgrade.

    ``old_table``: on SQLite, the old table, copied into the new one; None on PostgreSQL,
    whose table gained the columns in place.
    """
    source = old_table or "calls"
    rows = db.execute(f"SELECT * FROM {source}").fetchall()
    for row in rows:
        # A table that already has keys (a store put back to an older version number by
        # hand, as tests do) keeps them: they are what its approvals and logs carry.
        kept = row["key"] if "key" in row.keys() and old_table else None
        fields = (kept or row["call_id"], order_id_in(row["arguments"]))
        where = (row["run_id"], row["response_id"], row["seq"])
        if old_table is None:
            db.execute("UPDATE calls SET key = ?, order_id = ?"
                       " WHERE run_id = ? AND response_id = ? AND seq = ?", fields + where)
        else:
            db.execute("INSERT INTO calls(key, order_id, run_id, response_id, seq, call_id, name,"
                       " arguments, output) VALUES (?,?,?,?,?,?,?,?,?)",
                       fields + where + (row["call_id"], row["name"], row["arguments"],
                                         row["output"]))


def _no_limit(limit: int) -> int:
    """SQLite reads a negative LIMIT as "no limit"; PostgreSQL refuses it. Both take a huge one."""
    return limit if limit >= 0 else 2**62


def _moved_message(path: Path | str, target: str, at: float) -> str:
    """Why a moved SQLite store refuses a write, and where the live store is."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
    return (f"{path} was moved to PostgreSQL at {target} by `refund-agent migrate` on {when}, "
            "so nothing is written here any more (a decision or a refund made on both would "
            "count twice). Set REFUND_AGENT_DATABASE_URL to that database (with its password) "
            "and run this again; this file stays readable for reference.")


def _span(seconds: float) -> str:
    """``7 days``, ``1 hour``, ``90 seconds``: the largest unit that gives a whole number."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    n = round(seconds)
    return f"{n} second{'s' if n != 1 else ''}"


def _audit_lines(lines: Any) -> list[dict[str, Any]]:
    """A refund's lines as the audit records them: line, reason, cents."""
    out = []
    for line in lines:
        data = line if isinstance(line, dict) else line.model_dump()
        entry = {"line": data["line"], "reason": data["reason"],
                 "amount_cents": data["amount_cents"]}
        # Units of a line that has several (from schema 8 on); a line of one is all or none.
        if data.get("units") is not None and (data.get("quantity") or 2) > 1:
            entry["units"] = data["units"]
            if data.get("quantity"):
                entry["of_units"] = data["quantity"]
        out.append(entry)
    return out
