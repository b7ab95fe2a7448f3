"""The second agent (refund_agent/examples/closure.py) on the refund desk's loop and store.

Driven by the offline stand-in from the tool declarations alone (offline_model/follower.py): it
pauses durably, is approved and resumed in another process, and closes the account exactly
once across a SIGKILL between closing and recording, and across a second approval. Its runs are
its own: kept in their own file by default, and where two agents share a store, the other one
(here the store-credit agent of tests/helpers/credit.py) leaves them alone. The refund desk
doing the same is tests/desk/test_foreign_runs.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from helpers.credit import CreditDesk
from helpers.process import process_env as cli_env

from refund_agent import AlreadyDecided, DecisionRefused, RunNotReady, RunStatus
from refund_agent.examples import ClosureAgent
from refund_agent.examples.closure import TOOLS
from refund_agent.models import ApprovalStatus
from refund_agent.tools import ToolKind

ANA = "ana.ruiz@example.com"
EMAIL = "Hi,\n\nPlease close my account AC1001, we are moving abroad.\n\nAna"

# Approves the run's pending closure (when asked) and advances the run, in a new process.
_RESUME = r"""
import json, sys
from refund_agent.examples import ClosureAgent
agent = ClosureAgent()
run_id, approve = sys.argv[1], sys.argv[2] == "approve"
if approve:
    (pending,) = agent.store.approvals("pending")
    agent.decide(pending.id, approve=True, by="Dana Kim", fingerprint=pending.fingerprint)
