"""The policy is checked again when a person decides, not only when the agent proposed.

Between the proposal and the click the world can change: another run may refund the same
order, or the run's stored response may expire. Approving then must be refused with the reason,
and nothing may be half done: the approval stays pending (so someone can reject it with a note
the customer hears), no money moves, and the refusal is in the audit log.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import cli_env
from test_crash_matrix import record

from refund_agent import Agent
from refund_agent.errors import AlreadyDecided, DecisionRefused
from refund_agent.models import RunStatus


def _waiting(agent: Agent, sample: str = "damaged"):
    run = agent.advance(agent.start_sample(sample).id)
    assert run.status == RunStatus.WAITING
    (approval,) = [a for a in agent.store.approvals("pending") if a.run_id == run.id]
    return run, approval


def _audit(agent: Agent, approval_id: str) -> list[str]:
    return [e.event for e in agent.store.audit() if e.approval_id == approval_id]


def test_refunded_by_another_run_meanwhile_is_refused_on_approve(agent: Agent):
    first_run, first = _waiting(agent)
    second_run, second = _waiting(agent)        # the customer wrote twice about one order
    assert (first.order_id, first.amount) == (second.order_id, second.amount) == ("A1043", 48.0)

    agent.decide(first.id, True, "Dana")
    assert agent.advance(first_run.id).status == RunStatus.DONE

    with pytest.raises(DecisionRefused) as refused:
        agent.decide(second.id, True, "Sam")
    assert "at most $32.95" in str(refused.value)
    # Nothing half done: still pending, one refund in total, the refusal audited with its reason.
    assert agent.store.approval(second.id).status == "pending"
    assert len(agent.payments.refunds()) == 1
    assert _audit(agent, second.id) == ["requested", "refused"]
    assert "at most $32.95" in agent.store.audit()[-1].note
    assert agent.store.verify_audit() is None

    # The way out is a rejection, which the agent explains to the customer.
    agent.decide(second.id, False, "Sam", "We already refunded this on your other ticket.")
    assert agent.advance(second_run.id).status == RunStatus.DONE
    assert len(agent.payments.refunds()) == 1
    assert "already refunded this" in agent.outbox.messages()[-1]["request"]["body"]
    record("decision_recheck", case="refunded by another run", refused=1, refunds=1,
           half_executed=0)


def test_approved_elsewhere_but_not_yet_paid_counts_too(agent: Agent):
    """Run 1 is approved but its process died before paying; approving run 2 must still see it."""
    _first_run, first = _waiting(agent)
    _second_run, second = _waiting(agent)
    agent.decide(first.id, True, "Dana")        # the run has not continued: no refund yet
    assert agent.payments.refunds() == []
    with pytest.raises(DecisionRefused) as refused:
        agent.decide(second.id, True, "Sam")
    assert "at most $32.95" in str(refused.value)
    assert agent.store.approval(second.id).status == "pending"
    record("decision_recheck", case="approved elsewhere, not yet paid", refused=1, refunds=0,
           half_executed=0)


def _age(agent: Agent, approval_id: str, days: int) -> None:
    """Make an approval look as if it was requested ``days`` ago."""
    with sqlite3.connect(agent.settings.db_path) as db:
        db.execute("UPDATE approvals SET requested_at = ? WHERE id = ?",
                   (time.time() - days * 86400, approval_id))


def test_expired_stored_response_is_refused_on_approve(agent: Agent):
    run, approval = _waiting(agent)
    _age(agent, approval.id, days=31)
    with pytest.raises(DecisionRefused) as refused:
        agent.decide(approval.id, True, "Dana")
    assert "expired" in str(refused.value)
    assert agent.store.approval(approval.id).status == "pending"
    assert agent.payments.refunds() == []
    assert agent.store.run(run.id).status == RunStatus.WAITING
    assert _audit(agent, approval.id) == ["requested", "refused"]
    record("decision_recheck", case="stored response expired", refused=1, refunds=0,
           half_executed=0)


def test_a_refusal_does_not_count_as_the_decision(agent: Agent):
    """After a refused approve, the approval can still be decided, and a late click is told."""
    _run, approval = _waiting(agent)
    _age(agent, approval.id, days=31)
    with pytest.raises(DecisionRefused):
        agent.decide(approval.id, True, "Dana")
    agent.decide(approval.id, False, "Dana", "Too old; please open a new ticket.")
    with pytest.raises(AlreadyDecided, match="already rejected by Dana"):
        agent.decide(approval.id, True, "Sam")
    assert _audit(agent, approval.id) == ["requested", "refused", "rejected", "ignored"]


def test_if_the_policy_changed_after_approval_the_payment_is_not_made(agent: Agent,
                                                                       monkeypatch):
    """The last line of defence: the check repeated right before paying.

    Both approvals are forced through (as if the decision-time check had been skipped), so only
    the check before payment stands between the second one and an over-refund.
    """
    first_run, first = _waiting(agent)
    second_run, second = _waiting(agent)
    monkeypatch.setattr(agent, "approval_problem", lambda _a: None)
    agent.decide(first.id, True, "Dana")
    agent.decide(second.id, True, "Sam")
    assert agent.advance(first_run.id).status == RunStatus.DONE
    assert agent.advance(second_run.id).status == RunStatus.DONE
    refunds = agent.payments.refunds()
    assert [r["idempotency_key"] for r in refunds] == [first.id]
    assert _audit(agent, second.id)[-1] == "refused"
    (call,) = [c for c in agent.store.calls(second.response_id) if c.call_id == second.call_id]
    assert json.loads(call.output)["status"] == "not_issued"
    body = agent.outbox.messages()[-1]["request"]["body"]
    assert "refunded" not in body.lower() and "follow up" in body
    record("decision_recheck", case="policy changed between approval and payment", refused=1,
           refunds=1, half_executed=0)


_DECIDER = r"""
import json, sys
from refund_agent import Agent
from refund_agent.errors import RefundAgentError
agent = Agent()
for line in sys.stdin:
    approval_id, by = line.split()
    try:
        agent.decide(approval_id, True, by)
        print(json.dumps({"by": by, "ok": True}), flush=True)
    except RefundAgentError as exc:
        print(json.dumps({"by": by, "ok": False, "error": str(exc)}), flush=True)
