"""Customers' mail from a mailbox: the standard library's imaplib, polling (or IDLE where the
server offers it) for unseen messages.

Each unseen message is fetched without touching its flags (``BODY.PEEK[]``), taken
(intake.take), and only then flagged ``\\Seen``: a process killed in between leaves it unseen,
the next poll fetches it again, and its Message-ID finds what was already made of it.

The mailbox is named by a URL: ``imaps://USER:PASSWORD@HOST[:PORT][/MAILBOX]`` (TLS, port 993)
or ``imap://...`` (plain, port 143: loopback or a trusted network only). The user and password
may come from REFUND_AGENT_IMAP_USER / REFUND_AGENT_IMAP_PASSWORD instead; the password is
never printed.
"""

from __future__ import annotations

import contextlib
import imaplib
import re
import select
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ...errors import ConfigError
from .rows import MailRow


@dataclass(frozen=True)
class Mailbox:
    """Where the mail is: a server, a login and a folder (the password kept out of repr)."""

    secure: bool
    host: str
    port: int
    user: str
    mailbox: str
    password: str = field(default="", repr=False)

    def shown(self) -> str:
        """The URL as it may be printed: no password."""
        scheme = "imaps" if self.secure else "imap"
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{self.mailbox}"


def mailbox_from_url(url: str, env: Mapping[str, str]) -> Mailbox:
    """The mailbox a ``--imap`` URL names; ConfigError in one line for anything else."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("imap", "imaps") or not parts.hostname:
        raise ConfigError("--imap takes imaps://USER@HOST[:PORT][/MAILBOX] (or imap:// on a "
                          "trusted network), e.g. imaps://support@mail.example.com/INBOX.")
    try:
        port = parts.port or (993 if parts.scheme == "imaps" else 143)
    except ValueError:
        raise ConfigError("The --imap URL's port must be a number from 1 to 65535.") from None
    user = unquote(parts.username or "") or env.get("REFUND_AGENT_IMAP_USER", "")
    password = unquote(parts.password or "") or env.get("REFUND_AGENT_IMAP_PASSWORD", "")
    if not user or not password:
        raise ConfigError("Say how to log in to the mailbox: USER:PASSWORD in the --imap URL, "
                          "or REFUND_AGENT_IMAP_USER and REFUND_AGENT_IMAP_PASSWORD.")
    folder = unquote(parts.path.strip("/")) or "INBOX"
    return Mailbox(parts.scheme == "imaps", parts.hostname, port, user, folder, password)


class Poller:
    """One logged-in connection to the mailbox, taking its unseen messages.

    Args:
        box: the mailbox.
        take: records one raw message (intake.take); raises if it could not.
        report: told what became of each message.
        timeout: the socket's timeout, seconds.
    """

    def __init__(self, box: Mailbox, take: Callable[[bytes], MailRow],
                 report: Callable[[MailRow], None], timeout: float = 30.0) -> None:
        self.box, self._take, self._report, self._timeout = box, take, report, timeout
        self._conn: imaplib.IMAP4 | None = None

    def connect(self) -> None:
        """Connect, log in and select the folder; ConfigError in one line if it fails."""
        b = self.box
        where = f"{b.host}:{b.port}"
        try:
            if b.secure:
                conn: imaplib.IMAP4 = imaplib.IMAP4_SSL(b.host, b.port, timeout=self._timeout,
                                                        ssl_context=ssl.create_default_context())
            else:
                conn = imaplib.IMAP4(b.host, b.port, timeout=self._timeout)
        except (OSError, imaplib.IMAP4.error) as exc:
            raise ConfigError(f"Cannot reach the mailbox at {where}: "
                              f"{getattr(exc, 'strerror', None) or exc}.") from None
        try:
            conn.login(b.user, b.password)
        except imaplib.IMAP4.error:
            conn.shutdown()
            raise ConfigError(f"The mailbox at {where} refused the login for {b.user!r} "
                              "(check the user and password).") from None
        typ, _ = conn.select(_quoted(b.mailbox))
        if typ != "OK":
            conn.logout()
            raise ConfigError(f"The mailbox at {where} has no folder {b.mailbox!r}.")
        self._conn = conn

    @property
    def idles(self) -> bool:
        return self._conn is not None and "IDLE" in self._conn.capabilities

    def poll(self) -> int:
        """Take every unseen message once; how many were taken (new or not)."""
        conn = self._need()
        typ, data = conn.uid("SEARCH", None, "UNSEEN")   # type: ignore[arg-type]
        if typ != "OK":
            raise imaplib.IMAP4.error(f"SEARCH failed: {data!r}")
        taken = 0
        for uid in (data[0] or b"").split():
            typ, parts = conn.uid("FETCH", uid.decode(), "(BODY.PEEK[])")
            raw = next((p[1] for p in parts if isinstance(p, tuple)), None)
            if typ != "OK" or raw is None:
                continue   # expunged meanwhile
            row = self._take(raw)
            # Flagged only once recorded: a crash before this leaves it unseen.
            conn.uid("STORE", uid.decode(), "+FLAGS", "(\\Seen)")
            self._report(row)
            taken += 1
        return taken

    def wait(self, seconds: float) -> None:
        """Until the mailbox may have something new: IDLE (RFC 2177) where the server offers
        it, up to ``seconds``; else sleep that long."""
        conn = self._need()
        if not self.idles:
            time.sleep(seconds)
            return
        tag = conn._new_tag().decode()   # noqa: SLF001 - imaplib has no IDLE before 3.14
        conn.send(f"{tag} IDLE\r\n".encode())
        line = conn.readline()
        if not line.startswith(b"+"):
            raise imaplib.IMAP4.error(f"IDLE refused: {line!r}")
        # select, not a socket timeout: a read that timed out leaves imaplib's file unusable.
        sock = conn.sock
        pending = getattr(sock, "pending", lambda: 0)()
        if pending or select.select([sock], [], [], seconds)[0]:
            conn.readline()   # "* N EXISTS" or the like: something changed
        conn.send(b"DONE\r\n")
        while True:   # the rest of the untagged lines, then IDLE's own answer
            line = conn.readline()
            if not line or line.startswith(tag.encode()):
                break

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.logout()
            except (OSError, imaplib.IMAP4.error):
                with contextlib.suppress(OSError):
                    self._conn.shutdown()
            self._conn = None

    def _need(self) -> imaplib.IMAP4:
        if self._conn is None:
            self.connect()
        assert self._conn is not None
        return self._conn


def _quoted(mailbox: str) -> str:
    """A folder name as an IMAP astring (quoted when it has spaces or specials)."""
    if re.fullmatch(r"[A-Za-z0-9._/-]+", mailbox):
        return mailbox
    return '"' + mailbox.replace("\\", "\\\\").replace('"', '\\"') + '"'
