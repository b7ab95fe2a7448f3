"""Itemized refunds end to end: each order line is paid at most once, at what the policy allows.

These are the reproductions of the ways money leaked before refunds were itemized (a second
ticket for the same item, the angry sample approved again, one order id spelled five ways), each
now asserting that exactly what the policy allows is paid, once; plus the mixed request (one line
damaged, one returned) and a person approving only part of a refund. Everything goes through the
real openai SDK to the offline model, or a scripted one, and the terminal runs as new processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from offline_model.brain import Reply
from refund_agent.desk import Agent
from refund_agent.models import RunStatus

MAYA, PRIYA = "maya.chen@example.com", "priya.nair@example.com"
MIXED = ("Order A1043: the coffee maker arrived shattered, and honestly I also don't want the "
         "mugs anymore.")


def refunds(out: Path) -> list[dict]:
    path = out / "refunds.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def pending(out: Path) -> list[str]:
    return [line for line in run_cli(out, "queue").stdout.splitlines()
            if line.startswith("run_")]


def paid(out: Path) -> list[tuple[str, int, list[tuple[str, str, int]]]]:
    return [(r["request"]["order_id"], r["request"]["amount_cents"],
             [(x["line"], x["reason"], x["amount_cents"]) for x in r["request"]["lines"]])
            for r in refunds(out)]


def _ok(result) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


# -- the reproductions -------------------------------------------------------------------------

def test_the_cracked_skillet_sent_and_approved_twice_is_paid_once(tmp_path: Path):
    out = tmp_path / "output"
    ticket = ("send", "Order A1066: the cast iron skillet arrived cracked.", "--from", PRIYA)
    first = _ok(run_cli(out, *ticket))
    assert "Proposed refund $39.00 on A1066" in first
    _ok(run_cli(out, "approve", "--as", "Dana"))

    second = _ok(run_cli(out, *ticket))
    assert "Proposed refund" not in second and pending(out) == []
    assert "Cast iron skillet, 10 inch (refunded)" in second
    nothing = run_cli(out, "approve", "--as", "Dana")
    assert nothing.returncode == 4 and "Nothing is waiting for approval." in nothing.stderr

    # The skillet in full, once: no shipping (the gift card is final sale), no second record.
    assert paid(out) == [("A1066", 3900, [("SKL-CI-10", "damaged", 3900)])]
    assert _ok(run_cli(out, "audit", "--verify")).startswith("Audit log intact")


def test_the_angry_sample_approved_three_times_pays_its_skillet_once(tmp_path: Path):
    out = tmp_path / "output"
    for attempt in range(3):
        started = _ok(run_cli(out, "angry"))
        decided = run_cli(out, "approve", "--as", "Dana")
        if attempt == 0:
            assert "Proposed refund $31.50 on A1066" in started
            assert "Approved $31.50 for A1066" in _ok(decided)
        else:
            assert "Proposed refund" not in started
            assert decided.returncode == 4 and "Nothing is waiting" in decided.stderr
    # The skillet less the $7.50 return fee, once; never the final-sale gift card.
    assert paid(out) == [("A1066", 3150, [("SKL-CI-10", "changed_mind", 3150)])]
    assert sum(cents for _o, cents, _l in paid(out)) == 3150
    assert _ok(run_cli(out, "audit", "--verify")).startswith("Audit log intact")


SPELLINGS = ["#A1043", " A1043", "A1043 ", "a1043", "A 1043"]
COFFEE_MAKER = [{"line": "POUR-GLS-01", "reason": "damaged"}]


def test_one_order_spelled_five_ways_pays_each_line_once(scripted, settings):
    """Five tickets, each a model proposing the coffee maker under another spelling of A1043,
    each after the previous one was approved (the second also while the first still waited).
    The spelling is made canonical as the arguments are parsed, so the ledger sees one order:
    one approval reaches payment, every later request is refused with the reason."""

    def ticket(spelling: str) -> tuple[Agent, str, dict]:
        agent, _brain, _server = scripted(Reply(f"propose as {spelling!r}", calls=[(
            "issue_refund", {"order_id": spelling, "lines": COFFEE_MAKER, "amount": None,
                             "summary": "The coffee maker arrived cracked."})]))
        run = agent.advance(agent.start(MAYA, f"Order {spelling}: the coffee maker cracked.").id)
        (call,) = [c for s in agent.store.steps(run.id) if s.kind == "response"
                   for c in agent.store.calls(s.data["response_id"]) if c.name == "issue_refund"]
        return agent, run.id, json.loads(call.output) if call.output else {}

    first, first_run, output = ticket(SPELLINGS[0])
    assert output == {} and first.store.run(first_run).status == RunStatus.WAITING
    (approval,) = first.store.approvals("pending")
    assert approval.order_id == "A1043"

    _agent, _run, held = ticket(SPELLINGS[1])                   # while the first waits
    assert "already in a refund waiting for approval" in held["error"]
    first.decide(approval.id, True, "Dana",
                 fingerprint=first.store.approval(approval.id).fingerprint)
    assert first.advance(first_run).status == RunStatus.DONE

    for spelling in SPELLINGS[1:]:                              # after it was approved
        agent, run_id, refused = ticket(spelling)
        assert agent.store.run(run_id).status == RunStatus.DONE
        assert "Glass pour-over coffee maker (POUR-GLS-01) has already been refunded" in \
            refused["error"], spelling
        assert agent.store.approvals("pending") == []

    approvals = first.store.approvals(status=None)
    assert [(a.id, a.order_id, a.status) for a in approvals] == [(approval.id, "A1043",
                                                                   "approved")]
    assert paid(settings.output_dir) == [("A1043", 4800, [("POUR-GLS-01", "damaged", 4800)])]
    assert sum(cents for _o, cents, _l in paid(settings.output_dir)) <= 8095
    audit = first.store.audit()
    assert [e.event for e in audit] == ["requested", "refused", "approved", "issued"] + [
        "refused"] * 4
    assert {e.order_id for e in audit} == {"A1043"}             # one spelling in the ledger
    verified = run_cli(settings.output_dir, "audit", "--verify")
    assert verified.returncode == 0 and "Audit log intact: 8 entries" in verified.stdout


def test_a_mixed_request_proposes_each_line_with_its_own_reason(agent: Agent):
    run = agent.advance(agent.start(MAYA, MIXED).id)
    assert run.status == RunStatus.WAITING
    (approval,) = agent.store.approvals("pending")
    # The coffee maker in full (damaged); the mugs less the $7.50 return fee (a change of mind);
    # no shipping, since not every item arrived damaged.
    assert [(line.line, line.reason, line.amount_cents, line.fee_cents)
            for line in approval.lines] == [("POUR-GLS-01", "damaged", 4800, 0),
                                            ("MUG-STN-2", "changed_mind", 1850, 750)]
    assert approval.amount == 66.50 and approval.proposed_cents == 6650
    assert "SHIPPING" not in [line.line for line in approval.lines]
    (step,) = [s.data for s in agent.store.steps(run.id) if s.kind == "approval"]
    assert step["amount"] == 66.50 and step["lines"] == [
        {"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 4800},
        {"line": "MUG-STN-2", "reason": "changed_mind", "amount_cents": 1850}]


# -- a person approving part of a refund ----------------------------------------------------

def test_approving_only_some_lines_pays_those_and_frees_the_others(agent: Agent, model):
    run = agent.advance(agent.start(MAYA, MIXED).id)
    (approval,) = agent.store.approvals("pending")
    decided = agent.decide(approval.id, True, "Dana Kim", note="The mugs were used.",
                           keep=["POUR-GLS-01"],
                           fingerprint=agent.store.approval(approval.id).fingerprint)
    assert (decided.status, decided.amount_cents, decided.proposed_cents) == (
        "approved", 4800, 6650)
    assert [(line.line, line.decision) for line in decided.lines] == [
        ("POUR-GLS-01", "approved"), ("MUG-STN-2", "declined")]
    assert [line.line for line in decided.kept] == ["POUR-GLS-01"]
    assert [line.line for line in decided.declined] == ["MUG-STN-2"]
    assert list(agent.store.held_lines("A1043")) == ["POUR-GLS-01"]   # the mugs are free

    assert agent.advance(run.id).status == RunStatus.DONE
    # refunds.log: one record, the kept line only, at its amount.
    (refund,) = agent.payments.refunds()
    assert refund["request"]["amount_cents"] == 4800
    assert refund["request"]["lines"] == [
        {"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 4800}]

    # The function output the model received lists the declined line and the note.
    outputs = [json.loads(i["output"]) for body in model.server.requests
               for i in body["input"] if i.get("type") == "function_call_output"
               and i["call_id"] == approval.call_id]
    assert outputs, "the refund's output never reached the model"
    output = outputs[0]
    assert output["status"] == "refunded" and output["amount"] == 48.0
    assert [line["line"] for line in output["lines"]] == ["POUR-GLS-01"]
    assert output["declined"] == [{"line": "MUG-STN-2", "item": "Stoneware mugs, set of 2"}]
    assert output["note"] == "The mugs were used."

    # The audit's 'approved' entry records the edit; the timeline's decision step too.
    (approved,) = [e for e in agent.store.audit() if e.event == "approved"]
    assert approved.amount == 48.0 and approved.actor == "Dana Kim"
    assert approved.note == ("Approved 1 of 2 lines; declined MUG-STN-2 (Stoneware mugs, set "
                             "of 2). The mugs were used.")
    assert approved.lines == [{"line": "POUR-GLS-01", "reason": "damaged",
                               "amount_cents": 4800}]
    (issued,) = [e for e in agent.store.audit() if e.event == "issued"]
    assert issued.amount == 48.0 and issued.lines == approved.lines
    (decision,) = [s.data for s in agent.store.steps(run.id) if s.kind == "decision"]
    assert decision == {"approval_id": approval.id, "decision": "approved", "by": "Dana Kim",
                        "note": "The mugs were used.", "amount": 48.0,
                        "declined": ["MUG-STN-2"]}
    assert agent.store.verify_audit() is None

    # The customer hears what was refunded and that the mugs were not, with the note.
    body = agent.outbox.messages()[-1]["request"]["body"]
    assert "$48.00" in body and "$66.50" not in body
    assert "could not refund the stoneware mugs" in body and "The mugs were used." in body

    # The declined line is free again: a new ticket for the mugs is proposed.
    again = agent.advance(agent.start(MAYA, "Order A1043: I no longer want the mugs, they are "
                                            "unused.").id)
    assert again.status == RunStatus.WAITING
    (mugs,) = agent.store.approvals("pending")
    assert [(line.line, line.reason, line.amount_cents) for line in mugs.lines] == [
        ("MUG-STN-2", "changed_mind", 1850)]


def test_keeping_one_changed_mind_line_charges_it_the_whole_fee(agent: Agent):
    """The fee is charged once per refund: kept alone, a line carries all of it. The amount is
    re-quoted when the person decides, never taken from the proposal's share."""
    agent.advance(agent.start(MAYA, "Order A1043: I changed my mind about the coffee maker and "
                                    "the mugs, both unused. Please take them back.").id)
    (approval,) = agent.store.approvals("pending")
    assert [(line.line, line.reason) for line in approval.lines] == [
        ("POUR-GLS-01", "changed_mind"), ("MUG-STN-2", "changed_mind")]
    assert approval.amount_cents == 7400 - 750
    decided = agent.decide(approval.id, True, "Dana", keep=["POUR-GLS-01"],
                           fingerprint=agent.store.approval(approval.id).fingerprint)
    assert decided.amount_cents == 4800 - 750
    assert [(line.line, line.amount_cents, line.fee_cents) for line in decided.kept] == [
        ("POUR-GLS-01", 4050, 750)]
    agent.advance(approval.run_id)
    assert [r["request"]["amount_cents"] for r in agent.payments.refunds()] == [4050]


