"""The read-only calls a response starts with run before it is committed and are saved with it
(boundary 2): one transaction for the response and their outputs, the calls after the first
effect run after the commit as before, and a crash before the commit leaves nothing to undo."""

from __future__ import annotations

import pytest

from offline_model import Reply
from refund_agent import RunStatus
from refund_agent.store import Output, Store

MAYA = "maya.chen@example.com"
LOOKUP = ("lookup_order", {"order_id": "A1043"})
POLICY = ("check_refund_policy", {"order_id": "A1043"})
MESSAGE = ("send_customer_message", {"message": "Hi Maya, we are looking into it."})


def _count_transactions(store: Store, monkeypatch) -> list[bool]:
    """Each write transaction the store opens from now on, as its ``durable`` flag."""
    opened: list[bool] = []
    tx = store._tx  # noqa: SLF001 - only counted

    def counted(durable: bool = True):
        opened.append(durable)
        return tx(durable)
    monkeypatch.setattr(store, "_tx", counted)
    return opened


def test_a_response_and_the_lookups_it_starts_with_are_one_commit(scripted, monkeypatch):
    agent, _brain, _server = scripted(Reply("Look.", calls=[LOOKUP, POLICY]),
                                      Reply("Done.", text="Hi Maya, all is in order."))
    run = agent.start(MAYA, "My coffee maker arrived cracked. Order A1043.")
    opened = _count_transactions(agent.store, monkeypatch)
    run = agent.advance(run.id)
    assert run.status == RunStatus.DONE and run.lease_pid is None
    # The lease, the first response with both outputs, the last response with the run's end.
    # (Before: the lease, the response, one output each, the last response, the release.)
    assert len(opened) == 3, opened
    assert opened[-1] is True   # the run's end is reported to people: synced
    first = agent.store.calls(agent.store.transcript(run.id)[1].response_id)
    assert [c.name for c in first] == ["lookup_order", "check_refund_policy"]
    assert all(c.output and "A1043" in c.output for c in first)
    kinds = [(s.kind, s.data.get("name")) for s in agent.store.steps(run.id)]
    results = [i for i, (kind, _) in enumerate(kinds) if kind == "result"]
    calls = [i for i, (kind, _) in enumerate(kinds) if kind == "call"]
    assert len(results) == 2 and max(calls) < min(results), kinds   # in the order they ran


def test_the_run_ahead_stops_at_the_first_call_with_an_effect(scripted, monkeypatch):
    agent, _brain, _server = scripted(Reply("Look, then write.", calls=[LOOKUP, MESSAGE, POLICY]),
                                      Reply("Done.", text="Sent."))
    run = agent.start(MAYA, "My coffee maker arrived cracked. Order A1043.")
    opened = _count_transactions(agent.store, monkeypatch)
    run = agent.advance(run.id)
    assert run.status == RunStatus.DONE
    # The lease; the response with the lookup's output, synced (it holds an email call); the
    # email's output; the policy check's output, after the email, in order; the last response.
    assert opened == [False, True, False, False, True], opened
    results = [s.data["name"] for s in agent.store.steps(run.id) if s.kind == "result"]
    assert results == ["lookup_order", "send_customer_message", "check_refund_policy"]
    assert len(agent.outbox.messages()) == 1


def test_a_lookup_that_repeats_a_call_id_is_answered_with_the_error_only(scripted):
    """Two lookups under one call id in one response: the first is saved with the output it
    ran ahead with, the second with the repeat's error, and nothing of its own output."""
    agent, _brain, _server = scripted()
    lease, run = agent.store.acquire_run(agent.start(MAYA, "Order A1043.").id, "t")
    arguments = '{"order_id": "A1043"}'
    ran = Output(arguments, [("result", {"call_id": "c1", "name": "lookup_order",
                                         "output": {"order_id": "A1043"}})])
    recorded = agent.store.record_response(
        lease, response_id="resp_1", steps=[], usage={}, replies_sent=[],
        calls=[("c1", "lookup_order", arguments), ("c1", "lookup_order", arguments)],
        outputs={"c1": ran})
    first, second = recorded.calls
    assert first.output == arguments and first.key is not None
    assert second.key is None and "repeats call id" in (second.output or "")
    results = [s.data["output"] for s in agent.store.steps(run.id) if s.kind == "result"]
    assert results[0] == {"order_id": "A1043"} and len(results) == 2
    assert "repeats call id" in results[1]["error"]
    assert [c.output for c in agent.store.calls("resp_1")] == [first.output, second.output]


def test_a_lookup_that_fails_before_the_commit_leaves_no_half_saved_response(scripted,
                                                                             monkeypatch):
    """The process dies (here: the tool raises) between the response and its commit: nothing
    of that response is stored, and the run continues from before it."""
    from refund_agent.desk.tools import ShopTools

    agent, _brain, _server = scripted(Reply("Look.", calls=[LOOKUP]))
    run = agent.start(MAYA, "My coffee maker arrived cracked. Order A1043.")

    def dies(self, args):
        raise RuntimeError("the process died here")
    monkeypatch.setattr(ShopTools, "lookup_order", dies)
    with pytest.raises(RuntimeError):
        agent.advance(run.id)
    run = agent.store.run(run.id)
    assert run.status == RunStatus.FAILED and run.last_response_id is None
    assert agent.store.query("SELECT COUNT(*) FROM calls WHERE run_id = ?", (run.id,))[0][0] == 0
    assert not [s for s in agent.store.steps(run.id) if s.kind in ("call", "result")]
