"""Faults from the model's side: refused requests, cut streams, and a model that misbehaves.

The offline model injects HTTP faults (429, 500) before the answer starts and cuts streams
half way, exactly where the real API can fail. A fault matrix puts each fault at each turn of
the approve flow; a scripted model (``OfflineServer(brain=...)``) sends malformed arguments,
unknown tools and several calls in one response although parallel calls are off.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers.cli import DATA, run_cli
from helpers.crash import Outcome, assert_held, measure, read_outcome, record

from offline_model import events as offline_events
from offline_model.brain import Reply
from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.desk.customer import converse
from refund_agent.models import RunStatus
from refund_agent.providers.client import ModelAccess, open_model

MAX_RETRIES = 2   # the test settings' budget: one attempt plus two retries


def _settings(output: Path) -> Settings:
    # rate_patience=0: a 429 past the retries fails the run (resumably), as a 500 does, so the
    # matrix puts it at every turn (by default the limiter waits rate limits out: tests/providers)
    return Settings(api_key="", data_dir=DATA, output_dir=output, max_retries=MAX_RETRIES,
                    timeout=30.0, rate_patience=0.0)


class FaultAt:
    """Injects faults into the offline model just before turn ``turn`` (0-based) is requested.

    The hook is the agent's own live events: a committed "response" step means the previous
    turn is saved and the next request is about to go out.
    """

    def __init__(self, model: ModelAccess, turn: int, faults: list[str]) -> None:
        self.model, self.turn, self.faults, self.responses = model, turn, faults, 0
        if turn == 0:
            model.server.inject(*faults)

    def __call__(self, event) -> None:
        if event.kind == "step" and event.step.kind == "response":
            self.responses += 1
            if self.responses == self.turn:
                self.model.server.inject(*self.faults)


def _approve_flow(agent: Agent, on_event=None) -> list[str]:
    """Drive Maya's request to the end, resuming after every failure; returns the statuses."""
    seen = []
    run = agent.start_sample("damaged")
    while True:
        status = agent.advance(run.id, on_event).status
        seen.append(status.value)
        if status == RunStatus.WAITING:
            (approval,) = agent.store.approvals("pending")
            agent.decide(approval.id, True, "Dana Kim",
                         fingerprint=agent.store.approval(approval.id).fingerprint)
        elif status == RunStatus.DONE:
            return seen
        else:
            assert status == RunStatus.FAILED and len(seen) < 10


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Outcome:
    output = tmp_path_factory.mktemp("fault-baseline") / "output"
    settings = _settings(output)
    model = open_model(settings)
    _approve_flow(Agent(settings, model=model))
    model.server.close()
    return read_outcome(output)


TURNS = 5   # Maya's approve flow: lookup, policy, refund proposal | email, note
FAULTS = {"429": ["429"] * (MAX_RETRIES + 1), "500": ["500"] * (MAX_RETRIES + 1),
          "cut": ["cut"]}
CASES = [(kind, turn) for kind in FAULTS for turn in range(TURNS)]


@pytest.mark.parametrize(("kind", "turn"), CASES, ids=[f"{k}-turn{t}" for k, t in CASES])
def test_fault_at_every_turn_fails_cleanly_and_resumes_without_repeats(
        kind: str, turn: int, baseline: Outcome, tmp_path: Path):
    output = tmp_path / "output"
    settings = _settings(output)
    model = open_model(settings)
    agent = Agent(settings, model=model)
    hook = FaultAt(model, turn, FAULTS[kind])
    failures: list[dict] = []

    def watch(event) -> None:
        hook(event)
        if event.kind == "step" and event.step.kind == "error":
            failures.append(event.step.data)

    statuses = _approve_flow(agent, watch)
    model.server.close()

    assert statuses.count("failed") == 1, statuses
    (failure,) = failures
    expected = {"429": "rate-limiting", "500": "internal error",
                "cut": "connection to the provider broke"}[kind]
    assert expected in failure["message"] and "Resume" in failure["message"]
    bodies = model.server.requests
    # Retried up to the limit before the answer starts, never after it started.
    attempts = Counter(json.dumps(b["input"], sort_keys=True) for b in bodies)
    assert max(attempts.values()) == len(FAULTS[kind]) + 1   # the failed tries + the resume
    # The resumed request is the failed one again: the same saved outputs, the same previous
    # response. A call that had run is not run again, so its output is resent, not redone.
    failed_at = len(FAULTS[kind]) - 1 + turn
    assert bodies[failed_at]["input"] == bodies[failed_at + 1]["input"]
    assert bodies[failed_at].get("previous_response_id") == \
        bodies[failed_at + 1].get("previous_response_id")

    outcome = read_outcome(output)
    metrics = measure(outcome, baseline)
    results = Counter(c["call_id"] for c in outcome.calls if c["output"] is not None)
    metrics["calls_run_twice"] = sum(
        1 for run_id, kinds in outcome.steps.items() if kinds.count("result")
        != len([c for c in outcome.calls if c["run_id"] == run_id]))
    metrics["refund_reused_after_fault"] = sum(e["event"] == "reused" for e in outcome.audit)
    assert len(results) == len(outcome.calls)
    record("faults", fault=kind, turn=turn, attempts=len(bodies), **metrics)
    assert_held(metrics, f"{kind} at turn {turn}")


