"""Customers' mail by SMTP, end to end, against servers the project did not write: a message
sent with smtplib to ``refund-agent receive --smtp`` (a real process, aiosmtpd inside) becomes
one waiting ticket; approving it sends one threaded answer through an outbound aiosmtpd; the
customer's threaded answer continues the same run from its last stored response. Duplicates,
robots and strangers on the thread make nothing they should not. Then the intake's crash
points: a process killed after reading a message, or after recording it and before its 250,
loses nothing and takes nothing twice.
"""

from __future__ import annotations

import smtplib

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm
from helpers.mail import (
    DESK,
    MAYA,
    answer,
    chain,
    deliver,
    mail,
    receiving,
    smtp_env,
    wait_until,
)
from helpers.outside_servers import free_port, smtp_server, wait_for

pytest.importorskip("aiosmtpd")

from refund_agent.desk.records import DeskStore
from refund_agent.models import RunStatus  # noqa: E402
from refund_agent.store import Store  # noqa: E402


@pytest.fixture(scope="module")
def outbound():
    """The desk's outgoing mail server (aiosmtpd, login required): (port, mailbox)."""
    with smtp_server() as found:
        yield found


def open_store(out, backend) -> Store:
    return DeskStore(backend.url(out) if backend.postgres else out / "refund-agent.sqlite3")


def test_mail_in_threads_out_and_back_in_once(tmp_path, outbound, backend):
    port, box = outbound
    box.clear()
    out = tmp_path / "out"
    env = {**smtp_env(port), **backend.prepare(out)}
    inbound = free_port()
    with receiving(out, "--smtp", f"127.0.0.1:{inbound}", **env) as proc:
        wait_for(inbound, proc, "refund-agent receive --smtp")
        first = mail()
        deliver(inbound, first)
        deliver(inbound, first)   # an MTA's retry, a forwarding rule's second copy
        store = open_store(out, backend)
        run = wait_until(lambda: [r for r in store.runs() if r.status == RunStatus.WAITING],
                         "the mailed ticket to wait for approval")[0]
        assert [r.id for r in store.runs()] == [run.id]   # one ticket, one run
        assert (run.sender, run.subject) == (MAYA, "Cracked carafe")
        assert len(store.approvals("pending")) == 1
        assert box.messages == []   # nothing sent before a person decided

        # An out-of-office answer on the thread: recorded and audited, never fed to the agent.
        deliver(inbound, mail(subject="Automatic reply: Cracked carafe", message_id="<ooo@m>",
                              Auto_Submitted="auto-replied", In_Reply_To="<first@maya.example>",
                              body="I am away until Monday."))
        wait_until(lambda: store.mail(kind="auto"), "the auto-reply to be recorded")
        assert "mail_auto" in [e.event for e in store.audit()]

        approved = run_cli(out, "approve", "--as", "Dana Kim", **env)
        assert approved.returncode == 0, approved.stdout + approved.stderr
        [sent] = box.messages   # one answer, threaded on the customer's message
        assert sent["In-Reply-To"] == "<first@maya.example>"
        assert "<first@maya.example>" in sent["References"].split()
        assert sent["Subject"] == "Re: Cracked carafe"
        outgoing = [m for m in store.mail(run.id) if m.direction == "out"]
        assert [m.message_id for m in outgoing] == [sent["Message-ID"].strip()]
        before = store.run(run.id)

        # The customer answers it from her mail client: the same run continues.
        reply = answer(sent, "Thanks! Do I need to send the broken one back?", "<second@m>")
        deliver(inbound, reply)
        deliver(inbound, reply)
        after = wait_until(lambda: (r := store.run(run.id)).requests > before.requests
                           and r.status == RunStatus.DONE and r,
                           "the reply to continue the run")
        [taken] = store.replies(run.id)
        assert taken.text == "Thanks! Do I need to send the broken one back?"   # no quote
        assert before.last_response_id in chain(out, after.last_response_id)
        assert after.last_response_id != before.last_response_id

        # Someone else answering on Maya's thread starts a ticket of their own, flagged.
        deliver(inbound, answer(sent, "Refund me too", "<leo@m>",
                                sender="Leo Martins <leo.martins@example.com>"))
        [flagged] = wait_until(lambda: store.mail(kind="flagged"), "the flagged ticket")
        assert flagged.run_id != run.id and "maya.chen@example.com" in flagged.note
        assert len(store.replies(run.id)) == 1
        assert len(store.runs()) == 2
        runs_in = {m.message_id: m.run_id for m in store.mail() if m.direction == "in"}
        assert runs_in == {"<first@maya.example>": run.id, "<ooo@m>": run.id,
                           "<second@m>": run.id, "<leo@m>": flagged.run_id}
        store.close()
    [later] = box.messages[1:]   # the agent's answer to her reply threads on it as well
    assert later["In-Reply-To"] == "<second@m>" and later["Subject"] == "Re: Cracked carafe"
    assert later["References"].split() == ["<first@maya.example>", sent["Message-ID"].strip(),
                                           "<second@m>"]


