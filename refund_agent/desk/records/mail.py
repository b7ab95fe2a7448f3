"""The desk's mail in and out: one row per Message-ID (unique), so a message is taken once
however often it is delivered, and the ids that tie a customer's reply to its ticket's thread.

What to do with a message is decided by a pure function the caller passes in
(outside/mailin/decide.py); here it is carried out, with the message's row, in one transaction:
a new ticket, a reply added to its run, a reply held until its run can take it, or a robot's
mail recorded and audited with no run. The rows' types and the redelivery rule are
outside/mailin/rows.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ...config import MAIL_CAP_MOST
from ...intake import same_address
from ...models import MAIL_LOOP, RunStatus
from ...outside.mailin.rows import (
    TAKEN_IN,
    Answered,
    Decide,
    MailIn,
    MailRow,
    MailThread,
    redelivery,
    reused_id,
    reused_kind,
)
from ...store.core import StoreCore
from ...store.leases import Lease
from .escalations import raise_escalation


class Mail(StoreCore):
    """Received and sent mail, once per Message-ID."""

    def take_mail(self, mail: MailIn, decide: Decide, agent: str) -> MailRow:
        """Take one received message, once: boundary 1 for mail (its run, or its reply, exists
        with its row before anything reads it).

        ``decide(thread, answered)`` says what the message is, from the run its ids name
        (None: no known thread) and the desk's recent answers: "ticket" or "flagged" (a new
        run), "reply" (added to ``thread``'s run), "held" (that run cannot take a reply yet),
        "auto", "bounce" or "refused" (no run), or "looped" (answering would pass the cap on
        automatic answers: kept on the run it answers, which goes to a person).
        A message whose Message-ID was taken before is not looked at again when it is a
        redelivery (:func:`redelivery`): its first row comes back with ``new`` False. One from
        another sender is kept under :func:`reused_id`, and flagged (:func:`reused_kind`).
        """
        with self._tx() as db:
            # Two deliveries of one message racing (an MTA's retry while the first is still
            # being recorded): the second waits here and then finds the first's row, rather
            # than meeting the unique index with an error. SQLite's write lock already does.
            self.lock_order(db, f"mail {mail.message_id}")
            row = db.execute("SELECT * FROM mail WHERE message_id = ?",
                             (mail.message_id,)).fetchone()
            first = None
            if row is not None:
                if redelivery(row, mail):
                    return MailRow.of(row, new=False)
                first, mail = row, replace(mail, message_id=reused_id(mail.raw))
                self.lock_order(db, f"mail {mail.message_id}")
                again = db.execute("SELECT * FROM mail WHERE message_id = ?",
                                   (mail.message_id,)).fetchone()
                if again is not None:
                    return MailRow.of(again, new=False)
            thread = self._thread(db, mail.thread_ids)
            answered = self._answered(db, mail.sender, thread)
            kind, note = decide(thread, answered)
            if first is not None:
                kind, note = reused_kind(kind, note, first)
            run_id, reply_id = (thread.run_id if thread else None), None
            if kind == "looped":
                run_id = answered.thread_run or answered.sender_run
            facts = {"message_id": mail.message_id,
                     **({"attachments": list(mail.attachments)} if mail.attachments else {}),
                     **({"flagged": note} if kind == "flagged" else {})}
            if kind in ("ticket", "flagged"):
                run_id = self._insert_run(db, sender=mail.sender,
                                          sender_name=mail.sender_name or mail.sender,
                                          subject=mail.subject or "Refund request",
                                          email=mail.text, kind="email", raised_by=None,
                                          agent=agent, extra=facts)
            elif kind == "reply" and run_id:
                reply_id = self._insert_reply(db, run_id, mail.text, False, facts)
            cur = db.execute(
                "INSERT INTO mail(message_id, run_id, direction, kind, sender, recipient,"
                " subject, in_reply_to, refs, at, attachments, note, reply_id, text, raw)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
                (mail.message_id, run_id, "in", kind, mail.sender, None, mail.subject,
                 mail.in_reply_to, json.dumps(list(mail.references)), time.time(),
                 json.dumps(list(mail.attachments)), note, reply_id, mail.text, mail.raw))
            mail_id = cur.fetchone()[0]
            if kind not in ("ticket", "reply"):
                # Not fed to the agent as it stands: a person can see what came and why.
                self._audit(db, f"mail_{kind}", "mail", run_id=run_id,
                            note=f"{mail.message_id} from {mail.sender or '(no sender)'}: "
                                 f"{note}")
            if kind == "looped" and run_id:
                self._to_a_person(db, run_id, mail.message_id, mail.sender, note)
            row = db.execute("SELECT * FROM mail WHERE id = ?", (mail_id,)).fetchone()
        return MailRow.of(row)

    def _thread(self, db: Any, ids: Sequence[str]) -> MailThread | None:
        """The run the first of ``ids`` that the desk knows belongs to, its row locked."""
        for message_id in ids:
            found = db.execute("SELECT run_id FROM mail WHERE message_id = ?"
                               " AND run_id IS NOT NULL", (message_id,)).fetchone()
            if found is None:
                continue
            run = db.execute("SELECT * FROM runs WHERE id = ?" + self.lock_row,
                             (found["run_id"],)).fetchone()
            if run is None:
                continue
            takes = (run["status"] in (RunStatus.DONE, RunStatus.ASKED)
                     and not self._lease_live(db, dict(run)))
            return MailThread(run["id"], run["sender"], takes)
        return None

    def _answered(self, db: Any, sender: str, thread: MailThread | None) -> Answered:
        """The desk's recent answers on ``thread`` (if ``sender`` is its customer) and to
        ``sender``, newest first, for the cap on automatic answers."""
        ours = thread is not None and bool(sender) and same_address(sender, thread.sender)
        on_thread = tuple(r[0] for r in db.execute(
            "SELECT at FROM mail WHERE run_id = ? AND direction = 'out' ORDER BY at DESC"
            " LIMIT ?", (thread.run_id, MAIL_CAP_MOST))) if ours and thread else ()
        # Through the runs' sender index: the desk answers only a run's own customer.
        to_sender = db.execute(
            "SELECT m.at, m.run_id FROM runs r JOIN mail m ON m.run_id = r.id"
            " WHERE lower(r.sender) = lower(?) AND m.direction = 'out'"
            " ORDER BY m.at DESC LIMIT ?", (sender, MAIL_CAP_MOST)).fetchall() if sender else []
        return Answered(on_thread, tuple(r[0] for r in to_sender), sender,
                        thread.run_id if ours and thread else None,
                        to_sender[0][1] if to_sender else None)

    def _to_a_person(self, db: Any, run_id: str, message_id: str, sender: str,
                     why: str) -> None:
        """A message the desk will not answer (the cap on automatic answers is met): its
        ticket goes to a person, one open escalation however many such messages come."""
        reason = f"{message_id} from {sender or '(no sender)'}: {why}"
        if raise_escalation(db, f"{MAIL_LOOP}:{message_id}", run_id, MAIL_LOOP, reason,
                            "mail")[1]:
            self._audit(db, "escalated", "mail", run_id=run_id, note=f"{MAIL_LOOP}: {reason}")

    def release_held(self, decide: Callable[[MailThread, Answered], tuple[str, str]] | None
                     = None) -> list[MailRow]:
        """Replies held while their run could not take one, added now that it can (oldest
        first); the ones still held stay so. ``decide(thread, answered)`` may say "looped"
        instead of "reply" (the cap on automatic answers): that reply is kept, not added, and
        its ticket goes to a person. Returns the rows that changed."""
        released = []
        for held in self._read("SELECT id FROM mail WHERE kind = 'held' ORDER BY id"):
            with self._tx() as db:
                row = db.execute("SELECT * FROM mail WHERE id = ? AND kind = 'held'",
                                 (held["id"],)).fetchone()
                thread = row and self._thread(db, [row["message_id"]])
                if not row or not thread or not thread.takes_reply:
                    continue
                if decide is not None:
                    kind, note = decide(thread, self._answered(db, row["sender"] or "", thread))
                    if kind == "looped":
                        db.execute("UPDATE mail SET kind = 'looped', note = ? WHERE id = ?",
                                   (note, row["id"]))
                        self._audit(db, "mail_looped", "mail", run_id=thread.run_id,
                                    note=f"{row['message_id']} from {row['sender']}: {note}")
                        self._to_a_person(db, thread.run_id, row["message_id"],
                                          row["sender"], note)
                        released.append(MailRow.of(db.execute(
                            "SELECT * FROM mail WHERE id = ?", (row["id"],)).fetchone()))
                        continue
                text = row["text"] or "(The reply has no text of its own.)"
                facts = {"message_id": row["message_id"],
                         **({"attachments": json.loads(row["attachments"])}
                            if json.loads(row["attachments"] or "[]") else {})}
                reply_id = self._insert_reply(db, thread.run_id, text, False, facts)
                db.execute("UPDATE mail SET kind = 'reply', reply_id = ? WHERE id = ?",
                           (reply_id, row["id"]))
                released.append(MailRow.of(db.execute("SELECT * FROM mail WHERE id = ?",
                                                       (row["id"],)).fetchone()))
        return released

    def record_mail_out(self, lease: Lease, message_id: str, to: str, subject: str,
                        in_reply_to: str | None, references: Sequence[str]) -> None:
        """The desk's own message on its run's thread (once per Message-ID), fenced: a
        customer's answer to it is matched by this id."""
        with self._tx() as db:
            self._fence(db, lease)
            db.execute(
                "INSERT INTO mail(message_id, run_id, direction, kind, sender, recipient,"
                " subject, in_reply_to, refs, at, attachments, note)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                (message_id, lease.run_id, "out", "sent", None, to, subject, in_reply_to,
                 json.dumps(list(references)), time.time(), "[]", ""))

    def mail_thread(self, run_id: str, limit: int = 20) -> tuple[str, tuple[str, ...]] | None:
        """(In-Reply-To, References) for the run's next message: the customer's latest message
        it read, and the thread's ids in order (the first and the newest, ``limit`` in all);
        None for a run that did not come by mail."""
        rows = self._read("SELECT message_id, direction, kind FROM mail WHERE run_id = ?"
                          " ORDER BY id", (run_id,))
        taken = [r for r in rows if r["direction"] == "out" or r["kind"] in TAKEN_IN]
        last_in = [r["message_id"] for r in taken if r["direction"] == "in"]
        if not last_in:
            return None
        ids = tuple(r["message_id"] for r in taken)
        # A long thread keeps its first message and its newest ones (RFC 5322, 3.6.4).
        return last_in[-1], ids if len(ids) <= limit else (ids[0], *ids[1 - limit:])

    def mail(self, run_id: str | None = None, kind: str | None = None) -> list[MailRow]:
        """Mail rows, oldest first: one run's, or of one kind, or all."""
        clauses, args = [], []
        if run_id is not None:
            clauses.append("run_id = ?")
            args.append(run_id)
        if kind is not None:
            clauses.append("kind = ?")
            args.append(kind)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        return [MailRow.of(r) for r in self._read(f"SELECT * FROM mail{where} ORDER BY id",
                                                  tuple(args))]

    def raw_mail(self, message_id: str) -> bytes | None:
        """A received message exactly as it arrived."""
        rows = self._read("SELECT raw FROM mail WHERE message_id = ?", (message_id,))
        return bytes(rows[0]["raw"]) if rows and rows[0]["raw"] is not None else None
