"""Email over SMTP (the standard library's smtplib): recorded before it is sent, marked after.

SMTP has no idempotency key, so "once" here means: each call's message is recorded in the outbox
(``outbox.log``, or the shared store's "outbox" rows) before it is handed to the server, and
marked sent (``outbox-sent.log`` / "outbox-sent" rows) once the server took it. A later call
with the same key finds the mark and sends nothing. A crash between the hand-over and the mark
leaves a message recorded but not marked: the next attempt cannot know whether the server got
it, so it sends it again and says so (the record and the run's step carry ``resent``). That is
at most one duplicate, in that window only, and never a lost email: a message is never marked
sent before the server accepted it.

A refusal is different: when the server answers an attempt with an error (a 4xx or 5xx to the
login, the sender, the recipient or the data), that attempt certainly delivered nothing. Each
such refusal is written to the sent-marks log under its own key (``<key>#refused<n>``), and
each retry of a recorded message writes its start there first (``<key>#try<n>``), so a crash
inside a retry is still an attempt that may have gone out. A message is reported sent again
only when some earlier attempt was not refused; refused, then sent, is said as that.

Every message carries a ``Message-ID`` derived from the call key, the same on every attempt, so
a duplicate is recognisable as one (mail clients and many servers drop a repeated id), and
says it was written by a program (RFC 3834's ``Auto-Submitted``), so that auto-responders
leave it unanswered (the desk caps its own answers too: outside/mailin/loops.py).
"""

from __future__ import annotations

import email.policy
import re
import smtplib
import ssl
import time
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path
from typing import Any

from ..crash import crash_point
from ..errors import EmailNotSent
from .config import OutsideSettings
from .email import Thread, check_headers, recorded_for_smtp, thread_fields
from .payments import ledger_for

# What a Message-ID's left part may hold (RFC 5322 dot-atom text); anything else becomes "-".
_NOT_ATEXT = re.compile(r"[^A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]")


def message_id(key: str, sender: str) -> str:
    """The Message-ID of call ``key``'s email: the same for every attempt at it."""
    domain = sender.rpartition("@")[2].strip("<> ") or "refund-agent.invalid"
    local = _NOT_ATEXT.sub("-", key).strip(".") or "message"
    return f"<{local}.refund-agent@{domain}>"


def auto_submitted(record: dict[str, Any]) -> str:
    """RFC 3834's Auto-Submitted for an outbox record: ``auto-replied`` for an answer to a
    customer's mail (it threads on it), ``auto-generated`` for any other message the desk
    writes (a ticket typed in on the page, a sample)."""
    return "auto-replied" if record.get("in_reply_to") else "auto-generated"


def build_message(record: dict[str, Any], sender: str) -> EmailMessage:
    """The MIME message for an outbox record (its headers were checked to be one line each)."""
    request = record["request"]
    # Lines up to RFC 5322's 998 characters: a long Message-ID stays on its header's line
    # (folded, it is legal but some tools compare it raw), and the body's paragraphs go as
    # they are.
    message = EmailMessage(policy=email.policy.SMTP.clone(max_line_length=998))
    message["From"] = sender
    message["To"] = request["to"]
    message["Subject"] = request["subject"]
    message["Message-ID"] = record["message_id"]
    message["Date"] = formatdate(record.get("created_at") or time.time(), usegmt=True)
    if record.get("in_reply_to"):   # an answer to the customer's mail: it threads
        message["In-Reply-To"] = record["in_reply_to"]
        message["References"] = " ".join(record.get("references") or [record["in_reply_to"]])
    # Every message the desk sends is written by a program, and says so (RFC 3834), so that
    # a customer's vacation responder or ticketing system does not answer it and start a
    # loop; Exchange reads its own header instead. Only the automatic answers are
    # suppressed there: a delivery report still reaches the desk, which records the bounce.
    message["Auto-Submitted"] = auto_submitted(record)
    message["X-Auto-Response-Suppress"] = "OOF, AutoReply"
    message.set_content(request["body"])
    return message


