"""Tests for the offline Responses API server, driven through the real ``openai`` SDK.

Every client uses ``_strict_response_validation=True`` so the SDK validates each
response and stream event against its pydantic models instead of trusting them.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from helpers.errors import error_fields, refused
from openai.types.responses import Response

from offline_model import OfflineServer, start_offline_server
from offline_model.events import delta_delays
from offline_model.server import FAULTS_ENV

# Every test here runs against the stand-in in xAI's dialect and in OpenAI's.
pytestmark = pytest.mark.usefixtures("dialect")
REPO = Path(__file__).resolve().parents[2]
DAY = 86400.0
TOOLS = [
    {
        "type": "function",
        "name": "lookup_order",
        "description": "Look up an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
        "strict": False,
    }
]


@dataclass
class FakeReply:
    """Stands in for ``brain.Reply``."""

    reasoning: str = "The customer wants a refund; check the order first."
    text: str | None = "Let me look up that order for you."
    calls: list[tuple[str, dict[str, Any]]] = field(
        default_factory=lambda: [("lookup_order", {"order_id": "A-1001"})]
    )


class FakeBrain:
    """Records what it was shown and answers with ``reply`` (or raises ``error``)."""

    def __init__(self) -> None:
        self.reply = FakeReply()
        self.error: Exception | None = None
        self.seen: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    def __call__(
        self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> FakeReply:
        self.seen.append((conversation, tools))
        if self.error is not None:
            raise self.error
        return self.reply


class FakeClock:
    """A controllable ``time.time`` replacement."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def brain() -> FakeBrain:
    return FakeBrain()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "responses.sqlite3"


@pytest.fixture
def server(state_path: Path, brain: FakeBrain, clock: FakeClock) -> Iterator[OfflineServer]:
    with OfflineServer(state_path, brain=brain, clock=clock, faults=[]) as srv:
        yield srv


def make_client(server: OfflineServer, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url,
        api_key="offline",
        max_retries=max_retries,
        _strict_response_validation=True,
    )


@pytest.fixture
def client(server: OfflineServer) -> openai.OpenAI:
    return make_client(server)


def create(client: openai.OpenAI, **kw: Any) -> Response:
    kw.setdefault("model", "grok-4-fast")
    kw.setdefault("input", "I want a refund for order A-1001.")
    kw.setdefault("tools", TOOLS)
    return client.responses.create(**kw)


def raw_post(server: OfflineServer, path: str, data: bytes) -> tuple[int, dict[str, Any]]:
    url = server.base_url.removesuffix("/v1") + path
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def stored_ids(state_path: Path) -> list[str]:
    with sqlite3.connect(state_path) as db:
        return [row[0] for row in db.execute("SELECT id FROM responses")]


# -- responses ---------------------------------------------------------------


def test_create_parses_into_response_with_all_output_kinds(client: openai.OpenAI,
                                                           dialect: str) -> None:
    response = create(client)

    assert isinstance(response, Response) and response.status == "completed"
    if dialect == "xai":   # a UUID, and xAI's call ids: a prefix plus the index in the response
        assert str(uuid.UUID(response.id)) == response.id
    else:
        assert response.id.startswith("resp_")
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    reasoning, message, call = response.output
    assert reasoning.summary[0].text == FakeReply().reasoning
    assert response.output_text == FakeReply().text
    assert message.id.startswith("msg_") and message.role == "assistant"
    assert (
        call.name == "lookup_order"
        and re.fullmatch(r"call-[0-9a-f]{8}-0" if dialect == "xai" else r"call_[0-9a-f]{32}",
                         call.call_id)
        and call.id.startswith("fc_")
    )
    assert json.loads(call.arguments) == {"order_id": "A-1001"}
    assert response.tools[0].name == "lookup_order"
    assert response.store is True and response.tool_choice == "auto"


def test_reply_without_reasoning_or_text_has_only_calls(
    client: openai.OpenAI, brain: FakeBrain
) -> None:
    brain.reply = FakeReply(reasoning="", text=None, calls=[("a", {}), ("b", {"x": 1})])

    response = create(client)

    assert [(item.type, item.name) for item in response.output] == [
        ("function_call", "a"),
        ("function_call", "b"),
    ]
    assert response.usage.output_tokens_details.reasoning_tokens == 0


def test_input_is_normalised_for_the_brain(client: openai.OpenAI, brain: FakeBrain) -> None:
    create(client, input="hello")
    create(client, input=[{"role": "user", "content": "plain string content"}])

    assert brain.seen[0][0] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}
    ]
    assert brain.seen[1][0] == [
        {"type": "message", "role": "user", "content": "plain string content"}
    ]
    assert brain.seen[1][1] == TOOLS


