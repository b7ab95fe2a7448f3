"""Who has a ticket (schema 15): its owner, assigned, claimed and released, each change audited
and signed by the account that made it; and who stopped a run. The rules (who may do what) are
``desk/owners.py``'s, applied here under the row's lock so that two people acting at once
leave one owner and two audit lines that agree with it."""

from __future__ import annotations

import time
from datetime import datetime

from ...errors import DecisionRefused, NotFound
from ...store.core import StoreCore
from ..owners import OwnerChange, owner_problem


def owner_condition(owner: str | None = None, unassigned: bool = False, now: str = "0"
                    ) -> tuple[str, tuple[str, ...]]:
    """The inbox's owner filter as one SQL condition on ``runs`` (empty: no filter): the
    tickets ``owner`` has (with those of the accounts away that named ``owner`` their
    delegate; ``now`` is the engine's clock), or those nobody has. Kept apart from the inbox's
    own query, which it is ANDed onto."""
    if owner is not None:
        return ("id IN (SELECT run_id FROM owners WHERE account = ? OR account IN"
                f" (SELECT account FROM delegates WHERE delegate = ? AND until > {now}))",
                (owner, owner))
    if unassigned:
        return "id NOT IN (SELECT run_id FROM owners)", ()
    return "", ()


class Owners(StoreCore):
    """Tickets' owners, and the audit lines people leave on a ticket (stop)."""

    def owner(self, run_id: str) -> str | None:
        """The account that has the ticket, or None."""
        rows = self._read("SELECT account FROM owners WHERE run_id = ?", (run_id,))
        return rows[0][0] if rows else None

    def owners(self, run_ids: list[str] | None = None) -> dict[str, str]:
        """Run id -> owner, for ``run_ids`` (None: every owned ticket)."""
        if run_ids is None:
            return {r[0]: r[1] for r in self._read("SELECT run_id, account FROM owners")}
        if not run_ids:
            return {}
        ids = sorted(set(run_ids))
        return {r[0]: r[1] for r in self._read(
            f"SELECT run_id, account FROM owners WHERE run_id IN ({','.join('?' * len(ids))})",
            tuple(ids))}

    def change_owner(self, change: OwnerChange) -> bool:
        """Assign, claim or release a ticket: the rule checked against the owner as it is now,
        under the run's row lock, and the change audited in the same transaction. Returns
        False when it changed nothing (already so: the same click twice).

        Raises:
            NotFound: no such ticket.
            DecisionRefused: the rule refuses it (the message says why and what to do).
        """
        with self._tx() as db:
            run = db.execute("SELECT id FROM runs WHERE id = ?" + self.lock_row,
                             (change.run_id,)).fetchone()
            if run is None:
                raise NotFound(f"No ticket with id {change.run_id!r}.")
            row = db.execute("SELECT account FROM owners WHERE run_id = ?",
                             (change.run_id,)).fetchone()
            current = row[0] if row else None
            if problem := owner_problem(change, current):
                raise DecisionRefused(problem)
            target = change.new_owner
            if current == target:
                return False
            if target is None:
                db.execute("DELETE FROM owners WHERE run_id = ?", (change.run_id,))
            else:
                db.execute("INSERT INTO owners(run_id, account, since, assigned_by)"
                           " VALUES (?,?,?,?) ON CONFLICT (run_id) DO UPDATE SET"
                           " account = excluded.account, since = excluded.since,"
                           " assigned_by = excluded.assigned_by",
                           (change.run_id, target, time.time(), change.by))
            self._audit(db, change.event, change.by, run_id=change.run_id,
                        note=change.note(current))
            self._step(db, change.run_id, "owner", {"event": change.event, "by": change.by,
                                                    "owner": target, "was": current})
        return True

    def record_stop(self, run_id: str, by: str) -> None:
        """Who pressed *Stop* on a run, in the audit (the run's own step says only that it
        stopped, when its thread ends)."""
        with self._tx() as db:
            self._audit(db, "stopped", by, run_id=run_id,
                        note="stopped the run; Resume continues it from its last stored "
                             "response")

    # -- who a waiting refund is offered to (desk/offers.py) ---------------------------------

    def approved_by_on(self, order_id: str) -> dict[str, int]:
        """Name -> what that person approved on the order so far, in cents (every ticket)."""
        totals: dict[str, int] = {}
        for name, cents in self._read("SELECT decided_by, amount_cents FROM approvals"
                                      " WHERE order_id = ? AND status = 'approved'",
                                      (order_id,)):
            totals[name or ""] = totals.get(name or "", 0) + int(cents)
        return totals

    def raised_by_of(self, run_ids: list[str]) -> dict[str, str]:
        """Run id -> the desk account that typed the ticket in (tickets that have one)."""
        if not run_ids:
            return {}
        ids = sorted(set(run_ids))
        return {r[0]: r[1] for r in self._read(
            f"SELECT run_id, account FROM raised_by WHERE run_id IN ({','.join('?' * len(ids))})",
            tuple(ids))}

    # -- out of office (desk/owners.py) ------------------------------------------------------

    def away(self) -> dict[str, str]:
        """Account -> delegate, for the accounts away right now (by the database's clock)."""
        return {r[0]: r[1] for r in self._read(
            f"SELECT account, delegate FROM delegates WHERE until > {self.now}")}

    def away_until(self, account: str) -> tuple[str, float] | None:
        """(delegate, until) while ``account`` is away, else None."""
        rows = self._read(f"SELECT delegate, until FROM delegates WHERE account = ?"
                          f" AND until > {self.now}", (account,))
        return (rows[0][0], float(rows[0][1])) if rows else None

    def set_away(self, account: str, delegate: str, until: float) -> None:
        """``account`` is away until ``until``: its tickets and approvals go to ``delegate``
        (audited, signed by the account, naming both)."""
        with self._tx() as db:
            db.execute("INSERT INTO delegates(account, delegate, until, at) VALUES (?,?,?,?)"
                       " ON CONFLICT (account) DO UPDATE SET delegate = excluded.delegate,"
                       " until = excluded.until, at = excluded.at",
                       (account, delegate, until, time.time()))
            self._audit(db, "away", account,
                        note=f"{account} is away until {_day(until)}: tickets and approvals go "
                             f"to {delegate}")

    def set_back(self, account: str) -> bool:
        """``account`` is back: False when it was not away."""
        with self._tx() as db:
            row = db.execute("SELECT delegate FROM delegates WHERE account = ?",
                             (account,)).fetchone()
            if row is None:
                return False
            db.execute("DELETE FROM delegates WHERE account = ?", (account,))
            self._audit(db, "back", account,
                        note=f"{account} is back; {row[0]} no longer acts for them")
        return True


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
