"""The two decisions that pay nothing and keep the ticket open: ask the customer, and expiry.

Through the real agent and the offline model: the question reaches the customer once, the run
waits on them, their reply continues the same run to a new proposal; a refund nobody decides
in time expires, the customer is told, and a late approval finds it closed.
"""

from __future__ import annotations

import threading
import time

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from refund_agent import AlreadyDecided, DecisionRefused, RunNotReady, RunStatus


def emails(agent) -> list[dict]:
    """What the email stand-in sent, as {to, subject, body}."""
    return [m["request"] for m in agent.outbox.messages()]


# Orders in data/shop.json with a line the policy refunds, and their owners.
DAMAGED = [("maya.chen@example.com", "Order A1043: the glass pour-over coffee maker arrived "
                                     "cracked."),
           ("priya.nair@example.com", "Order A1066: the cast iron skillet arrived cracked."),
           ("leo.martins@example.com", "Order A1058: the oak cutting board arrived split.")]


def waiting_run(agent, which: int = 0):
    sender, body = DAMAGED[which]
    run = agent.advance(agent.start(sender, body).id)
    assert run.status == RunStatus.WAITING, run
    return run, [a for a in agent.store.approvals("pending") if a.run_id == run.id][0]


def test_ask_sends_the_question_waits_then_the_reply_proposes_again(agent):
    run, approval = waiting_run(agent)
    agent.ask(approval.id, "Dana Kim", "Could you send a photo of the crack?",
              fingerprint=agent.store.approval(approval.id).fingerprint)
    run = agent.advance(run.id)
    assert run.status == RunStatus.ASKED
    sent = emails(agent)
    assert len(sent) == 1 and "Could you send a photo of the crack?" in sent[0]["body"]
    assert agent.payments.refunds() == []
    events = [(e.event, e.actor) for e in agent.store.audit()]
    assert ("asked", "Dana Kim") in events

    # The customer answers: the same run carries on and proposes the refund again.
    agent.add_reply(run.id, "Here you go: the coffee maker has a crack down the side (photo).")
    run = agent.advance(run.id)
    assert run.status == RunStatus.WAITING
    first, second = agent.store.run_approvals(run.id)
    assert (first.status, second.status) == ("asked", "pending")
    assert [line.line for line in second.lines] == [line.line for line in first.lines]

    agent.decide(second.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(second.id).fingerprint)
    run = agent.advance(run.id)
    assert run.status == RunStatus.DONE
    assert [r["request"]["amount_cents"] for r in agent.payments.refunds()] == [
        second.amount_cents]
    assert len(emails(agent)) == 2


