"""One received message, taken once: read (parse.py), decided (decide.py), recorded with its
run or reply in one transaction (store/mail.py), between the intake's two crash points.

Every source acknowledges a message only after this returns (SMTP's 250, IMAP's \\Seen), so a
process killed anywhere before leaves the message with the sender, who delivers it again; one
killed after the record and before the acknowledgement gets it again and finds it by its
Message-ID.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from ...crash import crash_point
from ...store import Store
from ...store.mail import MailIn, MailRow
from .decide import decide
from .parse import Inbound, read_mail


def _clean(text: str) -> str:
    """Text the store and the model can take (a broken encoding's lone surrogates replaced)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def stored_form(mail: Inbound) -> MailIn:
    return MailIn(message_id=mail.message_id, sender=_clean(mail.sender),
                  sender_name=_clean(mail.sender_name), subject=_clean(mail.subject),
                  text=_clean(mail.text), thread_ids=mail.thread_ids,
                  in_reply_to=mail.in_reply_to[0] if mail.in_reply_to else None,
                  references=mail.references, attachments=tuple(map(_clean, mail.attachments)),
                  raw=mail.raw)


def take(store: Store, raw: bytes, agent: str, crash_at: frozenset[str] = frozenset()
         ) -> MailRow:
    """Take ``raw`` once for ``agent`` (Loop.agent_name); its row (``new`` False: taken before).

    Raises:
        StoreError: the store could not record it (the caller leaves it unacknowledged).
    """
    crash_point("after_mail_read", crash_at)
    mail = read_mail(raw)
    row = store.take_mail(stored_form(mail), partial(decide, mail), agent)
    crash_point("after_mail_recorded", crash_at)
    return row


def release_held(store: Store, say: Callable[[str], None]) -> list[str]:
    """Add the customers' replies held while their runs worked or waited on a person, now
    that those runs can take them; returns the runs' ids (each now marked working, so any
    worker claims it). Every worker calls this (``receive``, ``refund-agent work``, the page's),
    so a held reply does not wait for a receiver to be running."""
    runs: list[str] = []
    for row in store.release_held():
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
            "bounce": f"a bounce, recorded, not answered ({row.note})",
            "refused": f"refused ({row.note})"}.get(row.kind, row.kind)
    seen = "" if row.new else " (delivered again: already taken, nothing new)"
    return f"{row.message_id} from {row.sender or '(no sender)'}: {what}{seen}"
