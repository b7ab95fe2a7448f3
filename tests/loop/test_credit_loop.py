"""The loop end to end on a small agent that is not the refund desk (tests/helpers/credit.py),
through the real openai SDK against the offline model: what tests/desk/test_agent.py,
test_caps.py, test_edges.py and test_leading_reads.py check of the loop on the desk's Agent,
here on an agent of one's own. (The desk's own rules stay with those files.)"""

from __future__ import annotations

import json
import os
import threading

import openai
import pytest
from helpers.credit import ANA, EMAIL, STRANGER, CreditDesk, InstantCredit

from offline_model import OfflineServer, Reply
from refund_agent import (
    AlreadyDecided,
    Cancel,
    DecisionRefused,
    ModelAccess,
    RunBusy,
    RunNotReady,
    RunStatus,
    Store,
)
from refund_agent.intake import MAX_NOTE_CHARS
from refund_agent.turns import MAX_MODEL_TEXT_CHARS

LOOKUP = ("lookup_account", {"account_id": "CR-1001"})
ISSUE = ("issue_credit", {"account_id": "CR-1001", "amount_cents": 2500})


def _audit(desk: CreditDesk) -> list[str]:
    return [e.event for e in desk.store.audit()]


def _waiting(desk: CreditDesk):
    run = desk.advance(desk.start(ANA, EMAIL).id)
    assert run.status == RunStatus.WAITING
    (pending,) = desk.store.approvals("pending")
    return run, pending


# -- the stored-response protocol, the model's failures ----------------------------------------

def test_requests_follow_the_stored_response_protocol(credit, model):
    run, _pending = _waiting(credit)
    first, *later = model.server.requests
    assert [i["role"] for i in first["input"]] == ["system", "user"]
    assert "previous_response_id" not in first and "instructions" not in first
    for body in model.server.requests:
        # Nobody watched this advance: each reply was asked for whole, not streamed.
        assert body["store"] is True and body["stream"] is False
        assert body["parallel_tool_calls"] is False and body["prompt_cache_key"] == run.id
    for body in later:
        assert body["previous_response_id"]
        assert [i["type"] for i in body["input"]] == ["function_call_output"]
    chain = [s.data["response_id"] for s in credit.store.steps(run.id) if s.kind == "response"]
    assert [b["previous_response_id"] for b in later] == chain[:-1]


def test_a_watched_advance_streams_and_ends_as_an_unwatched_one(credit, model):
    watched = []
    run = credit.advance(credit.start(ANA, EMAIL).id, watched.append)
    assert [b["stream"] for b in model.server.requests] == [True] * run.requests
    kinds = {e.kind for e in watched}
    assert {"call", "arguments", "step"} <= kinds, kinds   # deltas as they came, then steps
    assert [e.text for e in watched if e.kind == "call"] == ["lookup_account", "issue_credit"]
    unwatched = credit.advance(credit.start(ANA, EMAIL).id)
    assert [b["stream"] for b in model.server.requests[run.requests:]] == [False] * run.requests
    assert (unwatched.status, unwatched.requests) == (run.status, run.requests)
    assert [s.kind for s in credit.store.steps(unwatched.id)] == \
        [s.kind for s in credit.store.steps(run.id)]


def test_rate_limit_before_the_answer_is_retried(credit, model):
    model.server.inject("429", "500")
    run = credit.advance(credit.start(ANA, EMAIL).id)
    assert run.status == RunStatus.WAITING
    assert len(model.server.requests) == run.requests + 2   # two refused attempts first


def test_rate_limit_past_the_retry_budget_fails_resumably(credit, model):
    model.server.inject("429", "429", "429")  # max_retries=2 in the test settings
    model.client.patience = 0.0  # REFUND_AGENT_RATE_PATIENCE=0: no waiting past the retries
    run = credit.advance(credit.start(ANA, EMAIL).id)
    assert run.status == RunStatus.FAILED and "rate-limiting" in run.error
    assert credit.advance(run.id).status == RunStatus.WAITING


@pytest.mark.parametrize("watched", [False, True], ids=["whole", "streamed"])
def test_a_response_that_fails_while_generating_fails_the_run_resumably(credit, model, watched):
    model.server.inject("failed")   # status "failed" whole; response.failed streamed
    run = credit.advance(credit.start(ANA, EMAIL).id, [].append if watched else None)
    assert [b["stream"] for b in model.server.requests] == [watched]
    assert run.status == RunStatus.FAILED and run.last_response_id is None, run.error
    assert "failed" in run.error.lower(), run.error
    assert credit.advance(run.id).status == RunStatus.WAITING


