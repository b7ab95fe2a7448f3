"""The email service's interface, and its stand-in: messages go to ``outbox.log``.

Every email service (this stand-in, SMTP in smtp.py) sends once per idempotency key, the call
key, and keeps its record of each message in the same ledger (``outbox.log`` beside an SQLite
store, the ledger table's "outbox" rows on a shared one), which reconcile.py checks against
the calls the agent made. The signature and the header checks live here, for every service.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError
from ..text import one_line
from .ledger import IdempotentLog, StoreLog
from .payments import ledger_for

# How a message sent again after a crash between its send and its mark is shown, on the
# timeline and in the terminal (outside/smtp.py: at most one duplicate, the same Message-ID).
RESENT_EMAIL = "(sent again after a crash: the customer may have it twice, same Message-ID)"


def with_signature(message: str, signature: str) -> str:
    """The message with the shop's signature on its own lines, exactly once.

    Models often sign off themselves; if the message already ends with the signature (or with
    its first line, e.g. "Warmly,"), that sign-off is replaced rather than doubled.
    """
    body = message.rstrip()
    sig = signature.strip()
    if body.endswith(sig):
        body = body[: -len(sig)].rstrip()
    first = sig.splitlines()[0].strip()
    if body.endswith(first):
        body = body[: -len(first)].rstrip()
    return f"{body}\n\n{sig}"


# (In-Reply-To, References): the message an email answers and its thread's ids, in order.
Thread = tuple[str, tuple[str, ...]]


def thread_fields(thread: Thread | None) -> dict[str, Any]:
    """What an outbox record keeps of the thread it answers (nothing for a run not mailed)."""
    if thread is None:
        return {}
    return {"in_reply_to": thread[0], "references": list(thread[1])}


class Outbox(Protocol):
    """What the agent needs of an email service."""

    log: IdempotentLog | StoreLog

    def send(self, key: str, to: str, subject: str, body: str, *,
             thread: Thread | None = None) -> tuple[dict[str, Any], bool]:
        """Send once per ``key``; returns (record with ``message_id``, reused). ``thread``:
        (In-Reply-To, References) of the customer's mail it answers (kept in the record the
        first attempt makes, so every attempt carries the same)."""
        ...

    def messages(self) -> list[dict[str, Any]]: ...


def check_headers(to: str, subject: str) -> None:
    """Refuse a recipient or subject that is not one line (a header injection).

    The agent refuses such input earlier; this is the last line of defence before anything
    that looks like a mail server.
    """
    one_line(to, "recipient")
    one_line(subject, "subject")


def recorded_for_smtp(record: dict[str, Any]) -> bool:
    """Whether an outbox record was made by the SMTP outbox (its Message-ID is a real header,
    ``<...>``; the stand-in's are ``msg_...``)."""
    return str(record.get("message_id", "")).startswith("<")


def unsent_for_the_stand_in(key: str, record: dict[str, Any]) -> str:
    """Why the stand-in refuses an SMTP record that was never marked sent, in one line."""
    return (f"The email for call {key} to {record['request']['to']} was recorded for SMTP "
            f"(Message-ID {record['message_id']}) and never marked sent, but this process uses "
            "the stand-in email service, which cannot send it: set REFUND_AGENT_EMAIL=smtp "
            "and the SMTP settings, then resume. Nothing was sent or marked.")


class StandInOutbox:
    """Sends each email once per idempotency key (the run and the ``send_customer_message``
    call id, see models.py (call_key))."""

    def __init__(self, output_dir: Path, store: Any | None = None) -> None:
        # ``store``: a shared store (PostgreSQL) keeps the records where every host sees them.
        self.log = ledger_for(output_dir, store, "outbox")
        self._output_dir, self._store = Path(output_dir), store

    def send(self, key: str, to: str, subject: str, body: str, *,
             thread: Thread | None = None) -> tuple[dict[str, Any], bool]:
        check_headers(to, subject)
        request = {"to": to, "subject": subject, "body": body}
        record, reused = self.log.once(
            key, request, lambda: {"message_id": "msg_" + uuid.uuid4().hex[:16],
                                   **thread_fields(thread)})
        if reused and recorded_for_smtp(record) and self._sent_marks().find(key) is None:
            raise ConfigError(unsent_for_the_stand_in(key, record))
        return record, reused

    def _sent_marks(self) -> IdempotentLog | StoreLog:
        # Made only when an SMTP record turns up, so a stand-in-only folder gets no new log.
        return ledger_for(self._output_dir, self._store, "outbox-sent")

    def messages(self) -> list[dict[str, Any]]:
        return self.log.records()
