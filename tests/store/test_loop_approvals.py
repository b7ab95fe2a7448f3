"""Boundaries 4 and 5 on the loop's own store, on both engines: a proposal with a subject, a
title and an amount is queued, refused when it changed, and decided, with no code of the
refund desk loaded or asked (its rules live in desk/records/approvals.py).

Before issue 44 the loop's store/approvals.py imported the desk's rules, policy and identity,
so opening the loop's store loaded the desk, and every decision ran the desk's checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from helpers.cli import PROJECT_ROOT

from refund_agent.errors import AlreadyDecided, DecisionRefused
from refund_agent.models import Proposal, RunStatus
from refund_agent.store import Store

# Run in a fresh interpreter: what it prints is what the loop's store did, and which of the
# desk's, the page's or the terminal's modules a proposal and its decision loaded.
SCRIPT = """
import json, sys
from refund_agent.models import Proposal, RunStatus
from refund_agent.store import Store

store = Store(sys.argv[1])
run = store.create_run(sender="lee@example.com", sender_name="Lee", subject="Credit",
                       email="Please credit my account.")
lease = store.acquire(run.id, "token")
queued = store.queue_approval(lease, response_id="resp_1", call_id="call_1", subject="acct-7",
                              title="Store credit of $12.50", customer=run.sender,
                              price=lambda held: Proposal(subject="acct-7", amount_cents=1250),
                              release=True)
decided = store.decide(queued.id, True, "Dana Kim", "fine", fingerprint=queued.fingerprint)
print(json.dumps({
    "status": decided.status, "amount_cents": decided.amount_cents,
    "run": store.run(run.id).status, "audit": [(e.event, e.amount) for e in store.audit()],
    "loaded": sorted(m for m in sys.modules
                     if m.split(".")[:2] in (["refund_agent", "desk"], ["refund_agent", "web"],
                                             ["refund_agent", "cli"]))}))
"""


def test_a_proposal_is_queued_and_decided_with_nothing_of_the_desk_loaded(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "loop.sqlite3")],
                         capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["loaded"] == []
    assert (seen["status"], seen["amount_cents"], seen["run"]) == ("approved", 1250,
                                                                   RunStatus.WAITING)
    assert seen["audit"] == [["requested", 12.5], ["approved", 12.5]]


@pytest.fixture
def store(tmp_path, backend) -> Store:
    out = tmp_path / "out"
    out.mkdir()
    backend.prepare(out)
    return Store(backend.url(out) if backend.postgres else out / "refund-agent.sqlite3")


def _proposed(store: Store, subject: str = "acct-7", amount_cents: int = 1250,
              lines: list | None = None):
    run = store.create_run(sender="lee@example.com", sender_name="Lee", subject="Credit",
                           email="Please credit my account.")
    lease = store.acquire(run.id, uuid.uuid4().hex)
    return run, store.queue_approval(
        lease, response_id="resp_1", call_id=f"call_{uuid.uuid4().hex}", subject=subject,
        title="Store credit", customer=run.sender, release=True,
        price=lambda held: Proposal(subject=subject, amount_cents=amount_cents,
                                    lines=lines or []))


def test_the_loops_store_holds_nothing_and_decides_what_was_declared(store):
    run, approval = _proposed(store)
    assert (approval.subject, approval.title, approval.lines) == ("acct-7", "Store credit", [])
    assert store.run(run.id).status == RunStatus.WAITING and store.run(run.id).lease_pid is None
    with pytest.raises(DecisionRefused, match="changed since it was shown"):
        store.decide(approval.id, True, "Dana Kim", None, fingerprint="0" * 16)
    decided = store.decide(approval.id, True, "Dana Kim", "ok", fingerprint=approval.fingerprint,
                           noun="store credit")
    assert (decided.status, decided.amount_cents, decided.decided_by) == ("approved", 1250,
                                                                          "Dana Kim")
    with pytest.raises(AlreadyDecided, match="This store credit was already approved"):
        store.decide(approval.id, False, "Lee Park", "no", noun="store credit")
    assert [(e.event, e.actor) for e in store.audit()] == [
        ("requested", "agent"), ("refused", "Dana Kim"), ("approved", "Dana Kim"),
        ("ignored", "Lee Park")]
    # The desk's rules are the desk store's arguments, not the loop's.
    with pytest.raises(TypeError):
        store.decide(approval.id, True, "Dana Kim", None, keep=["X"])  # type: ignore[call-arg]


def test_the_loops_store_refuses_a_proposal_with_lines_it_cannot_keep(store):
    """A proposal's lines are an agent's own records (the desk's store writes them): the
    loop's store refuses them rather than dropping them, and nothing is written."""
    with pytest.raises(TypeError, match="keeps no lines"):
        _proposed(store, lines=[{"line": "L1"}])
    assert store.approvals(status=None) == [] and store.audit() == []
    [run] = store.runs()
    assert run.status != RunStatus.WAITING