def test_keeping_part_of_an_all_damaged_refund_drops_the_shipping(agent: Agent, scripted):
    """Shipping comes only when every item is refunded as damaged: keep one item and the
    shipping line is declined with the other; refund the other later and it comes back."""
    everything = [{"line": "POUR-GLS-01", "reason": "damaged"},
                  {"line": "MUG-STN-2", "reason": "damaged"}]
    other, _brain, _server = scripted(Reply("all of it", calls=[("issue_refund", {
        "order_id": "A1043", "lines": everything, "amount": 80.95,
        "summary": "Both items arrived broken."})]))
    run = other.advance(other.start(MAYA, "Order A1043: everything arrived broken.").id)
    (approval,) = other.store.approvals("pending")
    assert [line.line for line in approval.lines] == ["POUR-GLS-01", "MUG-STN-2", "SHIPPING"]
    assert [line.line for line in approval.item_lines] == ["POUR-GLS-01", "MUG-STN-2"]
    decided = other.decide(approval.id, True, "Dana", keep=["POUR-GLS-01"],
                           note="The mugs arrived whole.",
                           fingerprint=other.store.approval(approval.id).fingerprint)
    assert decided.amount_cents == 4800
    assert [line.line for line in decided.declined] == ["MUG-STN-2", "SHIPPING"]
    other.advance(run.id)
    # The mugs, later, as damaged: now every item is refunded as damaged, so shipping is due.
    agent.advance(agent.start(MAYA, "Order A1043: the mugs arrived cracked after all.").id)
    (mugs,) = agent.store.approvals("pending")
    assert [(line.line, line.amount_cents) for line in mugs.lines] == [
        ("MUG-STN-2", 2600), ("SHIPPING", 695)]
    agent.decide(mugs.id, True, "Dana", fingerprint=agent.store.approval(mugs.id).fingerprint)
    agent.advance(mugs.run_id)
    assert [r["request"]["amount_cents"] for r in agent.payments.refunds()] == [4800, 3295]
    assert sum(r["request"]["amount_cents"] for r in agent.payments.refunds()) == 8095


@pytest.mark.parametrize(("keep", "message"), [
    ([], "Keep at least one of the proposed lines"),
    (["MUG-STN-2", "GIFT-50"], "GIFT-50 is not one of them"),
    (["SHIPPING"], "SHIPPING is not one of them"),
])
def test_keeping_lines_that_were_not_proposed_is_refused(agent: Agent, keep, message):
    from refund_agent.errors import DecisionRefused

    agent.advance(agent.start(MAYA, MIXED).id)
    (approval,) = agent.store.approvals("pending")
    with pytest.raises(DecisionRefused, match=message):
        agent.decide(approval.id, True, "Dana", keep=keep,
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.store.approval(approval.id).status == "pending"
    assert agent.payments.refunds() == []
