"""Stand-in for an email service: messages go to ``outbox.log`` instead of anyone's inbox."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from .ledger import IdempotentLog, StoreLog
from .text import one_line


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


class Outbox:
    """Sends each email once per idempotency key (the run and the ``send_customer_message``
    call id, see callrecords.py)."""

    def __init__(self, output_dir: Path, store: Any | None = None) -> None:
        # ``store``: a shared store (PostgreSQL) keeps the records where every host sees them.
        self.log: IdempotentLog | StoreLog = (
            StoreLog(store, "outbox") if store is not None
            else IdempotentLog(Path(output_dir) / "outbox.log"))

    def send(self, key: str, to: str, subject: str, body: str) -> tuple[dict[str, Any], bool]:
        # Headers are one line each; the agent refuses such input earlier, this is the last
        # line of defence before anything that looks like a mail server.
        one_line(to, "recipient")
        one_line(subject, "subject")
        request = {"to": to, "subject": subject, "body": body}
        return self.log.once(key, request, lambda: {"message_id": "msg_" + uuid.uuid4().hex[:16]})

    def messages(self) -> list[dict[str, Any]]:
        return self.log.records()