def test_requests_are_recorded_as_sent(server: OfflineServer, client: openai.OpenAI) -> None:
    create(client, input=[{"role": "user", "content": "hi"}], prompt_cache_key="conv-1")

    assert len(server.requests) == 1
    body = server.requests[0]
    assert body["input"] == [{"role": "user", "content": "hi"}]  # not mutated by normalisation
    assert body["prompt_cache_key"] == "conv-1" and body["model"] == "grok-4-fast"


# -- streaming -----------------------------------------------------------------

ITEM_EVENTS = {
    "reasoning": [
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ],
    "message": [
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
    ],
    "function_call": [
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    ],
}


def collapse(types: list[str]) -> list[str]:
    """Collapses runs of the same event type (several deltas count once)."""
    return [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]


def test_stream_yields_events_in_order_and_final_equals_stored(client: openai.OpenAI) -> None:
    events = list(create(client, stream=True))

    expected = ["response.created", "response.in_progress"]
    for kind in ("reasoning", "message", "function_call"):
        expected += ["response.output_item.added", *ITEM_EVENTS[kind], "response.output_item.done"]
    expected.append("response.completed")
    types = [event.type for event in events]
    assert collapse(types) == expected
    assert types.count("response.output_text.delta") > 1  # text is really split into chunks
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []

    final = events[-1].response
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == FakeReply().text
    assert client.responses.retrieve(final.id) == final


def test_stream_helper_returns_final_response(client: openai.OpenAI, dialect: str) -> None:
    with client.responses.stream(model="grok-4-fast", input="refund please", tools=TOOLS) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert "".join(deltas) == final.output_text == FakeReply().text
    assert final.output[2].type == "function_call"
    # xAI reports each response's cost; OpenAI does not.
    assert (final.usage.model_extra.get("cost_in_usd_ticks", 0) > 0) == (dialect == "xai")


def test_retrieve_can_replay_a_stored_response_as_a_stream(client: openai.OpenAI) -> None:
    response = create(client)

    replay = list(client.responses.retrieve(response.id, stream=True))

    assert replay[-1].type == "response.completed" and replay[-1].response == response


def test_latency_is_spread_over_deltas() -> None:
    stream = [{"type": t} for t in ("response.created", "a.delta", "b.delta", "x.done", "c.delta")]

    delays = delta_delays(stream, 1.0)

    assert delays[0] == delays[3] == 0
    assert delays[1] == pytest.approx(0.3 + 0.7 / 3)
    assert delays[2] == delays[4] == pytest.approx(0.7 / 3)
    assert sum(delays) == pytest.approx(1.0)
    assert delta_delays(stream, 0.0) == [0.0] * 5


# -- usage, caching and cost ---------------------------------------------------------


def expected_ticks(usage: Any) -> int:
    cached = usage.input_tokens_details.cached_tokens
    usd = ((usage.input_tokens - cached) * 3.00 + cached * 0.75 + usage.output_tokens * 15.00) / 1e6
    return round(usd * 1e10)


def test_cached_tokens_on_second_request_of_a_chain_with_the_same_key(
    client: openai.OpenAI, dialect: str
) -> None:
    first = create(client, prompt_cache_key="conv-1")
    call_id = first.output[2].call_id
    second = create(
        client,
        input=[
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": '{"status": "delivered"}',
            }
        ],
        previous_response_id=first.id,
        prompt_cache_key="conv-1",
        stream=True,
    )
    second = list(second)[-1].response
    other_key = create(
        client, input="again", previous_response_id=second.id, prompt_cache_key="conv-2"
    )

    assert first.usage.input_tokens_details.cached_tokens == 0
    cached = second.usage.input_tokens_details.cached_tokens
    assert 0 < cached < second.usage.input_tokens
    assert other_key.usage.input_tokens_details.cached_tokens == 0
    for response in (first, second, other_key):
        usage = response.usage
        assert usage.total_tokens == usage.input_tokens + usage.output_tokens
        assert usage.input_tokens_details.cache_write_tokens == 0
        if dialect == "openai":   # OpenAI reports tokens, never a cost
            assert "cost_in_usd_ticks" not in usage.model_extra
            continue
        assert (
            usage.cost_in_usd_ticks
            == usage.model_extra["cost_in_usd_ticks"]
            == expected_ticks(usage)
        )
    if dialect == "openai":
        return
    # Cached input is billed at a quarter of the price.
    assert second.usage.cost_in_usd_ticks < expected_ticks(
        second.usage.model_copy(update={"input_tokens_details": first.usage.input_tokens_details})
    )


