"""The two databases the store runs on, and the few places where their SQL differs.

The store (store.py) writes its SQL once, in SQLite's spelling. This module holds what each
engine needs around it: how to connect, how to begin a write transaction, how to lock what a
transaction is about to read and then change, how the schema's types are spelled, how the
store's version is kept, and how a page learns that something changed. SQL stays in the store
modules: this one and store.py.

- :class:`SQLite` (the default): one file in ``output/``; ``BEGIN IMMEDIATE`` takes the file's
  write lock, so every write transaction runs alone and no row lock is needed.
- :class:`Postgres` (``REFUND_AGENT_DATABASE_URL=postgresql://...``, psycopg 3): for several
  hosts. Write transactions run side by side under READ COMMITTED, each locking the rows it
  reads and then changes (``SELECT ... FOR UPDATE``), in one order everywhere (run, approval,
  order, audit anchor), so two of them never wait on each other in a circle.
"""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import threading
import time
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from .errors import StoreError

try:  # the postgres extra: pip install 'refund-agent[postgres]'
    import psycopg
    import psycopg.errors
except ImportError:  # pragma: no cover - depends on the installation
    psycopg = None  # type: ignore[assignment]

# Errors any database call may raise (psycopg's join when it is installed).
DB_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error,) + (
    (psycopg.Error,) if psycopg is not None else ())

# Lease times come from the database's clock, never a process's own: two processes (or hosts)
# whose clocks disagree still agree on whether a lease has expired. Seconds since 1970.
SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
# clock_timestamp(), not now(): now() is when the transaction began, which may be long before
# the row lock it waited for was granted.
PG_NOW = "(extract(epoch from clock_timestamp())::float8)"
# The channel every committing write transaction notifies on PostgreSQL (see change_counter).
CHANNEL = "refund_agent_changes"
# Namespaces for advisory locks (the first of pg_advisory_xact_lock's two keys).
_LOCK_SCHEMA, _LOCK_ORDER = 1_5001, 1_5002


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


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


class SQLite:
    """The embedded default: a file, its write lock, ``PRAGMA`` for the rest."""

    name = "sqlite"
    lock_row = ""      # BEGIN IMMEDIATE already excludes every other writer
    now = SQLITE_NOW

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.where = str(self.path)

    def connect(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.OperationalError:
            if not self.read_only_here():
                raise
        return self._connect_read_only()

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

    def _connect(self) -> sqlite3.Connection:
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

    def lock_order(self, db: Any, order_id: str) -> None:
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
def pg_sql(sql: str) -> str:
    """The store's SQLite spelling of a statement, as PostgreSQL (and psycopg) want it.

    Placeholders become psycopg's (``?`` -> ``%s``, ``:name`` -> ``%(name)s``, a literal ``%``
    doubled), SQLite's clock becomes PostgreSQL's, and LIKE becomes ILIKE
    (SQLite's LIKE ignores the case of ASCII letters; PostgreSQL's does not).
    """
    def swap(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("'"):
            return token.replace("%", "%%")  # psycopg reads % inside literals too
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        return f"%({token[1:]})s"

    sql = _TOKENS.sub(swap, sql)
    return sql.replace(SQLITE_NOW, PG_NOW).replace(" LIKE ", " ILIKE ")


def _plain(args: Any) -> Any:
    """Enum members as their values (a StrEnum is text in the database, on both engines)."""
    if isinstance(args, dict):
        return {k: v.value if isinstance(v, Enum) else v for k, v in args.items()}
    return tuple(v.value if isinstance(v, Enum) else v for v in args)


class _PgConnection:
    """A psycopg connection that takes the store's SQL as written for SQLite."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Any = ()) -> Any:
        return self.conn.execute(pg_sql(sql), _plain(args))

    def close(self) -> None:
        self.conn.close()

    @property
    def closed(self) -> bool:
        return bool(self.conn.closed)

    @property
    def idle(self) -> bool:
        """Not inside a transaction: safe to hand to another thread."""
        return self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def pg_schema(script: str) -> list[str]:
    """The SQLite schema script as PostgreSQL statements (types and one upsert respelled)."""
    script = "\n".join(line for line in script.splitlines()
                       if not line.lstrip().startswith("--"))
    out = []
    for statement in script.split(";"):
        statement = statement.strip()
        if not statement:
            continue
        statement = re.sub(r"\bINTEGER PRIMARY KEY\b(?! CHECK)", "BIGSERIAL PRIMARY KEY",
                           statement)
        statement = re.sub(r"\bINTEGER\b", "BIGINT", statement)
        statement = re.sub(r"\bREAL\b", "DOUBLE PRECISION", statement)
        if statement.startswith("INSERT OR IGNORE INTO"):
            statement = ("INSERT INTO" + statement[len("INSERT OR IGNORE INTO"):]
                         + " ON CONFLICT DO NOTHING")
        out.append(statement)
    return out


class Postgres:
    """One PostgreSQL database shared by every host (psycopg 3, a connection per thread)."""

    name = "postgresql"
    lock_row = " FOR UPDATE"
    now = PG_NOW

    def __init__(self, url: str) -> None:
        if psycopg is None:
            raise StoreError(
                "REFUND_AGENT_DATABASE_URL points at PostgreSQL, but psycopg is not installed. "
                "Install it with: pip install 'refund-agent[postgres]'")
        self.url = url
        self.where = redact(url)
        self._counter = 0
        self._changed = threading.Condition()
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()
        self._stop = threading.Event()

    def connect(self) -> _PgConnection:
        try:
            conn = psycopg.connect(self.url, autocommit=True, row_factory=_row_factory,
                                   connect_timeout=10, application_name="refund-agent")
        except psycopg.ProgrammingError as exc:  # a malformed URL, an unknown option
            # Named by its value, not a setting: it may come from --to as well.
            raise StoreError(f"{self.where} is not a usable PostgreSQL URL: "
                             f"{_first_line(exc)}") from None
        except psycopg.OperationalError as exc:  # refused, unknown host, bad password, no db
            raise StoreError(f"Cannot reach the PostgreSQL database at {self.where}: "
                             f"{_first_line(exc)}. Check that the server runs and the URL "
                             "(host, port, user, password, database) is right.") from None
        return _PgConnection(conn)

    def lock_order(self, db: _PgConnection, order_id: str) -> None:
        """Serialise the transactions that reserve lines of one order (until commit).

        Two tickets about the same order would otherwise both read "no line held" and both
        insert; the unique index would refuse the second with an error instead of a reason.
        """
        db.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (_LOCK_ORDER, order_id))

    def lock_schema(self, db: _PgConnection) -> None:
        """Two processes creating the schema at once: the second waits, then finds it made."""
        db.execute("SELECT pg_advisory_xact_lock(?, 0)", (_LOCK_SCHEMA,))

    def explain(self, exc: BaseException) -> str:
        return f"Database error in {self.where}: {_first_line(exc)}"

    # -- LISTEN/NOTIFY: the change counter ------------------------------------------------

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

    def close(self) -> None:
        self._stop.set()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