def test_ask_needs_a_question_and_a_second_click_is_yours(agent):
    _run, approval = waiting_run(agent)
    with pytest.raises(DecisionRefused, match="question"):
        agent.ask(approval.id, "Dana Kim", "   ",
                  fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.store.approval(approval.id).status == "pending"
    agent.ask(approval.id, "Dana Kim", "Which item is damaged?",
              fingerprint=agent.store.approval(approval.id).fingerprint)
    with pytest.raises(AlreadyDecided, match="You already asked the customer about"):
        agent.ask(approval.id, "Dana Kim", "Which item is damaged?",
                  fingerprint=agent.store.approval(approval.id).fingerprint)
    with pytest.raises(AlreadyDecided, match="sent back to the customer with a question by "
                                             "Dana Kim"):
        agent.decide(approval.id, True, "Sam Lee",
                     fingerprint=agent.store.approval(approval.id).fingerprint)


def test_a_waiting_run_takes_no_reply_but_an_asked_one_does(agent):
    run, approval = waiting_run(agent)
    with pytest.raises(RunNotReady):
        agent.add_reply(run.id, "Any news?")
    agent.ask(approval.id, "Dana Kim", "Is it the coffee maker or the mugs?",
              fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.advance(run.id)
    assert agent.add_reply(run.id, "The coffee maker.").text == "The coffee maker."


def test_expiry_closes_only_what_waited_too_long_and_tells_the_customer(agent):
    old_run, old = waiting_run(agent)
    young_run, young = waiting_run(agent, 1)
    # Age the first proposal past the window (8 days), as if it had waited over a holiday.
    agent.store.execute("UPDATE approvals SET requested_at = requested_at - 8 * 86400"
                        " WHERE id = ?", (old.id,))
    expired = agent.expire()
    assert [a.id for a in expired] == [old.id]
    assert agent.store.approval(young.id).status == "pending"
    assert agent.expire() == []               # nothing twice

    run = agent.advance(old_run.id)
    assert run.status == RunStatus.DONE
    (mail,) = [m for m in emails(agent) if m["to"] == run.sender]
    assert "wasn't reviewed in time" in mail["body"]
    note = [s for s in agent.store.steps(run.id) if s.kind == "note"][-1]
    assert "expired" in note.data["text"] and "follow up" in note.data["text"]
    (entry,) = [e for e in agent.store.audit() if e.event == "expired"]
    assert entry.approval_id == old.id and "7 days" in entry.note
    with pytest.raises(AlreadyDecided, match="expired"):
        agent.decide(old.id, True, "Dana Kim", fingerprint=agent.store.approval(old.id).fingerprint)
    assert agent.payments.refunds() == []
    assert young_run.id != old_run.id


def test_expiry_racing_an_approval_lands_exactly_one(agent):
    for attempt in range(6):
        run, approval = waiting_run(agent, attempt % 3)
        barrier = threading.Barrier(2)
        won: list[str] = []

        # Each pair of threads is joined before the next attempt: binding the loop's values
        # as defaults only says so to the linter.
        def approve(barrier=barrier, approval=approval, won=won) -> None:
            barrier.wait()
            try:
                agent.decide(approval.id, True, "Dana Kim",
                             fingerprint=agent.store.approval(approval.id).fingerprint)
                won.append("approved")
            except AlreadyDecided:
                pass

        def expire(barrier=barrier, won=won) -> None:
            barrier.wait()
            won.extend("expired" for _ in agent.store.expire(0))

        threads = [threading.Thread(target=approve), threading.Thread(target=expire)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, won
        assert agent.store.approval(approval.id).status == won[0]
        agent.advance(run.id)
        if won[0] == "approved":
            break   # that order's line is refunded now; the others keep racing
    assert len(agent.payments.refunds()) == sum(
        1 for a in agent.store.approvals(None) if a.status == "approved")


def test_terminal_ask_reply_and_expire(tmp_path):
    out = tmp_path / "out"
    assert run_cli(out).returncode == 0
    asked = run_cli(out, "ask", "Could you send a photo of the damage?", "--as", "Dana Kim")
    assert asked.returncode == 0, asked.stderr
    assert "back with a question" in asked.stdout
    assert "waiting on the customer's answer" in asked.stdout
    again = run_cli(out, "ask", "Again?", "--as", "Dana Kim")
    assert again.returncode == 4 and "Nothing is waiting" in again.stderr

    replied = run_cli(out, "reply", "Photo attached: the skillet is cracked across the base.")
    assert replied.returncode == 0, replied.stderr
    assert "waiting for approval" in replied.stdout

    kept = run_cli(out, "expire")
    assert kept.returncode == 0 and "0 approvals expired (older than 7 days" in kept.stdout
    # The shortest wait the setting allows is a second (0 is refused: see test_settings.py).
    time.sleep(1.1)
    gone = run_cli(out, "expire", REFUND_AGENT_APPROVAL_DAYS=str(1 / 86400))
    assert gone.returncode == 0, gone.stderr
    assert "1 approval expired" in gone.stdout and "wasn't reviewed in time" in gone.stdout
    late = run_cli(out, "approve", "--as", "Dana Kim")
    assert late.returncode == 4
    assert "was expired by expiry" in late.stderr
