"""What a received message is to the desk's mail records, as plain data and pure functions:
the thread a message names, the desk's recent answers, a message as it is kept, a row as it
comes back, and the rule that tells a redelivery from a second sender reusing a Message-ID.

They sit here, beside the intake that fills them, so the intake (outside/) needs nothing of
the store that keeps them: the refund desk's mail records (desk/records/mail.py, :class:`MailStore`
below is all the intake asks of them).

A Message-ID is the key, but anyone can write any id: a message under an id already taken is
a redelivery only when it comes from the same sender or has the same bytes. Anything else is
kept under a key made from its bytes, with the id it reused in its note, and flagged
(:func:`reused_id`), so a second sender's message is never silently dropped.
"""


from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ...intake import same_address

# The kinds of a row: what the desk did with a message it received, or "sent" for its own.
TAKEN_IN = ("ticket", "flagged", "reply")   # mail a run read (its thread's "in" messages)


@dataclass(frozen=True)
class MailThread:
    """The run a message's In-Reply-To/References name, as intake decides on it."""

    run_id: str
    sender: str
    takes_reply: bool   # finished or asking, and nobody is advancing it


@dataclass(frozen=True)
class Answered:
    """When the desk answered lately, for the cap on automatic answers (outside/mailin/
    loops.py): on the thread a message continues (only when its sender is that thread's
    customer), and to its sender on any thread; the newest MAIL_CAP_MOST of each."""

    on_thread: tuple[float, ...] = ()
    to_sender: tuple[float, ...] = ()
    sender: str = ""
    thread_run: str | None = None   # the run it continues, when it is its customer's
    sender_run: str | None = None   # the run of the newest answer to the sender


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


Decide = Callable[[MailThread | None, Answered], tuple[str, str]]


def redelivery(first: Mapping[str, Any], mail: MailIn) -> bool:
    """Whether ``mail`` is another delivery of the message whose row is ``first`` (the same
    Message-ID): the same bytes, or the same sender (an MTA's retry, a forwarding rule's second
    copy, a client sending again). The desk's own sent message is nobody's redelivery."""
    if first["raw"] is not None and bytes(first["raw"]) == mail.raw:
        return True
    sender = first["sender"] or ""
    return first["direction"] == "in" and bool(sender and mail.sender) and (
        sender.casefold() == mail.sender.casefold() or same_address(sender, mail.sender))


def reused_id(raw: bytes) -> str:
    """The key of a message whose Message-ID another message took first: its bytes', so its
    own redelivery finds it again (``.invalid``: never a real message's id, RFC 2606)."""
    return f"<sha256-{hashlib.sha256(raw).hexdigest()[:32]}@reused-id.invalid>"


def reused_kind(kind: str, note: str, first: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, note) for a message that reuses the Message-ID of ``first``'s message: what it
    would start or continue becomes a new ticket, flagged, so a person sees it; a robot's or
    a refused message stays what it was, with the reuse noted."""
    by = first["sender"] or ("the desk" if first["direction"] == "out" else "no sender")
    why = (f"it reuses the Message-ID {first['message_id']} of an earlier message from {by}, "
           "so it is kept under a key of its own")
    if kind in ("ticket", "reply", "held"):
        return "flagged", why
    return kind, f"{note}; {why}" if note else why


class MailStore(Protocol):
    """What the intake needs of the store that keeps mail (the desk's DeskStore has it)."""

    def take_mail(self, mail: MailIn, decide: Decide, agent: str) -> MailRow: ...

    def release_held(self, decide: Callable[[MailThread, Answered], tuple[str, str]] | None
                     = None) -> list[MailRow]: ...
