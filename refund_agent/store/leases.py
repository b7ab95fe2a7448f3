"""Boundary 7: one fenced owner per run. The lease, its fencing token, and the fence every
write on behalf of a run passes through, together.

A run is advanced by the holder of its lease. Taking it (``acquire``, or ``claim`` for a
worker looking for work) bumps the token's epoch; every write made for the run checks the
token in the write's own transaction (``_fence``), so a process that lost the run (paused past
its lease, slow, its clock skewed, or taken over by ``resume``) is refused at its next write
and stops before any further side effect. The holder renews the lease while it works.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import LeaseLost, NotFound, RunBusy, RunNotReady
from ..models import Run, RunStatus
from ..telemetry import points
from .core import StoreCore, pid_alive
from .runs import _agent_filter


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


class Leases(StoreCore):
    """Taking, renewing, checking and giving up a run's lease."""

    def acquire(self, run_id: str, token: str) -> Lease:
        """Boundary 7: take the run's lease for this process, with a fencing token one higher
        than before.

        Raises:
            RunBusy: another live process (or thread) holds the lease.
        """
        return self.acquire_run(run_id, token)[0]

    def acquire_run(self, run_id: str, token: str, agent: str | None = None
                    ) -> tuple[Lease, Run]:
        """:meth:`acquire`, with the run as the acquiring transaction left it (its desk status
        aside, which the commit refreshes): the loop starts from it instead of reading the
        row again. With ``agent``: RunNotReady, and nothing written, if another agent made
        the run (Run.owner_problem), checked on the row the acquisition reads anyway."""
        with self._tx(durable=False) as db:  # lost with the power, so were its holders
            row = db.execute("SELECT * FROM runs WHERE id = ?" + self.lock_row,
                             (run_id,)).fetchone()
            if row is None:
                raise NotFound(f"No run with id {run_id!r}.")
            row = dict(row)
            if agent is not None and (
                    problem := Run.model_validate(row).owner_problem(agent, "advance")):
                raise RunNotReady(problem)
            if row["lease_token"] not in (None, token) and self._lease_live(db, row):
                raise RunBusy(run_id, row["lease_pid"])
            lease = self._take(db, row, token)
            return lease, Run.model_validate(row)

    def _take(self, db: Any, row: dict[str, Any], token: str) -> Lease:
        """Give this process the run's lease (the caller checked that nobody live holds it);
        ``row`` (the run's, as read) is brought up to date with what the update wrote."""
        run_id = row["id"]
        if row["last_pid"] is not None and (row["last_pid"] != self.pid
                                            or row.get("lease_host") not in (None, self.host)):
            # What kind of process took it, and from what (schema 15): the ticket says "Server
            # restarted" only when a page's server took over from a page's server, not when a
            # terminal command carried on where the page (or another command) left off.
            self._step(db, run_id, "restart", {"previous_pid": row["last_pid"],
                                               "pid": self.pid, "front": self.front,
                                               "previous_front": row.get("last_front"),
                                               "cut_off": row["lease_token"] is not None})
            points.taken_over(run_id, row.get("agent", ""), row["last_pid"],
                              row["lease_token"] is not None)
        epoch, now = row["lease_epoch"] + 1, time.time()
        db.execute(f"UPDATE runs SET lease_pid = ?, lease_token = ?, lease_at = {self.now},"
                   " lease_epoch = ?, last_pid = ?, status = ?, error = NULL,"
                   " updated_at = ?, lease_host = ?, last_front = ? WHERE id = ?",
                   (self.pid, token, epoch, self.pid, RunStatus.WORKING, now, self.host,
                    self.front, run_id))
        row.update(lease_pid=self.pid, lease_token=token, lease_epoch=epoch, last_pid=self.pid,
                   status=RunStatus.WORKING, error=None, updated_at=now, lease_host=self.host,
                   last_front=self.front)
        return Lease(run_id, token, epoch)

    def claim(self, token: str, agent: str | None = None) -> Lease | None:
        """Take one run that needs a worker and that nobody live holds, or None; with
        ``agent``, only that agent's runs (a worker never takes another agent's run).

        A run needs a worker when it is marked working (new, or cut off mid-turn by a crash
        anywhere) or still waiting although its refund was decided. On PostgreSQL the candidate
        rows are read ``FOR UPDATE SKIP LOCKED``: workers on several hosts asking at once each
        get a different run, without waiting for one another; the lease and its fencing token
        then guard every later write. Leases that expired by the database's clock are taken,
        so any host recovers the runs of a host that died.
        """
        mine, args = _agent_filter(agent)
        with self._tx(durable=False) as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE (status = ? OR (status = ? AND EXISTS (SELECT 1 FROM"
                " approvals a WHERE a.run_id = runs.id AND a.status != 'pending') AND NOT EXISTS"
                " (SELECT 1 FROM approvals p WHERE p.run_id = runs.id AND p.status = 'pending')))"
                f" AND (lease_token IS NULL OR lease_host = ? OR lease_at < {self.now} - ?){mine}"
                " ORDER BY updated_at LIMIT 20" + self.lock_row + self.skip_locked,
                (RunStatus.WORKING, RunStatus.WAITING, self.host,
                 self.lease_seconds, *args)).fetchall()
            for row in map(dict, rows):
                if row["lease_token"] is None or not self._lease_live(db, row):
                    return self._take(db, row, token)
        return None

    def lease_epoch(self, run_id: str) -> int:
        """The run's fencing token as stored: how many times its lease was taken (0: never).
        A lease taken now gets one more; a holder whose ``Lease.epoch`` is lower lost the run."""
        rows = self._read("SELECT lease_epoch FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise NotFound(f"No run with id {run_id!r}.")
        return int(rows[0][0])

    def check_lease(self, lease: Lease) -> None:
        """Raise LeaseLost unless ``lease`` still holds its run (before an outside effect)."""
        with self._errors():
            self._fence(self._db(), lease)

    def renew(self, lease: Lease) -> None:
        """The heartbeat: push the lease's expiry forward, if it is still ours."""
        with self._tx(durable=False) as db:
            self._fence(db, lease, f"SET lease_at = {self.now}")

    def release(self, lease: Lease, status: RunStatus, error: str | None = None,
                step: tuple[str, dict[str, Any]] | None = None) -> Run:
        """Give up the lease and set the run's status (with an optional timeline step).

        Returns the run as this transaction left it (read by the same UPDATE, with what an
        agent's store adds: the desk, its desk status; see ``_released_run``), so the loop
        hands its caller the run without reading the row again."""
        # The run's end (and a person's Stop) is reported to people: durable. A pause or a
        # failure lost with the power leaves an orphaned run that resume continues.
        with self._tx(durable=status in (RunStatus.DONE, RunStatus.ASKED, RunStatus.STOPPED)) as db:
            row = dict(self._fence(
                db, lease, "SET lease_pid = NULL, lease_token = NULL, lease_at = NULL,"
                " status = ?, error = ?, updated_at = ?", (status, error, time.time()),
                returning=True, returning_also=self._released_columns))
            if step:
                self._step(db, lease.run_id, *step)
        return self._released_run(row)

    def _fence(self, db: Any, lease: Lease, update: str = "", args: tuple = (),
               returning: bool = False, returning_also: str = "") -> Any:
        """Refuse a write made on behalf of a run by a process that no longer holds it.

        ``update`` (``SET ...`` with its ``args``): the change the transaction makes to the
        run's row anyway, made here, on the condition that the lease is still this one: one
        statement, not a locking read and then the update. Either way the row stays locked
        until the write commits, so the lease cannot change hands in between. ``returning``:
        the updated row comes back (``RETURNING *``, the same statement), so a caller that
        needs the run next does not read it again; otherwise None. ``returning_also``: more
        columns after ``RETURNING *`` (``", expr AS name, ..."``).
        """
        if update:
            where = (f"UPDATE runs {update} WHERE id = ? AND lease_token = ? AND lease_epoch = ?"
                     + (" RETURNING *" if returning else ""))
            cursor = db.execute(where + (returning_also if returning else ""),
                                (*args, lease.run_id, lease.token, lease.epoch))
            if returning:
                rows = cursor.fetchall()   # all of them: SQLite finishes the statement so
                if len(rows) == 1:
                    return rows[0]
            elif cursor.rowcount == 1:
                return None
        row = db.execute("SELECT lease_token, lease_epoch, lease_pid FROM runs WHERE id = ?"
                         + self.lock_row, (lease.run_id,)).fetchone()
        if row is None or (row["lease_token"], row["lease_epoch"]) != (lease.token, lease.epoch):
            raise LeaseLost(lease.run_id, row["lease_pid"] if row else None)
        if update:   # the lease is ours, yet the update changed no row: cannot be; say so
            raise RuntimeError(f"The update of run {lease.run_id} changed no row.")

    def _lease_live(self, db: Any, row: dict[str, Any]) -> bool:
        """Whether someone holds this run: a live process that renewed its lease recently."""
        if row.get("lease_token") is None:
            return False
        age = db.execute(f"SELECT {self.now} - ?", (row.get("lease_at") or 0,)).fetchone()[0]
        if age >= self.lease_seconds:
            return False
        if row.get("lease_host") not in (None, self.host):
            # Another host's pid cannot be looked up from here: its lease holds until it
            # expires by the database's clock (its holder renews it while it works).
            return True
        return pid_alive(row.get("lease_pid"))
