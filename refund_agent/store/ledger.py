"""The payment and email stand-ins' idempotency records in the database, shared by every host
(PostgreSQL; on SQLite they stay in ``output/``'s JSONL logs, see ``outside/ledger.py``),
and what a copy of a whole store reads (``refund-agent migrate``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import IdempotencyConflict
from .core import StoreCore
from .schema import TABLES


class Ledger(StoreCore):
    """Records made once per (log, key), and the tables read whole."""

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
        with self._ledger_tx() as db:  # durable: the record stands for money paid, mail sent
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

    @contextmanager
    def _ledger_tx(self) -> Iterator[Any]:
        """Where ledger_once runs. On PostgreSQL no transaction around it: each statement is
        one of its own, and the INSERT, its only write, commits synced (the session's
        synchronous_commit, only ever turned off inside a transaction). A read inside a
        transaction would see no more under READ COMMITTED: the unique key, not a transaction,
        makes the record once. No page shows these records, so no NOTIFY either. On SQLite a
        transaction as every write's (synced, and refused by a store ``migrate`` moved)."""
        if not self.shared:
            with self._tx() as db:
                yield db
            return
        with self._errors():
            yield self._db()

    def ledger_find(self, log: str, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT record FROM ledger WHERE log = ? AND key = ?", (log, key))
        return json.loads(rows[0][0]) if rows else None

    def ledger_rows(self, log: str) -> list[tuple[int, str]]:
        """(row id, record as stored JSON) of one log, oldest first: for reconciling."""
        return [(r[0], r[1]) for r in
                self._read("SELECT id, record FROM ledger WHERE log = ? ORDER BY id", (log,))]

    # -- moving a whole store (see store/migrate.py) ---------------------------------------------

    def row_counts(self) -> dict[str, int]:
        """How many rows each table it has holds (a loop store has none of the desk's)."""
        return {table: self._read(f"SELECT COUNT(*) FROM {table}")[0][0]
                for table in self.tables()}

    def table_rows(self, table: str, columns: Sequence[str], batch: int = 5000
                   ) -> Iterator[list[tuple[Any, ...]]]:
        """The table's rows (those ``columns``) in primary key order, ``batch`` at a time."""
        with self._errors():
            cursor = self._db().execute(f"SELECT {', '.join(columns)} FROM {table}"
                                        f" ORDER BY {TABLES[table]}")
            while rows := cursor.fetchmany(batch):
                yield [tuple(row) for row in rows]