def test_reasoning_tokens_count_the_reasoning_text(client: openai.OpenAI) -> None:
    usage = create(client).usage

    assert usage.output_tokens_details.reasoning_tokens == -(-len(FakeReply().reasoning) // 4)
    assert usage.output_tokens > usage.output_tokens_details.reasoning_tokens


# -- conversation state ----------------------------------------------------------


def test_chain_is_rebuilt_for_the_brain(client: openai.OpenAI, brain: FakeBrain) -> None:
    first = create(client, input="Refund order A-1001 please.")
    output = {
        "type": "function_call_output",
        "call_id": first.output[2].call_id,
        "output": '{"total": 42}',
    }
    brain.reply = FakeReply(reasoning="", text="Refunded.", calls=[])
    second = create(client, input=[output], previous_response_id=first.id)
    create(client, input="thanks", previous_response_id=second.id)

    conversation = brain.seen[2][0]
    assert [item["type"] for item in conversation] == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    assert (
        conversation[3]["call_id"] == output["call_id"]
        and conversation[3]["name"] == "lookup_order"
    )
    assert conversation[4] == output
    assert conversation[5]["content"][0]["text"] == "Refunded."
    assert conversation[6]["content"][0]["text"] == "thanks"


def test_chains_survive_a_restart(state_path: Path, brain: FakeBrain, clock: FakeClock) -> None:
    with start_offline_server(state_path, brain=brain, clock=clock) as first_server:
        first = create(make_client(first_server), input="before restart")

    with start_offline_server(state_path, brain=brain, clock=clock) as second_server:
        second_client = make_client(second_server)
        assert second_client.responses.retrieve(first.id) == first
        create(second_client, input="after restart", previous_response_id=first.id)

    assert brain.seen[-1][0][0]["content"][0]["text"] == "before restart"


def test_expired_responses_are_not_found(client: openai.OpenAI, clock: FakeClock) -> None:
    first = create(client)
    clock.now += 29 * DAY
    create(client, input="still there", previous_response_id=first.id)
    clock.now += 2 * DAY

    with refused(openai.NotFoundError, param="previous_response_id", code="not_found") as caught:
        create(client, input="too late", previous_response_id=first.id)
    assert error_fields(caught.value)["message"] == f"Response with id '{first.id}' not found."
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_unknown_previous_response_is_not_found(client: openai.OpenAI) -> None:
    with refused(openai.NotFoundError, "resp_missing"):
        create(client, previous_response_id="resp_missing")


def test_store_false_cannot_be_continued(client: openai.OpenAI, state_path: Path) -> None:
    response = create(client, store=False)

    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        create(client, input="next", previous_response_id=response.id)
    assert response.id not in stored_ids(state_path)


def test_instructions_with_previous_response_id_are_rejected_by_xai_only(
        client: openai.OpenAI, dialect: str) -> None:
    first = create(client, instructions="You are a refund agent.")

    assert first.instructions == "You are a refund agent."
    if dialect == "openai":   # OpenAI takes them on a continued conversation
        create(client, input="next", previous_response_id=first.id, instructions="Be brief.")
        return
    with refused(openai.BadRequestError, "instructions"):
        create(client, input="next", previous_response_id=first.id, instructions="Be brief.")


def test_malformed_requests_get_400(server: OfflineServer) -> None:
    status, body = raw_post(server, "/v1/responses", b"{not json")
    assert status == 400 and "JSON" in error_fields(body)["message"]

    status, body = raw_post(server, "/v1/responses", json.dumps({"input": "hi"}).encode())
    error = error_fields(body)
    assert status == 400 and error["param"] in ("model", None) and "model" in error["message"]

    status, body = raw_post(server, "/v1/responses", json.dumps({"model": "m"}).encode())
    error = error_fields(body)
    assert status == 400 and error["param"] in ("input", None) and "input" in error["message"]


# -- faults ------------------------------------------------------------------------


def test_429_then_success_with_retries(server: OfflineServer) -> None:
    server.inject("429")

    response = create(make_client(server, max_retries=2))

    assert response.status == "completed"
    assert len(server.requests) == 2


def test_429_beyond_the_retry_budget_raises(server: OfflineServer) -> None:
    server.inject("429", "429", "429")

    with pytest.raises(openai.RateLimitError):
        create(make_client(server, max_retries=2))
    assert len(server.requests) == 3


def test_5xx_faults_are_retried(server: OfflineServer) -> None:
    server.inject("500", "503")

    events = list(create(make_client(server, max_retries=2), stream=True))

    assert events[-1].type == "response.completed"
    assert len(server.requests) == 3


def test_cut_stream_raises_while_iterating_and_stores_nothing(
    server: OfflineServer, client: openai.OpenAI, state_path: Path
) -> None:
    server.inject("cut")
    received = []

    with pytest.raises(openai.APIConnectionError):
        for event in create(client, stream=True):
            received.append(event)

    assert received[0].type == "response.created"
    assert "response.completed" not in [event.type for event in received]
    assert stored_ids(state_path) == []
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(received[0].response.id)
    assert create(client).status == "completed"  # the server is still fine


def test_cut_without_streaming_drops_the_connection(
    server: OfflineServer, client: openai.OpenAI
) -> None:
    server.inject("cut")

    with pytest.raises(openai.APIConnectionError):
        create(client)


def test_brain_failure_is_a_500_that_is_not_retried(
    server: OfflineServer, brain: FakeBrain
) -> None:
    brain.error = RuntimeError("boom")
    client = make_client(server, max_retries=2)

    with refused(openai.InternalServerError, "boom"):
        create(client)
    assert len(server.requests) == 1

    brain.error = None
    assert create(client).status == "completed"


def test_faults_from_env_and_http(
    state_path: Path, brain: FakeBrain, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULTS_ENV, "429, 500")
    with OfflineServer(state_path, brain=brain) as server:
        status, body = raw_post(
            server, "/_offline/faults", json.dumps({"faults": ["503"]}).encode()
        )
        assert (status, body) == (200, {"queued": ["503"]})
        status, body = raw_post(
            server, "/_offline/faults", json.dumps({"faults": ["nope"]}).encode()
        )
        assert status == 400

        with pytest.raises(openai.InternalServerError):
            create(make_client(server, max_retries=2))  # 429, 500, 503
        assert create(make_client(server)).status == "completed"
    assert len(server.requests) == 4


def test_inject_rejects_unknown_faults(server: OfflineServer) -> None:
    with pytest.raises(ValueError, match="unknown faults"):
        server.inject("418")


# -- command line ------------------------------------------------------------------------


def test_cli_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "offline_model", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode == 0
    assert "--port" in result.stdout and "--state" in result.stdout and "--latency" in result.stdout


def test_cli_serves_until_interrupted(tmp_path: Path, dialect: str) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "offline_model",
            "--port",
            "0",
            "--state",
            str(tmp_path / "s.sqlite3"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        banner = process.stdout.readline()
        base_url = banner.split(" at ")[1].split()[0]
        assert f"({dialect} dialect" in banner   # from REFUND_AGENT_OFFLINE_DIALECT
        with urllib.request.urlopen(
            base_url.removesuffix("/v1") + "/_offline/health", timeout=5
        ) as reply:
            assert json.loads(reply.read()) == {"ok": True}
    finally:
        process.send_signal(signal.SIGINT)  # what Ctrl+C sends
        out, _ = process.communicate(timeout=10)
    assert process.returncode == 0 and "stopped" in out


# -- the rest of the API: background, delete, the brain's view of tool_choice ----------------


def wait_until_finished(client: openai.OpenAI, response_id: str) -> Response:
    for _ in range(500):
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        time.sleep(0.01)
    raise AssertionError("the background response never finished")


def test_a_background_brain_failure_is_a_failed_response(
    client: openai.OpenAI, brain: FakeBrain
) -> None:
    brain.error = RuntimeError("boom")

    queued = create(client, background=True)
    failed = wait_until_finished(client, queued.id)

    assert queued.status == "queued"
    assert failed.status == "failed" and failed.output == []
    assert failed.error.code == "server_error" and "boom" in failed.error.message
    replay = list(client.responses.retrieve(queued.id, stream=True))
    assert replay[-1].type == "response.failed" and replay[-1].response == failed


def test_a_deletion_outlives_a_restart(
    state_path: Path, brain: FakeBrain, clock: FakeClock
) -> None:
    with start_offline_server(state_path, brain=brain, clock=clock) as first_server:
        client = make_client(first_server)
        kept, deleted = create(client), create(client)
        client.responses.delete(deleted.id)

    assert stored_ids(state_path) == [kept.id]
    with start_offline_server(state_path, brain=brain, clock=clock) as second_server:
        client = make_client(second_server)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(deleted.id)
        assert client.responses.retrieve(kept.id) == kept


def test_a_brain_that_takes_tool_choice_is_given_it(state_path: Path) -> None:
    seen: list[Any] = []

    def choosy(conversation: list[dict[str, Any]], tools: list[dict[str, Any]],
               tool_choice: Any = None) -> FakeReply:
        seen.append(tool_choice)
        return FakeReply(calls=[])

    with OfflineServer(state_path, brain=choosy, faults=[]) as server:
        client = make_client(server)
        create(client, tool_choice="none")
        create(client, tool_choice={"type": "function", "name": "lookup_order"})
        create(client)

    assert seen == ["none", {"type": "function", "name": "lookup_order"}, None]


def test_a_test_brain_may_still_call_tools_nobody_declared(
    client: openai.OpenAI, brain: FakeBrain
) -> None:
    """Fake brains stand for a misbehaving model: the server passes their calls on unchanged
    (it is the default brain that calls only declared tools)."""
    brain.reply = FakeReply(calls=[("delete_order", {"order_id": "A-1001"})])

    response = create(client)

    assert [item.name for item in response.output if item.type == "function_call"] == [
        "delete_order"
    ]
