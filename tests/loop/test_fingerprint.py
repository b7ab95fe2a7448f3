"""What you see is what you sign: an approval's fingerprint covers everything a reviewer is
shown, and the store decides only the approval whose fingerprint the decision names."""

from __future__ import annotations

import pytest
from helpers.credit import ANA, EMAIL, CreditDesk
from helpers.process import DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from refund_agent import AlreadyDecided, Approval, DecisionRefused, NotFound, Settings
from refund_agent.examples import PayablesAgent

# Two agents of one's own, neither the refund desk: each with a customer whose email it proposes
# an effect for, and what it has done so far (the desk's own: tests/desk, tests/cli).
AGENTS = {
    "payables": (PayablesAgent, "billing@acme-tools.example", "Please pay invoice INV-2041.",
                 lambda agent: agent.transfers_sent()),
    "credit": (CreditDesk, ANA, EMAIL, lambda agent: agent.credits()),
}

BASE = {"id": "run_1-call-1", "run_id": "run_1", "response_id": "resp_1", "call_id": "call-1",
        "order_id": "A1043", "amount_cents": 4800, "proposed_cents": 4800,
        "summary": "Refund the cracked coffee maker", "customer": "maya.chen@example.com",
        "status": "pending", "requested_at": 1.0, "requested_pid": 1, "decided_by": None,
        "decided_at": None, "decided_pid": None, "note": None,
        "lines": [{"line": "POUR-GLS-01", "name": "Pour-over coffee maker", "reason": "damaged",
                   "amount_cents": 4800, "allowed_cents": 4800, "fee_cents": 0,
                   "decision": None, "units": 1, "quantity": 1}]}
SHOWN = {"order_id": st.text(min_size=1, max_size=12), "summary": st.text(max_size=40),
         "customer": st.emails(), "proposed_cents": st.integers(0, 10**9)}
LINE_SHOWN = {"line": st.text(min_size=1, max_size=12), "name": st.text(max_size=20),
              "reason": st.sampled_from(["damaged", "changed_mind", "shipping"]),
              "amount_cents": st.integers(0, 10**7), "units": st.integers(1, 50)}


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_change_to_what_a_reviewer_sees_changes_the_fingerprint(data):
    before = Approval.model_validate(BASE)
    if data.draw(st.booleans(), label="a line field"):
        field = data.draw(st.sampled_from(sorted(LINE_SHOWN)), label="field")
        value = data.draw(LINE_SHOWN[field], label="value")
        changed = {**BASE, "lines": [{**BASE["lines"][0], field: value}]}
        same = value == BASE["lines"][0][field]
    else:
        field = data.draw(st.sampled_from(sorted(SHOWN)), label="field")
        value = data.draw(SHOWN[field], label="value")
        changed, same = {**BASE, field: value}, value == BASE[field]
    after = Approval.model_validate(changed)
    assert (after.fingerprint == before.fingerprint) == same


def test_what_a_reviewer_does_not_see_leaves_it_alone():
    """The decision's own fields change as it is decided; the fingerprint is of the proposal."""
    decided = {**BASE, "status": "approved", "decided_by": "Dana Kim", "decided_at": 9.0}
    assert Approval.model_validate(decided).fingerprint == Approval.model_validate(BASE).fingerprint


def _agent(name: str, output):
    made, sender, email, done = AGENTS[name]
    agent = made(Settings(api_key="", data_dir=DATA, output_dir=output, max_retries=2,
                          timeout=30.0))
    return agent, agent.start(sender, email), done


@pytest.mark.parametrize("name", sorted(AGENTS))
@settings(max_examples=25, deadline=None)
@given(wrong=st.text(alphabet="0123456789abcdef", min_size=1, max_size=16))
def test_a_decision_naming_another_fingerprint_is_refused_and_changes_nothing(tmp_path_factory,
                                                                              name, wrong):
    agent, run, done = _agent(name, tmp_path_factory.mktemp("fp") / "output")
    agent.advance(run.id)
    (pending,) = agent.store.approvals("pending")
    if wrong == pending.fingerprint:
        return
    for attempt in (lambda: agent.approve(pending.id, wrong, by="Dana Kim"),
                    lambda: agent.reject(pending.id, wrong, by="Dana Kim", note="No."),
                    lambda: agent.ask(pending.id, "Dana Kim", "Which?", fingerprint=wrong)):
        with pytest.raises(DecisionRefused, match="changed since it was shown"):
            attempt()
    assert agent.store.approval(pending.id).status == "pending"
    assert [e.event for e in agent.store.audit()].count("refused") == 3
    agent.approve(pending.id, pending.fingerprint, by="Dana Kim")
    with pytest.raises(AlreadyDecided):
        agent.approve(pending.id, pending.fingerprint, by="Lee Park")
    with pytest.raises(NotFound):
        agent.approve("run_nope-call-0", pending.fingerprint, by="Dana Kim")
    assert done(agent) == []   # decided, not yet carried out: nothing done on a refusal


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_stale_fingerprint_is_refused_and_nothing_is_done(tmp_path, name):
    """The proposal as stored changes under the reviewer after it was shown: their decision
    names what they saw and is refused (audited); the run is carried out only on what is
    approved as it stands."""
    agent, run, done = _agent(name, tmp_path / "output")
    agent.advance(run.id)
    (pending,) = agent.store.approvals("pending")
    shown = pending.fingerprint
    agent.store.execute("UPDATE approvals SET proposed_cents = proposed_cents * 10, "
                        "amount_cents = amount_cents * 10 WHERE id = ?", (pending.id,))
    with pytest.raises(DecisionRefused, match="changed since it was shown"):
        agent.approve(pending.id, shown, by="Dana Kim")
    assert agent.store.approval(pending.id).status == "pending"
    refused = [e for e in agent.store.audit() if e.event == "refused"]
    assert refused and "changed since it was shown" in refused[-1].note
    assert agent.advance(run.id).status == "waiting" and done(agent) == []
