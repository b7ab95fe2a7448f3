"""The customer's replies and the run's timeline: what a person wrote back, and the steps each
run shows (the agent's words, its calls, decisions, restarts)."""

from __future__ import annotations

import json
import time
from typing import Any

from ..errors import NotFound, RunNotReady
from ..models import Reply, RunStatus, Step
from .core import StoreCore
from .leases import Lease


class Replies(StoreCore):
    """Replies, accepted only when the run can take one, and the timeline's steps."""

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
                row = db.execute("SELECT * FROM runs WHERE id = ?" + self.lock_row,
                                 (run_id,)).fetchone()
                if row is None:
                    raise NotFound(f"No run with id {run_id!r}.")
                if row["status"] not in (RunStatus.DONE, RunStatus.ASKED) or \
                        self._lease_live(db, dict(row)):
                    raise RunNotReady(
                        f"Run {run_id} is {row['status']}; a customer can write back once the "
                        "agent has finished. The reply was not saved; send it again then.")
            reply_id = self._insert_reply(db, run_id, text, simulated)
        return self.replies(run_id, reply_id=reply_id)[0]

    def _insert_reply(self, db: Any, run_id: str, text: str, simulated: bool,
                      extra: dict[str, Any] | None = None) -> int:
        """add_reply's rows, in ``db``'s transaction (a mailed reply is taken in its own);
        ``extra``: more facts for the reply's timeline step."""
        cur = db.execute("INSERT INTO replies(run_id, at, text, simulated) VALUES (?,?,?,?)"
                         " RETURNING id", (run_id, time.time(), text, int(simulated)))
        reply_id = cur.fetchone()[0]
        self._step(db, run_id, "reply", {"text": text, "simulated": simulated, **(extra or {})})
        # The run has work again; marking it working lets a resume find it after a crash.
        self._touch(db, run_id, status=RunStatus.WORKING)
        if simulated:
            db.execute("UPDATE runs SET simulated_replies = simulated_replies + 1"
                       " WHERE id = ?", (run_id,))
        return reply_id

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

    def steps(self, run_id: str, after: int = 0) -> list[Step]:
        rows = self._read("SELECT * FROM steps WHERE run_id = ? AND id > ? ORDER BY id",
                          (run_id, after))
        return [Step.model_validate({**dict(r), "data": json.loads(r["data"])}) for r in rows]

    def last_step_id(self, run_id: str) -> int:
        return self._read("SELECT COALESCE(MAX(id), 0) FROM steps WHERE run_id = ?",
                          (run_id,))[0][0]
