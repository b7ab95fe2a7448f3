"""Customers' mail from a mailbox, against Debian's Dovecot (started here on loopback, its
config, users and maildir in a temporary folder): ``refund-agent receive --imap`` takes each
unseen message once, flags it \\Seen only once it is recorded, and threads its answers; a
receiver killed after reading a message, or after recording it and before flagging it, loses
nothing and takes nothing twice.
"""

from __future__ import annotations

import subprocess

import pytest
from helpers.cli import run_forked
from helpers.mail import DOVECOT, IMAP_PASSWORD, Dovecot, answer, chain, mail, smtp_env
from helpers.outside_servers import smtp_server

pytest.importorskip("aiosmtpd")

from refund_agent.desk.records import DeskStore
from refund_agent.models import RunStatus  # noqa: E402


@pytest.fixture(scope="module")
def dovecot():
    if not DOVECOT.exists():
        pytest.skip(f"{DOVECOT} is missing: install Debian's dovecot-imapd to run the IMAP tests "
                    "(.ci/run does)")
    server = Dovecot().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def outbound():
    with smtp_server() as found:
        yield found


def receive_once(out, dovecot: Dovecot, tls: bool = False, **env: str
                 ) -> subprocess.CompletedProcess:
    """``receive --imap`` (a new process, forked warm) until it has had nothing new for a
    second: its exit code and output."""
    done = run_forked(out, "receive", "--imap", dovecot.url(tls), "--idle-exit", "1",
                      timeout=120, **env)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout + done.stderr)


def test_a_mailbox_makes_one_ticket_per_message_and_threads_the_answer(tmp_path, dovecot,
                                                                        outbound):
    port, box = outbound
    box.clear()
    dovecot.clear()
    out, env = tmp_path / "out", smtp_env(port)
    first = mail()
    dovecot.append(first)
    dovecot.append(first)   # the same message delivered twice
    dovecot.append(mail(subject="Out of office", message_id="<away@m>",
                        Auto_Submitted="auto-replied", body="Back on Monday."))
    done = receive_once(out, dovecot, **env)
    assert done.returncode == 0, done.stdout
    assert "IDLE" in done.stdout   # Dovecot offers it, and it is used
    store = DeskStore(out / "refund-agent.sqlite3")
    [run] = store.runs()
    assert run.status == RunStatus.WAITING and dovecot.unseen() == 0
    assert [m.kind for m in store.mail()] == ["ticket", "auto"]

    approved = run_forked(out, "approve", "--as", "Dana Kim", **env)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    [sent] = box.messages
    assert sent["In-Reply-To"] == "<first@maya.example>"
    assert sent["Subject"] == "Re: Cracked carafe"
    before = store.run(run.id)

    dovecot.append(answer(sent, "Thanks! Do I need to send the broken one back?", "<two@m>"))
    assert receive_once(out, dovecot, **env).returncode == 0
    after = store.run(run.id)
    assert after.status == RunStatus.DONE and after.requests > before.requests
    assert before.last_response_id in chain(out, after.last_response_id)[1:]
    assert [r.text for r in store.replies(run.id)] == [
        "Thanks! Do I need to send the broken one back?"]
    assert len(store.runs()) == 1
    store.close()


@pytest.mark.parametrize("point", ["after_mail_read", "after_mail_recorded"])
def test_a_poller_killed_at_intake_loses_no_mail_and_takes_none_twice(tmp_path, dovecot, point):
    dovecot.clear()
    out = tmp_path / "out"
    dovecot.append(mail())
    killed = receive_once(out, dovecot, REFUND_AGENT_CRASH_AT=point)
    assert killed.returncode == -9, killed.stdout
    assert dovecot.unseen() == 1   # never flagged \Seen: the next poll gets it again
    store = DeskStore(out / "refund-agent.sqlite3")
    assert len(store.mail()) == (1 if point == "after_mail_recorded" else 0)
    done = receive_once(out, dovecot)
    assert done.returncode == 0, done.stdout
    assert dovecot.unseen() == 0
    assert [m.message_id for m in store.mail()] == ["<first@maya.example>"]
    [run] = store.runs()
    assert run.status == RunStatus.WAITING   # the recorded ticket was carried on
    store.close()


def test_imaps_verifies_the_servers_certificate(tmp_path, dovecot):
    """TLS from the first byte (imaps://): a certificate the client trusts (here through
    SSL_CERT_FILE, as a private CA would be) reads the mailbox; an unknown one is refused in
    one line, and nothing is read."""
    if not dovecot.tls:
        pytest.skip("openssl is missing, so Dovecot has no certificate for imaps")
    dovecot.clear()
    dovecot.append(mail())
    out = tmp_path / "out"
    refused = receive_once(out, dovecot, tls=True)
    assert refused.returncode == 1 and "certificate verify failed" in refused.stdout
    assert "Traceback" not in refused.stdout and dovecot.unseen() == 1
    done = receive_once(out, dovecot, tls=True, SSL_CERT_FILE=str(dovecot.dir / "cert.pem"))
    assert done.returncode == 0, done.stdout
    assert IMAP_PASSWORD not in done.stdout and "imaps://desk@127.0.0.1" in done.stdout
    assert dovecot.unseen() == 0 and len(DeskStore(out / "refund-agent.sqlite3").runs()) == 1