"""


def test_two_approvals_on_one_order_approved_at_once(agent: Agent, settings):
    """Two people approve two different $48 proposals on one $80.95 order at the same moment.

    Only one fits the policy. Each round, two processes are released together (one line written
    to each one's stdin); the check and the decision must be one step, so at most one wins.
    """
    rounds = 12
    procs = [subprocess.Popen([sys.executable, "-c", _DECIDER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env=cli_env(settings.output_dir)) for _ in range(2)]
    over_approved = 0
    try:
        for i in range(rounds):
            pair = [_waiting(agent)[1], _waiting(agent)[1]]
            for proc, approval, by in zip(procs, pair, ("Dana", "Sam"), strict=True):
                proc.stdin.write(f"{approval.id} {by}-{i}\n")
            for proc in procs:
                proc.stdin.flush()
            results = [json.loads(proc.stdout.readline()) for proc in procs]
            won = [r for r in results if r["ok"]]
            statuses = [agent.store.approval(a.id).status for a in pair]
            over_approved += max(0, statuses.count("approved") - 1)
            assert statuses.count("approved") <= 1, (i, results)
            for r in results:
                if not r["ok"]:
                    assert "at most" in r["error"], r
            # Free the order for the next round (the runs are never advanced, so nothing was
            # paid): mark this round's proposals rejected straight in the database.
            db = sqlite3.connect(settings.db_path)
            db.execute("UPDATE approvals SET status = 'rejected', decided_by = 'reset'"
                       " WHERE status IN ('approved', 'pending')")
            db.commit()
            db.close()
            assert len(won) <= 1
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=30)
    record("decision_recheck", case="two approvals on one order at once", rounds=rounds,
           over_approved=over_approved)
