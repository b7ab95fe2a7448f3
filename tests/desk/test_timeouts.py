"""The shop's timeout policy (issue 36, item 7): remind the owner after N hours, bring in a lead
after M, each step once per refund (in the audit and on the ticket) however many processes
apply it at once, by the database's clock; and waits said in people's units.

The invariant is a Hypothesis property: over generated histories of a refund ageing while two
processes apply the policy, each step happens at most once, and exactly once when it was due
at some application before the refund was decided."""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
from helpers.cli import DATA
from helpers.cli import run_forked as run_cli
from helpers.examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refund_agent.desk.owners import OwnerChange
from refund_agent.desk.records import DeskStore
from refund_agent.desk.shop import Shop
from refund_agent.desk.timeouts import TimeoutPolicy, human_duration
from refund_agent.desk.tools import IssueRefund, ShopTools
from refund_agent.models import RunStatus
from refund_agent.store import Store
from refund_agent.web import views

HOUR = 3600.0
POLICY = TimeoutPolicy(remind_after=4 * HOUR, escalate_after=24 * HOUR)
LEO = "leo.martins@example.com"


# Orders of the sample shop with a line each, to have several refunds waiting at once.
ORDERS = [("A1058", "BRD-OAK-M", LEO), ("A1043", "POUR-GLS-01", "maya.chen@example.com"),
          ("A1066", "SKL-CI-10", "priya.nair@example.com")]


def waiting_refund(store: Store, which: int = 0) -> tuple[str, str]:
    """A run with a refund waiting for a person: (run id, approval id)."""
    order, line, customer = ORDERS[which]
    run_id = store.create_run(sender=customer, sender_name="A customer", subject="Broken",
                              email="It arrived broken.").id
    lease = store.acquire(run_id, uuid.uuid4().hex)
    args = IssueRefund.model_validate(
        {"order_id": order, "amount": None, "summary": "Broken.",
         "lines": [{"line": line, "reason": "damaged"}]})
    store.record_response(lease, response_id=f"resp_{run_id}", steps=[], usage={},
                          replies_sent=[],
                          calls=[("call_1", "issue_refund", args.model_dump_json())])
    tools = ShopTools(Shop(DATA), customer, store.held_lines)
    approval = store.queue_approval(lease, response_id=f"resp_{run_id}", call_id="call_1",
                                    subject=order, title="Broken.", customer=customer,
                                    price=lambda held: tools.quote(args, held))
    assert not isinstance(approval, str), approval
    store.release(lease, RunStatus.WAITING)
    return run_id, approval.id


def age(store: Store, approval_id: str, hours: float) -> None:
    store.execute("UPDATE approvals SET requested_at = requested_at - ? WHERE id = ?",
                  (hours * HOUR, approval_id))


def test_waits_are_said_in_peoples_units():
    # Old code: a card with a 15-minute reminder said "Waiting 0 h for approval".
    assert views.reminder(0, 0.25, 20 * 60) == "Waiting 20 min for approval"
    assert views.reminder(0, 0.25, 10 * 60) is None
    assert (human_duration(40 * 60), human_duration(26 * HOUR), human_duration(72 * HOUR)) == (
        "40 min", "26 h", "3 days")
    assert POLICY.due(5 * HOUR, set()) == ["remind"]
    assert POLICY.due(30 * HOUR, {"remind"}) == ["escalate"]
    assert TimeoutPolicy(None, None).due(10**9, set()) == []


def test_the_owner_is_reminded_then_a_lead_brought_in_each_once(tmp_path):
    store = DeskStore(tmp_path / "refund-agent.sqlite3")
    store.add_account("Ana Ruiz", "approver", 3000, "scrypt$x", by="test")
    run_id, approval_id = waiting_refund(store)
    store.change_owner(OwnerChange(run_id, "claim", "Ana Ruiz", False))
    assert store.apply_timeouts(POLICY) == []
    age(store, approval_id, 5)
    assert store.apply_timeouts(POLICY) == [(approval_id, "remind")]
    assert store.apply_timeouts(POLICY) == []                       # once
    age(store, approval_id, 20)
    assert store.apply_timeouts(POLICY) == [(approval_id, "escalate")]
    assert store.apply_timeouts(POLICY) == []
    audit = [(e.event, e.actor, e.note) for e in store.audit() if e.event in
             ("reminded", "timed_out")]
    assert audit == [
        ("reminded", "timeouts", "waiting 5 h for a decision: reminded Ana Ruiz, who owns "
                                 "the ticket"),
        ("timed_out", "timeouts", "waiting 25 h for a decision: escalated to a lead")]
    (escalation,) = store.escalations(open_only=True)
    assert (escalation.kind, escalation.approval_id) == ("timeout", approval_id)
    titles = [b.title for b in views.timeline(store.steps(run_id)) if b.kind != "response"]
    assert "Reminder: waiting 5 h for a decision: reminded Ana Ruiz, who owns the ticket" \
        in titles
    assert "Escalated: waiting 25 h for a decision: escalated to a lead" in titles


