"""Mail loops (issue #43, case 3): the desk against an auto-responder that does not say it is
one. Every answer the desk sends gets an answer back at once, threaded, with no
``Auto-Submitted`` or ``Precedence`` header, so intake takes each as the customer's reply.

End to end: ``refund-agent receive --smtp`` (a real process, the offline model inside) takes
the customer's first message; the desk's mail goes out through an aiosmtpd server whose handler
is the scripted responder, which delivers its answer back to the listener. The desk must stop
at REFUND_AGENT_MAIL_CAP answers, hand the ticket to a person (an escalation) and audit it;
every message it sent carries RFC 3834's ``Auto-Submitted`` in the bytes the server got.
"""

from __future__ import annotations

import email
import email.policy
import queue
import threading
import uuid
from email.message import EmailMessage

import pytest
from helpers.mail import DESK, MAYA, deliver, mail, receiving, smtp_env, wait_until
from helpers.outside_servers import (
    SMTP_PASSWORD,
    SMTP_USER,
    Mailbox,
    authenticate,
    free_port,
    wait_for,
)
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("aiosmtpd")

from refund_agent.desk.records import DeskStore  # noqa: E402
from refund_agent.models import RunStatus  # noqa: E402
from refund_agent.outside.config import OutsideSettings  # noqa: E402
from refund_agent.outside.mailin.decide import HELD, REPLY, TICKET  # noqa: E402
from refund_agent.outside.mailin.intake import release_held, take  # noqa: E402
from refund_agent.outside.mailin.loops import LOOPED, MailCap, looped, span  # noqa: E402
from refund_agent.outside.mailin.rows import Answered  # noqa: E402
from refund_agent.outside.smtp import SmtpOutbox  # noqa: E402

# The responder answers this many of the desk's messages, then stops: on code with no cap
# the loop ends there (the test's own brake), not in an endless exchange.
BRAKE = 12


class AutoResponder(Mailbox):
    """The desk's outgoing server, whose every message reaches a customer's auto-responder:
    each one is kept as the raw bytes the server received, and answered (threaded, unlabelled)
    by delivering the answer to the desk's own listener on ``inbound``, from another thread so
    the desk's send gets its 250 first."""

    def __init__(self, inbound: int) -> None:
        super().__init__()
        self.raw: list[bytes] = []
        self._inbound = inbound
        self._outgoing: queue.Queue[EmailMessage | None] = queue.Queue()
        self._thread = threading.Thread(target=self._deliver, daemon=True)
        self._thread.start()

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        answer = await super().handle_DATA(server, session, envelope)
        self.raw.append(envelope.original_content)
        if len(self.raw) <= BRAKE:
            self._outgoing.put(self.answer(self.messages[-1], len(self.raw)))
        return answer

    @staticmethod
    def answer(to: email.message.Message, n: int) -> EmailMessage:
        """What a ticketing system's responder writes back: threaded as a mail client
        threads, a "Re:" subject, no header that says it is automatic."""
        refs = f"{to.get('References', '')} {to['Message-ID']}".strip()
        return mail(subject=f"Re: {to['Subject'].removeprefix('Re: ')}",
                    body=f"Thank you. Your message is logged as request #{4000 + n}; "
                         "we will get back to you.",
                    message_id=f"<responder-{n}@example.com>",
                    In_Reply_To=to["Message-ID"], References=refs)

    def _deliver(self) -> None:
        while (message := self._outgoing.get()) is not None:
            deliver(self._inbound, message)

    def close(self) -> None:
        self._outgoing.put(None)
        self._thread.join(timeout=30)


