"""The people who may decide, and the sign-in throttle every process on the store shares (see
``refund_agent/desk/accounts.py`` for the rules; this is what is stored)."""

from __future__ import annotations

import time
from typing import Any

from ...errors import DecisionRefused, NotFound
from ...store.core import StoreCore
from ..identity import same_person, taken_problem


class Accounts(StoreCore):
    """Accounts (their changes audited) and recent failed sign-ins."""

    def add_account(self, name: str, role: str, limit_cents: int | None, password: str,
                    by: str) -> None:
        """Create an account; ``password`` is the encoded hash (see accounts.py).

        Who may sign decisions is part of the record: the change is audited, by ``by``.
        """
        with self._tx() as db:
            # Names are unique by their skeletons (case, width, accents, invisible characters,
            # look-alike letters), which SQL cannot compute: the check reads every name under
            # the write lock (SQLite's BEGIN IMMEDIATE; on PostgreSQL an advisory lock that no
            # order id can take).
            self.lock_order(db, "accounts (names)")
            for (existing,) in db.execute("SELECT name FROM accounts").fetchall():
                if same_person(name, existing):
                    raise DecisionRefused(taken_problem(name, existing))
            added = db.execute("INSERT INTO accounts(name, role, limit_cents, password,"
                               " created_at) VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
                               (name, role, limit_cents, password, time.time())).rowcount
            if not added:
                raise DecisionRefused(f"An account named {name!r} already exists.")
            limit = "no limit" if limit_cents is None else f"up to ${limit_cents / 100:,.2f}"
            self._audit(db, "account_added", by, note=f"{name}: {role}, {limit}")

    def remove_account(self, name: str, by: str) -> tuple[int, int]:
        """Remove an account and, in the same transaction, what named it: its tickets are
        released (each audited and on its ticket, as a lead's release is) and the delegations
        to and from it end (audited), so no ticket is owned by, and no work handed to, an
        account that no longer exists. Returns (tickets released, delegations ended)."""
        with self._tx() as db:
            if not db.execute("DELETE FROM accounts WHERE name = ?", (name,)).rowcount:
                raise NotFound(f"No account named {name!r}.")
            self._audit(db, "account_removed", by, note=name)
            owned = db.execute("DELETE FROM owners WHERE account = ? RETURNING run_id",
                               (name,)).fetchall()
            for (run_id,) in sorted(map(tuple, owned)):
                self._audit(db, "released", by, run_id=run_id,
                            note=f"released the ticket ({name}'s): the account {name} was "
                                 "removed; nobody owns it now")
                self._step(db, run_id, "owner", {"event": "released", "by": by, "owner": None,
                                                 "was": name})
            ended = db.execute("DELETE FROM delegates WHERE account = ? OR delegate = ?"
                               " RETURNING account, delegate", (name, name)).fetchall()
            for account, delegate in sorted(map(tuple, ended)):
                self._audit(db, "back", by, note=(
                    f"the account {name} was removed; {delegate} no longer acts for them"
                    if account == name else
                    f"the account {name} was removed: it no longer acts for {account}, whose "
                    "tickets and approvals are theirs again"))
        return len(owned), len(ended)

    def account_rows(self, name: str | None = None) -> list[dict[str, Any]]:
        """Accounts as plain rows (name, role, limit_cents, password, created_at), by name."""
        if name is None:
            return [dict(r) for r in self._read("SELECT * FROM accounts ORDER BY name")]
        return [dict(r) for r in self._read("SELECT * FROM accounts WHERE name = ?", (name,))]

    def has_accounts(self) -> bool:
        return bool(self._read("SELECT 1 FROM accounts LIMIT 1"))

    # -- the sign-in throttle, shared by every process on this store (see accounts.py) ------
    # One row per wrong password, keyed by the name's key (name_key) with the client it came
    # from; the throttle counts a name's rows whatever their client. ``now``: seconds since
    # 1970 from the caller's clock (tests); None, the database's.

    def _clock(self, now: float | None) -> tuple[str, tuple]:
        return ("?", (now,)) if now is not None else (self.now, ())

    def sign_in_failures(self, key: str, window: float, now: float | None = None
                         ) -> tuple[int, float]:
        """(failed sign-ins of ``key`` in the last ``window`` seconds, from any client;
        seconds since the latest of them)."""
        clock, at = self._clock(now)
        count, latest, current = self._read(
            f"SELECT COUNT(*), MAX(at), {clock} FROM sign_in_failures"
            f" WHERE name_key = ? AND at > {clock} - ?", (*at, key, *at, window))[0]
        return count, (current - latest) if count else 0.0

    def sign_in_failed(self, key: str, client: str, window: float, actor: str, note: str,
                       slowed: str | None = None, now: float | None = None) -> None:
        """Count one failed sign-in under ``key`` from ``client`` and audit it as by
        ``actor`` (the name as tried, in canonical form; never the password); ``slowed``, if
        given, is audited beside it (``sign_in_slowed``: whose sign-ins wait, and how long).

        Entries older than the window are dropped here, so the table holds one window's worth.
        """
        clock, at = self._clock(now)
        with self._tx() as db:
            db.execute(f"DELETE FROM sign_in_failures WHERE at <= {clock} - ?", (*at, window))
            db.execute("INSERT INTO sign_in_failures(name_key, client, at)"
                       f" VALUES (?, ?, {clock})", (key, client, *at))
            self._audit(db, "sign_in_failed", actor, note=note)
            if slowed:
                self._audit(db, "sign_in_slowed", actor, note=slowed)

    def sign_in_succeeded(self, key: str) -> None:
        """Forget ``key``'s failures, from every client (a write only when there are some)."""
        if self._read("SELECT 1 FROM sign_in_failures WHERE name_key = ? LIMIT 1", (key,)):
            with self._tx(durable=False) as db:
                db.execute("DELETE FROM sign_in_failures WHERE name_key = ?", (key,))
