"""One PostgreSQL database shared by every host (``REFUND_AGENT_DATABASE_URL``, psycopg 3).

Write transactions run side by side under READ COMMITTED, each locking the rows it reads and
then changes (``SELECT ... FOR UPDATE``), in one order everywhere (run, approval, order, audit
anchor), so two of them never wait on each other in a circle. Workers claim runs with ``SKIP
LOCKED``; every committing write sends a NOTIFY, which pages listen for; a whole store is
filled with COPY (``refund-agent migrate``). Connections of threads that ended are handed to
the next thread (Streamlit draws every page on a new one).
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import StoreError
from .base import Store
from .core import psycopg
from .schema import SCHEMA_VERSION, due, parts_due, shipped_version
from .schema_postgres import POSTGRES_SCHEMA, POSTGRES_STEPS, POSTGRES_VERSION_TABLE
from .search import like_pattern

# The channel every committing write transaction notifies on (see change_counter).
CHANNEL = "refund_agent_changes"
# Namespaces for advisory locks (the first of pg_advisory_xact_lock's two keys).
_LOCK_SCHEMA, _LOCK_ORDER = 1_5001, 1_5002


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


class PostgresStore(Store):
    """A store in one PostgreSQL database (psycopg 3, a connection per thread)."""

    engine = "postgresql"
    shared = True
    # clock_timestamp(), not now(): now() is when the transaction began, which may be long
    # before the row lock it waited for was granted. Seconds since 1970.
    now = "(extract(epoch from clock_timestamp())::float8)"
    lock_row = " FOR UPDATE"
    skip_locked = " SKIP LOCKED"
    like = "ILIKE"       # as SQLite's LIKE: the case of ASCII letters does not matter
    table_exists = "SELECT 1 WHERE to_regclass(?) IS NOT NULL"
    pushes_changes = True

    path: str

    def _open(self, target: Any) -> None:
        if psycopg is None:
            raise StoreError(
                "REFUND_AGENT_DATABASE_URL points at PostgreSQL, but psycopg is not installed. "
                "Install it with: pip install 'refund-agent[postgres]'")
        self.url = str(target)
        self.path = redact(self.url)
        self._idle: list[Any] = []   # connections whose threads ended, for reuse
        self._counter = 0
        self._changed = threading.Condition()
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()
        self._stop = threading.Event()

    def _search_condition(self, words: list[str]) -> tuple[str, list[str]]:
        """Runs whose kept text holds every word (schema 16), through run_search's pg_trgm
        index (a word under three letters has no trigram: the index is read whole)."""
        return ("runs.id IN (SELECT run_id FROM run_search WHERE "
                + " AND ".join(["body LIKE ? ESCAPE '\\'"] * len(words)) + ")",
                [like_pattern(w) for w in words])

    # -- connections ---------------------------------------------------------------------

    def _connect(self) -> _PgConnection:
        try:
            conn = psycopg.connect(self.url, autocommit=True, row_factory=_row_factory,
                                   connect_timeout=10, application_name="refund-agent")
        except psycopg.ProgrammingError as exc:  # a malformed URL, an unknown option
            # Named by its value, not a setting: it may come from --to as well.
            raise StoreError(f"{self.path} is not a usable PostgreSQL URL: "
                             f"{_first_line(exc)}") from None
        except psycopg.OperationalError as exc:  # refused, unknown host, bad password, no db
            raise StoreError(f"Cannot reach the PostgreSQL database at {self.path}: "
                             f"{_first_line(exc)}. Check that the server runs and the URL "
                             "(host, port, user, password, database) is right.") from None
        return _PgConnection(conn)

    def _adopt(self, db: _PgConnection) -> None:
        self._local.handback = _Handback(db, self._idle)

    def _reuse(self) -> _PgConnection | None:
        """An idle connection an ended thread left behind, if any."""
        while True:
            try:
                db = self._idle.pop()   # atomic: two threads never get the same one
            except IndexError:
                return None
            if not db.closed:
                return db

    def _begin(self, db: _PgConnection, durable: bool) -> None:
        """``BEGIN``; not durable: with ``synchronous_commit`` off (the commit returns before
        its WAL reaches the disk; a server crash may lose it, never half of it). One round
        trip: the two statements go as one string."""
        db.begin("BEGIN" if durable else "BEGIN; SET LOCAL synchronous_commit = off")

    def _commit(self, db: _PgConnection) -> None:
        # A commit that wrote something a page shows notifies the listening pages (NOTIFY is
        # delivered at COMMIT, not before); a lease renewal or transcript alone does not, so an
        # idle page is not woken for nothing. A failed NOTIFY leaves the transaction open:
        # _tx rolls it back.
        db.execute(f"NOTIFY {CHANNEL}; COMMIT" if db.shown else "COMMIT")

    def _desk_may_be_stale(self, db: _PgConnection) -> bool:
        return db.desk_stale

    def lock_order(self, db: _PgConnection, order_id: str) -> None:
        """An advisory lock on the order until commit. Two tickets about the same order would
        otherwise both read "no line held" and both insert; the unique index would refuse the
        second with an error instead of a reason."""
        db.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (_LOCK_ORDER, order_id))

    def explain(self, exc: BaseException) -> str:
        return f"Database error in {self.path}: {_first_line(exc)}"

    def close(self) -> None:
        super().close()
        self._stop.set()
        while self._idle:
            self._idle.pop().close()

    # -- the schema ----------------------------------------------------------------------

    def _version(self) -> int:
        # A one-row table keeps it (absent: an empty database).
        rows = self._read("SELECT to_regclass('refund_agent_schema') IS NOT NULL")
        if not rows[0][0]:
            return 0
        rows = self._read("SELECT version FROM refund_agent_schema")
        return rows[0][0] if rows else 0

    def _upgrade(self, version: int) -> None:
        """Create the schema, or run the steps an older store needs, then the schema, then
        the parts due (the desk's tables), in one transaction.

        Under an advisory lock, reading the version again: several hosts starting on a new
        (or older) database at once make (or upgrade) it once.
        """
        with self._tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(?, 0)", (_LOCK_SCHEMA,))
            db.execute(POSTGRES_VERSION_TABLE)
            row = db.execute("SELECT version FROM refund_agent_schema").fetchone()
            version = 0 if row is None else row[0]
            if version == 7:
                columns = db.execute("SELECT * FROM calls LIMIT 0").description
                version = shipped_version(version, [c[0] for c in columns])
            # Read before the loop's schema makes schema_parts (see schema.parts_due).
            recorded = self._recorded_parts(db)
            if version >= SCHEMA_VERSION and not parts_due(self._parts, recorded, version):
                return
            steps = due(POSTGRES_STEPS, version)
            for step in steps:
                for statement in step.sql:
                    db.execute(statement)
            for statement in POSTGRES_SCHEMA:
                db.execute(statement)
            self._install_parts(db, version, recorded)   # the desk's tables, if due
            for step in steps:
                if step.data is not None:
                    step.data(db)
            db.execute("INSERT INTO refund_agent_schema(id, version) VALUES (1, ?)"
                       " ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                       (SCHEMA_VERSION,))

    # -- what only this engine does ------------------------------------------------------

    def integrity_problem(self, quick: bool = False) -> str | None:
        """None: PostgreSQL checks its own pages (data checksums); nothing to ask."""
        return None

    def moved_to(self) -> str | None:
        """None: only an SQLite store is moved (``migrate`` copies into PostgreSQL)."""
        return None

    def change_counter(self) -> int:
        """A number a LISTEN thread bumps at every committed write, from any host.

        The first call starts the thread and returns once it listens; later calls read an
        integer in memory, so a page may ask as often as it likes.
        """
        if self._listener is None:
            with self._changed:
                if self._listener is None:
                    self._listener = threading.Thread(target=self._listen, daemon=True,
                                                      name="refund-agent-listen")
                    self._listener.start()
            self._listening.wait(10)
        return self._counter

    def wait_for_change(self, since: int, timeout: float) -> int:
        """Block until the counter differs from ``since`` (or ``timeout``); returns it."""
        self.change_counter()
        with self._changed:
            self._changed.wait_for(lambda: self._counter != since, timeout)
            return self._counter

    def _bump(self) -> None:
        with self._changed:
            self._counter += 1
            self._changed.notify_all()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                       application_name="refund-agent-listen")
            except psycopg.Error:
                self._listening.set()  # callers fall back to an unchanging counter meanwhile
                self._stop.wait(1.0)
                continue
            try:
                with conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    # Anything may have changed while nobody listened (first start, reconnect).
                    self._bump()
                    self._listening.set()
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=1.0):
                            self._bump()
            except psycopg.Error:
                self._stop.wait(0.2)  # the server restarted or the network broke: listen again

    @contextmanager
    def bulk_load(self) -> Iterator[BulkLoad]:
        """One write transaction that fills tables with COPY.

        Every table is locked against other writers (readers go on) until it commits; if the
        body raises, nothing of it stays. Reads through this store on this thread, such as
        ``reconcile``, see the rows loaded so far.
        """
        with self._tx() as db:
            db.execute(f"LOCK TABLE {', '.join(self.tables())} IN EXCLUSIVE MODE")
            db.desk_stale = db.shown = True   # COPY passes by execute: refresh, notify
            yield BulkLoad(self, db)


class BulkLoad:
    """The tables of a PostgreSQL store, being filled in one transaction (bulk_load)."""

    def __init__(self, store: PostgresStore, db: _PgConnection) -> None:
        self.store, self.db = store, db

    def clear(self, table: str) -> None:
        self.db.execute(f"DELETE FROM {table}")

    def copy(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
        """COPY ``rows`` (values for ``columns``) into ``table``; returns how many."""
        count = 0
        with self.store._errors(f"Could not copy the {table} table: "):
            with self.db.conn.cursor() as cursor, cursor.copy(
                    f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
                    count += 1
        return count

    def analyze(self) -> None:
        """Give the planner the new tables' statistics now, not at autovacuum's next pass."""
        self.db.execute(f"ANALYZE {', '.join(self.store.tables())}")

    def reset_sequences(self) -> None:
        """Move each ``id`` sequence past the highest id copied in, so new rows never collide
        with copied ones (an ``id`` SQLite numbers itself is a BIGSERIAL here)."""
        for table, key in self.store.tables().items():
            if key != "id":
                continue
            sequence = self.db.execute("SELECT pg_get_serial_sequence(?, 'id')",
                                       (table,)).fetchone()[0]
            if sequence is not None:  # text ids (runs, approvals) and the anchor have none
                self.db.execute(f"SELECT setval(?, (SELECT COALESCE(MAX(id), 0) + 1 FROM"
                                f" {table}), false)", (sequence,))


# -- the connection: the store's SQL, psycopg's placeholders, rows like sqlite3.Row ---------

class _Row(tuple):
    """A result row readable by position and by column name, like ``sqlite3.Row``."""

    __slots__ = ()
    _names: tuple[str, ...]
    _index: dict[str, int]

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> tuple[str, ...]:
        return self._names


@lru_cache(maxsize=256)
def _row_type(names: tuple[bytes, ...]) -> type[_Row]:
    """The row class for one list of column names, made once (the store asks a few dozen
    shapes, each thousands of times)."""
    text = tuple(n.decode() for n in names)
    return type("Row", (_Row,), {"_names": text, "_index": {n: i for i, n in enumerate(text)},
                                 "__slots__": ()})


def _row_factory(cursor: Any) -> Any:
    result = cursor.pgresult
    if result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK:
        # A query's rows: the names straight from the result, no Column objects on the way.
        return _row_type(tuple(result.fname(i) for i in range(result.nfields)))
    # Anything else (a command, COPY): as psycopg describes it, if at all.
    return _row_type(tuple(c.name.encode() for c in cursor.description or ()))


_TOKENS = re.compile(r"'(?:[^']|'')*'|\?|(?<!:):[A-Za-z_]\w*|%")


@lru_cache(maxsize=512)
def pyformat(sql: str) -> str:
    """The store's placeholders as psycopg's: ``?`` -> ``%s``, ``:name`` -> ``%(name)s``, and a
    literal ``%`` doubled (psycopg reads it inside string literals too). Only placeholders
    change: the SQL itself is written for both engines (see core.py)."""
    def swap(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("'"):
            return token.replace("%", "%%")
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        return f"%({token[1:]})s"

    return _TOKENS.sub(swap, sql)


def _plain(args: Any) -> Any:
    """Enum members as their values (a StrEnum is text in the database, on both engines)."""
    if isinstance(args, dict):
        return {k: v.value if isinstance(v, Enum) else v for k, v in args.items()}
    return tuple(v.value if isinstance(v, Enum) else v for v in args)


# The writes that may leave a run's desk row stale: those the schema's desk triggers fire on
# (a run's status, an approval, a line, an escalation; a new run is stale until computed).
_DESK_WRITE = re.compile(r"\s*(WITH\b|DO\b|ALTER\b"   # (these: can't tell, so yes)
                         r"|INSERT\s+INTO\s+(runs|approvals|approval_lines|escalations)\b"
                         r"|(UPDATE|DELETE\s+FROM)\s+(approvals|approval_lines|escalations)\b"
                         r"|DELETE\s+FROM\s+runs\b|UPDATE\s+runs\b.*\bstatus\b)",
                         re.IGNORECASE | re.DOTALL)
# The writes no page shows: the lease's own columns and the transcript (never drawn).
_UNSEEN_WRITE = re.compile(r"\s*(UPDATE\s+runs\s+SET\s+lease_at\s*=[^,]*WHERE"
                           r"|INSERT\s+INTO\s+transcript\b"
                           r"|UPDATE\s+runs\s+SET\s+transcript_items\b[^;]*WHERE)",
                           re.IGNORECASE | re.DOTALL)
_WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE|WITH|DO|ALTER|CREATE|DROP|TRUNCATE|SELECT\s+setval)",
                    re.IGNORECASE)


class _PgConnection:
    """A psycopg connection that takes the store's SQL with its ``?`` placeholders.

    It also notes what the open transaction wrote, so the commit refreshes desk rows only
    after a write that may have left one stale, and notifies the pages only after a write
    they show (``desk_stale``, ``shown``; both reset by ``begin``)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.desk_stale = self.shown = True

    def begin(self, sql: str) -> None:
        self.desk_stale = self.shown = False
        self.conn.execute(sql)

    def execute(self, sql: str, args: Any = ()) -> Any:
        if not (self.desk_stale and self.shown) and _WRITE.match(sql):
            self.desk_stale = self.desk_stale or bool(_DESK_WRITE.match(sql))
            self.shown = self.shown or not _UNSEEN_WRITE.match(sql)
        return self.conn.execute(pyformat(sql), _plain(args))

    def close(self) -> None:
        self.conn.close()

    @property
    def closed(self) -> bool:
        return bool(self.conn.closed)

    @property
    def idle(self) -> bool:
        """Not inside a transaction: safe to hand to another thread."""
        return self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


class _Handback:
    """Gives a thread's connection to the next thread once this one ends.

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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
