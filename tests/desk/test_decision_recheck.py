"""The policy is checked again when a person decides, not only when the agent proposed.

Between the proposal and the click the world can change: the shop's export may record a refund
made elsewhere, or the terms may change. Approving then must be refused with the reason, and
nothing may be half done: the approval stays pending (so someone can reject it with a note the
customer hears), no money moves, and the refusal is in the audit log. The run's stored response
expiring is not such a change: the run continues from its own transcript, so an approval older
than 30 days is decided like any other.

Another ticket for the same item cannot get that far: a refund waiting for approval reserves its
order lines, so a second proposal naming them is refused when it is made (these tests also show
the store's own guard, a unique index, holding when the code's check is skipped).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers.cli import DATA, cli_env
from helpers.crash import record

from offline_model.brain import Reply
from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.desk.tools import ShopTools
from refund_agent.errors import AlreadyDecided, DecisionRefused
from refund_agent.models import RunStatus, call_key
from refund_agent.providers.client import open_model

MAYA = "maya.chen@example.com"
COFFEE_MAKER = {"order_id": "A1043", "lines": [{"line": "POUR-GLS-01", "reason": "damaged"}],
                "amount": None, "summary": "Cracked carafe, refunded in full."}


def _waiting(agent: Agent, sample: str = "damaged"):
    run = agent.advance(agent.start_sample(sample).id)
    assert run.status == RunStatus.WAITING
    (approval,) = [a for a in agent.store.approvals("pending") if a.run_id == run.id]
    return run, approval


def _audit(agent: Agent, approval_id: str) -> list[str]:
    return [e.event for e in agent.store.audit() if e.approval_id == approval_id]


def _another_ticket(scripted, args: dict = COFFEE_MAKER) -> tuple[Agent, dict]:
    """A second ticket whose model proposes the refund whatever the policy facts say.

    (The offline model reads the facts and would not even try.) Returns the agent, sharing the
    store, and what the issue_refund call got back.
    """
    other, _brain, _server = scripted(Reply("propose it", calls=[("issue_refund", args)]))
    run = other.advance(other.start(MAYA, "Order A1043: the coffee maker cracked.").id)
    assert run.status == RunStatus.DONE, run.error
    (call,) = [c for s in other.store.steps(run.id) if s.kind == "response"
               for c in other.store.calls(s.data["response_id"]) if c.name == "issue_refund"]
    assert other.store.find_approval(call.key) is None      # nothing was queued
    return other, json.loads(call.output)


def test_another_ticket_for_a_held_or_refunded_item_is_refused_when_proposed(agent: Agent,
                                                                             scripted):
    """The customer wrote twice about one item. The old flow let both tickets propose $48 and
    refused the second only when a person approved it; now the first proposal reserves the line,
    so the second is refused at once, with the reason, and audited."""
    first_run, first = _waiting(agent)
    assert (first.order_id, first.amount) == ("A1043", 48.0)

    other, output = _another_ticket(scripted)
    assert "already in a refund waiting for approval" in output["error"]
    assert f"approval {first.id}" in output["error"]
    refused = agent.store.audit()[-1]
    assert (refused.event, refused.actor, refused.order_id) == ("refused", "agent", "A1043")
    assert refused.lines == [{"line": "POUR-GLS-01", "reason": "damaged"}]

    agent.decide(first.id, True, "Dana", fingerprint=agent.store.approval(first.id).fingerprint)
    assert agent.advance(first_run.id).status == RunStatus.DONE

    _other, output = _another_ticket(scripted)
    assert "has already been refunded" in output["error"]
    # One approval, one refund; every refusal audited with its reason, the chain intact.
    assert [a.id for a in agent.store.approvals(status=None)] == [first.id]
    assert len(agent.payments.refunds()) == 1
    assert [e.event for e in agent.store.audit()] == [
        "requested", "refused", "approved", "issued", "refused"]
    assert "has already been refunded" in agent.store.audit()[-1].note
    assert agent.store.verify_audit() is None
    record("decision_recheck", case="another ticket for a held or refunded item", refused=2,
           refunds=1, half_executed=0)


def test_approved_elsewhere_but_not_yet_paid_counts_too(agent: Agent, scripted):
    """Run 1 is approved but its process died before paying; run 2 must still see the line
    as refunded."""
    first_run, first = _waiting(agent)
    # The run has not continued: no refund yet.
    agent.decide(first.id, True, "Dana", fingerprint=agent.store.approval(first.id).fingerprint)
    assert agent.payments.refunds() == []
    _other, output = _another_ticket(scripted)
    assert "has already been refunded" in output["error"]
    assert f"approval {first.id}" in output["error"]
    assert len(agent.store.approvals(status=None)) == 1
    assert agent.advance(first_run.id).status == RunStatus.DONE
    assert [r["request"]["amount_cents"] for r in agent.payments.refunds()] == [4800]
    record("decision_recheck", case="approved elsewhere, not yet paid", refused=1, refunds=1,
           half_executed=0)


def _own_data(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA, tmp_path / "data"))


def _agent_on(data: Path, output: Path) -> Agent:
    """An agent as a new process would make it: it reads the data folder afresh."""
    settings = Settings(api_key="", data_dir=data, output_dir=output, max_retries=2,
                        timeout=30.0)
    return Agent(settings, model=open_model(settings))


def test_refunded_outside_the_desk_meanwhile_is_refused_on_approve(tmp_path: Path):
    """The shop's export now records a refund of the same line, made elsewhere after the
    proposal: approving must see it."""
    data, output = _own_data(tmp_path), tmp_path / "output"
    agent = _agent_on(data, output)
    run, approval = _waiting(agent)
    orders = json.loads((data / "orders.json").read_text())
    (maya,) = [o for o in orders["orders"] if o["order_id"] == "A1043"]
    maya["refunds"] = [{"days_ago": 0, "reason": "Refunded by phone.",
                        "lines": [{"line": "POUR-GLS-01", "reason": "damaged"}]}]
    (data / "orders.json").write_text(json.dumps(orders))

    approver = _agent_on(data, output)
    with pytest.raises(DecisionRefused) as refused:
        approver.decide(approval.id, True, "Sam",
                        fingerprint=approver.store.approval(approval.id).fingerprint)
    assert "has already been refunded (an earlier refund)" in str(refused.value)
    # Nothing half done: still pending, its line still held, no money, the refusal audited.
    assert approver.store.approval(approval.id).status == "pending"
    assert list(approver.store.held_lines("A1043")) == ["POUR-GLS-01"]
    assert approver.payments.refunds() == []
    assert _audit(approver, approval.id) == ["requested", "refused"]
    assert "already been refunded" in approver.store.audit()[-1].note
    assert approver.store.verify_audit() is None

    # The way out is a rejection, which the agent explains to the customer.
    approver.decide(approval.id, False, "Sam", "We already refunded this by phone.",
                    fingerprint=approver.store.approval(approval.id).fingerprint)
    assert approver.advance(run.id).status == RunStatus.DONE
    assert approver.payments.refunds() == []
    assert "already refunded this by phone" in approver.outbox.messages()[-1]["request"]["body"]
    for a in (agent, approver):
        a.model.server.close()
    record("decision_recheck", case="refunded outside the desk meanwhile", refused=1, refunds=0,
           half_executed=0)


def test_terms_that_now_pay_more_than_the_card_showed_are_refused(tmp_path: Path):
    """The return fee was lowered after the proposal: the kept lines would now pay more than
    the person was shown, so the approval is refused and the agent must propose again."""
    data, output = _own_data(tmp_path), tmp_path / "output"
    agent = _agent_on(data, output)
    run = agent.advance(agent.start(MAYA, "Order A1043: I changed my mind about the mugs, "
                                          "they are unused.").id)
    (approval,) = agent.store.approvals("pending")
    assert [(line.line, line.reason, line.amount_cents) for line in approval.lines] == [
        ("MUG-STN-2", "changed_mind", 1850)]
    shop = json.loads((data / "shop.json").read_text())
    shop["policy"]["return_fee"] = 5.0
    (data / "shop.json").write_text(json.dumps(shop))

    approver = _agent_on(data, output)
    with pytest.raises(DecisionRefused) as refused:
        approver.decide(approval.id, True, "Sam",
                        fingerprint=approver.store.approval(approval.id).fingerprint)
    assert "now come to $21.00, more than the $18.50 proposed" in str(refused.value)
    assert approver.store.approval(approval.id).status == "pending"
    assert approver.payments.refunds() == []
    assert _audit(approver, approval.id) == ["requested", "refused"]
    assert approver.store.run(run.id).status == RunStatus.WAITING
    for a in (agent, approver):
        a.model.server.close()
    record("decision_recheck", case="terms changed to pay more than proposed", refused=1,
           refunds=0, half_executed=0)


def _age(agent: Agent, approval_id: str, days: int) -> None:
    """Make an approval look as if it was requested ``days`` ago."""
    with sqlite3.connect(agent.settings.db_path) as db:
        db.execute("UPDATE approvals SET requested_at = ? WHERE id = ?",
                   (time.time() - days * 86400, approval_id))


def test_an_approval_older_than_the_stored_response_is_decided_like_any_other(agent: Agent):
    """31 days later the stored response is gone; the decision stands and the run finishes."""
    run, approval = _waiting(agent)
    _age(agent, approval.id, days=31)
    agent.model.server.advance_clock(days=31)
    decided = agent.decide(approval.id, True, "Dana",
                           fingerprint=agent.store.approval(approval.id).fingerprint)
    assert decided.status == "approved"
    done = agent.advance(run.id)
    assert done.status == RunStatus.DONE, done.error
    assert len(agent.payments.refunds()) == 1
    assert len(agent.outbox.messages()) == 1
    assert _audit(agent, approval.id) == ["requested", "approved", "issued"]
    assert [e.event for e in agent.store.audit() if e.run_id == run.id].count("resent") == 1
    record("decision_recheck", case="approved after the stored response expired", refused=0,
           refunds=1, half_executed=0)


def test_a_refusal_does_not_count_as_the_decision(agent: Agent):
    """After a refused approve, the approval can still be decided, and a late click is told."""
    _run, approval = _waiting(agent)
    with pytest.raises(DecisionRefused, match="approval limit"):
        agent.decide(approval.id, True, "Dana", limit_cents=1_000,
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.decide(approval.id, False, "Dana", "Above my limit; please open a new ticket.",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    with pytest.raises(AlreadyDecided, match="already rejected by Dana") as late:
        agent.decide(approval.id, True, "Sam",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    assert late.value.decided_at == agent.store.approval(approval.id).decided_at
    assert _audit(agent, approval.id) == ["requested", "refused", "rejected", "ignored"]
    # The rejection freed the line: a new ticket for the item can be proposed again.
    assert agent.store.held_lines("A1043") == {}
    _waiting(agent)


def test_if_the_checks_were_skipped_the_database_still_holds_each_line_once(agent: Agent,
                                                                            scripted,
                                                                            monkeypatch):
    """The last line of defence is the store itself.

    The pricing is forced to ignore the lines other refunds hold (as if the check inside the
    proposal's transaction had been skipped). The store's trigger on held units (a line's
    held units never past its quantity; schema 8) still refuses the second reservation, the
    whole transaction rolls back, and no money moves.
    (This replaces a check repeated right before paying: approved lines stay held until paid,
    so nothing in the store can take them in between.)
    """
    first_run, first = _waiting(agent)
    price = ShopTools.quote
    monkeypatch.setattr(ShopTools, "quote", lambda self, args, held=None: price(self, args, {}))
    other, _brain, _server = scripted(Reply("propose it", calls=[("issue_refund",
                                                                  COFFEE_MAKER)]))
    run = other.start(MAYA, "Order A1043: the coffee maker cracked.")
    with pytest.raises(Exception, match="units held beyond the line quantity"):
        other.advance(run.id)
    assert other.store.run(run.id).status == RunStatus.FAILED
    # Nothing half done: no second approval, no second 'requested' entry, the line held once.
    assert [a.id for a in agent.store.approvals(status=None)] == [first.id]
    assert [e.event for e in agent.store.audit()] == ["requested"]
    assert [h.by for h in agent.store.held_lines("A1043")["POUR-GLS-01"]] == [
        f"approval {first.id}"]
    agent.decide(first.id, True, "Dana", fingerprint=agent.store.approval(first.id).fingerprint)
    assert agent.advance(first_run.id).status == RunStatus.DONE
    assert [r["idempotency_key"] for r in agent.payments.refunds()] == [first.id]
    assert agent.store.verify_audit() is None
    record("decision_recheck", case="checks skipped: the store holds each line once", refused=1,
           refunds=1, half_executed=0)


_PROPOSER = r"""
import json, sys, uuid
from refund_agent import RunStatus
from refund_agent.desk import Agent
from refund_agent.turns import Waiting
agent = Agent()
print("ready", flush=True)
for line in sys.stdin:
    run_id, call_id = line.split()
    run = agent.store.run(run_id)
    (call,) = [c for c in agent.store.calls(run.last_response_id) if c.call_id == call_id]
    lease = agent.store.acquire(run_id, uuid.uuid4().hex)
    result = agent._run_call(run, lease, call)
    if isinstance(result, Waiting):
        assert result.released   # the proposal's own commit paused the run and let it go
        print(json.dumps({"call": call_id, "queued": True}), flush=True)
    else:
        agent.store.release(lease, RunStatus.DONE)
        print(json.dumps({"call": call_id, "queued": False, "output": json.loads(result)}),
              flush=True)
"""


def _proposal(agent: Agent) -> tuple[str, str]:
    """A run whose saved response proposes Maya's coffee-maker refund, not yet run."""
    run = agent.store.create_run(sender=MAYA, sender_name="Maya Chen", kind="damaged",
                                 subject="Coffee maker arrived cracked",
                                 email="My order A1043 arrived with the coffee maker cracked.")
    call_id = f"call_{uuid.uuid4().hex}"
    lease = agent.store.acquire(run.id, uuid.uuid4().hex)
    agent.store.record_response(lease, response_id=f"resp_{uuid.uuid4().hex}",
                                calls=[(call_id, "issue_refund", json.dumps(COFFEE_MAKER))],
                                steps=[], usage={}, replies_sent=[])
    agent.store.release(lease, RunStatus.WORKING)  # its process died before the call ran
    return run.id, call_id


def test_two_tickets_for_one_item_proposed_at_once_reserve_it_once(agent: Agent, settings):
    """Two processes run two tickets' proposals of the same $48 line at the same moment.

    Before refunds were itemized, both proposals were queued and the race was between two
    people approving them; now the race is the reservation itself. Each round, two processes
    are released together (one line written to each one's stdin); pricing and reserving must
    be one step, so exactly one proposal is queued and the other is refused with the reason.
    """
    rounds = 12
    procs = [subprocess.Popen([sys.executable, "-c", _PROPOSER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env=cli_env(settings.output_dir)) for _ in range(2)]
    over_approved = 0
    try:
        assert [proc.stdout.readline().strip() for proc in procs] == ["ready", "ready"]
        for i in range(rounds):
            pair = [_proposal(agent), _proposal(agent)]
            for proc, (run_id, call_id) in zip(procs, pair, strict=True):
                proc.stdin.write(f"{run_id} {call_id}\n")
            for proc in procs:
                proc.stdin.flush()
            results = [json.loads(proc.stdout.readline()) for proc in procs]
            queued = [r for r in results if r["queued"]]
            held = agent.store.held_lines("A1043")
            over_approved += max(0, len(queued) - 1)
            assert len(queued) == 1 and list(held) == ["POUR-GLS-01"], (i, results)
            (lost,) = [r for r in results if not r["queued"]]
            assert "already in a refund waiting for approval" in lost["output"]["error"], lost
            winner = call_key(*next(p for p in pair if p[1] == queued[0]["call"]))
            assert [h.by for h in held["POUR-GLS-01"]] == [f"approval {winner}"]
            # Free the line for the next round the way a person would: reject the winner.
            agent.decide(winner, False, "reset", f"Round {i} is over.",
                         fingerprint=agent.store.approval(winner).fingerprint)
        # Each round: the winner's request, then the loser's refusal (it waited for the
        # winner's transaction), then the reset.
        assert [e.event for e in agent.store.audit()] == ["requested", "refused",
                                                          "rejected"] * rounds
        assert agent.payments.refunds() == [] and agent.store.verify_audit() is None
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=30)
    record("decision_recheck", case="two tickets for one item proposed at once", rounds=rounds,
           over_approved=over_approved)