def test_faults_within_the_retry_budget_do_not_fail_the_run(tmp_path: Path):
    settings = _settings(tmp_path / "output")
    model = open_model(settings)
    agent = Agent(settings, model=model)
    model.server.inject(*["429", "500"] * 1)
    assert _approve_flow(agent) == ["waiting", "done"]
    assert len(model.server.requests) == TURNS + 2
    model.server.close()
    record("faults", fault="429+500 within budget", turn=0, attempts=TURNS + 2, runs_failed=0)


def test_a_cut_stream_leaves_nothing_half_recorded(tmp_path: Path):
    """The response of a cut stream is neither stored by the model nor recorded by the run."""
    settings = _settings(tmp_path / "output")
    model = open_model(settings)
    agent = Agent(settings, model=model)
    run = agent.start_sample("damaged")
    model.server.inject("cut")
    seen: list[str] = []
    failed = agent.advance(run.id, lambda e: seen.append(e.kind))
    assert failed.status == RunStatus.FAILED
    assert "reasoning" in seen   # part of the answer had streamed before the cut
    assert failed.requests == 0 and failed.last_response_id is None
    assert [s.kind for s in agent.store.steps(run.id)] == ["email", "error"]
    assert agent.resumable() == [] and agent.store.latest_run({RunStatus.FAILED}).id == run.id
    assert agent.advance(run.id).status == RunStatus.WAITING
    model.server.close()


def test_the_terminal_reports_a_model_failure_and_resume_finishes(tmp_path: Path):
    output = tmp_path / "output"
    failed = run_cli(output, "sample", "damaged", REFUND_AGENT_OFFLINE_FAULTS="429,429,429",
                     REFUND_AGENT_RATE_PATIENCE="0")
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert "failed: The provider is rate-limiting requests (429)" in failed.stdout
    assert "`refund-agent resume` retries" in failed.stdout
    resumed = run_cli(output, "resume")
    assert resumed.returncode == 0 and "waiting for approval" in resumed.stdout
    cut = run_cli(output, "approve", "--as", "Dana", REFUND_AGENT_OFFLINE_FAULTS="cut")
    assert cut.returncode == 1 and "connection to the provider broke" in cut.stdout
    assert run_cli(output, "resume").returncode == 0
    out = read_outcome(output)
    assert [r["status"] for r in out.runs] == ["done"]
    assert len(out.refunds) == 1 and len(out.emails) == 1
    assert [e["event"] for e in out.audit] == ["requested", "approved", "issued"]


# -- a refusal no retry cures, after the money moved (issue 33 item 10) ------------------------

def _paid_then_refused(tmp_path: Path, expired: bool) -> tuple[Agent, ModelAccess, str]:
    """Maya's refund approved; every request after the payment is refused with a 422. With
    ``expired``, as xAI refuses a transcript it cannot read: the stored response is gone (a
    404), and the transcript sent instead is refused."""
    settings = _settings(tmp_path / "output")
    model = open_model(settings)
    agent = Agent(settings, model=model)
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING, run.error
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    if expired:
        model.server.advance_clock(days=31)
    # The advance and two resumes (a 422 is never retried); "ok" lets the 404 through.
    model.server.inject(*(["ok", "422"] if expired else ["422"]) * 3)
    return agent, model, run.id


