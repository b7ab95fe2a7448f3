"""The refund desk's part of boundaries 4 and 5; the loop's store keeps the rest
(store/approvals.py: the approval's row, the compare-and-set, its audit line, the run's pause).

A refund is itemized: its lines are written beside the approval (approval_lines) and hold
their units of the order's lines until a decision frees them, so two tickets cannot both
reserve one glass. Approving one applies the desk's rules inside the decision's transaction,
read under the order's lock: the kept lines priced again against what other refunds hold now
(``requote``), no line paying more than its card showed, the approver's limit on the order,
nobody approving a refund on a ticket they opened, and two different people above the shop's
two-person amount (desk/rules.py). The loop's store reaches all of this through its hooks
(``_holds``, ``_proposal_lines``, ``_approval_lines``, ``_lines_closed``,
``_decision_recorded``) and through :meth:`DeskApprovals.decide`'s own arguments.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from ...errors import DecisionRefused
from ...models import Approval, Proposal
from ...store.approvals import Approvals
from ...store.leases import Lease
from ..identity import same_person
from ..policy import SHIPPING, Held, HeldMap, Quote
from ..rules import (
    PAY,
    SIGN_OFF,
    SignOff,
    four_eyes,
    limit_problem,
    overpaid_line,
    own_ticket_problem,
)

#: The decision's pricing of the kept lines (desk/agent.py: Agent.requote): the approval,
#: the lines kept and what other refunds hold on the order now -> a quote, or why not.
Requote = Callable[[Approval, list[str], dict[str, list[Held]]], Quote | str]


class DeskApprovals(Approvals):
    """Refunds queued with their lines, and decided under the desk's approval rules."""

    if TYPE_CHECKING:   # DeskRecords' (escalations.py), beside this mixin in DeskStore
        def signoff(self, approval_id: str, db: Any | None = None) -> SignOff | None: ...

        def _sign_off(self, db: Any, approval: Any, by: str, total: int, keep: list[str],
                      note: str | None) -> None: ...

    # -- boundary 4 -------------------------------------------------------------------------

    def queue_approval(self, lease: Lease, *, response_id: str, call_id: str, subject: str,
                       title: str, customer: str,
                       price: Callable[[HeldMap], Quote | Proposal | str],
                       release: bool = False) -> Approval | str:
        """The loop's boundary 4 (Approvals.queue_approval), where ``price`` may also give a
        refund's quote: its lines are written with the approval and hold their units.

        ``price`` is called inside the transaction with the lines other refunds hold on the
        order ``subject`` (read under the order's lock), so two tickets cannot both reserve
        the same line. Returns the approval, or the reason ``price`` gave (nothing is written
        then).
        """
        def priced(held: Mapping[str, Any]) -> Proposal | str:
            quote = price(held)
            if not isinstance(quote, Quote):
                return quote
            return Proposal(subject=quote.order_id, amount_cents=quote.total_cents,
                            lines=list(quote.lines))

        return super().queue_approval(lease, response_id=response_id, call_id=call_id,
                                      subject=subject, title=title, customer=customer,
                                      price=priced, release=release)

    def _holds(self, db: Any, subject: str) -> dict[str, list[Held]]:
        return self._held(db, subject)

    def _proposal_lines(self, db: Any, approval_id: str, proposal: Proposal
                        ) -> list[dict[str, Any]]:
        """The refund's lines, each holding its units of the order's line (held = 1)."""
        written: list[dict[str, Any]] = []
        numbered = list(enumerate(proposal.lines))
        for chunk in (numbered[i:i + 100] for i in range(0, len(numbered), 100)):
            written += map(dict, db.execute(   # the lines in one statement, as steps are
                "INSERT INTO approval_lines(approval_id, order_id, seq, line, name, reason,"
                " amount_cents, allowed_cents, fee_cents, held, units, quantity) VALUES "
                + ",".join(["(?,?,?,?,?,?,?,?,?,1,?,?)"] * len(chunk)) + " RETURNING *",
                tuple(v for seq, q in chunk
                      for v in (approval_id, proposal.subject, seq, q.line, q.name, q.reason,
                                q.amount_cents, q.allowed_cents, q.fee_cents, q.units,
                                q.quantity))).fetchall())
        return sorted(written, key=lambda line: line["seq"])

    def _approval_lines(self, db: Any, approval_ids: list[str]
                        ) -> dict[str, list[dict[str, Any]]]:
        lines: dict[str, list[dict[str, Any]]] = {approval_id: [] for approval_id in approval_ids}
        for chunk in (approval_ids[i:i + 500] for i in range(0, len(approval_ids), 500)):
            marks = ",".join("?" * len(chunk))
            for line in db.execute(f"SELECT * FROM approval_lines WHERE approval_id IN"
                                   f" ({marks}) ORDER BY approval_id, seq", chunk):
                lines[line["approval_id"]].append(dict(line))
        return lines

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

    # -- boundary 5 -------------------------------------------------------------------------

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None,
               keep: list[str] | None = None, *, fingerprint: str | None = None,
               requote: Requote | None = None, limit_cents: int | None = None,
               two_person_above_cents: int | None = None, noun: str = "proposal") -> Approval:
        """The loop's boundary 5 for a refund: its compare-and-set (Approvals.decide), with the
        desk's rules applied inside the same transaction when it is approved.

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
        ``noun``: what the agent calls its proposals, for AlreadyDecided's message.

        Raises:
            NotFound: no such approval.
            AlreadyDecided: someone decided first; the late attempt is audited as 'ignored'.
            DecisionRefused: the kept lines are not the proposal's, ``requote`` gave a
                reason, or the amount is above ``limit_cents`` (audited as 'refused'; the
                approval stays pending).
        """
        return self._decide(approval_id, approve, by, note, fingerprint, noun, partial(
            self._approve, by=by, note=note, keep=keep, requote=requote,
            limit_cents=limit_cents, two_person_above_cents=two_person_above_cents))

    def _approve(self, db: Any, approval: Approval, *, by: str, note: str | None,
                 keep: list[str] | None, requote: Requote | None,
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
        self._approved(db, approval, by, note, total, edit=edit, lines=kept_lines,
                       declined=[line.line for line in declined])
        return None

    def _lines_closed(self, db: Any, approval: Approval, status: str) -> None:
        """A refund that pays nothing frees every line it held."""
        db.execute("UPDATE approval_lines SET held = 0, decision = ? WHERE approval_id = ?",
                   (status, approval.id))

    def _decision_recorded(self, db: Any, approval: Approval, by: str) -> None:
        # A refund sent to a lead is the lead's no more once anyone decided it.
        db.execute("UPDATE escalations SET taken_by = ?, taken_at = ? WHERE approval_id = ?"
                   " AND taken_by IS NULL", (by, time.time(), approval.id))

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
