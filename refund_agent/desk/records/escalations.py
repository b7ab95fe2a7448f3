"""The desk's records (schema 9): escalations a lead takes, hand-offs to a lead, first
sign-offs of a two-person refund, who typed a ticket in; and the inbox read by desk status.
What they are for is in ``refund_agent/models.py`` and ``desk/rules.py``."""

from __future__ import annotations

import json
import string
import time
from collections.abc import Collection
from typing import Any

from ...errors import AlreadyDecided, DecisionRefused, NotFound
from ...models import HANDOFF, Escalation, InboxRow, Run
from ...store.core import StoreCore, no_limit
from ...store.leases import Lease
from ...store.search import page_query, search_words
from ..identity import Actor
from ..rules import SignOff
from ..status import DeskStatus, customer_name
from .owners import owner_condition


def raise_escalation(db: Any, key: str, run_id: str, kind: str, reason: str, by: str,
                     approval_id: str | None = None) -> tuple[int, bool]:
    """Open an escalation (inside the caller's transaction): once per ``key``, and at most one
    open per ticket, kind and refund. Returns (its id, True), or (the one already there, False):
    the escalation with this key (a call run again), else the open one it would repeat.

    The database enforces both (the key's unique constraint, schema 13's unique index on the
    open ones), so two raises racing in two processes open one: the loser's insert waits for
    the winner's commit, does nothing, and then reads the winner's row.
    """
    if db.execute(
            "INSERT INTO escalations(key, run_id, approval_id, kind, reason, raised_by, raised_at)"
            " VALUES (?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
            (key, run_id, approval_id, kind, reason, by, time.time())).rowcount:
        return db.execute("SELECT id FROM escalations WHERE key = ?", (key,)).fetchone()[0], True
    row = db.execute("SELECT id FROM escalations WHERE key = ?", (key,)).fetchone() or \
        db.execute("SELECT id FROM escalations WHERE run_id = ? AND kind = ?"
                   " AND COALESCE(approval_id, '') = ? AND taken_by IS NULL",
                   (run_id, kind, approval_id or "")).fetchone()
    return row[0], False


def open_escalation(db: Any, run_id: str, kind: str,
                    approval_id: str | None = None) -> Escalation | None:
    """The open escalation of this kind on the ticket (and refund), if any."""
    row = db.execute("SELECT * FROM escalations WHERE run_id = ? AND kind = ?"
                     " AND COALESCE(approval_id, '') = ? AND taken_by IS NULL",
                     (run_id, kind, approval_id or "")).fetchone()
    return None if row is None else Escalation.model_validate(dict(row))