@pytest.mark.parametrize("expired", [False, True], ids=["stored", "expired"])
def test_a_permanent_refusal_after_the_refund_hands_the_ticket_to_a_person(
        tmp_path: Path, expired: bool):
    agent, model, run_id = _paid_then_refused(tmp_path, expired)
    failed = agent.advance(run_id)
    assert len(agent.payments.refunds()) == 1            # the money moved first
    assert failed.status == RunStatus.FAILED
    assert "resume retries" not in failed.error.lower(), failed.error
    assert "person needs to take this ticket over" in failed.error
    # The customer is told their refund was issued and that a person will follow up, once.
    [sent] = agent.outbox.messages()
    assert sent["request"]["to"] == failed.sender
    assert "refund of $" in sent["request"]["body"] and "follow up" in sent["request"]["body"]
    # A lead has the ticket: an open escalation.
    [escalation] = agent.store.escalations(open_only=True, run_id=run_id)
    assert "422" in escalation.reason
    for _ in range(2):                                   # `refund-agent resume`, twice
        again = agent.advance(run_id)
        assert again.status == RunStatus.FAILED and "resume retries" not in again.error.lower()
    assert len(agent.outbox.messages()) == 1             # not emailed twice
    assert len(agent.store.escalations(run_id=run_id)) == 1
    assert len(agent.payments.refunds()) == 1
    tries = 2 if expired else 1                          # the 404, then the transcript
    assert len(model.server.requests) == 3 + 3 * tries   # three turns, then each advance's
    model.server.close()


def test_a_permanent_refusal_before_any_money_moved_is_not_handed_over(tmp_path: Path):
    """Nothing was paid, so nothing is owed to the customer yet: the run fails for the team to
    fix, and its text does not promise that resuming alone will get past the refusal."""
    settings = _settings(tmp_path / "output")
    model = open_model(settings)
    agent = Agent(settings, model=model)
    model.server.inject("422")
    failed = agent.advance(agent.start_sample("damaged").id)
    assert failed.status == RunStatus.FAILED and "(422)" in failed.error
    assert "resume retries" not in failed.error.lower(), failed.error
    assert agent.outbox.messages() == [] and agent.store.escalations() == []
    model.server.close()


def test_the_terminal_does_not_say_resume_retries_for_a_ticket_handed_over(tmp_path: Path):
    output = tmp_path / "output"
    assert run_cli(output, "sample", "damaged").returncode == 0
    refused = run_cli(output, "approve", "--as", "Dana", REFUND_AGENT_OFFLINE_FAULTS="422")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "person needs to take this ticket over" in refused.stdout
    assert "resume` retries" not in refused.stdout and "Resume retries" not in refused.stdout
    out = read_outcome(output)
    assert len(out.refunds) == 1 and len(out.emails) == 1


def test_the_simulated_customer_failing_leaves_the_run_resumable(tmp_path: Path):
    """The angry customer's reply is a model request too; when it fails, the run must say so and
    resume must carry on the conversation, not crash out of the front end."""
    settings = _settings(tmp_path / "output")
    model = open_model(settings)
    agent = Agent(settings, model=model)
    run = agent.advance(agent.start_sample("angry").id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana",
                 fingerprint=agent.store.approval(approval.id).fingerprint)

    def fail_the_persona(event) -> None:
        if event.kind == "step" and event.step.kind == "note":   # the run is about to finish
            model.server.inject(*["429"] * (MAX_RETRIES + 1))

    after = converse(agent, run.id, fail_the_persona)
    assert after.status == RunStatus.FAILED
    assert "rate-limiting" in after.error and "customer" in after.error
    assert agent.store.latest_run({RunStatus.FAILED}).id == run.id
    finished = converse(agent, run.id)
    assert finished.status == RunStatus.DONE and finished.simulated_replies == 2
    out = read_outcome(settings.output_dir)
    metrics = measure(out)
    record("faults", fault="429 on the simulated customer", turn=-1, **metrics)
    assert_held(metrics, "simulated customer failure")
    model.server.close()


# -- a model that misbehaves -----------------------------------------------------------------

RAW = "__raw_arguments__"


