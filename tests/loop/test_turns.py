"""The pure halves of a turn (refund_agent/turns.py): the request built, the response read.

Hand-made runs and responses, no store, no server: each rule of the loop's request and of its
reading of a response is checked on its own.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from openai.types.responses import Response

from refund_agent import turns
from refund_agent.models import Reply, Run, RunStatus, StepKind
from refund_agent.turns import MAX_MODEL_TEXT_CHARS, NextInput


def _run(**fields) -> Run:
    base = dict(id="run_1", created_at=0, kind="custom", sender="ana@example.com",
                sender_name="Ana Ruiz", subject="Broken tray", email="It broke.",
                status=RunStatus.WORKING, last_response_id=None, requests=0, cost_ticks=0,
                input_tokens=0, cached_tokens=0, output_tokens=0, simulated_replies=0,
                error=None, lease_pid=None, last_pid=None, updated_at=0,
                transcript_complete=True)
    return Run(**{**base, **fields})


def _response(*output: dict, usage: dict | None = None) -> Response:
    return Response.construct(id="resp_1", object="response", created_at=0, model="grok-4",
                              output=list(output), usage=usage)


CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup_order",
        "arguments": '{"order_id": "A1043"}', "status": "completed"}


def _message(text: str) -> dict:
    return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def test_the_first_input_is_the_system_prompt_then_the_email_with_its_headers():
    system, email = turns.first_input(_run(), "You are the desk.")
    assert system == {"type": "message", "role": "system", "content": "You are the desk."}
    assert email["role"] == "user"
    assert email["content"] == ("From: Ana Ruiz <ana@example.com>\nSubject: Broken tray\n\n"
                                "It broke.")


def test_replies_go_as_user_messages_and_name_their_ids():
    replies = [Reply(id=7, run_id="run_1", at=0, text="Still broken", simulated=False,
                     response_id=None)]
    assert turns.replies_input(replies) == NextInput(
        [turns.user_message("The customer wrote back:\n\nStill broken")], [7])


def _request(**overrides):
    args = dict(model="grok-4", run_id="run_1", items=[{"x": 1}], tools=[],
                previous_response_id="resp_0", zero_retention=False, include=False,
                effort=None)
    return turns.build_request(**{**args, **overrides})


def test_a_request_continues_the_stored_response():
    params = _request()
    assert params["previous_response_id"] == "resp_0" and params["store"] is True
    assert params["input"] == [{"x": 1}] and params["prompt_cache_key"] == "run_1"
    assert params["parallel_tool_calls"] is False and "reasoning" not in params
    assert "include" not in params


def test_zero_retention_sends_the_transcript_and_stores_nothing():
    params = _request(zero_retention=True, history=[{"h": 1}], include=True, effort="low")
    assert "previous_response_id" not in params and params["store"] is False
    assert params["input"] == [{"h": 1}, {"x": 1}]
    assert params["include"] == turns.INCLUDE and params["reasoning"] == {"effort": "low"}


def test_a_resend_drops_the_gone_response_and_stores_again():
    again = turns.resend_request(_request(), [{"h": 1}], [{"x": 1}])
    assert "previous_response_id" not in again and again["store"] is True
    assert again["input"] == [{"h": 1}, {"x": 1}]


def test_a_response_with_a_call_saves_the_call_and_its_commentary():
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [
        {"type": "summary_text", "text": "Look it up."}]}
    read = turns.read_response(_response(reasoning, _message("Checking."), CALL), [{"x": 1}],
                               model="grok-4", seconds=1.23456)
    assert read.calls == [("call_1", "lookup_order", '{"order_id": "A1043"}')]
    assert [kind for kind, _ in read.steps] == [StepKind.REASONING, StepKind.CALL,
                                                StepKind.TEXT, StepKind.RESPONSE]
    response_step = read.steps[-1][1]
    assert response_step["seconds"] == 1.235 and response_step["response_id"] == "resp_1"
    # The transcript: what the request added, then every output item; the digest covers it.
    assert [origin for origin, _ in read.transcript] == ["input", "output", "output", "output"]
    assert response_step["transcript_digest"] == turns.transcript_digest(read.transcript)


def test_text_without_calls_is_the_note_and_is_capped():
    read = turns.read_response(_response(_message("x" * (MAX_MODEL_TEXT_CHARS + 5))), [],
                               model="grok-4", seconds=0)
    (kind, data), _response_step = read.steps
    assert kind is StepKind.NOTE and read.calls == []
    assert data["text"].endswith("[... 5 more characters not kept]")


def test_usage_reads_xais_ticks_or_estimates_a_cost():
    xai = SimpleNamespace(usage=SimpleNamespace(
        input_tokens=100, output_tokens=10, cost_in_usd_ticks=12345, model_extra={},
        input_tokens_details=SimpleNamespace(cached_tokens=40)), model="grok-4")
    assert turns.usage_of(xai) == {"input_tokens": 100, "output_tokens": 10,
                                   "cached_tokens": 40, "cost_ticks": 12345}
    openai_like = SimpleNamespace(usage=SimpleNamespace(
        input_tokens=100, output_tokens=10, model_extra={}, input_tokens_details=None),
        model="gpt-5-mini")
    found = turns.usage_of(openai_like)
    assert found.get("cost_estimated") == 1 and found["cost_ticks"] > 0


@pytest.mark.parametrize("fields, entries, problem", [
    ({"transcript_complete": False}, ["resp_1"], "before refund-agent kept transcripts"),
    ({}, [], "does not end at that response"),
    ({}, ["resp_0"], "does not end at that response"),
    ({}, ["resp_1"], None),
])
def test_a_transcript_serves_only_when_it_reaches_the_last_response(fields, entries, problem):
    run = _run(last_response_id="resp_1", **fields)
    rows = [SimpleNamespace(response_id=r, origin="output", item={"n": i})
            for i, r in enumerate(entries)]
    found = turns.transcript_problem(run, rows, [])
    assert (found is None) if problem is None else (problem in found)


def test_a_changed_transcript_item_is_found_by_its_digest():
    run = _run(last_response_id="resp_1")
    items = [("output", {"n": 1})]
    step = SimpleNamespace(kind=StepKind.RESPONSE, data={
        "response_id": "resp_1", "transcript_digest": turns.transcript_digest(items)})
    rows = [SimpleNamespace(response_id="resp_1", origin="output", item={"n": 1})]
    assert turns.transcript_problem(run, rows, [step]) is None
    rows[0].item = {"n": 2}
    assert "changed after it was written" in turns.transcript_problem(run, rows, [step])
    with pytest.raises(turns.NoTranscript, match="cannot continue"):
        turns.history(run, rows, [step])
