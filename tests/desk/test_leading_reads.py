"""The read-only calls a response starts with run before it is committed and are saved with it
(boundary 2): one transaction for the response and their outputs, the calls after the first
effect run after the commit as before, and a crash before the commit leaves nothing to undo.
Then the same rule over generated responses, with and without a death at a crash point."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# -- generated responses ---------------------------------------------------------------------

ESCALATE = ("escalate", {"kind": "manager", "reason": "She asks for a manager."})
BAD_ARGUMENTS = ("lookup_order", {"order": "A1043"})        # read-only, refused by its schema
UNKNOWN = ("refund_everything", {"order_id": "A1043"})       # no such tool
CALLS = {"lookup": LOOKUP, "policy": POLICY, "message": MESSAGE, "escalate": ESCALATE,
         "bad_arguments": BAD_ARGUMENTS, "unknown": UNKNOWN}
# What HOW-IT-WORKS.md says of each: a lookup may run before its response is committed;
# an escalation too, but what it writes must be saved before the next call runs; an email is
# an effect and runs after the commit; a call that cannot run is answered with its error.
READ_ONLY, STOPS_AFTER = {"lookup", "policy", "escalate", "bad_arguments"}, {"escalate"}


def _run_ahead(kinds: list[str]) -> int:
    """How many calls the documented rule saves with their response."""
    saved = 0
    for kind in kinds:
        if kind not in READ_ONLY:
            break
        saved += 1
        if kind in STOPS_AFTER:
            break
    return saved


def _generated(scripted, folder: Path, kinds: list[str], database_url: str = ""):  # noqa: ANN001
    """An agent with a store of its own (one per example) whose model answers Maya's email
    with one response making ``kinds``' calls, then a reply; and its brain and settings."""
    from refund_agent.config import Settings
    from refund_agent.desk import Agent

    made, brain, _server = scripted(Reply("Work.", calls=[CALLS[k] for k in kinds]),
                                    Reply("Done.", text="Hi Maya, here is where things stand."))
    settings_ = Settings(api_key="", data_dir=made.settings.data_dir, output_dir=folder,
                         database_url=database_url)
    return Agent(settings_, model=made.model), brain, settings_


def _check_answered_once(agent, brain, run, kinds: list[str]) -> None:  # noqa: ANN001
    """The run finished with each call of its generated response answered once, in the order
    written (its result step too), every output sent to the model, each email sent once and
    one open escalation if any was asked for."""
    assert run.status == RunStatus.DONE, (run.status, run.error)
    first = agent.store.calls(agent.store.transcript(run.id)[1].response_id)
    assert [c.name for c in first] == [CALLS[k][0] for k in kinds] and all(c.output for c in first)
    results = [s.data["call_id"] for s in agent.store.steps(run.id) if s.kind == "result"]
    assert results == [c.call_id for c in first]
    sent = [i["call_id"] for i in brain.seen[-1] if i.get("type") == "function_call_output"]
    assert sent == [c.call_id for c in first]
    assert len(agent.outbox.messages()) == kinds.count("message")
    open_escalations = agent.store.query(
        "SELECT COUNT(*) FROM escalations WHERE run_id = ? AND taken_by IS NULL", (run.id,))
    assert open_escalations[0][0] == ("escalate" in kinds)


@settings(max_examples=examples(40, fast=10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(sorted(CALLS)), min_size=1, max_size=6))
def test_any_response_runs_each_call_once_in_order_and_commits_as_the_rule_says(
        kinds, scripted, tmp_path_factory, monkeypatch):
    """One response with a generated list of calls (lookups, an email, escalations, bad
    arguments, a tool that does not exist), then a reply: each call is answered once, in the
    order written, the model is sent every output, effects happen once, and the commits are
    the lease, the response with the calls the rule lets run ahead, one per other call, and
    the last response."""
    agent, brain, _ = _generated(scripted, tmp_path_factory.mktemp("generated"), kinds)
    run = agent.start(MAYA, "My coffee maker arrived cracked. Order A1043.")
    with monkeypatch.context() as patched:
        opened = _count_transactions(agent.store, patched)
        run = agent.advance(run.id)
    _check_answered_once(agent, brain, run, kinds)
    assert len(opened) == 1 + 1 + (len(kinds) - _run_ahead(kinds)) + 1, (kinds, opened)


class _Died(BaseException):
    """The process died at a crash point (a BaseException: no ``except Exception`` takes it)."""


@pytest.mark.parametrize("engine", ["sqlite",
                                    pytest.param("postgresql", marks=pytest.mark.postgres)])
@settings(max_examples=examples(40, fast=10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(sorted(CALLS)), min_size=1, max_size=6),
       point=st.sampled_from(["after_response", "before_tool", "after_tool"]),
       nth=st.integers(1, 4))
def test_a_death_anywhere_in_a_generated_response_repeats_nothing_on_resume(
        engine, kinds, point, nth, scripted, tmp_path_factory, request):
    """The same generated responses, with the process dying at the ``nth`` time it reaches
    ``point`` (if it does), then resumed, on both engines: each call still answered once and in
    order, each email sent once, one escalation at most, and the model sent every output."""
    import uuid
    from unittest import mock

    from refund_agent import loop as loop_module
    from refund_agent.desk import Agent

    url = (request.getfixturevalue("pg_cluster").create(f"lr_{uuid.uuid4().hex[:12]}")
           if engine == "postgresql" else "")
    agent, brain, settings_ = _generated(scripted, tmp_path_factory.mktemp("generated"), kinds,
                                         url)
    reached = []

    def crash_point(name: str, _enabled: frozenset[str]) -> None:
        if name == point:
            reached.append(name)
            if len(reached) == nth:
                raise _Died(name)

    run = agent.start(MAYA, "My coffee maker arrived cracked. Order A1043.")
    resumed = Agent(settings_, model=agent.model)   # as a new process would
    try:
        with mock.patch.object(loop_module, "crash_point", crash_point):
            try:
                run = agent.advance(run.id)
            except _Died:
                run = resumed.advance(run.id)
        _check_answered_once(agent, brain, run, kinds)
    finally:
        resumed.store.close()
        agent.store.close()
