"""One received message, taken once: read (parse.py), decided (decide.py), recorded with its
run or reply in one transaction (desk/records/mail.py), between the intake's two crash points.

Every source acknowledges a message only after this returns (SMTP's 250, IMAP's \\Seen), so a
process killed anywhere before leaves the message with the sender, who delivers it again; one
killed after the record and before the acknowledgement gets it again and finds it by its
Message-ID.

No message stops intake: one that cannot be read (or that the store refuses although it was
read) is recorded as "unreadable", its raw bytes kept and the record audited, keyed by its
bytes, and acknowledged like any other. Only the store's own failure (StoreError: a database
down, a full disk) leaves a message unacknowledged, for the sender to retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from ...crash import crash_point
from ...errors import StoreError
from .decide import UNREADABLE
from .loops import DEFAULT_CAP, LOOPED, MailCap, decide_capped, release_capped
from .parse import Inbound, read_mail, unreadable_mail
from .rows import Answered, MailIn, MailRow, MailStore, MailThread


def _clean(text: str) -> str:
    """Text the store and the model can take: a broken encoding's lone surrogates replaced,
    and NUL, which PostgreSQL refuses in any text column (the raw bytes keep it)."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def stored_form(mail: Inbound) -> MailIn:
    ids = partial(map, _clean)
    return MailIn(message_id=_clean(mail.message_id), sender=_clean(mail.sender),
                  sender_name=_clean(mail.sender_name), subject=_clean(mail.subject),
                  text=_clean(mail.text), thread_ids=tuple(ids(mail.thread_ids)),
                  in_reply_to=_clean(mail.in_reply_to[0]) if mail.in_reply_to else None,
                  references=tuple(ids(mail.references)),
                  attachments=tuple(map(_clean, mail.attachments)), raw=mail.raw)


def _decided(mail: Inbound, cap: MailCap, now: float, thread: MailThread | None,
             answered: Answered) -> tuple[str, str]:
    """decide_capped, its note made storable (it may quote what the sender wrote). An
    unreadable message is that whatever else holds, so recording it depends on no rule."""
    if mail.unreadable:
        return UNREADABLE, _clean(mail.unreadable)
    kind, why = decide_capped(mail, cap, now, thread, answered)
    return kind, _clean(why)


def _record(store: MailStore, mail: Inbound, agent: str, cap: MailCap) -> MailRow:
    return store.take_mail(stored_form(mail), partial(_decided, mail, cap, time.time()), agent)


def take(store: MailStore, raw: bytes, agent: str, crash_at: frozenset[str] = frozenset(),
         cap: MailCap = DEFAULT_CAP) -> MailRow:
    """Take ``raw`` once for ``agent`` (Loop.agent_name); its row (``new`` False: taken before).
    ``cap``: how many automatic answers a thread and an address get (MailCap.of(settings)).

    Raises:
        StoreError: the store could not record it (the caller leaves it unacknowledged).
    """
    crash_point("after_mail_read", crash_at)
    try:
        mail = read_mail(raw)
    except Exception as exc:  # noqa: BLE001 - whatever the reader fails on is in the message
        # (a header it refuses, parts nested past the recursion limit), and stays there on
        # every delivery: recorded as unreadable, never retried.
        mail = unreadable_mail(raw, exc)
    try:
        row = _record(store, mail, agent, cap)
    except StoreError:
        raise   # the store's own failure: the sender keeps the message and retries
    except Exception as exc:  # noqa: BLE001 - read, yet not recordable as read
        if mail.unreadable:
            raise
        # Something in what was read fails on the way in (a value an engine refuses that
        # _clean does not know of): the same bytes would fail again, so they are recorded
        # as unreadable rather than holding up every message behind them.
        row = _record(store, unreadable_mail(raw, exc), agent, cap)
    crash_point("after_mail_recorded", crash_at)
    return row


def release_held(store: MailStore, say: Callable[[str], None], cap: MailCap = DEFAULT_CAP
                 ) -> list[str]:
    """Add the customers' replies held while their runs worked or waited on a person, now
    that those runs can take them; returns the runs' ids (each now marked working, so any
    worker claims it). Every worker calls this (``receive``, ``refund-agent work``, the page's),
    so a held reply does not wait for a receiver to be running. A reply that would make the
    desk answer past ``cap`` is not added: its ticket goes to a person."""
    runs: list[str] = []
    for row in store.release_held(partial(release_capped, cap, time.time())):
        if row.kind == LOOPED:
            say(f"{row.message_id}: not answered, {row.run_id} went to a person ({row.note})")
            continue
        say(f"{row.message_id}: the held reply was added to {row.run_id}")
        if row.run_id and row.run_id not in runs:
            runs.append(row.run_id)
    return runs


def describe(row: MailRow) -> str:
    """One line for the terminal: what became of a message."""
    what = {"ticket": f"a new ticket, {row.run_id}",
            "flagged": f"a new ticket, {row.run_id}, flagged: {row.note}",
            "reply": f"a reply on {row.run_id}",
            "held": f"a reply held for {row.run_id} ({row.note})",
            "auto": f"an automatic message, recorded, not answered ({row.note})",
            "looped": f"not answered, {row.run_id} went to a person ({row.note})",
            "bounce": f"a bounce, recorded, not answered ({row.note})",
            "unreadable": f"unreadable, recorded, not answered ({row.note})",
            "refused": f"refused ({row.note})"}.get(row.kind, row.kind)
    seen = "" if row.new else " (delivered again: already taken, nothing new)"
    return f"{row.message_id} from {row.sender or '(no sender)'}: {what}{seen}"
