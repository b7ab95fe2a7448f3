"""The refund desk leaves another agent's runs alone: the closure example
(refund_agent/examples/closure.py) on the desk's own store, where the desk's resume (its
terminal), worker, claim, expiry, decisions and hand-off refuse or skip its runs (issue 33,
item 5). The closure agent's own tests are tests/loop/test_second_agent.py; the same rule
between two agents that are not the desk is there too.
"""

from __future__ import annotations

import pytest
from helpers.cli import run_forked

from refund_agent import RunStatus
from refund_agent.desk import Agent
from refund_agent.errors import DecisionRefused, RunNotReady
from refund_agent.examples import ClosureAgent
from refund_agent.models import ApprovalStatus
from refund_agent.web.worker import Worker

ANA = "ana.ruiz@example.com"
EMAIL = "Hi,\n\nPlease close my account AC1001, we are moving abroad.\n\nAna"


@pytest.fixture
def closer(settings, model) -> ClosureAgent:
    return ClosureAgent(settings, model=model)


def _waiting(closer: ClosureAgent) -> str:
    run = closer.start(ANA, EMAIL, sender_name="Ana Ruiz")
    assert closer.advance(run.id).status == RunStatus.WAITING
    return run.id


# -- a run is its maker's --------------------------------------------------------------------


class _SharedCloser(ClosureAgent):
    """The closure agent on the refund desk's own store file, as two agents on one shared
    PostgreSQL store are (its name, "closure", is inherited)."""

    store_file = None


def test_the_closure_example_keeps_its_runs_out_of_the_desks_store(closer, settings, model):
    desk = Agent(settings, model=model)
    run_id = _waiting(closer)
    assert closer.store.path != desk.store.path
    assert desk.store.runs() == [] and closer.store.run(run_id).agent == "closure"


def test_the_desk_leaves_a_waiting_closure_run_alone_and_the_closer_finishes_it(settings, model):
    """Before: the desk's `resume --run` answered close_account with "There is no tool called
    'close_account'", the run ended done with nothing closed, its approval pending for ever;
    the desk's approve and expiry decided the closure as if it were a refund."""
    closer = _SharedCloser(settings, model=model)
    desk = Agent(settings, model=model)
    run_id = _waiting(closer)
    (pending,) = closer.store.approvals("pending")
    assert desk.store.path == closer.store.path

    resumed = run_forked(settings.output_dir, "resume", "--run", run_id)
    assert resumed.returncode == 1
    assert "made by the 'closure' agent" in resumed.stderr and "Traceback" not in resumed.stderr
    with pytest.raises(RunNotReady, match="made by the 'closure' agent: only that agent may "
                                          "advance it, not the 'refunds' agent"):
        desk.advance(run_id)
    with pytest.raises(RunNotReady, match="only that agent may continue it"):
        desk.add_reply(run_id, "It is AC-1001, please hurry.")
    assert closer.store.replies(run_id) == []
    for attempt in (lambda: desk.decide(pending.id, True, "Dana Kim",
                                        fingerprint=desk.store.approval(pending.id).fingerprint),
                    lambda: desk.decide(pending.id, False, "Dana Kim", note="No.",
                                        fingerprint=desk.store.approval(pending.id).fingerprint),
                    lambda: desk.ask(pending.id, "Dana Kim", "Which account?",
                                     fingerprint=desk.store.approval(pending.id).fingerprint),
                    lambda: desk.hand_off(pending.id, "Dana Kim")):
        with pytest.raises(DecisionRefused, match="made by the 'closure' agent: only that "
                                                  "agent may (decide|hand off) it"):
            attempt()
    # Long overdue: the desk's expiry leaves it to its own agent's.
    closer.store.execute("UPDATE approvals SET requested_at = requested_at - 100 * 86400")
    assert desk.expire() == []

    assert closer.store.run(run_id).status == RunStatus.WAITING
    assert closer.store.approval(pending.id).status is ApprovalStatus.PENDING
    assert closer.store.calls_named("close_account")[0].output is None
    assert [e.event for e in closer.store.audit()] == ["requested"]

    closer.decide(pending.id, approve=True, by="Dana Kim",
                  fingerprint=closer.store.approval(pending.id).fingerprint)
    assert closer.advance(run_id).status == RunStatus.DONE
    (closure,) = closer.closed()
    assert closure["request"]["account_id"] == "AC-1001"


def test_the_desks_resume_worker_and_claim_never_pick_up_a_closure_run(settings, model):
    """Two closure runs a resume would take: one decided while nobody ran it, one cut off
    before its first turn (working, no live owner). Before, the desk's resume, its page's
    worker at start-up and `refund-agent work` took them both."""
    closer = _SharedCloser(settings, model=model)
    desk = Agent(settings, model=model)
    decided = _waiting(closer)
    (pending,) = closer.store.approvals("pending")
    closer.decide(pending.id, approve=True, by="Dana Kim",
                  fingerprint=closer.store.approval(pending.id).fingerprint)
    orphaned = closer.start(ANA, EMAIL, sender_name="Ana Ruiz").id
    assert {r.id for r in closer.resumable()} == {decided, orphaned}

    assert desk.resumable() == [] and desk.claim() is None
    nothing = run_forked(settings.output_dir, "resume")
    assert nothing.returncode == 0 and "Nothing to resume." in nothing.stdout, nothing.stderr
    worker = Worker(desk)
    try:
        assert worker.start() == []
    finally:
        worker.shutdown()
    assert closer.store.run(decided).status == RunStatus.WAITING
    assert closer.store.run(orphaned).status == RunStatus.WORKING
    assert closer.store.calls_named("close_account")[0].output is None

    assert closer.claim() in (decided, orphaned)
    for run_id in (decided, orphaned):
        assert closer.advance(run_id).status in (RunStatus.DONE, RunStatus.WAITING)
    assert closer.store.run(decided).status == RunStatus.DONE and len(closer.closed()) == 1