@pytest.fixture
def scripted_raw(scripted, monkeypatch):
    """The shared scripted model, where ``{RAW: "..."}`` sends a call's arguments verbatim."""
    build = offline_events.build_output_items

    def raw_arguments(reply, *dialect):
        items = build(reply, *dialect)
        for item in items:
            if item["type"] == "function_call" and RAW in item["arguments"]:
                item["arguments"] = json.loads(item["arguments"])[RAW]
        return items

    monkeypatch.setattr(offline_events, "build_output_items", raw_arguments)
    return scripted


def _outputs(body: dict) -> list[tuple[str, dict]]:
    return [(i["call_id"], json.loads(i["output"])) for i in body["input"]
            if i.get("type") == "function_call_output"]


COFFEE_MAKER = [{"line": "POUR-GLS-01", "reason": "damaged"}]
REFUND = ("issue_refund", {"order_id": "A1043", "lines": COFFEE_MAKER, "amount": 48.0,
                           "summary": "Cracked carafe."})


def test_malformed_unknown_and_missing_arguments_go_back_as_errors(scripted_raw):
    agent, _script, server = scripted_raw(
        Reply("truncated JSON", calls=[("lookup_order", {RAW: '{"order_id": "A10'})]),
        Reply("not an object", calls=[("check_refund_policy", {RAW: '["A1043"]'})]),
        Reply("empty", calls=[("issue_refund", {RAW: ""})]),
        Reply("missing amount", calls=[("issue_refund", {"order_id": "A1043",
                                                         "lines": COFFEE_MAKER,
                                                         "summary": "x"})]),
        Reply("extra field", calls=[("send_customer_message",
                                     {"message": "hi", "to": "friend@example.com"})]),
        Reply("made up", calls=[("delete_order", {"order_id": "A1043"})]),
        Reply("null name", calls=[("", {})]),
    )
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.DONE
    errors = [out["error"] for body in server.requests[1:] for _c, out in _outputs(body)]
    assert len(errors) == 7
    assert "Invalid arguments for lookup_order" in errors[0]
    assert "Invalid arguments for check_refund_policy" in errors[1]
    assert "Invalid arguments for issue_refund" in errors[2]
    assert "amount" in errors[3] and "Field required" in errors[3]
    assert "to: Extra inputs are not permitted" in errors[4]
    assert "no tool called 'delete_order'" in errors[5]
    assert "no tool called ''" in errors[6]
    # Nothing with a side effect happened, and every call has its output saved.
    assert agent.store.approvals(status=None) == []
    assert agent.payments.refunds() == [] and agent.outbox.messages() == []
    out = read_outcome(agent.settings.output_dir)
    assert not any(c["output"] is None for c in out.calls)
    record("faults", fault="malformed/unknown/missing arguments", turn=-1, bad_calls=7,
           side_effects=0)


def test_two_calls_in_one_response_run_the_safe_one_and_pause_on_the_refund(scripted_raw):
    agent, _script, server = scripted_raw(
        Reply("both at once", calls=[("lookup_order", {"order_id": "A1043"}), REFUND]))
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING and len(server.requests) == 1
    lookup, refund = agent.store.calls(run.last_response_id)
    assert lookup.output is not None and refund.output is None   # ran / waits for a person
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(run.id).status == RunStatus.DONE
    # Every output of that response goes back together, in order, in one request.
    sent = _outputs(server.requests[1])
    assert [c for c, _o in sent] == [lookup.call_id, refund.call_id]
    assert sent[1][1]["status"] == "refunded"
    kinds = [s.kind for s in agent.store.steps(run.id)]
    assert kinds.count("result") == 2 and kinds.count("refund") == 1
    assert len(agent.payments.refunds()) == 1
    record("faults", fault="two calls in one response", turn=-1, duplicate_refunds=0)


