"""An append-only JSON-lines file keyed by idempotency key, shared safely between processes.

Both stand-ins for outside systems (payments and email) behave like real providers that take an
``Idempotency-Key``: the first request with a key does the work, a later request with the same
key gets the first result back, and the same key with different arguments is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import IdempotencyConflict, LedgerError
from ..telemetry import points


class IdempotentLog:
    """A JSONL file where each line is one record with a unique ``idempotency_key``.

    Reading every record (``records``, for reconciling) keeps the parsed records in memory and
    parses only the lines appended since the last read. Looking up one key (``find``, and
    ``once`` before it appends) goes through a key index beside the file (``<name>.idx``, see
    :class:`_KeyIndex`), so a new process does not read the whole history to make one refund:
    it costs the same with ten records or a hundred thousand. The file is only ever appended
    to; if it is replaced or truncated, the cache and the index start over from the new file.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        self._by_key: dict[str, dict[str, Any]] = {}
        self._offset = 0  # bytes of complete lines already parsed
        self._file_id: tuple[int, int] | None = None
        self._tail: list[dict[str, Any]] = []  # a last line without its newline, if it parses
        self._torn = False  # the file ends in a line without its newline
        #: Bumped whenever the cache starts over, so derived indexes know to start over too.
        self.generation = 0
        self._index = _KeyIndex(self.path)

    def scan(self) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        """Read what was appended since the last call: (generation, records, tail).

        ``records`` is the cache itself (oldest first; callers must not modify it): it only
        grows until ``generation`` changes. ``tail`` holds the file's last line when it has no
        newline yet (a crash mid-write) but parses anyway, which the file's readers count.
        """
        with self._lock:
            try:
                fh = open(self.path, "rb")
            except FileNotFoundError:
                self._start_over(None)
                return self.generation, self._records, []
            with fh:
                st = os.fstat(fh.fileno())
                file_id = (st.st_dev, st.st_ino)
                if file_id != self._file_id or st.st_size < self._offset:
                    self._start_over(file_id)
                fh.seek(self._offset)
                chunk = fh.read()
            end = chunk.rfind(b"\n") + 1
            for line in chunk[:end].split(b"\n"):
                record = _parse(line)
                if record is not None:
                    self._records.append(record)
                    self._by_key.setdefault(record.get("idempotency_key"), record)
            self._offset += end
            self._torn = end < len(chunk)
            tail = _parse(chunk[end:])
            self._tail = [tail] if tail is not None else []
            return self.generation, self._records, self._tail

    def _start_over(self, file_id: tuple[int, int] | None) -> None:
        if self._offset or self._records or file_id != self._file_id:
            self.generation += 1
        self._records, self._by_key, self._tail, self._torn = [], {}, [], False
        self._offset, self._file_id = 0, file_id

    def records(self) -> list[dict[str, Any]]:
        """Every record, oldest first (a torn last line from a crash is skipped)."""
        _, records, tail = self.scan()
        return [*records, *tail]

    def find(self, key: str) -> dict[str, Any] | None:
        """The first record with this idempotency key, or None."""
        with self._lock:
            try:
                fh = open(self.path, "rb")
            except FileNotFoundError:
                self._torn = False
                return None
            with fh:
                try:
                    record, self._torn = self._index.find(fh, key)
                    return record
                except (sqlite3.Error, OSError):
                    pass  # no usable index (a read-only folder, say): read the file instead
        _, _, tail = self.scan()
        with self._lock:
            record = self._by_key.get(key)
        if record is None:
            record = next((r for r in tail if r.get("idempotency_key") == key), None)
        return record

    def once(self, key: str, request: dict[str, Any],
             make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """Boundary 6: do ``make`` once per key; returns (record, reused).

        The key is the call's (its run and call id): a repeat after a crash, a resume or a
        second approval gets the first record back, as a provider's Idempotency-Key does.

        Raises:
            IdempotencyConflict: the key was used before with a different ``request``.
        """
        try:
            record, reused = self._once(key, request, make)
        except OSError as exc:  # a full disk, a read-only folder, an I/O error
            raise LedgerError(
                f"Could not write to {self.path}: {exc.strerror or exc}. Nothing was recorded "
                "there; fix that (free space, permissions) and run `refund-agent resume`, "
                "which carries on exactly once.") from None
        points.effect(self.path.stem, key, reused)
        return record, reused

    def _once(self, key: str, request: dict[str, Any],
              make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # An exclusive lock on the file itself serialises check-then-append across processes.
        with open(self.path, "a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                record = self.find(key)  # reads the file's new lines, under the file lock
                if record is not None:
                    if record.get("request") != request:
                        raise IdempotencyConflict(
                            f"Idempotency key {key} was already used with other arguments.")
                    return record, True
                record = {"idempotency_key": key, "request": request, **make(),
                          "created_at": time.time(), "pid": os.getpid()}
                # A crash mid-write can leave a last line without its newline; start a fresh
                # line so this record is not glued to it (and lost with it).
                fh.write(("\n" if self._torn else "") + json.dumps(record) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
                return record, False
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


class _KeyIndex:
    """Where each idempotency key's first record is in the log: a small SQLite file beside it.

    It is derived from the log and checks itself against it, so the log stays the only truth:
    each lookup first indexes the lines appended since the last one (usually none or a few),
    after checking that the bytes just before that point are still the ones it indexed (a
    replaced, truncated or rewritten file makes it start over); a key it finds is read back
    from the log and must be there, or it starts over. Its commits are not fsynced: after a
    power loss SQLite's write-ahead log keeps it a consistent, perhaps older, picture of the
    log, and the catching up above fills in the rest.
    """

    SIG = 64  # bytes before the indexed end that must not change

    def __init__(self, log_path: Path) -> None:
        self.path = log_path.with_name(log_path.name + ".idx")
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, isolation_level=None, timeout=10,
                                 check_same_thread=False)  # the log's lock guards it
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 1),"
                       " dev INTEGER, ino INTEGER, indexed INTEGER, sig BLOB)")
            db.execute("CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY,"
                       " offset INTEGER NOT NULL, length INTEGER NOT NULL)")
            self._db = db
        return self._db

    def find(self, fh: Any, key: str) -> tuple[dict[str, Any] | None, bool]:
        """(the first record with ``key`` or None, whether the file ends in a torn line)."""
        fd = fh.fileno()
        for fresh in (False, True):
            st = os.fstat(fd)
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                tail = self._catch_up(db, fd, st, fresh)
                row = db.execute("SELECT offset, length FROM keys WHERE key = ?",
                                 (key,)).fetchone()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            torn = st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n"
            if row is None:
                record = next((r for r in tail if r.get("idempotency_key") == key), None)
                return record, torn
            record = _parse(os.pread(fd, row[1], row[0]))
            if record is not None and record.get("idempotency_key") == key:
                return record, torn
        raise sqlite3.DatabaseError(f"{self.path} does not agree with the log")

    def _catch_up(self, db: sqlite3.Connection, fd: int, st: os.stat_result, fresh: bool
                  ) -> list[dict[str, Any]]:
        """Index the lines appended since the last call; returns a parsable torn last line."""
        row = db.execute("SELECT dev, ino, indexed, sig FROM meta WHERE id = 1").fetchone()
        start = 0
        if row and not fresh and (row[0], row[1]) == (st.st_dev, st.st_ino) \
                and row[2] <= st.st_size:
            sig = row[3] or b""
            if os.pread(fd, len(sig), row[2] - len(sig)) == sig:
                start = row[2]
        if start == 0:
            db.execute("DELETE FROM keys")
        chunk = os.pread(fd, st.st_size - start, start) if st.st_size > start else b""
        end = chunk.rfind(b"\n") + 1
        rows, pos = [], start
        for line in chunk[:end].split(b"\n")[:-1]:
            record = _parse(line)
            if record is not None and isinstance(record.get("idempotency_key"), str):
                rows.append((record["idempotency_key"], pos, len(line)))
            pos += len(line) + 1
        db.executemany("INSERT OR IGNORE INTO keys VALUES (?, ?, ?)", rows)
        indexed = start + end
        sig = os.pread(fd, min(self.SIG, indexed), indexed - min(self.SIG, indexed))
        db.execute("INSERT OR REPLACE INTO meta VALUES (1, ?, ?, ?, ?)",
                   (st.st_dev, st.st_ino, indexed, sig))
        tail = _parse(chunk[end:])
        return [tail] if tail is not None else []


class StoreLog:
    """The same log kept in the store's ``ledger`` table, for a store several hosts share.

    A file lock does not cross machines, and a file on one host is not seen by the others;
    a unique key in the shared PostgreSQL database is both (see ``Store.ledger_once``).
    ``name`` tells the logs apart ("refunds", "outbox").
    """

    def __init__(self, store: Any, name: str) -> None:
        self.store = store
        self.name = name
        self.path = None  # nothing on disk; reconcile reads the table

    def once(self, key: str, request: dict[str, Any],
             make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        record, reused = self.store.ledger_once(self.name, key, request, make)
        points.effect(self.name, key, reused)
        return record, reused

    def find(self, key: str) -> dict[str, Any] | None:
        return self.store.ledger_find(self.name, key)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(record) for _, record in self.store.ledger_rows(self.name)]


def _parse(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None