class DeskRecords(StoreCore):
    """Store methods for escalations and sign-offs ."""

    # -- inside a call's output transaction (boundary 3) ----------------------------------

    def _raised_by(self, db: Any, run_id: str, account: str) -> None:
        """Who typed the ticket in (the loop's store's hook), so they may not approve it."""
        db.execute("INSERT INTO raised_by(run_id, account) VALUES (?,?)", (run_id, account))

    def _output_kept(self, db: Any, run_id: str, steps: list[tuple[str, dict[str, Any]]]
                     ) -> None:
        """The desk's part of saving a call's output (the loop's store's hook): its
        escalation steps raised."""
        self._raise_escalations(db, run_id, steps)

    def _raise_escalations(self, db: Any, run_id: str,
                           steps: list[tuple[str, dict[str, Any]]]) -> None:
        """Store every escalation step of a call's output, once per call key and while one of
        its kind is open on the ticket, once (the audit says only what was opened)."""
        for kind, data in steps:
            if kind != "escalation":
                continue
            if raise_escalation(db, data["key"], run_id, data["kind"], data["reason"],
                                Actor.AGENT)[1]:
                self._audit(db, "escalated", Actor.AGENT, run_id=run_id,
                            note=f"{data['kind']}: {data['reason']}")

    def escalate_run(self, lease: Lease, kind: str, reason: str) -> bool:
        """Put the run in front of a lead on the agent's behalf: one escalation per run and
        ``kind`` however often this is called (a run resumed and failing again), written by the
        run's owner only, audited. False when it was raised before."""
        with self._tx() as db:
            self._fence(db, lease)
            raised = raise_escalation(db, f"{lease.run_id}/{kind}", lease.run_id, kind, reason,
                                      Actor.AGENT)
            if raised:
                self._audit(db, "escalated", Actor.AGENT, run_id=lease.run_id,
                            note=f"{kind}: {reason}")
        return raised

    # -- the desk -------------------------------------------------------------------------

    def escalations(self, open_only: bool = False, run_id: str | None = None,
                    limit: int = 200) -> list[Escalation]:
        """Escalations, oldest first (open ones only, or one run's, if asked)."""
        where, args = [], []
        if open_only:
            where.append("taken_by IS NULL")
        if run_id:
            where.append("run_id = ?")
            args.append(run_id)
        sql = ("SELECT * FROM escalations" + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY raised_at, id LIMIT ?")
        return [Escalation.model_validate(dict(r))
                for r in self._read(sql, (*args, no_limit(limit)))]

    def open_escalation(self, run_id: str, kind: str,
                        approval_id: str | None = None) -> Escalation | None:
        """The open escalation of ``kind`` on the ticket (and refund), if any: raising
        another one now would return it."""
        with self._errors():
            return open_escalation(self._db(), run_id, kind, approval_id)

    def open_escalation_runs(self) -> dict[str, int]:
        """Run id -> how many escalations on it are open."""
        return {r[0]: r[1] for r in self._read(
            "SELECT run_id, COUNT(*) FROM escalations WHERE taken_by IS NULL GROUP BY run_id")}

    def take_escalation(self, escalation_id: int, by: str) -> Escalation:
        """A lead picks an escalation up: compare-and-set on it being open, audited (a late
        attempt by someone else too, as ``ignored``, as a late decision is).

        Raises:
            NotFound: no such escalation.
            AlreadyDecided: someone took it first (its message names who).
        """
        with self._tx() as db:
            row = db.execute("SELECT * FROM escalations WHERE id = ?" + self.lock_row,
                             (escalation_id,)).fetchone()
            if row is None:
                raise NotFound(f"No escalation {escalation_id}.")
            found = Escalation.model_validate(dict(row))
            if found.taken_by is not None:
                late = AlreadyDecided(str(escalation_id), "taken", found.taken_by,
                                      found.taken_at, tried_by=by)
                if found.taken_by.casefold() != by.casefold():   # a late click, as decisions
                    self._audit(db, "ignored", by, run_id=found.run_id,
                                approval_id=found.approval_id,
                                note=f"tried to take escalation {escalation_id}; already taken "
                                     f"by {found.taken_by}")
            else:
                late = None
                db.execute("UPDATE escalations SET taken_by = ?, taken_at = ? WHERE id = ?"
                           " AND taken_by IS NULL", (by, time.time(), escalation_id))
                # The refund it is about, if any, so the row reads as the others do (the
                # amount is proposed: taking an escalation pays nothing).
                refund = db.execute("SELECT order_id, amount_cents FROM approvals WHERE id = ?",
                                    (found.approval_id,)).fetchone() if found.approval_id else None
                self._audit(db, "taken", by, run_id=found.run_id,
                            approval_id=found.approval_id,
                            order_id=refund["order_id"] if refund else None,
                            amount=refund["amount_cents"] / 100 if refund else None,
                            note=f"took the escalation ({found.kind}): {found.reason}")
        if late:
            raise late
        return next(e for e in self.escalations(run_id=found.run_id) if e.id == escalation_id)

    def hand_off(self, approval_id: str, by: str, note: str | None) -> Escalation:
        """An approver over their limit sends a pending refund to a lead (audited).

        Raises:
            NotFound: no such approval.
            AlreadyDecided: it was decided already.
            DecisionRefused: it was sent to a lead already and nobody has taken it yet.
        """
        with self._tx() as db:
            approval = self._pending(db, approval_id, "send to a lead", by, noun="refund")
            if isinstance(approval, AlreadyDecided):
                late: Exception | None = approval
            else:
                late = None
                key = f"handoff:{approval_id}:{int(time.time() * 1000)}"
                open_ = db.execute("SELECT taken_by FROM escalations WHERE approval_id = ?"
                                   " AND taken_by IS NULL", (approval_id,)).fetchone()
                if open_ is not None:
                    late = DecisionRefused("This refund is already waiting for a lead.")
                else:
                    reason = (f"{by} sent ${approval.amount:,.2f} on order {approval.order_id} to "
                              "a lead: it is above their approval limit."
                              + (f" Their note: {note}" if note else ""))
                    raise_escalation(db, key, approval.run_id, HANDOFF, reason, by, approval_id)
                    self._audit(db, "handed_off", by, run_id=approval.run_id,
                                approval_id=approval_id, order_id=approval.order_id,
                                amount=approval.amount, note=reason)
                    self._step(db, approval.run_id, "handoff", {"by": by, "reason": reason})
        if late:
            raise late
        return self.escalations(run_id=approval.run_id)[-1]

    def handed_off(self) -> set[str]:
        """The pending approvals an approver sent to a lead (open hand-offs)."""
        return {r[0] for r in self._read(
            "SELECT approval_id FROM escalations WHERE kind = ? AND taken_by IS NULL"
            " AND approval_id IS NOT NULL", (HANDOFF,))}

    # -- first sign-offs ------------------------------------------------------------------

    def signoff(self, approval_id: str, db: Any | None = None) -> SignOff | None:
        """The first sign-off recorded on a pending refund, if any."""
        rows = (db.execute("SELECT * FROM signoffs WHERE approval_id = ?", (approval_id,))
                .fetchall() if db is not None else
                self._read("SELECT * FROM signoffs WHERE approval_id = ?", (approval_id,)))
        if not rows:
            return None
        r = dict(rows[0])
        return SignOff(r["signed_by"], r["at"], r["amount_cents"], tuple(json.loads(r["keep"])),
                       r["note"])

    def _sign_off(self, db: Any, approval: Any, by: str, total: int, keep: list[str],
                  note: str | None) -> None:
        """Record the first of two approvals (inside the decision's transaction)."""
        db.execute("INSERT INTO signoffs(approval_id, signed_by, at, amount_cents, keep, note)"
                   " VALUES (?,?,?,?,?,?)",
                   (approval.id, by, time.time(), total, json.dumps(sorted(keep)), note))
        text = (f"first sign-off of ${total / 100:,.2f}; a second person must approve"
                + (f". {note}" if note else ""))
        self._audit(db, "signed_off", by, run_id=approval.run_id, approval_id=approval.id,
                    order_id=approval.order_id, amount=total / 100, note=text)
        self._step(db, approval.run_id, "signoff", {"by": by, "amount": total / 100,
                                                    "keep": sorted(keep), "note": note})


# -- the inbox by what happened ------------------------------------------------------------

class DeskInbox(StoreCore):
    """The inbox read by desk status, beside ``Runs.inbox``: from the status each run's row
    keeps (schema 12, records/inbox.py), so counting and paging never read approvals."""

    def _desk_conditions(self, search: str, owner: str | None, unassigned: bool
                         ) -> tuple[list[str], list[Any]]:
        """The inbox's conditions on runs (``Runs._inbox_conditions``: the search), after the
        desk's owner filter: ``owner``'s tickets or, with ``unassigned``, nobody's
        (records/owners.py)."""
        conditions, args = self._inbox_conditions(search)
        mine, mine_args = owner_condition(owner, unassigned, self.now)
        if mine:
            return [mine, *conditions], [*mine_args, *args]
        return conditions, args

    def _desk_filter(self, search: str, owner: str | None, unassigned: bool
                     ) -> tuple[str, tuple]:
        conditions, args = self._desk_conditions(search, owner, unassigned)
        return ("WHERE " + " AND ".join(conditions) if conditions else ""), tuple(args)

    def desk_index(self, search: str = "") -> list[tuple[str, Any, int, float]]:
        """Every run matching ``search``, newest first, as (id, DeskStatus, open escalations,
        created_at). Reads every matching row: for reports and tests; the page uses
        :meth:`desk_groups` and :meth:`desk_page`."""
        where, args = self._inbox_filter(search, ())
        return [(r[0], DeskStatus(r[1]), int(r[2]), r[3]) for r in self._read(
            "SELECT id, desk_status, desk_escalations, created_at FROM runs"
            f" {where} ORDER BY created_at DESC, id DESC", args)]

    def desk_groups(self, search: str = "", *, owner: str | None = None,
                    unassigned: bool = False) -> list[tuple[Any, int, int]]:
        """How many runs matching ``search`` have each (DeskStatus, open escalations > 0):
        a dozen rows at most, however many tickets there are. Without a search or an owner
        filter, the counts the schema keeps as runs change (desk_counts, schema 16); with one,
        the matches'. ``owner``/``unassigned``: only that account's tickets, or nobody's."""
        if not search_words(search) and owner is None and not unassigned:
            return [(DeskStatus(status), int(escalated), int(n)) for status, escalated, n in
                    self._read("SELECT status, escalated, n FROM desk_counts"
                               " WHERE n > 0 AND status <> ''")]
        where, args = self._desk_filter(search, owner, unassigned)
        counts: dict[tuple[Any, int], int] = {}
        for status, escalations, n in self._read(
                "SELECT desk_status, desk_escalations, COUNT(*) FROM runs"
                f" {where} GROUP BY desk_status, desk_escalations", args):
            group = (DeskStatus(status), int(escalations > 0))
            counts[group] = counts.get(group, 0) + int(n)
        return [(status, escalated, n) for (status, escalated), n in counts.items()]

    def desk_page(self, search: str, statuses: Collection[Any] | None, or_escalated: bool,
                  limit: int, after: tuple[float, str] | None = None,
                  oldest_first: bool = False, *, owner: str | None = None,
                  unassigned: bool = False) -> list[str]:
        """The ids of one page of runs matching ``search`` whose desk status is one of
        ``statuses`` (None: any) or, with ``or_escalated``, that have an open escalation;
        newest first, starting after the run whose (created_at, id) is ``after`` (None: the
        newest). ``oldest_first``: the page from the other end (the last page, or the one
        before ``after``), still returned newest first. A keyset page: as quick at the end as
        at the start (store/search.py, page_query). ``owner``/``unassigned`` as for
        :meth:`desk_groups`."""
        conditions, args = self._desk_conditions(search, owner, unassigned)
        branches: list[tuple[str, tuple]] = []
        if statuses:
            branches += [("desk_status = ?", (str(s),)) for s in statuses]
        if or_escalated:
            branches.append(("desk_escalations > 0", ()))
        if not branches and (statuses is not None or or_escalated):
            return []
        sql, values = page_query(conditions, args, branches, limit, after, oldest_first)
        ids = [r[0] for r in self._read(sql, values)]
        return ids[::-1] if oldest_first else ids

    def customer_names(self, senders: Collection[str] | None = None) -> dict[str, str]:
        """Address (case-folded) -> the name the customer last gave on any ticket, so one
        customer reads the same in every row, whichever ticket had no name. ``senders``: only
        these addresses (what one page shows), each its latest name through an index."""
        names: dict[str, str] = {}
        if senders is None:
            for sender, name in self._read("SELECT sender, sender_name FROM runs"
                                           " ORDER BY created_at"):
                if name and name.strip() and name != sender:
                    names[sender.casefold()] = name.strip()
            return names
        for sender in {s.casefold(): s for s in senders}.values():
            # Both spellings of lower case: SQLite's lower() folds ASCII letters only.
            rows = self._read(
                "SELECT sender_name FROM runs WHERE lower(sender) IN (?, ?)"
                " AND TRIM(sender_name) <> '' AND sender_name <> sender"
                " ORDER BY created_at DESC LIMIT 1", (sender.lower(), _ascii_lower(sender)))
            if rows:
                names[sender.casefold()] = rows[0][0].strip()
        return names

    def run_customers(self, run_ids: Collection[str] | None = None) -> dict[str, str]:
        """Run id -> the customer as the desk shows them (see :meth:`customer_names`), for
        every run or only ``run_ids``."""
        if run_ids is None:
            rows = self._read("SELECT id, sender FROM runs")
        elif not run_ids:
            return {}
        else:
            ids = sorted(set(run_ids))
            rows = self._read(f"SELECT id, sender FROM runs WHERE id IN"
                              f" ({','.join('?' * len(ids))})", tuple(ids))
        names = self.customer_names(None if run_ids is None else [r[1] for r in rows])
        return {r[0]: customer_name(names.get(r[1].casefold()), r[1]) for r in rows}

    def inbox_rows(self, ids: list[str]) -> list[Any]:
        """The inbox entries of these runs, in the order given."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        # The latest proposal's order and amount; the desk status is the one the row keeps.
        latest = ("(SELECT {col} FROM approvals a WHERE a.run_id = runs.id"
                  " ORDER BY a.requested_at DESC, a.id DESC LIMIT 1)")
        rows = self._read(
            f"SELECT runs.*, {latest.format(col='order_id')} AS inbox_order,"
            f" {latest.format(col='amount_cents')} AS inbox_amount,"
            " (SELECT c.order_id FROM calls c WHERE c.run_id = runs.id"
            "  AND c.name = 'lookup_order' AND c.order_id IS NOT NULL LIMIT 1) AS looked_up"
            f" FROM runs WHERE id IN ({marks})", tuple(ids))
        found = {}
        for r in rows:
            data = dict(r)
            order, looked = data.pop("inbox_order"), data.pop("looked_up")
            found[data["id"]] = InboxRow(run=Run.model_validate(data),
                                         order_id=order or (str(looked) if looked else None),
                                         amount_cents=data.pop("inbox_amount"),
                                         desk=str(data["desk_status"]),
                                         escalations=int(data["desk_escalations"]))
        return [found[i] for i in ids if i in found]


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)