@pytest.fixture
def slow(settings):
    """A credit desk on a stand-in that takes 1 s a reply, and that stand-in."""
    server = OfflineServer(settings.output_dir / "offline-model.sqlite3", latency=1.0).start()
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    yield CreditDesk(settings, model=ModelAccess(client, "offline", server)), server
    server.close()


@pytest.mark.parametrize("watched", [True, False], ids=["mid-stream", "awaiting a whole reply"])
def test_a_stop_uses_nothing_from_the_reply_and_the_resume_runs_nothing_twice(slow, watched):
    desk, server = slow
    run = desk.start(ANA, EMAIL)
    cancel = Cancel()

    def on_event(event):
        if event.kind == "reasoning":
            cancel.set()

    if not watched:   # nobody watches: the reply is asked whole, and the stop comes meanwhile
        threading.Timer(0.3, cancel.set).start()
    stopped = desk.advance(run.id, on_event if watched else None, cancel)
    assert [b["stream"] for b in server.requests] == [watched]
    assert stopped.status == RunStatus.STOPPED   # within the first response
    assert stopped.last_response_id is None      # the stopped response was never recorded
    server.latency = 0.0
    assert desk.advance(run.id).status == RunStatus.WAITING
    calls = [s.data["call_id"] for s in desk.store.steps(run.id) if s.kind == "call"]
    assert len(calls) == len(set(calls)) == 2    # the lookup, the proposal: once each


def test_a_wrong_base_url_is_not_reported_as_an_expired_response(credit):
    run = credit.start(ANA, EMAIL)
    server = credit.model.server
    credit.model.client = credit.model.client.with_options(
        base_url=server.base_url.replace("/v1", "/nowhere"))
    done = credit.advance(run.id)
    assert done.status == RunStatus.FAILED
    assert "404" in done.error and "REFUND_AGENT_BASE_URL" in done.error
    assert "expire" not in done.error


def test_the_model_note_is_cut_with_a_marker(scripted_credit):
    desk, _brain, _server = scripted_credit(Reply("x" * 50_000, "n" * 3_000_000))
    run = desk.advance(desk.start(ANA, EMAIL).id)
    assert run.status == RunStatus.DONE
    steps = {s.kind: s.data for s in desk.store.steps(run.id)}
    note, reasoning = steps["note"]["text"], steps["reasoning"]["text"]
    assert note.startswith("n" * MAX_MODEL_TEXT_CHARS)
    assert note.endswith("[... 2,990,000 more characters not kept]")
    assert reasoning.endswith("[... 40,000 more characters not kept]")


# -- what comes in: emails, replies, decisions -------------------------------------------------

def test_bad_emails_are_refused_before_any_request(credit, model):
    with pytest.raises(RunNotReady, match="not an email address"):
        credit.start("nobody", "Credit please")
    with pytest.raises(RunNotReady, match="empty"):
        credit.start("a@example.com", "   ")
    with pytest.raises(RunNotReady, match="limit"):
        credit.start("a@example.com", "x" * 50_000)
    assert credit.store.runs() == [] and model.server.requests == []


def test_replies_to_unfinished_runs_are_refused_and_not_stored(credit):
    run, _pending = _waiting(credit)
    with pytest.raises(RunNotReady, match="not saved"):
        credit.add_reply(run.id, "Hello?")
    assert credit.store.replies(run.id) == []


def test_a_stranger_is_credited_nothing(credit):
    run = credit.advance(credit.start(STRANGER, EMAIL).id)
    assert run.status == RunStatus.DONE
    assert credit.store.approvals(None) == [] and credit.credits() == []


def test_second_decision_is_refused_and_audited(credit):
    _run, pending = _waiting(credit)
    credit.approve(pending.id, pending.fingerprint, by="Dana Kim")
    with pytest.raises(AlreadyDecided, match="already approved by Dana Kim"):
        credit.reject(pending.id, pending.fingerprint, by="Sam Lee", note="no")
    assert _audit(credit) == ["requested", "approved", "ignored"]
    assert credit.store.approval(pending.id).decided_by == "Dana Kim"


@pytest.mark.parametrize("by,approve,note,message", [
    ("", True, None, "approver's name"), ("  ", True, None, "approver's name"),
    ("Dana", False, "", "rejection needs a note"),
])
def test_decision_input_is_checked(credit, by, approve, note, message):
    _run, pending = _waiting(credit)
    with pytest.raises(DecisionRefused, match=message):
        credit.decide(pending.id, approve, by=by, note=note, fingerprint=pending.fingerprint)
    assert credit.store.approval(pending.id).status == "pending"