def test_calls_after_a_refund_in_the_same_response_wait_for_the_decision(scripted):
    """An email written in the same breath as the proposal must not reach the customer before
    a person decides, and must not go out at all if the refund is rejected (it was written
    without knowing the outcome). The model is told so and writes a new one."""
    promise = ("send_customer_message", {"message": "Good news: your $48.00 refund is done!"})
    agent, _script, server = scripted(
        Reply("refund and announce it", calls=[REFUND, promise]),
        Reply("explain", calls=[("send_customer_message",
                                 {"message": "Sorry, we can't refund this one."})]))
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING
    assert agent.outbox.messages() == []                      # nothing sent while waiting
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, False, "Dana", "The carafe was dropped by the customer.",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(run.id).status == RunStatus.DONE
    bodies = [m["request"]["body"] for m in agent.outbox.messages()]
    assert len(bodies) == 1 and "can't refund" in bodies[0]    # the promise never went out
    refund_out, email_out = (o for _c, o in _outputs(server.requests[1]))
    assert refund_out["status"] == "rejected"
    assert email_out["error"].startswith("Not sent")
    record("faults", fault="email after a rejected refund in one response", turn=-1,
           false_emails=0)


def test_calls_after_an_approved_refund_in_the_same_response_run_after_it(scripted):
    promise = ("send_customer_message", {"message": "Your $48.00 refund is on its way."})
    agent, _script, server = scripted(Reply("refund and announce it", calls=[REFUND, promise]))
    run = agent.advance(agent.start_sample("damaged").id)
    (approval,) = agent.store.approvals("pending")
    assert agent.outbox.messages() == []
    agent.decide(approval.id, True, "Dana",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(run.id).status == RunStatus.DONE
    assert len(agent.payments.refunds()) == 1 and len(agent.outbox.messages()) == 1
    refund_out, email_out = (o for _c, o in _outputs(server.requests[1]))
    assert refund_out["status"] == "refunded" and email_out["status"] == "sent"


def test_two_refunds_in_one_response_need_two_approvals_and_the_policy_still_holds(scripted_raw):
    agent, _script, server = scripted_raw(Reply("twice", calls=[REFUND, REFUND]))
    run = agent.advance(agent.start_sample("damaged").id)
    first = agent.store.approvals("pending")
    assert len(first) == 1            # one proposal at a time
    agent.decide(first[0].id, True, "Dana",
                 fingerprint=agent.store.approval(first[0].id).fingerprint)
    run = agent.advance(run.id)
    # The second names the line the first just refunded: refused, never queued.
    assert run.status == RunStatus.DONE
    assert len(agent.store.approvals(status=None)) == 1
    assert [r["request"]["amount_cents"] for r in agent.payments.refunds()] == [4800]
    outs = [o for _c, o in _outputs(server.requests[1])]
    assert outs[0]["status"] == "refunded"
    assert "Glass pour-over coffee maker (POUR-GLS-01) has already been refunded" in \
        outs[1]["error"]
    assert [e.event for e in agent.store.audit()] == ["requested", "approved", "issued",
                                                      "refused"]
    record("faults", fault="two refunds in one response", turn=-1, duplicate_refunds=0,
           over_policy=0)


def test_two_refunds_of_different_lines_in_one_response_need_two_approvals(scripted):
    mugs = ("issue_refund", {"order_id": "A1043", "amount": None,
                             "lines": [{"line": "MUG-STN-2", "reason": "changed_mind"}],
                             "summary": "Unused mugs, returned."})
    agent, _script, server = scripted(Reply("two refunds", calls=[REFUND, mugs]))
    run = agent.advance(agent.start_sample("damaged").id)
    (first,) = agent.store.approvals("pending")        # one proposal at a time
    assert [line.line for line in first.lines] == ["POUR-GLS-01"]
    agent.decide(first.id, True, "Dana", fingerprint=agent.store.approval(first.id).fingerprint)
    run = agent.advance(run.id)
    assert run.status == RunStatus.WAITING              # the second waits for its own person
    (second,) = agent.store.approvals("pending")
    assert [(line.line, line.amount_cents) for line in second.lines] == [("MUG-STN-2", 1850)]
    assert len(agent.payments.refunds()) == 1
    agent.decide(second.id, True, "Sam", fingerprint=agent.store.approval(second.id).fingerprint)
    assert agent.advance(run.id).status == RunStatus.DONE
    refunds = agent.payments.refunds()
    assert [r["request"]["amount_cents"] for r in refunds] == [4800, 1850]
    assert [r["idempotency_key"] for r in refunds] == [first.id, second.id]
    outs = [o for _c, o in _outputs(server.requests[1])]
    assert [o["status"] for o in outs] == ["refunded", "refunded"]
    record("faults", fault="two refunds of different lines in one response", turn=-1,
           duplicate_refunds=0, over_policy=0)
