"""Approvals: boundary 4 (a refund waits for a person, its lines held) and boundary 5 (a
decision is a compare-and-set on 'pending', with its audit line, in one transaction)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..desk.identity import Actor, same_person
from ..desk.policy import SHIPPING, Held, Quote
from ..desk.rules import PAY, SIGN_OFF, four_eyes, limit_problem, overpaid_line, own_ticket_problem
from ..errors import AlreadyDecided, DecisionRefused, NotFound, StoreError, Undone
from ..models import Approval, Run, RunStatus, call_key
from .audit import audit_lines
from .core import StoreCore, no_limit
from .leases import Lease


class Approvals(StoreCore):
    """Queueing refunds for a person, and their decisions: approve, reject, ask, expire."""

    def queue_approval(self, lease: Lease, *, response_id: str, call_id: str, order_id: str,
                       summary: str, customer: str,
                       price: Callable[[dict[str, Held]], Quote | str],
                       release: bool = False) -> Approval | str:
        """Boundary 4: a pending approval, its lines, its audit line and the run's pause.

        ``price`` is called inside the transaction with the lines other refunds hold on the
        order, so two tickets cannot both reserve the same line. Returns the approval, or the
        reason ``price`` gave (nothing is written then: the caller records the refusal).
        ``release``: the pause also gives up the lease (nobody advances a run that waits for
        a person), in the same transaction: the loop's proposals do, and then do not release
        it again (turns.Waiting.released).
        """
        try:
            return self._queue_approval(lease, response_id, call_id, order_id, summary,
                                        customer, price, release)
        except Undone as not_queued:   # rolled back: the run's pause too
            return not_queued.answer  # type: ignore[return-value]

    def _queue_approval(self, lease: Lease, response_id: str, call_id: str, order_id: str,
                        summary: str, customer: str,
                        price: Callable[[dict[str, Held]], Quote | str],
                        release: bool = False) -> Approval:
        run_id = lease.run_id
        with self._tx() as db:
            # The run's pause (and with ``release`` the lease's end), made by the lease's
            # check itself (one statement), first: the run's row is locked before the order's
            # lines, as everywhere. Undone when nothing is queued.
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
            quote = price(self._held(db, order_id))
            if isinstance(quote, str):
                raise Undone(quote)
            # Requested by the database's clock, as expiry reads it: a host whose clock runs
            # ahead (or behind) neither expires a fresh proposal nor keeps a stale one.
            # The rows come back as written (RETURNING), so the approval is not read again.
            approval = dict(db.execute(
                "INSERT INTO approvals(id, run_id, response_id, call_id, order_id, amount_cents,"
                " proposed_cents, summary, customer, status, requested_at, requested_pid)"
                f" VALUES (?,?,?,?,?,?,?,?,?, 'pending', {self.now}, ?) RETURNING *",
                (approval_id, run_id, response_id, call_id, quote.order_id, quote.total_cents,
                 quote.total_cents, summary, customer, self.pid)).fetchall()[0])
            written: list[dict[str, Any]] = []
            numbered = list(enumerate(quote.lines))
            for chunk in (numbered[i:i + 100] for i in range(0, len(numbered), 100)):
                written += map(dict, db.execute(   # the lines in one statement, as steps are
                    "INSERT INTO approval_lines(approval_id, order_id, seq, line, name, reason,"
                    " amount_cents, allowed_cents, fee_cents, held, units, quantity) VALUES "
                    + ",".join(["(?,?,?,?,?,?,?,?,?,1,?,?)"] * len(chunk)) + " RETURNING *",
                    tuple(v for seq, q in chunk
                          for v in (approval_id, quote.order_id, seq, q.line, q.name, q.reason,
                                    q.amount_cents, q.allowed_cents, q.fee_cents, q.units,
                                    q.quantity))).fetchall())
            lines = audit_lines(quote.lines)
            self._audit(db, "requested", Actor.AGENT, run_id=run_id, approval_id=approval_id,
                        order_id=quote.order_id, amount=quote.amount, note=summary, lines=lines)
            self._step(db, run_id, "approval", {"approval_id": approval_id,
                                                "order_id": quote.order_id,
                                                "amount": quote.amount, "summary": summary,
                                                "lines": lines})
        return Approval.model_validate(
            {**approval, "lines": sorted(written, key=lambda line: line["seq"])})

    def _held(self, db: Any, order_id: str, except_id: str | None = None,
              lock: bool = True) -> dict[str, list[Held]]:
        """The units of an order that refunds hold, by line: approved ones as refunded, pending.

        A line may be held by several refunds (one glass refunded, another waiting), so each
        line maps to its holds, oldest first; a row without units (from before schema 8)
        holds all the line's units. ``lock`` (inside a write transaction) keeps other
        transactions from reserving units of this order until this one commits.
        """
        if lock:
            self.lock_order(db, order_id)
        rows = db.execute(
            "SELECT l.line, l.reason, l.amount_cents, l.units, l.approval_id, a.status"
            " FROM approval_lines l JOIN approvals a ON a.id = l.approval_id"
            " WHERE l.order_id = ? AND l.held = 1 ORDER BY a.requested_at, l.approval_id",
            (order_id,)).fetchall()
        held: dict[str, list[Held]] = {}
        for r in rows:
            if r["approval_id"] != except_id:
                held.setdefault(r["line"], []).append(Held(
                    r["reason"], "refunded" if r["status"] == "approved" else "pending",
                    f"approval {r['approval_id']}", r["amount_cents"], r["units"]))
        return held

    def held_lines(self, order_id: str, except_id: str | None = None
                   ) -> dict[str, list[Held]]:
        """The units of an order held by refunds in this store (made, approved or pending)."""
        with self._errors():
            return self._held(self._db(), order_id, except_id, lock=False)

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
        """The approval an issue_refund call queued, by the call's key (Call.key), or None."""
        found = self._approvals("WHERE id = ?", (key,))
        return found[0] if found else None

    def approvals(self, status: str | None = "pending", limit: int = 200) -> list[Approval]:
        if status is None:
            return self._approvals("ORDER BY requested_at DESC LIMIT ?", (no_limit(limit),))
        return self._approvals("WHERE status = ? ORDER BY requested_at LIMIT ?",
                               (status, no_limit(limit)))

    def pending_count(self) -> int:
        """How many refunds wait for a decision."""
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
            lines: dict[str, list[dict[str, Any]]] = {r["id"]: [] for r in rows}
            ids = list(lines)
            for chunk in (ids[i:i + 500] for i in range(0, len(ids), 500)):
                marks = ",".join("?" * len(chunk))
                for line in db.execute(f"SELECT * FROM approval_lines WHERE approval_id IN"
                                       f" ({marks}) ORDER BY approval_id, seq", chunk):
                    lines[line["approval_id"]].append(dict(line))
        return [Approval.model_validate({**r, "lines": lines[r["id"]]}) for r in rows]

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None,
               keep: list[str] | None = None, *, fingerprint: str | None = None,
               requote: Callable[[Approval, list[str], dict[str, Held]], Quote | str] | None
               = None, limit_cents: int | None = None,
               two_person_above_cents: int | None = None) -> Approval:
        """Boundary 5: compare-and-set on 'pending', with its audit line, in one transaction.

        Where what the order had approved (any ticket, anyone) plus the kept lines comes above
        ``two_person_above_cents``, the first approval only records a sign-off (the approval
        stays pending; see rules.four_eyes) and a second, different person completes it;
        nobody approves a refund on a ticket they opened (runs.raised_by).

        An approval may keep only some of the proposed lines (``keep``, skus); the others are
        declined and their lines freed. ``requote`` prices the kept lines inside the same
        transaction, against the lines other refunds hold right now, so nothing the policy
        forbids can be approved, however the store changed since the proposal. ``limit_cents``
        is the most the deciding person may approve on the order (None: no limit); what the
        kept lines pay plus what that person approved on the order before (any ticket, any run)
        is compared with it, in the same transaction.

        ``fingerprint`` (Approval.fingerprint, of the approval as the person saw it): when
        given, a pending approval that no longer matches it is refused, never decided.

        Raises:
            NotFound: no such approval.
            AlreadyDecided: someone decided first; the late attempt is audited as 'ignored'.
            DecisionRefused: the kept lines are not the proposal's, ``requote`` gave a
                reason, or the amount is above ``limit_cents`` (audited as 'refused'; the
                approval stays pending).
        """
        with self._tx() as db:
            approval = self._pending(db, approval_id, "approve" if approve else "reject", by,
                                     fingerprint=fingerprint)
            if isinstance(approval, Exception):
                late: Exception | None = approval
            elif approve:
                late = self._approve(db, approval, by, note, keep, requote, limit_cents,
                                     two_person_above_cents)
            else:
                late = self._close(db, approval, "rejected", by, note)
        if late:
            raise late
        return self.approval(approval_id)

    def ask(self, approval_id: str, by: str, question: str, *,
            fingerprint: str | None = None) -> Approval:
        """Send a proposal back to the customer with ``question``, paying nothing (yet).

        The approval closes as 'asked' and frees its lines; the run tells the customer, waits
        for their reply, and may propose again then. Same compare-and-set as :meth:`decide`.

        Raises:
            NotFound, AlreadyDecided: as for :meth:`decide`.
        """
        with self._tx() as db:
            approval = self._pending(db, approval_id, "ask the customer about", by,
                                     fingerprint=fingerprint)
            late = approval if isinstance(approval, Exception) else \
                self._close(db, approval, "asked", by, question)
        if late:
            raise late
        return self.approval(approval_id)

    def expire(self, older_than: float, by: str = Actor.EXPIRY,
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
                 audit_late: bool = True, fingerprint: str | None = None
                 ) -> Approval | AlreadyDecided | DecisionRefused:
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
                              approval.decided_at, tried_by=by)

    def _close(self, db: Any, approval: Approval, status: str, by: str,
               note: str | None) -> None:
        """A decision that pays nothing (rejected, asked, expired): every line is freed."""
        db.execute("UPDATE approval_lines SET held = 0, decision = ? WHERE approval_id = ?",
                   (status, approval.id))
        self._set_decision(db, approval, status, by, note, approval.amount_cents)
        self._audit(db, status, by, run_id=approval.run_id, approval_id=approval.id,
                    order_id=approval.order_id, amount=approval.amount, note=note,
                    lines=audit_lines(approval.lines))
        self._step(db, approval.run_id, "decision",
                   {"approval_id": approval.id, "decision": status, "by": by, "note": note})

    def _approve(self, db: Any, approval: Approval, by: str, note: str | None,
                 keep: list[str] | None, requote: Callable | None,
                 limit_cents: int | None = None,
                 two_person_above_cents: int | None = None) -> Exception | None:
        proposed = [line.line for line in approval.item_lines]
        kept = proposed if keep is None else [line.strip() for line in keep]
        if not proposed:
            # A refund of the shipping alone (owed once every item was refunded as damaged by
            # refunds proposed side by side) has no line to tick: it is approved as it is.
            strangers = sorted(set(kept) - {SHIPPING})
            if strangers:
                return DecisionRefused(
                    f"This refund pays only the shipping ({SHIPPING}); approve it as it is, or "
                    f"reject it with a note. {', '.join(strangers)} is not one of its lines.")
            kept = []
        else:
            strangers = sorted(set(kept) - set(proposed))
            if strangers or not kept:
                return DecisionRefused(
                    f"Keep at least one of the proposed lines ({', '.join(proposed)}); "
                    + (f"{', '.join(strangers)} is not one of them." if strangers else
                       "to refund nothing, reject with a note instead."))
        where = {"run_id": approval.run_id, "approval_id": approval.id,
                 "order_id": approval.order_id}
        quote: Quote | str | None = None
        if requote is not None:
            quote = requote(approval, kept, self._held(db, approval.order_id, approval.id))
            if isinstance(quote, Quote) and quote.total_cents > approval.proposed_cents:
                quote = (f"the kept lines now come to ${quote.amount:.2f}, more than the "
                         f"${approval.amount:.2f} proposed; ask the agent to propose again.")
            elif isinstance(quote, Quote):
                # Line by line too: one line's rise can hide behind another line's removal.
                quote = overpaid_line(approval.lines, quote) or quote
        if isinstance(quote, str):
            self._audit(db, "refused", by, **where, amount=approval.amount, note=quote)
            return DecisionRefused(f"Cannot approve: {quote}")
        amounts = ({q.line: q for q in quote.lines} if quote is not None else
                   {line.line: line for line in approval.lines if line.line in kept
                    or line.reason == "shipping"})
        # An approval without lines (another agent's action) pays what it declared.
        total = (sum(q.amount_cents for q in amounts.values()) if approval.lines
                 else approval.proposed_cents)
        # Checked here, not only on the card: the amount is what the kept lines pay now, and
        # the limit covers all this person approved on the order (every ticket, every run),
        # read under the order's lock so two decisions cannot both count the old total.
        # Before any line changes: a refusal leaves the proposal exactly as it was.
        reason = None if limit_cents is None else limit_problem(
            by, limit_cents, approval.order_id, total,
            self._approved_on(db, approval.order_id, by))
        raised = db.execute("SELECT account FROM raised_by WHERE run_id = ?",
                            (approval.run_id,)).fetchone()
        reason = reason or own_ticket_problem(by, raised[0] if raised else None)
        # Two people by what the order pays in all, read under the same lock: two refunds of
        # one order approved at once cannot both count the total without the other.
        before = 0 if two_person_above_cents is None else \
            self._approved_on(db, approval.order_id)
        step, why = four_eyes(by, total, [k for k in kept if k != SHIPPING],
                              two_person_above_cents, self.signoff(approval.id, db), before)
        reason = reason or why
        if reason:
            self._audit(db, "refused", by, **where, amount=total / 100, note=reason)
            return DecisionRefused(f"Cannot approve: {reason}")
        if step == SIGN_OFF:   # the refund stays pending, its lines held, for a second person
            self._sign_off(db, approval, by, total, [k for k in kept if k != SHIPPING], note)
            return None
        assert step == PAY
        for line in approval.lines:
            if line.line in amounts:
                # Units only ever go down here (the approver lowered them; the re-quote
                # refuses more than proposed), so the row still fits inside its line.
                kept_units = getattr(amounts[line.line], "units", None)
                db.execute("UPDATE approval_lines SET decision = 'approved', amount_cents = ?,"
                           " fee_cents = ?, units = COALESCE(?, units)"
                           " WHERE approval_id = ? AND line = ?",
                           (amounts[line.line].amount_cents, amounts[line.line].fee_cents,
                            kept_units, approval.id, line.line))
            else:
                db.execute("UPDATE approval_lines SET held = 0, decision = 'declined'"
                           " WHERE approval_id = ? AND line = ?", (approval.id, line.line))
        self._set_decision(db, approval, "approved", by, note, total)
        declined = [line for line in approval.lines if line.line not in amounts]
        edit = ""
        if declined:
            edit = (f"Approved {len(amounts)} of {len(approval.lines)} lines; declined "
                    + ", ".join(f"{line.line} ({line.name})" for line in declined) + ".")
        fewer = [f"{line.line} ({line.name}) {units} of the {line.units} units proposed"
                 for line in approval.lines if line.line in amounts and line.units is not None
                 and (units := getattr(amounts[line.line], "units", None)) is not None
                 and units < line.units]
        if fewer:
            edit = " ".join(filter(None, [edit, "Approved " + ", ".join(fewer) + "."]))
        kept_lines = [{**line.model_dump(), "amount_cents": amounts[line.line].amount_cents,
                       "units": getattr(amounts[line.line], "units", None) or line.units}
                      for line in approval.lines if line.line in amounts]
        self._audit(db, "approved", by, **where, amount=total / 100,
                    note=" ".join(filter(None, [edit, note])) or None,
                    lines=audit_lines(kept_lines))
        self._step(db, approval.run_id, "decision",
                   {"approval_id": approval.id, "decision": "approved", "by": by, "note": note,
                    "amount": total / 100, "declined": [line.line for line in declined]})
        return None

    def _approved_on(self, db: Any, order_id: str, by: str | None = None,
                     lock: bool = True) -> int:
        """What ``by`` (None: anyone) has approved on this order so far, paid or being paid,
        in cents. ``lock`` (inside a decision's transaction) holds the order until commit."""
        if lock:
            self.lock_order(db, order_id)
        if by is None:
            return int(db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM approvals"
                                  " WHERE order_id = ? AND status = 'approved'",
                                  (order_id,)).fetchone()[0])
        # By person, not by spelling: a look-alike twin account (identity.same_person) shares
        # one limit. An order has a handful of approvals, so they are summed here.
        rows = db.execute("SELECT decided_by, amount_cents FROM approvals WHERE order_id = ?"
                          " AND status = 'approved'", (order_id,)).fetchall()
        return sum(int(cents) for name, cents in rows if same_person(name or "", by))

    def approved_on(self, order_id: str, by: str | None = None) -> int:
        """What ``by`` (None: anyone) has approved on the order so far, in cents: what the
        approver's card counts against a limit or the two-person amount. A decision reads it
        again inside its own transaction."""
        with self._errors():
            return self._approved_on(self._db(), order_id, by, lock=False)

    def _set_decision(self, db: Any, approval: Approval, status: str, by: str,
                      note: str | None, amount_cents: int) -> None:
        db.execute("UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?,"
                   " decided_pid = ?, note = ?, amount_cents = ? WHERE id = ?"
                   " AND status = 'pending'",
                   (status, by, time.time(), self.pid, note, amount_cents, approval.id))
        # A refund sent to a lead is the lead's no more once anyone decided it.
        db.execute("UPDATE escalations SET taken_by = ?, taken_at = ? WHERE approval_id = ?"
                   " AND taken_by IS NULL", (by, time.time(), approval.id))


def _span(seconds: float) -> str:
    """``7 days``, ``1 hour``, ``90 seconds``: the largest unit that gives a whole number."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    n = round(seconds)
    return f"{n} second{'s' if n != 1 else ''}"
