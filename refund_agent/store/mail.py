"""Mail in and out: one row per Message-ID (unique), so a message is taken once however often
it is delivered, and the ids that tie a customer's reply to its ticket's thread.

What to do with a message is decided by a pure function the caller passes in
(outside/mailin/decide.py); here it is carried out, with the message's row, in one transaction:
a new ticket, a reply added to its run, a reply held until its run can take it, or a robot's
mail recorded and audited with no run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import RunStatus
from .core import StoreCore
from .leases import Lease

# The kinds of a row: what the desk did with a message it received, or "sent" for its own.
TAKEN_IN = ("ticket", "flagged", "reply")   # mail a run read (its thread's "in" messages)


@dataclass(frozen=True)
class MailThread:
    """The run a message's In-Reply-To/References name, as intake decides on it."""

    run_id: str
    sender: str
    takes_reply: bool   # finished or asking, and nobody is advancing it


@dataclass(frozen=True)
class MailIn:
    """A received message as the store keeps it (outside/mailin/parse.py reads it)."""

    message_id: str
    sender: str
    sender_name: str
    subject: str
    text: str
    thread_ids: Sequence[str]
    in_reply_to: str | None
    references: Sequence[str]
    attachments: Sequence[str]
    raw: bytes


@dataclass(frozen=True)
class MailRow:
    """One message's row: ``new`` is False when it had been taken before (a redelivery)."""

    id: int
    message_id: str
    run_id: str | None
    direction: str
    kind: str
    sender: str
    subject: str
    note: str
    attachments: tuple[str, ...]
    at: float
    new: bool = True

    @classmethod
    def of(cls, row: Any, new: bool = True) -> MailRow:
        return cls(id=row["id"], message_id=row["message_id"], run_id=row["run_id"],
                   direction=row["direction"], kind=row["kind"], sender=row["sender"] or "",
                   subject=row["subject"] or "", note=row["note"] or "",
                   attachments=tuple(json.loads(row["attachments"] or "[]")), at=row["at"],
                   new=new)


Decide = Callable[[MailThread | None], tuple[str, str]]


class Mail(StoreCore):
    """Received and sent mail, once per Message-ID."""

    def take_mail(self, mail: MailIn, decide: Decide, agent: str) -> MailRow:
        """Take one received message, once: boundary 1 for mail (its run, or its reply, exists
        with its row before anything reads it).

        ``decide(thread)`` says what the message is, from the run its ids name (None: no known
        thread): "ticket" or "flagged" (a new run), "reply" (added to ``thread``'s run),
        "held" (that run cannot take a reply yet), "auto", "bounce" or "refused" (no run).
        A message whose Message-ID was taken before is not looked at again: its first row
        comes back with ``new`` False.
        """
        with self._tx() as db:
            # Two deliveries of one message racing (an MTA's retry while the first is still
            # being recorded): the second waits here and then finds the first's row, rather
            # than meeting the unique index with an error. SQLite's write lock already does.
            self.lock_order(db, f"mail {mail.message_id}")
            row = db.execute("SELECT * FROM mail WHERE message_id = ?",
                             (mail.message_id,)).fetchone()
            if row is not None:
                return MailRow.of(row, new=False)
            thread = self._thread(db, mail.thread_ids)
            kind, note = decide(thread)
            run_id, reply_id = (thread.run_id if thread else None), None
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

    def release_held(self) -> list[MailRow]:
        """Replies held while their run could not take one, added now that it can (oldest
        first); the ones still held stay so."""
        released = []
        for held in self._read("SELECT id FROM mail WHERE kind = 'held' ORDER BY id"):
            with self._tx() as db:
                row = db.execute("SELECT * FROM mail WHERE id = ? AND kind = 'held'",
                                 (held["id"],)).fetchone()
                thread = row and self._thread(db, [row["message_id"]])
                if not row or not thread or not thread.takes_reply:
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