@pytest.mark.parametrize("what", ["note", "question"])
def test_a_persons_over_long_note_is_refused_and_loses_nothing(credit, what):
    _run, pending = _waiting(credit)
    long = "w" * (MAX_NOTE_CHARS + 1)
    with pytest.raises(DecisionRefused, match=f"The {what} is 2,001 characters long; keep it "
                                              f"to 2,000 or fewer."):
        if what == "note":
            credit.reject(pending.id, pending.fingerprint, by="Lee Park", note=long)
        else:
            credit.ask(pending.id, "Lee Park", long, fingerprint=pending.fingerprint)
    assert [a.id for a in credit.store.approvals("pending")] == [pending.id]
    credit.reject(pending.id, pending.fingerprint, by="Lee Park", note="w" * MAX_NOTE_CHARS)
    assert credit.store.approvals("pending") == []


# -- one owner, one winner -----------------------------------------------------------------------

def test_two_threads_cannot_advance_one_run(credit):
    run = credit.start(ANA, EMAIL)
    lease = credit.store.acquire(run.id, "someone-else")  # this process, another token
    with pytest.raises(RunBusy, match=str(os.getpid())):
        credit.advance(run.id)
    credit.store.release(lease, RunStatus.STOPPED)
    assert credit.advance(run.id).status == RunStatus.WAITING


def test_concurrent_decisions_in_threads_yield_one_winner(credit):
    _run, pending = _waiting(credit)
    results: list[str] = []
    barrier = threading.Barrier(6)

    def decide(i: int) -> None:
        barrier.wait()
        try:
            credit.decide(pending.id, i % 2 == 0, by=f"person {i}", note="n",
                          fingerprint=pending.fingerprint)
            results.append("won")
        except AlreadyDecided:
            results.append("lost")

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["lost"] * 5 + ["won"]
    assert _audit(credit).count("ignored") == 5


# -- boundary 2: a response and the lookups it starts with ---------------------------------------

def _count_transactions(store: Store, monkeypatch) -> list[bool]:
    """Each write transaction the store opens from now on, as its ``durable`` flag."""
    opened: list[bool] = []
    tx = store._tx  # noqa: SLF001 - only counted

    def counted(durable: bool = True):
        opened.append(durable)
        return tx(durable)
    monkeypatch.setattr(store, "_tx", counted)
    return opened


def test_a_response_and_the_lookups_it_starts_with_are_one_commit(scripted_credit, monkeypatch):
    desk, _brain, _server = scripted_credit(Reply("Look.", calls=[LOOKUP, LOOKUP]),
                                            Reply("Done.", text="Hi Ana, you are owed $25."))
    run = desk.start(ANA, EMAIL)
    opened = _count_transactions(desk.store, monkeypatch)
    run = desk.advance(run.id)
    assert run.status == RunStatus.DONE and run.lease_pid is None
    # The lease, the first response with both outputs, the last response with the run's end.
    assert len(opened) == 3, opened
    assert opened[-1] is True
    first = desk.store.calls(desk.store.transcript(run.id)[1].response_id)
    assert [c.name for c in first] == ["lookup_account", "lookup_account"]
    assert all(c.output and "CR-1001" in c.output for c in first)


def _look_credit_look(scripted_credit, monkeypatch):
    """InstantCredit answering one response of a lookup, a credit (an effect), a lookup."""
    desk, _brain, _server = scripted_credit(Reply("Look, credit, look.",
                                                  calls=[LOOKUP, ISSUE, LOOKUP]),
                                            Reply("Done.", text="Credited."),
                                            agent=InstantCredit)
    run = desk.start(ANA, EMAIL)
    opened = _count_transactions(desk.store, monkeypatch)
    return desk, desk.advance(run.id), opened


def test_the_run_ahead_stops_at_the_first_call_with_an_effect(scripted_credit, monkeypatch):
    desk, run, opened = _look_credit_look(scripted_credit, monkeypatch)
    assert run.status == RunStatus.DONE
    # The lease; the response with the lookup's output; the credit's output; the second
    # lookup's, after the credit, in order; the last response (synced: the run's end).
    assert len(opened) == 5 and opened[0] is False and opened[-1] is True, opened
    assert opened[2:4] == [False, False], opened
    results = [s.data["name"] for s in desk.store.steps(run.id) if s.kind == "result"]
    assert results == ["lookup_account", "issue_credit", "lookup_account"]
    (issued,) = desk.credits()
    assert json.loads(desk.store.calls_named("issue_credit")[0].output)["status"] == "credited"
    assert issued["request"]["amount_cents"] == 2500


def test_a_response_holding_any_agents_effect_is_committed_synced(scripted_credit, monkeypatch):
    _desk, _run, opened = _look_credit_look(scripted_credit, monkeypatch)
    assert opened[1] is True, opened
