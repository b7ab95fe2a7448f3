"""No message from anyone stops intake (issue #43): a From whose encoded display name holds
CR LF, multiparts nested a thousand deep, a quoted-printable NUL (which PostgreSQL refuses in a
text column). Each is taken once: recorded as unreadable with its raw bytes and audited (or,
for the NUL, made a ticket with the NUL left out of the text), and acknowledged: IMAP flags it
\\Seen, SMTP answers 250. The good message behind it becomes a ticket; a restart takes nothing
twice; no traceback reaches the output. A store that cannot record (database down) still
leaves the message with the sender.
"""

from __future__ import annotations

import smtplib
import sqlite3

import pytest
from helpers.cli import run_forked
from helpers.mail import (
    CRLF_FROM,
    DESK,
    DOVECOT,
    MAYA,
    NUL_BODY,
    Dovecot,
    mail,
    nested,
    receiving,
)
from helpers.outside_servers import free_port, wait_for

pytest.importorskip("aiosmtpd")

from refund_agent.desk.records import DeskStore  # noqa: E402
from refund_agent.outside.mailin.intake import take  # noqa: E402

BAD = {"crlf": CRLF_FROM, "nested": nested()}


@pytest.fixture(scope="module")
def dovecot():
    if not DOVECOT.exists():
        pytest.skip(f"{DOVECOT} is missing: install Debian's dovecot-imapd to run the IMAP tests "
                    "(.ci/run does)")
    server = Dovecot().start()
    yield server
    server.stop()


def open_store(out, backend) -> DeskStore:
    return DeskStore(backend.target(out))


def check_taken(store: DeskStore) -> None:
    """The two unreadable messages recorded (raw bytes kept, audited, no run), Leo's NUL
    message a ticket without the NUL, Maya's good message a ticket."""
    rows = {m.message_id: m for m in store.mail()}
    unreadable = store.mail(kind="unreadable")
    assert len(unreadable) == 2 and all(m.run_id is None for m in unreadable)
    assert all(m.message_id.endswith("@unreadable.invalid>") for m in unreadable)
    kept = [store.raw_mail(m.message_id) or b"" for m in unreadable]
    assert any(b"Leo=0D=0ABcc" in r for r in kept) and any(b'boundary="b999"' in r for r in kept)
    assert all(m.note.startswith("it cannot be read") for m in unreadable)
    assert rows["<nul@leo.example>"].kind == "ticket"
    assert rows["<first@maya.example>"].kind == "ticket"
    assert b"=00" in (store.raw_mail("<nul@leo.example>") or b"")
    leo = store.run(rows["<nul@leo.example>"].run_id)
    assert "\x00" not in leo.email and "arrived broken" in leo.email
    assert [e.event for e in store.audit()].count("mail_unreadable") == 2