@pytest.mark.parametrize("point", ["after_mail_read", "after_mail_recorded"])
def test_a_receiver_killed_at_intake_loses_no_mail_and_takes_none_twice(tmp_path, point):
    """Killed after reading a message (not recorded) or after recording it (no 250 yet): the
    client sees no 250 and delivers again to the restarted receiver; one ticket either way,
    which ``refund-agent work`` then carries to the approval queue (``--no-work``)."""
    out = tmp_path / "out"
    inbound = free_port()
    first = mail()
    with receiving(out, "--smtp", f"127.0.0.1:{inbound}", "--no-work",
                   REFUND_AGENT_CRASH_AT=point) as proc:
        wait_for(inbound, proc, "refund-agent receive --smtp")
        with pytest.raises(smtplib.SMTPException):   # no 250: the MTA keeps it
            deliver(inbound, first)
        assert proc.wait(timeout=30) == -9
    store = DeskStore(out / "refund-agent.sqlite3")
    assert len(store.mail()) == (1 if point == "after_mail_recorded" else 0)
    with receiving(out, "--smtp", f"127.0.0.1:{inbound}", "--no-work") as proc:
        wait_for(inbound, proc, "refund-agent receive --smtp")
        deliver(inbound, first)   # the MTA's retry
        deliver(inbound, first)
    assert [m.message_id for m in store.mail()] == ["<first@maya.example>"]
    [run] = store.runs()
    assert run.status == RunStatus.WORKING   # --no-work: left for a worker, which takes it
    worked = run_cli(out, "work", "--idle-exit", "1")
    assert worked.returncode == 0, worked.stdout + worked.stderr
    assert store.run(run.id).status == RunStatus.WAITING


def test_the_listener_takes_mail_only_for_the_desk_and_only_after_its_login(tmp_path):
    """``receive --smtp`` is nobody's relay: a recipient that is not one of the desk's
    addresses (the shop's support email, REFUND_AGENT_RECEIVE_ADDRESSES) is refused with 550
    at RCPT; with REFUND_AGENT_RECEIVE_USER set, nothing is taken before a good login, and the
    password is never printed."""
    out, inbound, secret = tmp_path / "out", free_port(), "listener pass 7f3a"
    alias, stranger = "Refunds@JuniperPine.example", "someone@elsewhere.example"
    with receiving(out, "--smtp", f"127.0.0.1:{inbound}", "--no-work",
                   REFUND_AGENT_RECEIVE_ADDRESSES="refunds@juniperpine.example, @returns.example",
                   REFUND_AGENT_RECEIVE_USER="mta", REFUND_AGENT_RECEIVE_PASSWORD=secret) as proc:
        wait_for(inbound, proc, "refund-agent receive --smtp")
        with smtplib.SMTP("127.0.0.1", inbound, timeout=30) as client:
            with pytest.raises(smtplib.SMTPSenderRefused) as no_login:
                client.sendmail(MAYA, [DESK], bytes(mail()))
            assert no_login.value.smtp_code == 530
            with pytest.raises(smtplib.SMTPAuthenticationError):
                client.login("mta", "wrong")
        with smtplib.SMTP("127.0.0.1", inbound, timeout=30) as client:
            client.login("mta", secret)
            with pytest.raises(smtplib.SMTPRecipientsRefused) as elsewhere:
                client.sendmail(MAYA, [stranger], bytes(mail(message_id="<x@m>")))
            assert elsewhere.value.recipients[stranger][0] == 550
            refused = client.sendmail(MAYA, [stranger, DESK.upper(), alias, "desk@returns.example"],
                                      bytes(mail()))
            assert list(refused) == [stranger] and refused[stranger][0] == 550
        store = DeskStore(out / "refund-agent.sqlite3")
        assert [m.message_id for m in store.mail()] == ["<first@maya.example>"]
        store.close()
    printed = proc.stdout.read()
    assert f"Refused mail for {stranger}" in printed and "login required: mta" in printed
    assert secret not in printed and "Traceback" not in printed