def test_two_processes_applying_at_once_take_each_step_once(tmp_path):
    path = tmp_path / "refund-agent.sqlite3"
    store = DeskStore(path)
    approvals = [waiting_refund(store, i)[1] for i in range(3)]
    for approval_id in approvals:
        age(store, approval_id, 30)
    taken: list[tuple[str, str]] = []
    barrier = threading.Barrier(2)

    def apply() -> None:
        mine = DeskStore(path)
        barrier.wait()
        taken.extend(mine.apply_timeouts(POLICY))
        mine.close()
    threads = [threading.Thread(target=apply) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted((a, s) for a in approvals for s in ("remind", "escalate"))
    assert len([e for e in store.audit() if e.event in ("reminded", "timed_out")]) == 6
    assert len(store.escalations(open_only=True)) == 3


def test_a_decided_refund_takes_no_step(tmp_path):
    store = DeskStore(tmp_path / "refund-agent.sqlite3")
    _run, approval_id = waiting_refund(store)
    age(store, approval_id, 30)
    store.decide(approval_id, False, "Dana Kim", "Used")
    assert store.apply_timeouts(POLICY) == []


def test_the_terminal_applies_the_policy_from_the_shop(tmp_path):
    out = tmp_path / "out"
    assert run_cli(out).returncode == 0                    # Maya's $48.00 waits
    store = DeskStore(out / "refund-agent.sqlite3")
    (approval,) = store.approvals("pending")
    age(store, approval.id, 5)                             # shop.json: remind after 4 h
    first = run_cli(out, "expire")
    assert first.returncode == 0 and f"Timeout policy: remind on {approval.id}." in first.stdout
    again = run_cli(out, "expire")
    assert "Timeout policy" not in again.stdout
    shown = run_cli(out, "show", approval.run_id).stdout
    assert "!! Reminder: waiting 5 h for a decision and nobody owns the ticket" in shown


_SHARED: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    if "dir" in _SHARED:
        shutil.rmtree(_SHARED.pop("dir"), ignore_errors=True)


@settings(max_examples=examples(40, fast=15), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(st.tuples(st.floats(0, 12), st.booleans(), st.booleans()),
                        min_size=1, max_size=8),
       decide_at=st.one_of(st.none(), st.integers(0, 7)))
def test_each_timeout_step_happens_at_most_once_per_approval(history, decide_at):
    if "dir" not in _SHARED:
        _SHARED["dir"] = Path(tempfile.mkdtemp(prefix="timeouts-"))
    path = _SHARED["dir"] / "refund-agent.sqlite3"
    one, other = DeskStore(path), DeskStore(path)
    try:
        _run, approval_id = waiting_refund(one)
        waited, due = 0.0, set[str]()
        decided = False
        for i, (hours, by_other, twice) in enumerate(history):
            if decide_at == i and not decided:
                one.decide(approval_id, False, "Dana Kim", "No")
                decided = True
            age(one, approval_id, hours)
            waited += hours * HOUR
            if not decided:
                due |= set(POLICY.due(waited, set()))
            for store in (other if by_other else one,) + ((one, other) if twice else ()):
                store.apply_timeouts(POLICY)
        steps = [r[0] for r in one._read(
            "SELECT step FROM timeout_steps WHERE approval_id = ?", (approval_id,))]
        audited = [e.event for e in one.audit() if e.approval_id == approval_id
                   and e.event in ("reminded", "timed_out")]
        assert sorted(steps) == sorted(set(steps)) == sorted(due)
        assert len(audited) == len(steps)
        if not decided:   # the next history's refund holds the same line
            one.decide(approval_id, False, "Dana Kim", "No")
    finally:
        one.close()
        other.close()