run = agent.advance(run_id)
sent = [body.get("previous_response_id") for body in agent.model.server.requests]
print(json.dumps({"status": run.status, "previous_response_ids": sent}))
"""


def _in_new_process(settings, run_id: str, approve: bool, **env: str):
    return subprocess.run([sys.executable, "-c", _RESUME, run_id,
                           "approve" if approve else "resume"],
                          env=cli_env(settings.output_dir, **env), capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def closer(settings, model) -> ClosureAgent:
    return ClosureAgent(settings, model=model)


def _waiting(closer: ClosureAgent) -> str:
    run = closer.start(ANA, EMAIL, sender_name="Ana Ruiz")
    assert closer.advance(run.id).status == RunStatus.WAITING
    return run.id


def test_tools_are_declared_not_named():
    assert TOOLS["lookup_account"].kind is ToolKind.READ_ONLY
    assert TOOLS["close_account"].needs_approval


def test_pauses_durably_then_approved_and_resumed_in_another_process(closer, settings):
    run_id = _waiting(closer)
    (pending,) = closer.store.approvals("pending")
    assert pending.order_id == "AC-1001" and pending.run_id == run_id
    assert closer.closed() == []                      # nothing happens while it waits
    done = _in_new_process(settings, run_id, approve=True)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["status"] == RunStatus.DONE
    # The new process continued the stored response; it did not resend the conversation.
    run = closer.store.run(run_id)
    assert answer["previous_response_ids"] and all(answer["previous_response_ids"])
    (closure,) = closer.closed()
    assert closure["idempotency_key"] == pending.id   # the call's key: run and call id
    assert closure["request"]["account_id"] == "AC-1001"
    outputs = [json.loads(c.output) for c in closer.store.calls_named("close_account")]
    assert [o["status"] for o in outputs] == ["closed"]
    assert run.last_response_id is not None
    assert closer.store.verify_audit() is None


def test_a_crash_after_closing_before_recording_closes_once(closer, settings):
    run_id = _waiting(closer)
    (pending,) = closer.store.approvals("pending")
    closer.decide(pending.id, approve=True, by="Dana Kim",
                  fingerprint=closer.store.approval(pending.id).fingerprint)
    crashed = _in_new_process(settings, run_id, approve=False,
                              REFUND_AGENT_CRASH_AT="after_closure")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(closer.closed()) == 1                  # closed, and the run never recorded it
    (call,) = closer.store.calls_named("close_account")
    assert call.output is None
    assert closer.advance(run_id).status == RunStatus.DONE   # picked up again
    assert len(closer.closed()) == 1                  # the same key: not closed twice
    (call,) = closer.store.calls_named("close_account")
    assert json.loads(call.output)["already_closed"] is True


def test_a_second_approval_closes_nothing_more(closer):
    run_id = _waiting(closer)
    (pending,) = closer.store.approvals("pending")
    closer.decide(pending.id, approve=True, by="Dana Kim",
                  fingerprint=closer.store.approval(pending.id).fingerprint)
    with pytest.raises(AlreadyDecided):
        closer.decide(pending.id, approve=True, by="Lee Park",
                      fingerprint=closer.store.approval(pending.id).fingerprint)
    assert closer.advance(run_id).status == RunStatus.DONE
    assert closer.advance(run_id).status == RunStatus.DONE   # a second resume: nothing to do
    assert len(closer.closed()) == 1


def test_a_rejection_closes_nothing(closer):
    run_id = _waiting(closer)
    (pending,) = closer.store.approvals("pending")
    closer.decide(pending.id, approve=False, by="Dana Kim", note="Balance still open",
                  fingerprint=closer.store.approval(pending.id).fingerprint)
    assert closer.advance(run_id).status == RunStatus.DONE
    assert closer.closed() == []
    assert closer.store.approval(pending.id).status is ApprovalStatus.REJECTED
    (call,) = closer.store.calls_named("close_account")
    assert json.loads(call.output)["status"] == "rejected"


def test_someone_elses_account_is_never_proposed(closer):
    run = closer.start("leo.martins@example.com", EMAIL)   # AC-1001 is Ana's
    assert closer.advance(run.id).status == RunStatus.DONE
    assert closer.store.approvals(None) == [] and closer.closed() == []
    note = [s.data["text"] for s in closer.store.steps(run.id) if s.kind == "note"]
    assert note and "No account AC-1001" in note[-1]


def _tool(name: str, description: str, **properties: dict) -> dict:
    return {"type": "function", "name": name, "description": description, "strict": True,
            "parameters": {"type": "object", "properties": properties,
                           "required": list(properties), "additionalProperties": False}}


def test_the_stand_in_follows_any_look_up_then_act_tools():
    """Tools it has never seen, in another domain: it reads them, not a sample."""
    from offline_model import brain

    tools = [_tool("find_subscription", "Look up a subscription by its number.",
                   sub={"type": "string", "description": "The number, for example SUB-20417."}),
             _tool("cancel_subscription", "Cancel a subscription; a person approves it first.",
                   sub={"type": "string", "description": "The number, for example SUB-20417."},
                   plan={"type": "string"}, why={"type": "string"})]
    email = {"type": "message", "role": "user",
             "content": "From: Bo <bo@example.com>\n\nPlease cancel sub-88812. Too pricey."}
    first = brain.respond([email], tools)
    assert first.calls == [("find_subscription", {"sub": "SUB-88812"})]
    looked = [email, {"type": "function_call", "call_id": "c1", "name": "find_subscription",
                      "arguments": '{"sub": "SUB-88812"}'},
              {"type": "function_call_output", "call_id": "c1",
               "output": '{"sub": "SUB-88812", "plan": "pro"}'}]
    second = brain.respond(looked, tools)
    assert second.calls == [("cancel_subscription", {"sub": "SUB-88812", "plan": "pro",
                                                     "why": "Please cancel sub-88812."})]
    # Without an identifier shaped like the example, it asks instead of guessing.
    vague = {**email, "content": "Please cancel my subscription."}
    assert brain.respond([vague], tools).calls == []


# -- a run is its maker's --------------------------------------------------------------------


class _SharedCloser(ClosureAgent):
    """The closure agent on the store-credit agent's store file, as two agents on one shared
    PostgreSQL store are (its name, "closure", is inherited)."""

    store_file = CreditDesk.store_file


def test_another_agent_leaves_a_waiting_closure_run_alone_and_the_closer_finishes_it(
        settings, model):
    """Two agents of one's own on one store: the store-credit agent can neither advance,
    continue, decide, ask about nor expire the closure agent's run, nor resume or claim it."""
    closer = _SharedCloser(settings, model=model)
    other = CreditDesk(settings, model=model)
    run_id = _waiting(closer)
    (pending,) = closer.store.approvals("pending")
    assert other.store.path == closer.store.path

    with pytest.raises(RunNotReady, match="made by the 'closure' agent: only that agent may "
                                          "advance it, not the 'store-credit' agent"):
        other.advance(run_id)
    with pytest.raises(RunNotReady, match="only that agent may continue it"):
        other.add_reply(run_id, "It is AC-1001, please hurry.")
    assert closer.store.replies(run_id) == []
    for attempt in (lambda: other.approve(pending.id, pending.fingerprint, by="Dana Kim"),
                    lambda: other.reject(pending.id, pending.fingerprint, by="Dana Kim",
                                         note="No."),
                    lambda: other.ask(pending.id, "Dana Kim", "Which account?",
                                      fingerprint=pending.fingerprint)):
        with pytest.raises(DecisionRefused, match="made by the 'closure' agent: only that "
                                                  "agent may decide it"):
            attempt()
    # Long overdue: the other agent's expiry leaves it to its own agent's.
    closer.store.execute("UPDATE approvals SET requested_at = requested_at - 100 * 86400")
    assert other.expire() == []
    assert other.resumable() == [] and other.claim() is None

    assert closer.store.run(run_id).status == RunStatus.WAITING
    assert closer.store.approval(pending.id).status is ApprovalStatus.PENDING
    assert closer.store.calls_named("close_account")[0].output is None
    assert [e.event for e in closer.store.audit()] == ["requested"]

    closer.store.execute("UPDATE approvals SET requested_at = requested_at + 100 * 86400")
    closer.approve(pending.id, pending.fingerprint, by="Dana Kim")
    assert other.resumable() == [] and other.foreign_runs() == {"closure": 1}
    assert closer.advance(run_id).status == RunStatus.DONE
    (closure,) = closer.closed()
    assert closure["request"]["account_id"] == "AC-1001"
