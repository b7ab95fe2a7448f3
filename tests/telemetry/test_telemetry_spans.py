"""The loop's spans for an agent that writes none (the store-credit agent), by the GenAI
semantic conventions (semantic-conventions-genai v0.1.0) and the project's ``refund_agent.*``:
what they are called, how they nest into one trace across the pause, what they say, and what
they keep out unless content capture is asked for."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from helpers.credit import ANA, EMAIL, CreditDesk  # noqa: E402
from helpers.telemetry import Recorded, values  # noqa: E402
from opentelemetry import trace as otel_trace  # noqa: E402

from refund_agent import RunStatus, telemetry  # noqa: E402

APPROVER = "Dana Kim"


def _approved_ticket(credit: CreditDesk):
    """Start, wait, approve, finish: the whole ticket, in this process."""
    run = credit.advance(credit.start(ANA, EMAIL).id)
    assert run.status == RunStatus.WAITING
    (pending,) = credit.store.approvals("pending")
    decided = credit.approve(pending.id, pending.fingerprint, by=APPROVER)
    done = credit.advance(run.id)
    assert done.status == RunStatus.DONE
    return done, pending, decided


def test_a_whole_ticket_is_one_trace_of_gen_ai_spans(credit, recorded):
    run, pending, _ = _approved_ticket(credit)
    spans = recorded.spans
    assert len({s.context.trace_id for s in spans}) == 1
    (start,) = recorded.named("refund_agent.start")
    assert start.parent is None and start.attributes["gen_ai.conversation.id"] == run.id
    advances = recorded.named("invoke_agent ")
    assert [s.name for s in advances] == ["invoke_agent store-credit"] * 2
    by_id = {s.context.span_id: s for s in spans}
    for advance in advances:
        assert advance.parent.span_id == start.context.span_id   # the run's stored context
        assert advance.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert advance.attributes["gen_ai.agent.name"] == "store-credit"
        assert advance.attributes["gen_ai.conversation.id"] == run.id
        assert advance.attributes["gen_ai.provider.name"] == "x_ai"
    assert [a.attributes["refund_agent.run.status"] for a in advances] == ["waiting", "done"]
    for span in recorded.named("chat ") + recorded.named("execute_tool "):
        assert by_id[span.parent.span_id].name.startswith("invoke_agent")
    tools = [s.attributes["gen_ai.tool.name"] for s in recorded.named("execute_tool ")]
    assert tools == ["lookup_account", "issue_credit", "issue_credit"]   # proposed, then run
    calls = {c.call_id: c for r in _responses(credit, run.id) for c in credit.store.calls(r)}
    for span in recorded.named("execute_tool "):
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.type"] == "function"
        call = calls[span.attributes["gen_ai.tool.call.id"]]
        assert span.attributes["gen_ai.tool.name"] == call.name
        assert span.attributes["refund_agent.call.key"] == call.key


def _responses(credit: CreditDesk, run_id: str) -> list[str]:
    return [s.data["response_id"] for s in credit.store.steps(run_id) if s.kind == "response"]


def test_chat_spans_carry_the_responses_and_their_tokens(credit, recorded):
    run, _, _ = _approved_ticket(credit)
    chats = recorded.named("chat ")
    assert len(chats) == run.requests
    assert [c.attributes["gen_ai.response.id"] for c in chats] == _responses(credit, run.id)
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == run.input_tokens
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats) == run.output_tokens
    assert sum(c.attributes["refund_agent.cost_usd"] for c in chats) == pytest.approx(
        run.cost_usd)
    for chat in chats:
        assert chat.kind == otel_trace.SpanKind.CLIENT
        assert chat.name == f"chat {credit.settings.model}"
        assert chat.attributes["gen_ai.request.model"] == credit.settings.model
        assert chat.attributes["server.address"] == "127.0.0.1"


def test_the_proposal_the_wait_and_the_decision(credit, recorded):
    run, pending, decided = _approved_ticket(credit)
    proposing = next(s for s in recorded.named("execute_tool issue_credit")
                     if "refund_agent.approval.id" in s.attributes)
    assert proposing.attributes["refund_agent.approval.id"] == pending.id
    assert proposing.attributes["refund_agent.approval.fingerprint"] == pending.fingerprint
    assert proposing.attributes["refund_agent.approval.amount_cents"] == 2500
    assert [e.name for e in proposing.events] == ["refund_agent.proposal",
                                                  "refund_agent.wait.started"]
    (wait,) = recorded.named("refund_agent.wait")
    assert wait.start_time == int(pending.requested_at * 1e9)
    assert wait.end_time == int(decided.decided_at * 1e9)
    waited = decided.decided_at - pending.requested_at
    assert wait.attributes["refund_agent.wait.seconds"] == pytest.approx(waited)
    (decision,) = recorded.named("refund_agent.decision")
    assert decision.attributes["refund_agent.decision"] == "approved"
    assert decision.attributes["refund_agent.decision.by"] == APPROVER
    (start,) = recorded.named("refund_agent.start")
    assert wait.parent.span_id == decision.parent.span_id == start.context.span_id


def test_the_resume_names_its_process_and_lease(credit, recorded):
    _approved_ticket(credit)
    first, resumed = recorded.named("invoke_agent ")
    assert first.attributes["refund_agent.resume"] is False
    assert resumed.attributes["refund_agent.resume"] is True
    assert resumed.attributes["refund_agent.lease.epoch"] == (
        first.attributes["refund_agent.lease.epoch"] + 1)
    assert resumed.attributes["refund_agent.resume.pid"] > 0
    assert resumed.attributes["refund_agent.resume.host"]


def test_the_effect_names_its_key_and_whether_the_ledger_reused_it(credit, recorded):
    run, pending, _ = _approved_ticket(credit)
    done = [s for s in recorded.named("execute_tool issue_credit")
            if "refund_agent.effect.key" in s.attributes]
    (effect,) = done
    assert effect.attributes["refund_agent.effect.key"] == pending.id
    assert effect.attributes["refund_agent.effect.reused"] is False
    # The same key again (a resume after a crash between the effect and its output): reused.
    tel = telemetry.active()
    with tel.span("again", {}):
        record, reused = credit.effects.once(pending.id, {"account_id": "CR-1001",
                                                          "amount_cents": 2500},
                                             lambda: {"credit_id": "never"})
    (again,) = recorded.named("again")
    assert reused and record["credit_id"] != "never"
    assert again.attributes["refund_agent.effect.reused"] is True


def test_by_default_no_content_reaches_a_span(credit, recorded):
    run, _, _ = _approved_ticket(credit)
    text = "".join(values(s) for s in recorded.spans)
    assert "late delivery" not in text and ANA not in text   # the email, its sender
    for response in _responses(credit, run.id):
        for call in credit.store.calls(response):
            assert call.arguments not in text
    content = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
               "gen_ai.tool.call.result", "gen_ai.system_instructions"}
    assert not content & {k for s in recorded.spans for k in s.attributes}


def test_content_only_with_the_switch(credit, recorded_content):
    run, _, _ = _approved_ticket(credit)
    chats = recorded_content.named("chat ")
    assert "late delivery" in chats[0].attributes["gen_ai.input.messages"]
    assert all(json.loads(c.attributes["gen_ai.output.messages"]) for c in chats)
    lookup = recorded_content.named("execute_tool lookup_account")[0]
    assert json.loads(lookup.attributes["gen_ai.tool.call.arguments"]) == {
        "account_id": "CR-1001"}
    ran = recorded_content.named("execute_tool issue_credit")[-1]
    assert json.loads(ran.attributes["gen_ai.tool.call.result"])["status"] == "credited"


def test_a_failed_request_names_its_error(credit, model, recorded):
    model.server.inject("429", "429", "429")   # past the retries (max_retries=2)
    model.client.patience = 0.0
    run = credit.advance(credit.start(ANA, EMAIL).id)
    assert run.status == RunStatus.FAILED
    (chat,) = recorded.named("chat ")
    assert chat.attributes["error.type"] == "429"
    assert chat.status.status_code == otel_trace.StatusCode.ERROR
    (advance,) = recorded.named("invoke_agent ")
    assert advance.attributes["refund_agent.run.status"] == "failed"
    assert advance.status.status_code == otel_trace.StatusCode.ERROR


class Broken(CreditDesk):
    """Its effect function fails midway: whether the credit happened is not known."""
    agent_name = "broken-credit"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        tool = self.tools["issue_credit"]

        def fails(ctx, args, approval=None):
            raise ConnectionResetError("the answer never came")
        self.tools = {**self.tools, "issue_credit": type(tool)(
            tool.name, tool.description, tool.args, tool.kind, run=fails, propose=tool.propose,
            done_status=tool.done_status)}


def test_an_effect_that_raised_leaves_its_outcome_unknown(settings, model, recorded):
    desk = Broken(settings, model=model)
    run = desk.advance(desk.start(ANA, EMAIL).id)
    (pending,) = desk.store.approvals("pending")
    desk.approve(pending.id, pending.fingerprint, by=APPROVER)
    with pytest.raises(ConnectionResetError):
        desk.advance(run.id)
    failed = recorded.named("execute_tool issue_credit")[-1]
    assert failed.attributes["refund_agent.effect.outcome"] == "unknown"
    assert failed.attributes["error.type"] == "ConnectionResetError"
    assert failed.status.status_code == otel_trace.StatusCode.ERROR


def test_a_request_span_of_the_application_is_linked_not_made_the_parent(credit, recorded):
    run = credit.advance(credit.start(ANA, EMAIL).id)
    (pending,) = credit.store.approvals("pending")
    credit.approve(pending.id, pending.fingerprint, by=APPROVER)
    tracer = otel_trace.get_tracer("the-application",
                                   tracer_provider=telemetry.active()._tracer_provider)
    with tracer.start_as_current_span("POST /approve") as request:
        credit.advance(run.id)
    resumed = recorded.named("invoke_agent ")[-1]
    (start,) = recorded.named("refund_agent.start")
    assert resumed.context.trace_id == start.context.trace_id
    assert [link.context.span_id for link in resumed.links] == [request.get_span_context().span_id]


def test_a_run_made_without_a_trace_gets_one_at_its_first_traced_advance(credit):
    run = credit.start(ANA, EMAIL)   # telemetry off (the fixtures' default): no context kept
    assert credit.store.run(run.id).trace_context is None
    recorded = Recorded()
    credit.advance(run.id)
    (advance,) = recorded.named("invoke_agent ")
    assert advance.parent is None and advance.attributes["gen_ai.conversation.id"] == run.id
    kept = json.loads(credit.store.run(run.id).trace_context)["traceparent"]
    assert kept.split("-")[1:3] == [f"{advance.context.trace_id:032x}",
                                    f"{advance.context.span_id:016x}"]
    (pending,) = credit.store.approvals("pending")
    credit.approve(pending.id, pending.fingerprint, by=APPROVER)
    credit.advance(run.id)
    (decision,) = recorded.named("refund_agent.decision")
    resumed = recorded.named("invoke_agent ")[-1]
    assert decision.parent.span_id == resumed.parent.span_id == advance.context.span_id
    assert credit.store.run(run.id).trace_context == json.dumps({"traceparent": kept})


@pytest.mark.postgres
def test_on_postgresql_the_run_keeps_its_trace_context_too(pg_cluster, settings, model,
                                                            recorded):
    url = pg_cluster.create(f"otel_{uuid.uuid4().hex[:8]}")
    desk = CreditDesk(dataclasses.replace(settings, database_url=url), model=model)
    run = desk.start(ANA, EMAIL)
    (start,) = recorded.named("refund_agent.start")
    kept = json.loads(desk.store.run(run.id).trace_context)
    assert kept["traceparent"].split("-")[1:3] == [f"{start.context.trace_id:032x}",
                                                   f"{start.context.span_id:016x}"]
    desk.advance(run.id)
    (pending,) = desk.store.approvals("pending")
    desk.approve(pending.id, pending.fingerprint, by=APPROVER)
    assert desk.advance(run.id).status == RunStatus.DONE
    assert {s.context.trace_id for s in recorded.spans} == {start.context.trace_id}
    desk.store.close()
