"""The shop's timeout policy applied (desk/timeouts.py): each step once per refund, in the
audit and on the ticket. Schema 15's timeout_steps table keys a step by (approval, step), so of
two workers (or a worker and a cron job, or a worker before and after a restart) applying the
policy at once, one writes the step and the other's insert does nothing; the audit line and the
ticket's step are written in that same transaction, only by the one whose insert counted."""

from __future__ import annotations

import time

from ...store.core import StoreCore
from ..identity import Actor
from ..owners import for_whom, stand_in
from ..timeouts import ESCALATE, TIMEOUT, TimeoutPolicy, step_note
from .escalations import raise_escalation

# The audit's event for each step.
EVENTS = {"remind": "reminded", ESCALATE: "timed_out"}


class Timeouts(StoreCore):
    """Applying the timeout policy to the refunds waiting."""

    def apply_timeouts(self, policy: TimeoutPolicy, agent: str | None = None
                       ) -> list[tuple[str, str]]:
        """Take every step the policy makes due on a pending refund (``agent``'s runs only, if
        named) and not taken before; returns the (approval id, step) pairs this call took."""
        if policy.remind_after is None and policy.escalate_after is None:
            return []
        mine = "" if agent is None else " AND a.run_id IN (SELECT id FROM runs WHERE agent = ?)"
        # Waited by the database's clock, which wrote requested_at.
        rows = self._read(
            f"SELECT a.id, {self.now} - a.requested_at AS waited FROM approvals a"
            f" WHERE a.status = 'pending'{mine} ORDER BY a.requested_at",
            () if agent is None else (agent,))
        done: dict[str, set[str]] = {}
        for approval_id, step in self._read(
                "SELECT approval_id, step FROM timeout_steps WHERE approval_id IN"
                " (SELECT id FROM approvals WHERE status = 'pending')"):
            done.setdefault(approval_id, set()).add(step)
        taken = []
        for approval_id, waited in rows:
            for step in policy.due(float(waited), done.get(approval_id, set())):
                if self._take_step(approval_id, step, float(waited)):
                    taken.append((approval_id, step))
        return taken

    def _take_step(self, approval_id: str, step: str, waited: float) -> bool:
        with self._tx() as db:
            approval = db.execute("SELECT run_id, order_id, amount_cents, status FROM approvals"
                                  " WHERE id = ?" + self.lock_row, (approval_id,)).fetchone()
            if approval is None or approval["status"] != "pending":
                return False   # decided since it was read: nothing is due any more
            if not db.execute("INSERT INTO timeout_steps(approval_id, step, at) VALUES (?,?,?)"
                              " ON CONFLICT DO NOTHING",
                              (approval_id, step, time.time())).rowcount:
                return False   # another process took this step first
            run_id = approval["run_id"]
            row = db.execute("SELECT account FROM owners WHERE run_id = ?",
                             (run_id,)).fetchone()
            owner = row[0] if row else None
            # An owner away: the reminder reaches their delegate, and says for whom.
            away = {r[0]: r[1] for r in db.execute(
                f"SELECT account, delegate FROM delegates WHERE until > {self.now}").fetchall()}
            note = step_note(step, waited, for_whom(owner, stand_in(owner, away)) or None)
            if step == ESCALATE:
                raise_escalation(db, f"timeout:{approval_id}", run_id, TIMEOUT,
                                 f"A refund has been {note}.", Actor.TIMEOUTS, approval_id)
            self._audit(db, EVENTS[step], Actor.TIMEOUTS, run_id=run_id, approval_id=approval_id,
                        order_id=approval["order_id"], amount=approval["amount_cents"] / 100,
                        note=note)
            self._step(db, run_id, "timeout", {"step": step, "approval_id": approval_id,
                                               "note": note,
                                               "owner": owner})
        return True