def test_a_mailbox_message_that_cannot_be_read_is_recorded_and_the_next_one_taken(
        tmp_path, dovecot, backend):
    dovecot.clear()
    out = tmp_path / "out"
    env = backend.prepare(out)
    for raw in (*BAD.values(), NUL_BODY):
        dovecot.append(raw)
    dovecot.append(mail())
    done = run_forked(out, "receive", "--imap", dovecot.url(), "--no-work", "--idle-exit", "1",
                      timeout=120, **env)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed
    assert "Traceback" not in printed and dovecot.unseen() == 0
    store = open_store(out, backend)
    check_taken(store)
    assert printed.count("unreadable, recorded, not answered") == 2

    # Marked unread again (or a restart after a crash before \Seen): nothing is taken twice.
    dovecot.unsee()
    again = run_forked(out, "receive", "--imap", dovecot.url(), "--no-work", "--idle-exit", "1",
                       timeout=120, **env)
    assert again.returncode == 0 and "Traceback" not in again.stdout + again.stderr
    assert len(store.mail()) == 4 and len(store.runs()) == 2 and dovecot.unseen() == 0
    listed = run_forked(out, "mail", "--kind", "unreadable", **env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("@unreadable.invalid>") == 2, listed.stdout
    store.close()


def test_over_smtp_a_message_that_cannot_be_read_gets_250_once_recorded(tmp_path, backend):
    """Never 451 for ever: the MTA is told 250 once the message is recorded as unreadable,
    and the good message after it is taken; nothing reaches the log as a traceback."""
    out = tmp_path / "out"
    env = backend.prepare(out)
    inbound = free_port()
    with receiving(out, "--smtp", f"127.0.0.1:{inbound}", "--no-work", **env) as proc:
        wait_for(inbound, proc, "refund-agent receive --smtp")
        with smtplib.SMTP("127.0.0.1", inbound, timeout=30) as client:
            for raw in (*BAD.values(), NUL_BODY, bytes(mail())):
                # sendmail raises on anything but 250: a 4xx or 5xx fails the test here.
                assert client.sendmail(MAYA, [DESK], raw) == {}
            for raw in BAD.values():   # the MTA's second copy: taken before, nothing new
                assert client.sendmail(MAYA, [DESK], raw) == {}
        store = open_store(out, backend)
        check_taken(store)
        assert len(store.mail()) == 4
        store.close()
    printed = proc.stdout.read()
    assert "Traceback" not in printed and "try again later" not in printed


def test_a_store_that_cannot_record_leaves_the_message_unacknowledged(tmp_path):
    """A store fault is not the message's: SMTP answers 4xx (the MTA retries) and says why in
    one line, with no traceback; the receiver keeps running, and the retry is taken once the
    store is back."""
    out = tmp_path / "out"
    out.mkdir()
    inbound = free_port()
    with receiving(out, "--smtp", f"127.0.0.1:{inbound}", "--no-work") as proc:
        wait_for(inbound, proc, "refund-agent receive --smtp")
        # The store refuses every write to the mail table (a fault of the store, which a
        # person mends, never of the message).
        holder = sqlite3.connect(out / "refund-agent.sqlite3", isolation_level=None)
        holder.execute("ALTER TABLE mail RENAME TO mail_away")
        with smtplib.SMTP("127.0.0.1", inbound, timeout=60) as client:
            with pytest.raises(smtplib.SMTPDataError) as refused:
                client.sendmail(MAYA, [DESK], bytes(mail()))
        assert 400 <= refused.value.smtp_code < 500
        holder.execute("ALTER TABLE mail_away RENAME TO mail")
        holder.close()
        assert proc.poll() is None   # still receiving
        with smtplib.SMTP("127.0.0.1", inbound, timeout=60) as client:
            assert client.sendmail(MAYA, [DESK], bytes(mail())) == {}   # the MTA's retry
        store = DeskStore(out / "refund-agent.sqlite3")
        assert [m.kind for m in store.mail()] == ["ticket"]
        store.close()
    printed = proc.stdout.read()
    assert "Traceback" not in printed and "Could not record" in printed


def test_take_records_each_unreadable_message_once(tmp_path):
    """The intake alone: the same unreadable bytes delivered twice are one row."""
    store = DeskStore(tmp_path / "refund-agent.sqlite3")
    first = take(store, CRLF_FROM, "refunds")
    second = take(store, CRLF_FROM, "refunds")
    assert (first.kind, first.new, second.new) == ("unreadable", True, False)
    assert first.message_id == second.message_id and len(store.mail()) == 1
    store.close()


@pytest.mark.postgres
def test_a_quoted_printable_nul_is_taken_on_postgresql(pg_cluster):
    """PostgreSQL refuses NUL in a text column: the text is stored without it, the raw bytes
    as they came (a bytea keeps any byte)."""
    store = DeskStore(pg_cluster.create("mailin_nul"))
    row = take(store, NUL_BODY, "refunds")
    assert row.kind == "ticket" and "\x00" not in store.run(row.run_id).email
    assert store.raw_mail("<nul@leo.example>") == NUL_BODY
    store.close()


def test_a_message_the_reader_fails_on_in_any_way_is_recorded_unreadable(tmp_path,
                                                                        monkeypatch):
    """Past the cheap guard on multipart containers, the standard library's own
    RecursionError is recorded the same way: whatever the reader raises is the message's."""
    from refund_agent.outside.mailin import parse

    monkeypatch.setattr(parse, "MAX_MULTIPARTS", 10**6)
    store = DeskStore(tmp_path / "refund-agent.sqlite3")
    row = take(store, nested(), "refunds")
    assert row.kind == "unreadable" and "RecursionError" in row.note
    assert store.raw_mail(row.message_id) == nested()
    store.close()


def test_a_message_read_but_failing_on_the_way_in_is_recorded_unreadable(tmp_path,
                                                                        monkeypatch):
    """Read, yet failing inside the intake's transaction (here deciding on it raises): the
    same bytes would fail on every retry, so they are recorded as unreadable, once; the store
    keeps nothing half-made."""
    from refund_agent.outside.mailin import intake

    def broken(*_args: object) -> tuple[str, str]:
        raise RuntimeError("no rule for this message")

    monkeypatch.setattr(intake, "decide_capped", broken)
    store = DeskStore(tmp_path / "refund-agent.sqlite3")
    row = take(store, bytes(mail()), "refunds")
    assert row.kind == "unreadable" and "no rule for this message" in row.note
    assert store.runs() == [] and len(store.mail()) == 1
    assert take(store, bytes(mail()), "refunds").new is False
    store.close()
