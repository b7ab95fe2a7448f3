"""Customers' mail in: an SMTP server (smtp.py, aiosmtpd) or a polled mailbox (imap.py,
imaplib), each handing every message to :func:`intake.take`, which makes it a ticket, a reply
on its thread, or a recorded robot's message, once per Message-ID.

parse.py reads a raw message (pure); decide.py says what it becomes (pure); rows.py is what
the store keeps of it (the desk's records keep it: desk/records/mail.py). ``refund-agent
receive`` (cli/mail.py) runs either. docs/DESK.md says how a team points its mail at the desk.
"""

from __future__ import annotations

# The intake's crash points (tests/outside/test_mailin_crash.py kills at each): a message read
# and not recorded must be delivered again (no 250 sent, no \Seen set); one recorded and not
# acknowledged is delivered again and found by its Message-ID.
MAILIN_CRASH_POINTS: dict[str, str] = {
    "after_mail_read": "a received message was read; it is not recorded and not acknowledged",
    "after_mail_recorded": "a received message is recorded; the SMTP client has no 250 yet, "
                           "or the IMAP message is not flagged \\Seen",
}

__all__ = ["MAILIN_CRASH_POINTS"]
