"""Approvals: boundary 4 (a proposal waits for a person, and the run pauses) and boundary 5
(a decision is a compare-and-set on 'pending' and on what the person was shown, with its audit
line, in one transaction).

Generic: a proposal is a subject, a title and, where the agent declares one, an amount
(models.Proposal). An agent that keeps more of a proposal (the refund desk: its order's lines,
what they hold, its approval rules) joins the same transactions through the hooks marked
below, in its own store (desk/records/approvals.py); this module imports nothing of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import AlreadyDecided, DecisionRefused, NotFound, StoreError, Undone
from ..models import Approval, Proposal, Run, RunStatus, call_key
from ..telemetry import points
from .audit import audit_lines
from .core import StoreCore, no_limit
from .leases import Lease

#: What boundary 5 does to a pending approval a person approves, inside the decision's
#: transaction: None when it is decided, or the refusal to raise once the audit line commits.
Approving = Callable[[Any, Approval], Exception | None]


class Approvals(StoreCore):
    """Queueing proposals for a person, and their decisions: approve, reject, ask, expire."""

    def queue_approval(self, lease: Lease, *, response_id: str, call_id: str, subject: str,
                       title: str, customer: str,
                       price: Callable[[Mapping[str, Any]], Proposal | str],
                       release: bool = False) -> Approval | str:
        """Boundary 4: a pending approval, its audit line and the run's pause.

        ``price`` is called inside the transaction with what other proposals hold on
        ``subject`` (:meth:`_holds`: nothing in the loop's store), so that an agent's store
        can keep two runs from both reserving the same thing. Returns the approval, or the
        reason ``price`` gave (nothing is written then: the caller records the refusal).
        ``release``: the pause also gives up the lease (nobody advances a run that waits for
        a person), in the same transaction: the loop's proposals do, and then do not release
        it again (turns.Waiting.released).
        """
        try:
            queued = self._queue_approval(lease, response_id, call_id, subject, title,
                                          customer, price, release)
        except Undone as not_queued:   # rolled back: the run's pause too
            return not_queued.answer  # type: ignore[return-value]
        points.proposed(queued)   # on the call's execute_tool span, if telemetry is on
        return queued

    def _queue_approval(self, lease: Lease, response_id: str, call_id: str, subject: str,
                        title: str, customer: str,
                        price: Callable[[Mapping[str, Any]], Proposal | str],
                        release: bool = False) -> Approval:
        run_id = lease.run_id
        with self._tx() as db:
            # The run's pause (and with ``release`` the lease's end), made by the lease's
            # check itself (one statement), first: the run's row is locked before anything an
            # agent's store locks in :meth:`_holds`, as everywhere. Undone when nothing is
            # queued.
            self._fence(db, lease, "SET status = ?, updated_at = ?" + (
                ", lease_pid = NULL, lease_token = NULL, lease_at = NULL, error = NULL"
                if release else ""), (RunStatus.WAITING, time.time()))
            # The approval's id is the call's key (see models.py (call_key)): calls saved before
            # schema 6 keep their call id as key, so their approvals keep their ids.
            approval_id, queued = db.execute(
                "SELECT k.id, EXISTS (SELECT 1 FROM approvals WHERE approvals.id = k.id) FROM"
                " (SELECT COALESCE((SELECT key FROM calls WHERE run_id = ? AND response_id = ?"
                " AND call_id = ? AND key IS NOT NULL), ?) AS id) AS k",
                (run_id, response_id, call_id, call_key(run_id, call_id))).fetchone()
            if queued:
                raise Undone(self.approval(approval_id, db))
            proposal = price(self._holds(db, subject))
            if isinstance(proposal, str):
                raise Undone(proposal)
            # Requested by the database's clock, as expiry reads it: a host whose clock runs
            # ahead (or behind) neither expires a fresh proposal nor keeps a stale one.
            # The rows come back as written (RETURNING), so the approval is not read again.
            # (The subject and title keep the columns' first names, order_id and summary.)
            approval = dict(db.execute(
                "INSERT INTO approvals(id, run_id, response_id, call_id, order_id, amount_cents,"
                " proposed_cents, summary, customer, status, requested_at, requested_pid)"
                f" VALUES (?,?,?,?,?,?,?,?,?, 'pending', {self.now}, ?) RETURNING *",
                (approval_id, run_id, response_id, call_id, proposal.subject,
                 proposal.amount_cents, proposal.amount_cents, title, customer, self.pid)
            ).fetchall()[0])
            written = self._proposal_lines(db, approval_id, proposal)
            lines = audit_lines(proposal.lines)
            self._audit(db, "requested", "agent", run_id=run_id, approval_id=approval_id,
                        order_id=proposal.subject, amount=proposal.amount, note=title,
                        lines=lines)
            self._step(db, run_id, "approval", {"approval_id": approval_id,
                                                "order_id": proposal.subject,
                                                "amount": proposal.amount, "summary": title,
                                                "lines": lines})
        return Approval.model_validate({**approval, "lines": written})

    # -- hooks: what an agent's store keeps of its proposals, in the same transactions ------

    def _holds(self, db: Any, subject: str) -> Mapping[str, Any]:
        """What other proposals hold on ``subject``, handed to ``price`` inside boundary 4's
        transaction (locking what the agent's store needs locked). The loop's store keeps
        no holds: nothing."""
        return {}

    def _proposal_lines(self, db: Any, approval_id: str, proposal: Proposal
                        ) -> list[dict[str, Any]]:
        """Write ``proposal``'s lines beside its approval (boundary 4's transaction); returns
        them as stored, in order. The loop's store keeps none: a proposal with lines needs
        an agent's store that does (the refund desk's)."""
        if proposal.lines:
            raise TypeError(f"{type(self).__name__} keeps no lines of a proposal: an agent that "
                            "itemizes its proposals keeps them in a store of its own.")
        return []

    def _approval_lines(self, db: Any, approval_ids: list[str]
                        ) -> dict[str, list[dict[str, Any]]]:
        """The stored lines of these approvals, by approval id, each in order (none here)."""
        return {}

    def _lines_closed(self, db: Any, approval: Approval, status: str) -> None:
        """A decision that pays nothing (``status``: rejected, asked, expired) is about to be
        recorded, in its transaction: an agent's store frees what the proposal held."""

    def _decision_recorded(self, db: Any, approval: Approval, by: str) -> None:
        """``by`` decided ``approval`` (any decision), in the decision's transaction: an
        agent's store updates its own records (the desk closes a lead's hand-off)."""

    def approval(self, approval_id: str, db: Any | None = None) -> Approval:
        found = self._approvals("WHERE id = ?", (approval_id,), db)
        if not found:
            raise NotFound(f"No approval with id {approval_id!r}.")
        return found[0]

    def approval_run(self, approval_id: str) -> Run:
        """The run an approval was proposed on, in one read."""
        rows = self._read("SELECT runs.* FROM approvals JOIN runs ON runs.id = approvals.run_id"
                          " WHERE approvals.id = ?", (approval_id,))
        if not rows:
            raise NotFound(f"No approval with id {approval_id!r}.")
        return Run.model_validate(dict(rows[0]))

    def latest_decision(self, run_id: str) -> tuple[str, float | None] | None:
        """The status and decision time of the run's latest proposal (None: it made none),
        without its lines."""
        rows = self._read("SELECT status, decided_at FROM approvals WHERE run_id = ?"
                          " ORDER BY requested_at DESC, id DESC LIMIT 1", (run_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    def find_approval(self, key: str) -> Approval | None:
        """The approval a call queued, by the call's key (Call.key), or None."""
        found = self._approvals("WHERE id = ?", (key,))
        return found[0] if found else None

    def approvals(self, status: str | None = "pending", limit: int = 200) -> list[Approval]:
        if status is None:
            return self._approvals("ORDER BY requested_at DESC LIMIT ?", (no_limit(limit),))
        return self._approvals("WHERE status = ? ORDER BY requested_at LIMIT ?",
                               (status, no_limit(limit)))

    def pending_count(self) -> int:
        """How many proposals wait for a decision."""
        return self._read("SELECT COUNT(*) FROM approvals WHERE status = 'pending'")[0][0]

    def run_approvals(self, run_id: str) -> list[Approval]:
        """The run's proposals, oldest first."""
        return self._approvals("WHERE run_id = ? ORDER BY requested_at", (run_id,))

    def _approvals(self, where: str, args: tuple, db: Any | None = None,
                   lock: bool = False) -> list[Approval]:
        with self._errors():
            db = db or self._db()
            rows = [dict(r) for r in db.execute(
                f"SELECT * FROM approvals {where}" + (self.lock_row if lock else ""),
                args)]
            lines = self._approval_lines(db, [r["id"] for r in rows]) if rows else {}
        return [Approval.model_validate({**r, "lines": lines.get(r["id"], [])}) for r in rows]

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None, *,
               fingerprint: str | None = None, noun: str = "proposal") -> Approval:
        """Boundary 5: compare-and-set on 'pending', with its audit line, in one transaction.

        An approval pays what the proposal declared (an agent's store with rules of its own,
        as the refund desk's, decides through :meth:`_decide` with them).

        ``fingerprint`` (Approval.fingerprint, of the approval as the person saw it): when
        given, a pending approval that no longer matches it is refused, never decided.
        ``noun``: what the agent calls its proposals, for AlreadyDecided's message.

        Raises:
            NotFound: no such approval.
            AlreadyDecided: someone decided first; the late attempt is audited as 'ignored'.
            DecisionRefused: it no longer matches ``fingerprint`` (audited as 'refused'; the
                approval stays pending).
        """
        return self._decide(approval_id, approve, by, note, fingerprint, noun,
                            lambda db, approval: self._approved(db, approval, by, note,
                                                                approval.proposed_cents))

    def _decide(self, approval_id: str, approve: bool, by: str, note: str | None,
                fingerprint: str | None, noun: str, approving: Approving) -> Approval:
        """:meth:`decide` with what approving does (``approving(db, approval)``, inside the
        transaction, after the compare-and-set: it records the decision with
        :meth:`_approved`, or returns the refusal to raise once its audit line commits)."""
        with self._tx() as db:
            approval = self._pending(db, approval_id, "approve" if approve else "reject", by,
                                     fingerprint=fingerprint, noun=noun)
            if isinstance(approval, Exception):
                late: Exception | None = approval
            elif approve:
                late = approving(db, approval)
            else:
                late = self._close(db, approval, "rejected", by, note)
        if late:
            raise late
        return self.approval(approval_id)

    def ask(self, approval_id: str, by: str, question: str, *,
            fingerprint: str | None = None, noun: str = "proposal") -> Approval:
        """Send a proposal back to the customer with ``question``, paying nothing (yet).

        The approval closes as 'asked' and frees what it held; the run tells the customer, waits
        for their reply, and may propose again then. Same compare-and-set as :meth:`decide`.

        Raises:
            NotFound, AlreadyDecided: as for :meth:`decide`.
        """
        with self._tx() as db:
            approval = self._pending(db, approval_id, "ask the customer about", by,
                                     fingerprint=fingerprint, noun=noun)
            late = approval if isinstance(approval, Exception) else \
                self._close(db, approval, "asked", by, question)
        if late:
            raise late
        return self.approval(approval_id)

    def expire(self, older_than: float, by: str = "expiry",
               agent: str | None = None) -> list[Approval]:
        """Close every approval pending for more than ``older_than`` seconds as 'expired'
        (on ``agent``'s runs only, if named: another agent's proposals are not ours to close).

        Each is its own compare-and-set, so a person deciding at the same moment wins or loses
        cleanly. Returns the approvals this call expired.
        """
        moved = self.moved_message()
        if moved:   # even with nothing due: a cron job on the old settings must hear of it
            raise StoreError(moved)
        mine = "" if agent is None else " AND run_id IN (SELECT id FROM runs WHERE agent = ?)"
        # By the database's clock, which wrote requested_at: not this process's own.
        due = [a.id for a in self._approvals(
            f"WHERE status = 'pending' AND requested_at < {self.now} - ?{mine}",
            (older_than,) if agent is None else (older_than, agent))]
        expired = []
        for approval_id in due:
            with self._tx() as db:
                approval = self._pending(db, approval_id, "expire", by, audit_late=False)
                if isinstance(approval, AlreadyDecided):
                    continue
                self._close(db, approval, "expired", by,
                            f"Not decided within {_span(older_than)}.")
            expired.append(self.approval(approval_id))
        return expired

    def _pending(self, db: Any, approval_id: str, attempt: str, by: str,
                 audit_late: bool = True, fingerprint: str | None = None,
                 noun: str = "proposal") -> Approval | AlreadyDecided | DecisionRefused:
        """The approval if it is still pending and still what the person was shown (its
        ``fingerprint``, when given); else the late or stale attempt, audited as 'ignored'
        or 'refused' (returned, so that the audit line commits)."""
        # Locked until the decision commits: this is the compare half of compare-and-set.
        found = self._approvals("WHERE id = ?", (approval_id,), db, lock=True)
        if not found:
            raise NotFound(f"No approval with id {approval_id!r}.")
        approval = found[0]
        if approval.status == "pending" and fingerprint not in (None, approval.fingerprint):
            why = (f"it changed since it was shown to {by} (fingerprint {fingerprint}, now "
                   f"{approval.fingerprint}); open it again and decide on what it says now")
            self._audit(db, "refused", by, run_id=approval.run_id, approval_id=approval_id,
                        order_id=approval.order_id, amount=approval.amount,
                        note=f"tried to {attempt} it; {why}")
            return DecisionRefused(f"Cannot {attempt} this approval: {why}.")
        if approval.status == "pending":
            return approval
        if audit_late:
            self._audit(db, "ignored", by, run_id=approval.run_id, approval_id=approval_id,
                        order_id=approval.order_id, amount=approval.amount,
                        note=f"tried to {attempt} it; already {approval.status} by "
                             f"{approval.decided_by}")
        return AlreadyDecided(approval_id, approval.status, approval.decided_by or "",
                              approval.decided_at, tried_by=by, noun=noun)

    def _close(self, db: Any, approval: Approval, status: str, by: str,
               note: str | None) -> None:
        """A decision that pays nothing (rejected, asked, expired): whatever it held is freed."""
        self._lines_closed(db, approval, status)
        self._set_decision(db, approval, status, by, note, approval.amount_cents)
        self._audit(db, status, by, run_id=approval.run_id, approval_id=approval.id,
                    order_id=approval.order_id, amount=approval.amount, note=note,
                    lines=audit_lines(approval.lines))
        self._step(db, approval.run_id, "decision",
                   {"approval_id": approval.id, "decision": status, "by": by, "note": note})

    def _approved(self, db: Any, approval: Approval, by: str, note: str | None,
                  amount_cents: int, *, edit: str = "", lines: list[dict[str, Any]] | None = None,
                  declined: list[str] | None = None) -> None:
        """Record an approval that pays ``amount_cents``, with its audit line and timeline
        step, in the decision's transaction. An agent's store that changed what is paid says
        so: ``edit`` (a sentence before the person's note in the audit line), the ``lines``
        paid and those ``declined``."""
        self._set_decision(db, approval, "approved", by, note, amount_cents)
        self._audit(db, "approved", by, run_id=approval.run_id, approval_id=approval.id,
                    order_id=approval.order_id, amount=amount_cents / 100,
                    note=" ".join(filter(None, [edit, note])) or None,
                    lines=audit_lines(lines or []))
        self._step(db, approval.run_id, "decision",
                   {"approval_id": approval.id, "decision": "approved", "by": by, "note": note,
                    "amount": amount_cents / 100, "declined": declined or []})

    def _set_decision(self, db: Any, approval: Approval, status: str, by: str,
                      note: str | None, amount_cents: int) -> None:
        db.execute("UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?,"
                   " decided_pid = ?, note = ?, amount_cents = ? WHERE id = ?"
                   " AND status = 'pending'",
                   (status, by, time.time(), self.pid, note, amount_cents, approval.id))
        self._decision_recorded(db, approval, by)


def _span(seconds: float) -> str:
    """``7 days``, ``1 hour``, ``90 seconds``: the largest unit that gives a whole number."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    n = round(seconds)
    return f"{n} second{'s' if n != 1 else ''}"
