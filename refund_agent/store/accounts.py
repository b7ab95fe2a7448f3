"""The people who may decide, and the sign-in throttle every process on the store shares (see
``refund_agent/accounts.py`` for the rules; this is what is stored)."""

from __future__ import annotations

import time
from typing import Any

from ..errors import DecisionRefused, NotFound
from ..identity import name_key
from .core import StoreCore


class Accounts(StoreCore):
    """Accounts (their changes audited) and recent failed sign-ins."""

    def add_account(self, name: str, role: str, limit_cents: int | None, password: str,
                    by: str) -> None:
        """Create an account; ``password`` is the encoded hash (see accounts.py).

        Who may sign decisions is part of the record: the change is audited, by ``by``.
        """
        with self._tx() as db:
            # Names are unique by their canonical key (case, width, look-alike letters), which
            # SQL cannot compute: the check reads every name under the write lock (SQLite's
            # BEGIN IMMEDIATE; on PostgreSQL an advisory lock that no order id can take).
            self.lock_order(db, "accounts (names)")
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
            f"SELECT COUNT(*), MIN(at), {self.now} FROM sign_in_failures"
            f" WHERE name_key = ? AND client = ? AND at > {self.now} - ?",
            (key, client, window))[0]
        return count, (now - oldest) if count else 0.0

    def sign_in_failed(self, key: str, client: str, window: float, actor: str, note: str
                       ) -> None:
        """Count one failed sign-in under ``key`` and audit it as by ``actor`` (the name as
        tried, in canonical form; never the password).

        Entries older than the window are dropped here, so the table holds one window's worth.
        """
        with self._tx() as db:
            db.execute(f"DELETE FROM sign_in_failures WHERE at <= {self.now} - ?", (window,))
            db.execute("INSERT INTO sign_in_failures(name_key, client, at)"
                       f" VALUES (?, ?, {self.now})", (key, client))
            self._audit(db, "sign_in_failed", actor, note=note)

    def sign_in_succeeded(self, key: str, client: str) -> None:
        """Forget ``client``'s failures for ``key`` (a write only when there are some)."""
        if self._read("SELECT 1 FROM sign_in_failures WHERE name_key = ? AND client = ?"
                      " LIMIT 1", (key, client)):
            with self._tx(durable=False) as db:
                db.execute("DELETE FROM sign_in_failures WHERE name_key = ? AND client = ?",
                           (key, client))