class SmtpOutbox:
    """Sends each email through an SMTP server, recorded before and marked after.

    Args:
        output_dir, store: where the outbox and its sent marks are (see payments.ledger_for).
        settings: the server, its security, the login and the From address.
        default_from: the From address when REFUND_AGENT_SMTP_FROM is empty (the shop's).
        crash_at: crash points to honour (``email_recorded``, ``after_smtp_send``).
    """

    def __init__(self, output_dir: Path, store: Any | None, settings: OutsideSettings,
                 default_from: str, crash_at: frozenset[str] = frozenset()) -> None:
        self.log = ledger_for(output_dir, store, "outbox")
        self.sent = ledger_for(output_dir, store, "outbox-sent")
        self.settings = settings
        self.sender = settings.smtp_from or default_from
        self._crash = crash_at

    def send(self, key: str, to: str, subject: str, body: str, *,
             thread: Thread | None = None) -> tuple[dict[str, Any], bool]:
        """Send once per ``key``; returns (record, reused); ``thread`` as in Outbox.send.

        Raises:
            EmailNotSent: the server could not be reached or refused it (nothing marked sent).
        """
        check_headers(to, subject)
        request = {"to": to, "subject": subject, "body": body}
        record, recorded_before = self.log.once(
            key, request, lambda: {"message_id": message_id(key, self.sender),
                                   **thread_fields(thread)})
        crash_point("email_recorded", self._crash)
        if self.sent.find(key) is not None:
            return record, True
        # Recorded by an earlier attempt but never marked sent: that attempt died between the
        # two, or the server refused it. A refusal is recorded; any other earlier attempt may
        # have reached the server, so the message is sent again (same Message-ID) and says so.
        attempt = self._start_attempt(key, record) if recorded_before else 1
        refused = sum(self.sent.find(f"{key}#refused{n}") is not None for n in range(1, attempt))
        resent = refused < attempt - 1
        try:
            self._deliver(build_message(record, self.sender))
        except _Refused as exc:
            answer = exc.answer
            self.sent.once(f"{key}#refused{attempt}", {"message_id": record["message_id"]},
                           lambda: {"kind": "refused", "answer": answer, "at": time.time()})
            raise EmailNotSent(str(exc)) from None
        crash_point("after_smtp_send", self._crash)
        self.sent.once(key, {"message_id": record["message_id"]},
                       lambda: {"sent_at": time.time(), "resent": resent,
                                **({"refused_before": refused} if refused else {})})
        return ({**record, "resent": True} if resent else record), False

    def _start_attempt(self, key: str, record: dict[str, Any]) -> int:
        """Write down a retry's start before it is handed over; returns its number (2, 3...).
        The first attempt's start is the outbox record itself."""
        attempt = 2
        while True:
            _, taken = self.sent.once(f"{key}#try{attempt}",
                                      {"message_id": record["message_id"]},
                                      lambda: {"kind": "attempt", "at": time.time()})
            if not taken:
                return attempt
            attempt += 1

    def messages(self) -> list[dict[str, Any]]:
        return self.log.records()

    def unsent(self) -> list[dict[str, Any]]:
        """Messages recorded but not marked sent: a crash (or a refusal) between the two.

        Only this outbox's own records: the stand-in's (from before SMTP was switched on) were
        never meant for a server, and are not waiting to be sent.
        """
        marked = {r.get("idempotency_key") for r in self.sent.records() if not r.get("kind")}
        return [r for r in self.log.records()
                if recorded_for_smtp(r) and r.get("idempotency_key") not in marked]

    def resent(self) -> list[dict[str, Any]]:
        """Sent marks of messages sent again after such a gap (perhaps delivered twice)."""
        return [r for r in self.sent.records() if r.get("resent")]

    def refused_then_sent(self) -> list[dict[str, Any]]:
        """Sent marks of messages the server refused at every earlier attempt (sent once)."""
        return [r for r in self.sent.records()
                if r.get("refused_before") and not r.get("resent")]

    def refusals(self) -> dict[str, str]:
        """The server's answer per message key whose latest attempt it refused (an attempt
        that started after a refusal, and was cut off, may have been delivered: not here)."""
        latest: dict[str, int] = {}
        refused: dict[str, tuple[int, str]] = {}
        for r in self.sent.records():
            kind = r.get("kind")
            if kind in ("attempt", "refused"):
                base, _, number = r["idempotency_key"].rpartition(
                    "#try" if kind == "attempt" else "#refused")
                latest[base] = max(latest.get(base, 1), int(number))
                if kind == "refused":
                    refused[base] = (int(number), r.get("answer", ""))
        return {key: answer for key, (n, answer) in refused.items() if n == latest[key]}

    def _deliver(self, message: EmailMessage) -> None:
        """Hand ``message`` to the server.

        Raises:
            _Refused: the server answered with an error before taking it (nothing delivered).
            EmailNotSent: anything else (the connection, TLS): it may or may not have arrived.
        """
        s = self.settings
        where = f"{s.smtp_host}:{s.port}"
        context = ssl.create_default_context(cafile=s.smtp_ca_file or None)
        server: smtplib.SMTP | None = None
        try:
            if s.smtp_security == "tls":
                server = smtplib.SMTP_SSL(s.smtp_host, s.port, timeout=s.smtp_timeout,
                                          context=context)
            else:
                server = smtplib.SMTP(s.smtp_host, s.port, timeout=s.smtp_timeout)
            if s.smtp_security == "starttls":
                server.starttls(context=context)
            if s.smtp_user:
                server.login(s.smtp_user, s.smtp_password)
            server.send_message(message)
        except smtplib.SMTPAuthenticationError as exc:
            raise _Refused(
                f"The mail server {where} refused the login for SMTP_USER {s.smtp_user!r} "
                "(check SMTP_USER and SMTP_PASSWORD). The email is recorded and not sent; "
                "resume sends it.", _answer(exc)) from None
        except smtplib.SMTPNotSupportedError as exc:
            raise _Refused(
                f"The mail server {where} does not support what SMTP_SECURITY="
                f"{s.smtp_security} needs ({exc}). The email is recorded and not sent.",
                str(exc)) from None
        except smtplib.SMTPRecipientsRefused as exc:
            refused = ", ".join(exc.recipients)
            raise _Refused(
                f"The mail server {where} refused the recipient {refused}. The email is "
                "recorded and not sent; a person needs to reach the customer.",
                "; ".join(_answer(a) for a in exc.recipients.values())) from None
        except smtplib.SMTPResponseException as exc:   # the sender or the data refused
            raise _Refused(
                f"The mail server {where} refused the email ({_answer(exc)}). It is recorded "
                "and not sent; resume sends it.", _answer(exc)) from None
        except (smtplib.SMTPException, ssl.SSLError, OSError) as exc:
            raise EmailNotSent(
                f"Could not send the email through {where}: {exc or type(exc).__name__}. It is "
                "recorded and not marked sent; resume sends it (if the server took it before "
                "the failure, the customer gets it twice, with the same Message-ID).") from None
        finally:
            if server is not None:
                _close(server)


class _Refused(EmailNotSent):
    """The server answered an attempt with an error: that attempt delivered nothing."""

    def __init__(self, message: str, answer: str) -> None:
        super().__init__(message)
        self.answer = answer


def _answer(refusal: Any) -> str:
    """The server's answer ("550 no such user") from smtplib's exception or (code, text)."""
    code, text = ((refusal.smtp_code, refusal.smtp_error) if hasattr(refusal, "smtp_code")
                  else refusal)
    text = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    return f"{code} {' '.join(text.split())}"


def _close(server: smtplib.SMTP) -> None:
    """Say QUIT and close; an error here changes nothing (the message was taken or refused
    already), so it is not raised over what happened before it."""
    try:
        server.quit()
    except (smtplib.SMTPException, OSError):
        server.close()
