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

from ..ledger import IdempotentLog, StoreLog
from ..text import one_line
from .payments import ledger_for


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


class Outbox(Protocol):
    """What the agent needs of an email service."""

    log: IdempotentLog | StoreLog

    def send(self, key: str, to: str, subject: str, body: str) -> tuple[dict[str, Any], bool]:
        """Send once per ``key``; returns (record with ``message_id``, reused)."""
        ...

    def messages(self) -> list[dict[str, Any]]: ...


def check_headers(to: str, subject: str) -> None:
    """Refuse a recipient or subject that is not one line (a header injection).

    The agent refuses such input earlier; this is the last line of defence before anything
    that looks like a mail server.
    """
    one_line(to, "recipient")
    one_line(subject, "subject")


class StandInOutbox:
    """Sends each email once per idempotency key (the run and the ``send_customer_message``
    call id, see callrecords.py)."""

    def __init__(self, output_dir: Path, store: Any | None = None) -> None:
        # ``store``: a shared store (PostgreSQL) keeps the records where every host sees them.
        self.log = ledger_for(output_dir, store, "outbox")

    def send(self, key: str, to: str, subject: str, body: str) -> tuple[dict[str, Any], bool]:
        check_headers(to, subject)
        request = {"to": to, "subject": subject, "body": body}
        return self.log.once(key, request, lambda: {"message_id": "msg_" + uuid.uuid4().hex[:16]})

    def messages(self) -> list[dict[str, Any]]:
        return self.log.records()