def test_an_unlabelled_auto_responder_gets_at_most_the_cap_then_a_person(tmp_path):
    from aiosmtpd.controller import Controller

    out, inbound, outbound, cap = tmp_path / "out", free_port(), free_port(), 3
    responder = AutoResponder(inbound)
    server = Controller(responder, hostname="127.0.0.1", port=outbound,
                        authenticator=authenticate, auth_required=True, auth_require_tls=False)
    server.start()
    try:
        with receiving(out, "--smtp", f"127.0.0.1:{inbound}", **smtp_env(outbound),
                       REFUND_AGENT_MAIL_CAP=str(cap)) as proc:
            wait_for(inbound, proc, "refund-agent receive --smtp")
            # A customer who names no order: the desk asks for it, by email, at once.
            deliver(inbound, mail(subject="Refund please",
                                  body="Hello, I would like a refund for my last order."))
            store = DeskStore(out / "refund-agent.sqlite3")
            wait_until(lambda: store.escalations() or len(responder.raw) >= BRAKE,
                       "the loop to be capped (or the responder's brake)")
            [run] = store.runs()
            wait_until(lambda: store.run(run.id).status != RunStatus.WORKING
                       and not store.mail(kind="held"), "the run to settle")
            sent = list(responder.raw)
            escalations = store.escalations(run_id=run.id)
            audit = [e for e in store.audit() if e.run_id == run.id]
            looped = store.mail(kind="looped")
            kinds = [m.kind for m in store.mail(run.id) if m.direction == "in"]
            store.close()
    finally:
        responder.close()
        server.stop()

    assert len(sent) == cap, f"the desk answered the responder {len(sent)} times"
    # Handed to a person: one open escalation on the ticket, and audit lines saying why.
    [escalation] = escalations
    assert escalation.open and escalation.kind == "mail_loop"
    assert f"{cap} automatic answers" in escalation.reason
    assert [e.event for e in audit if e.event in ("mail_looped", "escalated")] == \
        ["mail_looped", "escalated"]
    assert [m.run_id for m in looped] == [run.id]
    # The responder's first answers continued the run (each got an answer); the one past the
    # cap is kept on the ticket, not answered.
    assert kinds == ["ticket", *["reply"] * (cap - 1), "looped"]
    # Every message the desk sent says it is automatic (RFC 3834) and asks Exchange not to
    # answer it, and each still threads on the message it answers.
    for n, raw in enumerate(sent):
        head = raw.split(b"\r\n\r\n", 1)[0]
        assert b"\r\nAuto-Submitted: auto-replied\r\n" in head, head
        assert b"\r\nX-Auto-Response-Suppress: OOF, AutoReply\r\n" in head, head
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert message["To"] == MAYA and message["From"] == DESK
        expected = "<first@maya.example>" if n == 0 else f"<responder-{n}@example.com>"
        assert message["In-Reply-To"] == expected
        assert message["References"].split()[0] == "<first@maya.example>"


# -- the store's side, on both engines ------------------------------------------------------

def open_store(tmp_path, backend) -> DeskStore:
    out = tmp_path / "out"
    out.mkdir()
    backend.prepare(out)
    return DeskStore(backend.url(out) if backend.postgres else out / "refund-agent.sqlite3")


def answers(store: DeskStore, lease, n: int, start: int = 0) -> None:
    """The desk's answers ``start``.. on the lease's run, as send_on_thread records them."""
    for i in range(start, start + n):
        store.record_mail_out(lease, f"<ours-{lease.run_id}-{i}@desk>", MAYA,
                              "Re: Refund please", "<first@maya.example>",
                              ["<first@maya.example>"])


def test_a_held_reply_is_judged_again_when_released(tmp_path, backend):
    """A reply that came while its run worked was under the cap then (the answer it responds
    to not yet recorded: an auto-responder answers within the send); released once the run
    finished, it is counted against every answer since, and goes to a person."""
    store = open_store(tmp_path, backend)
    cap = MailCap(answers=2, seconds=3600)
    run_id = take(store, bytes(mail()), "refunds", cap=cap).run_id
    lease = store.acquire(run_id, uuid.uuid4().hex)
    answers(store, lease, 1)
    early = mail(message_id="<auto-1@m>", subject="Re: Cracked carafe", body="Logged.",
                 In_Reply_To="<ours-0@desk>", References="<first@maya.example>")
    assert take(store, bytes(early), "refunds", cap=cap).kind == "held"
    answers(store, lease, 1, start=1)   # the second answer, sent while the reply waited
    store.release(lease, RunStatus.DONE)
    said: list[str] = []
    assert release_held(store, said.append, cap) == []   # no run to advance
    [kept] = store.mail(kind="looped")
    assert (kept.message_id, kept.run_id) == ("<auto-1@m>", run_id)
    assert store.replies(run_id) == [] and store.run(run_id).status == RunStatus.DONE
    [escalation] = store.escalations(run_id=run_id)
    assert escalation.kind == "mail_loop" and "2 automatic answers" in escalation.reason
    assert [e.event for e in store.audit()] == ["mail_held", "mail_looped", "escalated"]
    assert said == [f"<auto-1@m>: not answered, {run_id} went to a person ({kept.note})"]
    store.close()


def test_a_responder_that_never_threads_is_capped_per_address(tmp_path, backend):
    """An auto-responder that starts a new thread each time (no In-Reply-To) would make a new
    ticket of every answer: past the cap to that address, its message is kept on the ticket
    the desk answered last, which goes to a person, however many more come. Other customers
    are not held back by it."""
    store = open_store(tmp_path, backend)
    cap = MailCap(answers=3, seconds=3600)
    first = take(store, bytes(mail()), "refunds", cap=cap).run_id
    answers(store, store.acquire(first, uuid.uuid4().hex), 2)
    second = take(store, bytes(mail(message_id="<new-thread@m>", subject="Your message")),
                  "refunds", cap=cap)
    assert second.kind == "ticket"   # two answers so far: under the cap
    answers(store, store.acquire(second.run_id, uuid.uuid4().hex), 1)
    for n in range(3):
        unthreaded = mail(message_id=f"<again-{n}@m>", subject="Your message", body="Logged.")
        row = take(store, bytes(unthreaded), "refunds", cap=cap)
        assert (row.kind, row.run_id) == ("looped", second.run_id)
        assert "3 automatic answers to maya.chen@example.com" in row.note
    assert len(store.runs()) == 2
    assert [e.run_id for e in store.escalations()] == [second.run_id]   # one, still open
    other = take(store, bytes(mail(sender="Leo Martins <leo.martins@example.com>",
                                   message_id="<leo@m>")), "refunds", cap=cap)
    assert other.kind == "ticket"
    store.close()


