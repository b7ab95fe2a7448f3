"""Customers' mail for the mail-in tests: messages as mail clients write them, a ``receive``
process, and Debian's Dovecot IMAP server started on loopback in a throwaway folder.

tests/outside/test_mailin_smtp.py and test_mailin_imap.py use these; the outbound server is
helpers.outside_servers.smtp_server (aiosmtpd).
"""

from __future__ import annotations

import imaplib
import os
import pwd
import shutil
import smtplib
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from .cli import PROJECT_ROOT, cli_env
from .outside_servers import SMTP_PASSWORD, SMTP_USER, free_port, wait_for

DOVECOT = Path("/usr/sbin/dovecot")
IMAP_USER, IMAP_PASSWORD = "desk", "imap pass"
DESK = "help@juniperpine.example"
MAYA = "maya.chen@example.com"


def smtp_env(port: int) -> dict[str, str]:
    """The settings that send the desk's mail through the aiosmtpd server on ``port``."""
    return {"REFUND_AGENT_EMAIL": "smtp", "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port),
            "SMTP_USER": SMTP_USER, "SMTP_PASSWORD": SMTP_PASSWORD, "SMTP_SECURITY": "none"}


def mail(sender: str = f"Maya Chen <{MAYA}>", subject: str = "Cracked carafe",
         body: str = "Hi, my order A1043 arrived and the pour-over carafe was cracked. "
                     "Can I get a refund?",
         message_id: str = "<first@maya.example>", **headers: str) -> EmailMessage:
    """A customer's message; ``headers`` (underscores for dashes) added as given."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = DESK
    message["Subject"] = subject
    message["Message-ID"] = message_id
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(body)
    return message


def nested(depth: int = 1000, sender: str = "leo.martins@example.com") -> bytes:
    """A message of ``depth`` multiparts inside one another (the standard library's reader
    recurses once per level)."""
    head = (f"From: {sender}\r\nTo: {DESK}\r\nSubject: Deep\r\n"
            "Message-ID: <deep@leo.example>\r\nMIME-Version: 1.0\r\n").encode()
    opening = b"".join(b'Content-Type: multipart/mixed; boundary="b%d"\r\n\r\n--b%d\r\n'
                       % (i, i) for i in range(depth))
    closing = b"".join(b"\r\n--b%d--\r\n" % i for i in reversed(range(depth)))
    return head + opening + b"Content-Type: text/plain\r\n\r\nhello" + closing


# Messages that once stopped intake for good (issue #43): a From whose encoded display name
# holds CR LF, multiparts nested a thousand deep, and a quoted-printable NUL in the body (which
# PostgreSQL refuses in a text column). Each is followed, in the tests, by a good message.
CRLF_FROM = (b"From: =?utf-8?q?Leo=0D=0ABcc:_x@y?= <leo@example.com>\r\n"
             b"To: help@juniperpine.example\r\nSubject: Refund\r\n"
             b"Message-ID: <crlf@leo.example>\r\n\r\nMy order A1043 broke.\r\n")
NUL_BODY = (b"From: Leo Martins <leo.martins@example.com>\r\nTo: help@juniperpine.example\r\n"
            b"Subject: Broken lamp\r\nMessage-ID: <nul@leo.example>\r\nMIME-Version: 1.0\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Transfer-Encoding: quoted-printable\r\n\r\n"
            b"My order A1058 =00arrived broken.\r\n")


def answer(to: EmailMessage, body: str, message_id: str, sender: str = f"Maya Chen <{MAYA}>"
           ) -> EmailMessage:
    """The customer's answer to ``to`` (a message the desk sent), threaded as a mail client
    threads it, quoting it below."""
    refs = f"{to.get('References', '')} {to['Message-ID']}".strip()
    quoted = "\n".join(f"> {line}" for line in to.get_content().splitlines())
    return mail(sender=sender, subject=f"Re: {to['Subject'].removeprefix('Re: ')}",
                body=f"{body}\n\nOn Fri, 4 Dec 2026, Juniper & Pine wrote:\n{quoted}\n",
                message_id=message_id, In_Reply_To=to["Message-ID"], References=refs)


def chain(out: Path, response_id: str | None) -> list[str]:
    """The offline model's previous_response_id links from ``response_id`` back to the start
    (its state file in the output folder)."""
    db = sqlite3.connect(out / "offline-model.sqlite3")
    ids = []
    while response_id:
        ids.append(response_id)
        row = db.execute("SELECT previous_response_id FROM responses WHERE id = ?",
                         (response_id,)).fetchone()
        response_id = row[0] if row else None
    db.close()
    return ids


def deliver(port: int, message: EmailMessage) -> None:
    """Hand ``message`` to the SMTP server on ``port`` as an MTA would."""
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.send_message(message)


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """``check()``'s first true value, polled; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def receiving(output: Path, *args: str, **env: str) -> Iterator[subprocess.Popen]:
    """``refund-agent receive ARGS`` as a real process until the block ends (then stopped)."""
    proc = subprocess.Popen([sys.executable, "-m", "refund_agent", "receive", *args],
                            env=cli_env(output, **env), cwd=PROJECT_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- Dovecot -----------------------------------------------------------------------------------

class Dovecot:
    """Debian's dovecot-imapd on a free loopback port, its config, users (a passwd-file) and
    maildirs in a temporary folder; plain IMAP with login allowed (loopback only)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.tls_port = free_port()   # imaps, when openssl made a certificate
        self.dir = Path(tempfile.mkdtemp(prefix="dovecot-"))
        self.dir.chmod(0o755)   # Dovecot's auth process (its own user) reads the users file
        self.proc: subprocess.Popen | None = None

    def config(self) -> str:
        root = os.geteuid() == 0
        me = pwd.getpwuid(os.geteuid())
        # Run as root, Dovecot's login and internal processes take its own users and the mail
        # one an unprivileged uid (it refuses 0); run as anyone else, all are that user.
        mail_uid, mail_gid = (65534, 65534) if root else (me.pw_uid, me.pw_gid)
        login, internal = ("dovenull", "dovecot") if root else (me.pw_name, me.pw_name)
        mail = self.dir / "mail"
        mail.mkdir()
        os.chown(mail, mail_uid, mail_gid)
        (self.dir / "users").write_text(f"{IMAP_USER}:{{PLAIN}}{IMAP_PASSWORD}\n")
        tls = self.certificate()
        imaps = (f"address = 127.0.0.1\n    port = {self.tls_port}\n    ssl = yes"
                 if tls else "port = 0")
        ssl = (f"ssl = yes\nssl_cert = <{self.dir}/cert.pem\nssl_key = <{self.dir}/key.pem"
               if tls else "ssl = no")
        return f"""
base_dir = {self.dir}/run
state_dir = {self.dir}/state
log_path = {self.dir}/dovecot.log
protocols = imap
listen = 127.0.0.1
{ssl}
disable_plaintext_auth = no
auth_mechanisms = plain login
default_login_user = {login}
default_internal_user = {internal}
default_internal_group = {internal if not root else 'dovecot'}
first_valid_uid = {min(mail_uid, 1) if root else mail_uid}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {self.dir}/users
}}
userdb {{
  driver = static
  args = uid={mail_uid} gid={mail_gid} home={mail}/%u
}}
mail_location = maildir:{mail}/%u/Maildir
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.port}
  }}
  inet_listener imaps {{
    {imaps}
  }}
}}
service anvil {{
  chroot =
}}
"""

    def certificate(self) -> bool:
        """A self-signed certificate for 127.0.0.1 (cert.pem, key.pem); False without openssl."""
        if shutil.which("openssl") is None:
            return False
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(self.dir / "key.pem"), "-out", str(self.dir / "cert.pem")],
                       check=True, capture_output=True)
        return True

    @property
    def tls(self) -> bool:
        return (self.dir / "cert.pem").exists()

    def start(self) -> Dovecot:
        for sub in ("run", "state"):
            (self.dir / sub).mkdir()
        conf = self.dir / "dovecot.conf"
        conf.write_text(self.config())
        self.proc = subprocess.Popen([str(DOVECOT), "-F", "-c", str(conf)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for(self.port, self.proc, f"dovecot ({self.dir}/dovecot.log)")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, tls: bool = False) -> str:
        scheme, port = ("imaps", self.tls_port) if tls else ("imap", self.port)
        return f"{scheme}://{IMAP_USER}:{IMAP_PASSWORD.replace(' ', '%20')}@127.0.0.1:{port}/INBOX"

    @contextmanager
    def client(self) -> Iterator[imaplib.IMAP4]:
        conn = imaplib.IMAP4("127.0.0.1", self.port, timeout=30)
        conn.login(IMAP_USER, IMAP_PASSWORD)
        conn.select("INBOX")
        try:
            yield conn
        finally:
            conn.logout()

    def append(self, message: EmailMessage | bytes) -> None:
        """Put ``message`` (or raw bytes) in the inbox, unseen, as delivery would."""
        raw = message if isinstance(message, bytes) else message.as_bytes()
        with self.client() as conn:
            typ, data = conn.append("INBOX", None, None, raw)
            assert typ == "OK", data

    def unseen(self) -> int:
        with self.client() as conn:
            typ, data = conn.uid("SEARCH", None, "UNSEEN")
            return len((data[0] or b"").split())

    def unsee(self) -> None:
        """Clear every message's \\Seen flag, as a mail client's "mark as unread" does."""
        with self.client() as conn:
            _typ, data = conn.uid("SEARCH", None, "ALL")
            for uid in (data[0] or b"").split():
                conn.uid("STORE", uid.decode(), "-FLAGS", "(\\Seen)")

    def clear(self) -> None:
        """Delete every message in the inbox."""
        with self.client() as conn:
            _typ, data = conn.uid("SEARCH", None, "ALL")
            for uid in (data[0] or b"").split():
                conn.uid("STORE", uid.decode(), "+FLAGS", "(\\Deleted)")
            conn.expunge()
