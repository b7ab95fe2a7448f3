"""Customer replies continue a finished run; the simulated angry customer tests composure."""

from __future__ import annotations

import json

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from refund_agent import RunNotReady, RunStatus
from refund_agent.desk import converse
from refund_agent.desk.customer import MAX_SIMULATED_REPLIES


def finish_damaged(agent):
    run = agent.advance(agent.start_sample("damaged").id)
    [approval] = agent.store.approvals("pending")
    agent.decide(approval.id, approve=True, by="Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    return agent.advance(run.id)


def test_reply_continues_the_run_sending_only_the_new_message(agent, model):
    run = finish_damaged(agent)
    before = len(model.server.requests)
    agent.add_reply(run.id, "Thanks! Can you also refund the shipping? I'll post a bad review.")
    after = agent.advance(run.id)
    assert after.status == RunStatus.DONE
    body = model.server.requests[before]
    assert body["previous_response_id"] == run.last_response_id
    assert len(body["input"]) == 1 and body["input"][0]["role"] == "user"
    assert "refund the shipping" in body["input"][0]["content"]
    notes = [s.data["text"] for s in agent.store.steps(run.id) if s.kind == "note"]
    assert "a bad review" in notes[-1]
    assert len(agent.payments.refunds()) == 1 and len(agent.outbox.messages()) == 2


def test_reply_is_refused_while_the_run_is_not_finished(agent):
    run = agent.advance(agent.start_sample("damaged").id)
    with pytest.raises(RunNotReady, match="waiting"):
        agent.add_reply(run.id, "Hello?")
    with pytest.raises(RunNotReady, match="empty"):
        agent.add_reply(run.id, "  ")


def test_angry_customer_holds_the_line(agent, model):
    run = agent.advance(agent.start_sample("angry").id)
    [approval] = agent.store.approvals("pending")
    agent.decide(approval.id, approve=True, by="Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    run = converse(agent, run.id)
    assert run.status == RunStatus.DONE
    assert 1 <= run.simulated_replies <= MAX_SIMULATED_REPLIES
    refunds = agent.payments.refunds()
    # The skillet, less the return fee; never the final-sale gift card, whatever was said.
    assert [r["request"]["amount_cents"] for r in refunds] == [3150]
    assert refunds[0]["request"]["lines"] == [
        {"line": "SKL-CI-10", "reason": "changed_mind", "amount_cents": 3150}]
    replies = [s.data for s in agent.store.steps(run.id) if s.kind == "reply"]
    assert all(r["simulated"] for r in replies) and "chargeback" in replies[0]["text"]
    notes = " ".join(s.data["text"] for s in agent.store.steps(run.id) if s.kind == "note")
    for flag in ("a chargeback", "a bad review", "a manager"):
        assert flag in notes
    # The persona requests count toward the run's requests and cost.
    persona = [b for b in model.server.requests if not b.get("tools")]
    agent_turns = [s for s in agent.store.steps(run.id) if s.kind == "response"]
    assert run.requests == len(agent_turns) + len(persona)


def test_persona_sees_only_the_emails(agent, model):
    run = agent.advance(agent.start_sample("angry").id)
    [approval] = agent.store.approvals("pending")
    agent.decide(approval.id, approve=True, by="Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    converse(agent, run.id)
    persona = [b for b in model.server.requests if not b.get("tools")]
    assert persona and all(b["store"] is False for b in persona)
    hidden = [s.data["text"] for s in agent.store.steps(run.id) if s.kind in ("reasoning", "note")]
    for body in persona:
        text = json.dumps(body["input"])
        assert "function_call" not in text and "check_refund_policy" not in text
        assert "max_refund" not in text and "re_" not in text
        assert not any(h in text for h in hidden)


def test_conversation_stops_after_the_reply_limit(agent):
    run = agent.advance(agent.start_sample("angry").id)
    [approval] = agent.store.approvals("pending")
    agent.decide(approval.id, approve=True, by="Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    run = converse(agent, run.id, max_replies=1)
    assert run.simulated_replies == 1 and run.status == RunStatus.DONE


def test_crash_between_simulated_reply_and_next_turn_resumes_cleanly(tmp_path):
    out = tmp_path / "out"
    assert run_cli(out, "angry").returncode == 0
    crashed = run_cli(out, "approve", "--as", "Dana Kim",
                      REFUND_AGENT_CRASH_AT="after_simulated_reply")
    assert crashed.returncode == -9, crashed.stderr
    resumed = run_cli(out, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "done" in resumed.stdout
    from refund_agent.desk.records import DeskStore

    store = DeskStore(out / "refund-agent.sqlite3")
    [run] = store.runs()
    replies = store.replies(run.id)
    texts = [r.text for r in replies]
    assert len(texts) == len(set(texts)) and all(r.response_id for r in replies)
    assert len([line for line in (out / "refunds.log").read_text().splitlines()]) == 1


def test_a_death_after_the_agents_answer_and_before_the_customer_writes_back_is_resumed(tmp_path):
    """The simulated customer answers within the same advance as the agent, under its lease:
    a process killed after the agent's answer is saved, before her reply, leaves the run
    working, and resume asks her. (The run used to end first and be taken again for her
    reply; a death in between ended the conversation there, and resume found nothing.)"""
    from refund_agent.desk.records import DeskStore

    def finish(out):
        assert run_cli(out, "angry").returncode == 0
        return run_cli(out, "approve", "--as", "Dana Kim")

    assert finish(tmp_path / "calm").returncode == 0
    calm = DeskStore(tmp_path / "calm" / "refund-agent.sqlite3")
    [expected] = calm.runs()
    calm.close()
    assert expected.simulated_replies >= 1

    out = tmp_path / "out"
    assert run_cli(out, "angry").returncode == 0
    command = ["approve", "--as", "Dana Kim"]
    for _ in range(12):   # each process dies at its first saved response; the next resumes
        killed = run_cli(out, *command, REFUND_AGENT_CRASH_AT="after_response")
        assert killed.returncode == -9, killed.stderr
        command = ["resume"]
        store = DeskStore(out / "refund-agent.sqlite3")
        [run] = store.runs()
        answered = not store.calls(run.last_response_id)
        if answered and run.simulated_replies < expected.simulated_replies:
            break   # killed between her email's answer and her next reply
        store.close()
    else:
        pytest.fail("no death between the agent's answer and the customer's reply")
    assert run.status == RunStatus.WORKING
    store.close()
    resumed = run_cli(out, "resume")
    assert resumed.returncode == 0 and "done" in resumed.stdout, resumed.stderr
    store = DeskStore(out / "refund-agent.sqlite3")
    [run] = store.runs()
    assert run.status == RunStatus.DONE
    assert run.simulated_replies == expected.simulated_replies
    assert len((out / "refunds.log").read_text().splitlines()) == 1
    assert len((out / "outbox.log").read_text().splitlines()) == len(
        (tmp_path / "calm" / "outbox.log").read_text().splitlines())