# -- the cap itself: a pure decision --------------------------------------------------------

THREADS = {"t1": "maya@example.com", "t2": "maya@example.com", "t3": "leo@example.com"}


@settings(max_examples=300, deadline=None)
@given(answers=st.integers(1, 4), seconds=st.sampled_from([1.0, 10.0, 60.0]),
       events=st.lists(st.tuples(st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0, 7.0, 20.0]),
                                 st.sampled_from([*THREADS, None]),
                                 st.sampled_from(list(set(THREADS.values())))),
                       max_size=60))
def test_never_more_than_the_cap_in_any_window(answers, seconds, events):
    """A generated timeline of messages (gaps, the thread each continues or None for a new
    one, the sender): the desk answers what the cap lets through. In every window of
    ``seconds``, on every thread and to every address, it answered at most ``answers`` times;
    and it refused only when that many answers were already in the window."""
    cap = MailCap(answers, seconds)
    sent: list[tuple[float, str, str]] = []   # (time, thread, address) of each answer
    now = 0.0
    for n, (gap, thread, sender) in enumerate(events):
        now += gap
        if thread is not None and THREADS[thread] != sender:
            thread = None   # a stranger on a thread starts a ticket of their own
        on_thread = tuple(t for t, th, _ in sent if th == thread)
        to_sender = tuple(t for t, _, s in sent if s == sender)
        kind = REPLY if thread else TICKET
        got, why = looped(kind, "", Answered(on_thread, to_sender, sender), now, cap)
        if got == kind:
            sent.append((now, thread or f"new-{n}", sender))
        else:
            assert got == LOOPED and why
            busy = [len([t for t in times if t > now - seconds])
                    for times in ((on_thread if thread else ()), to_sender)]
            assert max(busy) >= answers
    for t0, _, _ in sent:   # every window that starts just before an answer
        for key in (1, 2):
            for value in {a[key] for a in sent}:
                inside = [a for a in sent if a[key] == value and t0 <= a[0] < t0 + seconds]
                assert len(inside) <= answers, (key, value, inside)


def test_the_cap_counts_only_the_window():
    cap = MailCap(2, 60)
    old, recent = (0.0, 1.0), (100.0, 130.0)
    assert looped(REPLY, "", Answered(old, old, MAYA), 120.0, cap) == (REPLY, "")
    kind, why = looped(REPLY, "", Answered(recent, recent, MAYA), 150.0, cap)
    assert kind == LOOPED and "2 automatic answers on this thread within a minute" in why
    assert looped(HELD, "", Answered(recent, (), MAYA), 150.0, cap)[0] == LOOPED
    # A robot's mail, a refused sender: never answered anyway, kept as they are.
    assert looped("auto", "Auto-Submitted", Answered(recent, recent), 150.0, cap) == \
        ("auto", "Auto-Submitted")
    assert span(3600) == "an hour" and span(7200) == "2 hours" and span(90) == "90 seconds"


# -- the desk's mail says it is automatic ---------------------------------------------------

def test_a_message_that_answers_no_mail_is_labelled_auto_generated(tmp_path):
    """A ticket typed in on the page has no thread: its email is still the desk's automatic
    mail (Auto-Submitted: auto-generated), in the bytes the server received."""
    from aiosmtpd.controller import Controller

    box, port = RawBox(), free_port()
    server = Controller(box, hostname="127.0.0.1", port=port, authenticator=authenticate,
                        auth_required=True, auth_require_tls=False)
    server.start()
    try:
        outbox = SmtpOutbox(tmp_path, None, OutsideSettings(
            email="smtp", smtp_host="127.0.0.1", smtp_port=port, smtp_user=SMTP_USER,
            smtp_password=SMTP_PASSWORD, smtp_security="none", smtp_from=DESK), DESK)
        outbox.send("run_x/call_1", MAYA, "Re: Refund", "Hello.")
        outbox.send("run_x/call_2", MAYA, "Re: Refund", "Hello again.",
                    thread=("<first@maya.example>", ("<first@maya.example>",)))
    finally:
        server.stop()
    heads = [raw.split(b"\r\n\r\n", 1)[0] for raw in box.raw]
    assert b"\r\nAuto-Submitted: auto-generated\r\n" in heads[0]
    assert b"\r\nAuto-Submitted: auto-replied\r\n" in heads[1]
    assert b"\r\nIn-Reply-To: <first@maya.example>\r\n" in heads[1]
    assert all(b"\r\nX-Auto-Response-Suppress: OOF, AutoReply\r\n" in h for h in heads)


class RawBox(Mailbox):
    """aiosmtpd's handler keeping the raw bytes of every message it accepted."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[bytes] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.raw.append(envelope.original_content)
        return await super().handle_DATA(server, session, envelope)
