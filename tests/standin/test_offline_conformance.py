"""Conformance of the offline model with the Responses API, driven through the real ``openai`` SDK.

Every endpoint the SDK offers for Responses is called as a client developer would call it, and
every object that comes back is validated against the SDK's own types: create (plain and
streamed), the ``responses.stream`` helper, retrieve (plain and replayed as a stream), delete,
cancel, background mode, ``input_items.list`` with its cursor pagination, ``input_tokens.count``,
``compact``, and ``parse``, whose structured output the stand-in refuses with a clear 400. Then
the stand-in's own lane: it never calls a tool the request did not declare, it honours
``tool_choice``, it says plainly what it is when asked anything else, the simulated customer
reacts to what happened, and it reads only English, and only the customer's words.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest
from helpers.errors import error_fields, refused
from openai import BaseModel as SDKModel
from openai.types.responses import (
    CompactedResponse,
    InputTokenCountResponse,
    Response,
    ResponseItem,
    ResponseItemList,
    ResponseStreamEvent,
)

from offline_model import OfflineServer, brain, reader
from offline_model.brain import Reply, respond
from offline_model.events import GRPC_TEXT, ApiError
from refund_agent import RunStatus
from refund_agent.config import PROJECT_ROOT
from refund_agent.desk import converse
from refund_agent.desk.prompts import customer_brief
from refund_agent.desk.tools import tool_schemas

MODEL = "grok-4-fast"
# Every model-facing test here runs against the stand-in in xAI's dialect and in OpenAI's.
pytestmark = pytest.mark.usefixtures("dialect")
DESK_TOOLS = tool_schemas()
WEATHER = [{
    "type": "function", "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
    "strict": True,
}]
EMAIL = ("From: Ana Ruiz <ana.ruiz@example.com>\nSubject: Broken tray\n\n"
         "Hi, order B2001 arrived today and the serving tray showed up split in two. "
         "Could I get a refund?\n\nAna")
# Only these extra fields (beyond the SDK's types) may appear anywhere in an object: xAI's cost,
# and the response's "store", which the APIs echo though this SDK's Response type omits it.
EXTRAS = {"cost_in_usd_ticks", "store"}


class SeeingBrain:
    """The real brain, remembering what it was shown."""

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    def __call__(self, conversation, tools, tool_choice=None):
        self.seen.append(conversation)
        return respond(conversation, tools, tool_choice)


@pytest.fixture
def seeing() -> SeeingBrain:
    return SeeingBrain()


@pytest.fixture
def server(tmp_path: Path, seeing: SeeingBrain) -> Iterator[OfflineServer]:
    with OfflineServer(tmp_path / "responses.sqlite3", brain=seeing, faults=[]) as srv:
        yield srv


@pytest.fixture
def client(server: OfflineServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="offline", max_retries=0,
                         _strict_response_validation=True)


def create(client: openai.OpenAI, **kw: Any) -> Response:
    kw.setdefault("model", MODEL)
    kw.setdefault("input", EMAIL)
    kw.setdefault("tools", DESK_TOOLS)
    return client.responses.create(**kw)


# -- validating with the SDK's own types -------------------------------------------------------

def unknown_fields(value: Any, where: str = "") -> list[str]:
    """Fields that no SDK type declares, anywhere inside ``value``."""
    found: list[str] = []
    if isinstance(value, SDKModel):
        found += [f"{where}.{k}" for k in (value.model_extra or {}) if k not in EXTRAS]
        for name in type(value).model_fields:
            found += unknown_fields(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += unknown_fields(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += unknown_fields(item, f"{where}.{key}")
    return found


def conforms(model: Any, raw: Any) -> Any:
    """Validates raw JSON against an SDK type (a class or an annotated union) and returns it."""
    parsed = pydantic.TypeAdapter(model).validate_python(raw)
    assert unknown_fields(parsed) == [], unknown_fields(parsed)
    return parsed


def raw_json(api_response: Any) -> Any:
    """The JSON body, as sent, of a ``with_raw_response`` call."""
    return json.loads(api_response.content)


def raw_events(server: OfflineServer, path: str, body: dict | None = None) -> list[dict]:
    """The server-sent events of a request, as sent (``data:`` lines parsed)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.base_url + path, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        text = reply.read().decode()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def exchange(server: OfflineServer, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, str, Any]:
    """One plain HTTP exchange: (status, content type, parsed JSON body or None)."""
    host, port = server.base_url.removeprefix("http://").split("/")[0].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        reply = connection.getresponse()
        data = reply.read()
        return (reply.status, reply.getheader("Content-Type") or "",
                json.loads(data) if data else None)
    finally:
        connection.close()


def wait_for(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


def calls(response: Response) -> list[tuple[str, dict]]:
    return [(item.name, json.loads(item.arguments)) for item in response.output
            if item.type == "function_call"]


# -- create, stream, retrieve ------------------------------------------------------------------

def test_create_returns_a_response_the_sdk_types_accept(client: openai.OpenAI, dialect) -> None:
    raw = raw_json(client.responses.with_raw_response.create(
        model=MODEL, input=EMAIL, tools=DESK_TOOLS, prompt_cache_key="conv-1",
        parallel_tool_calls=False, reasoning={"effort": "low"}, metadata={"run": "r1"}))

    response = conforms(Response, raw)
    assert response.status == "completed" and response.object == "response"
    assert calls(response) == [("lookup_order", {"order_id": "B2001"})]
    assert response.metadata == {"run": "r1"} and response.parallel_tool_calls is False
    assert response.usage.input_tokens > 0
    # xAI reports each response's cost; OpenAI does not.
    assert (raw["usage"].get("cost_in_usd_ticks", 0) > 0) == (dialect == "xai")


def test_streamed_create_sends_events_the_sdk_types_accept(server: OfflineServer,
                                                           client: openai.OpenAI) -> None:
    raw = raw_events(server, "/responses", {"model": MODEL, "input": EMAIL, "tools": DESK_TOOLS,
                                            "stream": True})
    events = [conforms(ResponseStreamEvent, event) for event in raw]

    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert client.responses.retrieve(final.id) == final
    # The SDK's own stream accumulates the same response.
    streamed = list(create(client, stream=True))
    assert calls(streamed[-1].response) == calls(final)


def test_the_stream_helper_accumulates_the_final_response(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input=EMAIL, tools=DESK_TOOLS) as stream:
        arguments = "".join(e.delta for e in stream
                            if e.type == "response.function_call_arguments.delta")
        final = stream.get_final_response()

    assert json.loads(arguments) == {"order_id": "B2001"}
    assert isinstance(final, Response) and final.status == "completed"
    # Resuming a stored response by id through the helper replays it.
    with client.responses.stream(response_id=final.id, starting_after=2) as again:
        replayed = again.get_final_response()
    assert replayed.id == final.id and calls(replayed) == calls(final)


def test_retrieve_plain_and_as_a_stream_from_any_point(server: OfflineServer,
                                                       client: openai.OpenAI) -> None:
    response = create(client)

    conforms(Response, raw_json(client.responses.with_raw_response.retrieve(response.id)))
    everything = list(client.responses.retrieve(response.id, stream=True))
    tail = list(client.responses.retrieve(response.id, stream=True, starting_after=3))
    assert everything[-1].response == response
    assert [e.sequence_number for e in tail] == [e.sequence_number for e in everything[4:]]
    for event in raw_events(server, f"/responses/{response.id}?stream=true"):
        conforms(ResponseStreamEvent, event)


# -- delete --------------------------------------------------------------------------------

def test_delete_answers_the_deletion_object_then_the_response_is_gone(
        client: openai.OpenAI) -> None:
    first = create(client)
    second = create(client, input="Thanks", previous_response_id=first.id)

    raw = raw_json(client.responses.with_raw_response.delete(first.id))
    assert raw == {"id": first.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(first.id)
    # A conversation can't continue through a deleted response.
    with refused(openai.NotFoundError, second.id):
        create(client, input="Hello?", previous_response_id=second.id)
    assert client.responses.retrieve(second.id).id == second.id


def test_delete_is_not_retried_and_never_answers_html(server: OfflineServer) -> None:
    retrying = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=3)
    with pytest.raises(openai.NotFoundError) as caught:
        retrying.responses.delete("resp_unknown")
    assert error_fields(caught.value)["code"] in ("not_found", GRPC_TEXT[404])
    assert caught.value.response.headers["content-type"] == "application/json"


# -- background, cancel ---------------------------------------------------------------------------

def test_background_is_queued_then_completed_when_polled(tmp_path: Path) -> None:
    with OfflineServer(tmp_path / "s.sqlite3", latency=0.3, faults=[]) as slow:
        client = openai.OpenAI(base_url=slow.base_url, api_key="x", max_retries=0,
                               _strict_response_validation=True)
        queued = conforms(Response, raw_json(client.responses.with_raw_response.create(
            model=MODEL, input=EMAIL, tools=DESK_TOOLS, background=True)))
        assert queued.status == "queued" and queued.background is True and queued.output == []

        done = wait_for(lambda: (r := client.responses.retrieve(queued.id)).status
                        == "completed" and r)
        assert calls(done) == [("lookup_order", {"order_id": "B2001"})]
        assert done.background is True and done.usage.output_tokens > 0
        # A completed background response continues a conversation like any other.
        assert create(client, input="Any news?", previous_response_id=done.id).status == \
            "completed"
        # Cancelling a finished one changes nothing.
        assert client.responses.cancel(done.id) == done


def test_background_stream_follows_the_response_to_completion(tmp_path: Path) -> None:
    with OfflineServer(tmp_path / "s.sqlite3", latency=0.2, faults=[]) as slow:
        client = openai.OpenAI(base_url=slow.base_url, api_key="x", max_retries=0,
                               _strict_response_validation=True)
        events = list(client.responses.create(model=MODEL, input=EMAIL, tools=DESK_TOOLS,
                                              background=True, stream=True))
        types = [e.type for e in events]
        assert types[:3] == ["response.created", "response.queued", "response.in_progress"]
        assert events[0].response.status == "queued" and types[-1] == "response.completed"

        # Picking a running background response up again, part-way through, by id.
        queued = client.responses.create(model=MODEL, input=EMAIL, tools=DESK_TOOLS,
                                         background=True)
        resumed = list(client.responses.retrieve(queued.id, stream=True, starting_after=0))
        assert resumed[0].sequence_number == 1 and resumed[-1].type == "response.completed"
        assert resumed[-1].response == client.responses.retrieve(queued.id)


def test_cancel_stops_a_queued_background_response(tmp_path: Path) -> None:
    with OfflineServer(tmp_path / "s.sqlite3", latency=2.0, faults=[]) as slow:
        client = openai.OpenAI(base_url=slow.base_url, api_key="x", max_retries=0,
                               _strict_response_validation=True)
        queued = client.responses.create(model=MODEL, input=EMAIL, tools=DESK_TOOLS,
                                         background=True)
        cancelled = conforms(Response, raw_json(
            client.responses.with_raw_response.cancel(queued.id)))

        assert cancelled.status == "cancelled" and cancelled.output == []
        assert client.responses.cancel(queued.id).status == "cancelled"   # idempotent
        time.sleep(0.2)
        assert client.responses.retrieve(queued.id).status == "cancelled"
        with refused(openai.BadRequestError, "cancelled"):
            create(client, input="go on", previous_response_id=queued.id)
    # Closing the server fails what it can no longer finish.
    with OfflineServer(tmp_path / "s.sqlite3", latency=30.0, faults=[]) as slow:
        client = openai.OpenAI(base_url=slow.base_url, api_key="x", max_retries=0)
        pending = client.responses.create(model=MODEL, input=EMAIL, tools=DESK_TOOLS,
                                          background=True)
    with OfflineServer(tmp_path / "s.sqlite3", faults=[]) as again:
        client = openai.OpenAI(base_url=again.base_url, api_key="x", max_retries=0)
        failed = client.responses.retrieve(pending.id)
        assert failed.status == "failed" and "shut down" in failed.error.message


def test_cancel_refuses_what_it_cannot_cancel(client: openai.OpenAI) -> None:
    response = create(client)
    with refused(openai.BadRequestError, "background=true"):
        client.responses.cancel(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_unknown")
    with refused(openai.BadRequestError, "store"):
        create(client, background=True, store=False)


# -- input items ------------------------------------------------------------------------------

def chain_of_three(client: openai.OpenAI) -> Response:
    first = create(client, prompt_cache_key="k")
    (call,) = [item for item in first.output if item.type == "function_call"]
    second = create(client, previous_response_id=first.id, input=[{
        "type": "function_call_output", "call_id": call.call_id,
        "output": json.dumps({"error": "No order B2001 was found for ana.ruiz@example.com."})}])
    return create(client, previous_response_id=second.id, input=[
        {"role": "user", "content": "The customer wrote back:\n\nIt's order B2002, sorry."}])


def test_input_items_lists_everything_the_model_read(client: openai.OpenAI,
                                                     seeing: SeeingBrain) -> None:
    third = chain_of_three(client)

    raw = raw_json(client.responses.input_items.with_raw_response.list(third.id, limit=100,
                                                                       order="asc"))
    page = conforms(ResponseItemList, raw)
    assert raw["object"] == "list" and raw["has_more"] is False
    assert (page.first_id, page.last_id) == (page.data[0].id, page.data[-1].id)
    assert len({item.id for item in page.data}) == len(page.data)
    # The same items, in the same order, as the brain was shown for the third response.
    assert [item.type for item in page.data] == [i["type"] for i in seeing.seen[-1]]
    assert page.data[0].content[0].text == EMAIL
    assert page.data[-1].content[0].text.endswith("It's order B2002, sorry.")
    # Ids are stable from one call to the next (cursors depend on it).
    again = client.responses.input_items.list(third.id, limit=100, order="asc")
    assert [item.id for item in again.data] == [item.id for item in page.data]


def test_input_items_paginate_with_after_limit_and_order(client: openai.OpenAI) -> None:
    third = chain_of_three(client)
    everything = client.responses.input_items.list(third.id, limit=100, order="asc").data

    first_page = client.responses.input_items.list(third.id, limit=2)   # newest first
    assert [i.id for i in first_page.data] == [i.id for i in everything[::-1][:2]]
    assert first_page.has_more is True
    after = client.responses.input_items.list(third.id, limit=2, after=first_page.data[-1].id)
    assert [i.id for i in after.data] == [i.id for i in everything[::-1][2:4]]
    # The SDK's auto-pagination walks every page by cursor.
    walked = list(client.responses.input_items.list(third.id, limit=1, order="asc"))
    assert [i.id for i in walked] == [i.id for i in everything]
    for item in walked:
        conforms(ResponseItem, item.model_dump(mode="json", exclude_none=True))
    last = client.responses.input_items.list(third.id, after=everything[0].id)
    assert last.data == [] and last.has_more is False


@pytest.mark.parametrize(("query", "param"), [
    ({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "sideways"}, "order"),
    ({"after": "msg_nowhere"}, "after"),
])
def test_input_items_refuse_bad_queries(client: openai.OpenAI, query, param) -> None:
    response = create(client)
    with refused(openai.BadRequestError, param=param):
        client.responses.input_items.list(response.id, **query)


def test_input_items_of_an_unknown_response_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_unknown")


# -- input tokens, compaction -----------------------------------------------------------------

def test_input_tokens_count_what_create_would_bill(client: openai.OpenAI) -> None:
    first = create(client)
    counted = conforms(InputTokenCountResponse, raw_json(
        client.responses.input_tokens.with_raw_response.count(
            model=MODEL, input="Any news?", previous_response_id=first.id, tools=DESK_TOOLS)))
    second = create(client, input="Any news?", previous_response_id=first.id)
    assert counted.object == "response.input_tokens"
    assert counted.input_tokens == second.usage.input_tokens


def test_compact_folds_the_conversation_into_one_item_that_restores_it(
        client: openai.OpenAI, seeing: SeeingBrain) -> None:
    third = chain_of_three(client)
    seen_before = seeing.seen[-1]
    output = raw_json(client.responses.with_raw_response.retrieve(third.id))["output"]
    compacted = conforms(CompactedResponse, raw_json(client.responses.with_raw_response.compact(
        model=MODEL, previous_response_id=third.id)))
    assert [item.type for item in compacted.output] == ["compaction"]

    item = compacted.output[0].model_dump(mode="json", exclude_none=True)
    fresh = create(client, input=[item, {"role": "user", "content": "Any news?"}])
    assert seeing.seen[-1][:-1] == seen_before + output
    assert fresh.status == "completed"
    with refused(openai.BadRequestError, "compaction"):
        create(client, input=[{**item, "encrypted_content": "forged"}])


# -- parse ---------------------------------------------------------------------------------

class Answer(pydantic.BaseModel):
    answer: int


def test_structured_output_is_refused_with_a_clear_400(client: openai.OpenAI) -> None:
    with refused(openai.BadRequestError, "structured output", param="text.format"):
        client.responses.parse(model=MODEL, input="What is 2+2?", text_format=Answer)
    with refused(openai.BadRequestError, "json_object"):
        create(client, text={"format": {"type": "json_object"}})


def test_parse_without_a_text_format_works_like_create(client: openai.OpenAI) -> None:
    parsed = client.responses.parse(model=MODEL, input=EMAIL, tools=DESK_TOOLS)
    assert parsed.output_parsed is None
    assert calls(parsed) == [("lookup_order", {"order_id": "B2001"})]


# -- encrypted reasoning, the history sent back, the clock -------------------------------------

ENCRYPTED = ["reasoning.encrypted_content"]


def as_input(response: Response) -> list[dict]:
    """A response's output items as a client keeps them to send back (exactly as they came)."""
    return [item.to_dict(mode="json") for item in response.output]


def outputs(response: Response, output: dict) -> list[dict]:
    """A function_call_output for each call of ``response``, all answering ``output``."""
    return [{"type": "function_call_output", "call_id": item.call_id, "output": json.dumps(output)}
            for item in response.output if item.type == "function_call"]


ORDER = {"order_id": "B2001", "customer": {"name": "Ana Ruiz", "email": "ana.ruiz@example.com"},
         "items": [
    {"sku": "TRAY-1", "name": "Serving tray", "price": 40.0, "quantity": 1}]}


def test_include_seals_each_reasoning_item_and_the_sdk_types_accept_it(
        server: OfflineServer, client: openai.OpenAI) -> None:
    raw = raw_json(client.responses.with_raw_response.create(
        model=MODEL, input=EMAIL, tools=DESK_TOOLS, include=ENCRYPTED))
    response = conforms(Response, raw)
    [reasoning] = [item for item in response.output if item.type == "reasoning"]
    blob = reasoning.encrypted_content
    assert isinstance(blob, str) and len(blob) > 40
    assert reasoning.summary[0].text.split()[0] not in blob   # opaque, not readable text
    # Streamed: the finished item carries the blob; the announced skeleton does not.
    events = raw_events(server, "/responses", {"model": MODEL, "input": EMAIL,
                                               "tools": DESK_TOOLS, "include": ENCRYPTED,
                                               "stream": True})
    parsed = [conforms(ResponseStreamEvent, event) for event in events]
    added = [e.item for e in parsed if e.type == "response.output_item.added"
             and e.item.type == "reasoning"]
    done = [e.item for e in parsed if e.type == "response.output_item.done"
            and e.item.type == "reasoning"]
    assert added[0].encrypted_content is None and done[0].encrypted_content
    assert parsed[-1].response.output[0].encrypted_content == done[0].encrypted_content
    # Without include, no blob at all.
    plain = create(client)
    assert all(getattr(item, "encrypted_content", None) is None for item in plain.output)


def test_the_history_sent_back_is_read_like_a_chained_request(client: openai.OpenAI,
                                                              seeing: SeeingBrain) -> None:
    email = {"type": "message", "role": "user", "content": EMAIL}
    first = create(client, input=[email], include=ENCRYPTED, prompt_cache_key="ana")
    turn = outputs(first, ORDER)
    chained = create(client, previous_response_id=first.id, input=turn, include=ENCRYPTED,
                     prompt_cache_key="ana")
    history = [email, *as_input(first), *turn]
    stateless = create(client, input=history, include=ENCRYPTED, store=False,
                       prompt_cache_key="ana")
    # The same decision, the same billable input, and the cache serves what it has seen.
    assert calls(stateless) == calls(chained) == [("check_refund_policy",
                                                  {"order_id": "B2001"})]
    assert stateless.usage.input_tokens == chained.usage.input_tokens
    assert stateless.usage.input_tokens_details.cached_tokens > 0
    assert [i.get("type", "message") for i in seeing.seen[-1]] == \
        [i.get("type", "message") for i in seeing.seen[-2]]
    # store=false: nothing to continue from, nothing to retrieve.
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(stateless.id)


def _tampered(blob: str) -> str:
    middle = len(blob) // 2
    return blob[:middle] + ("A" if blob[middle] != "A" else "B") + blob[middle + 1:]


@pytest.mark.parametrize("change", ["edited", "moved", "garbage"])
def test_reasoning_whose_blob_does_not_verify_is_a_400(client: openai.OpenAI, change) -> None:
    first = create(client, include=ENCRYPTED)
    history = [{"type": "message", "role": "user", "content": EMAIL}, *as_input(first),
               *outputs(first, ORDER)]
    index = next(i for i, item in enumerate(history) if item.get("type") == "reasoning")
    reasoning = history[index]
    if change == "edited":
        reasoning["encrypted_content"] = _tampered(reasoning["encrypted_content"])
    elif change == "moved":
        reasoning["id"] = "rs_" + "0" * 32   # a genuine blob, on another item
    else:
        reasoning["encrypted_content"] = "not-a-blob"
    with refused(openai.BadRequestError, "could not be verified",
                 param=f"input[{index}].encrypted_content", code="invalid_encrypted_content"
                 ) as caught:
        create(client, input=history, include=ENCRYPTED, store=False)
    assert reasoning["id"] in error_fields(caught.value)["message"]


def test_a_blob_still_opens_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    with OfflineServer(path, faults=[]) as first_server:
        sdk = openai.OpenAI(base_url=first_server.base_url, api_key="x", max_retries=0)
        first = create(sdk, include=ENCRYPTED)
    with OfflineServer(path, faults=[]) as second_server:
        sdk = openai.OpenAI(base_url=second_server.base_url, api_key="x", max_retries=0)
        history = [{"type": "message", "role": "user", "content": EMAIL}, *as_input(first),
                   *outputs(first, ORDER)]
        assert calls(create(sdk, input=history, store=False))[0][0] == "check_refund_policy"


def test_include_values_are_checked(server: OfflineServer) -> None:
    for include, fragment in (("reasoning.encrypted_content", "array of strings"),
                              (["reasoning.everything"], "reasoning.everything")):
        status, _type, body = exchange(server, "POST", "/v1/responses", json.dumps(
            {"model": MODEL, "input": "hi", "include": include}).encode(),
            {"Content-Type": "application/json"})
        assert status == 400 and fragment in error_fields(body)["message"]
        assert error_fields(body)["param"] in ("include", None)


def test_the_clock_moves_forward_and_stored_responses_expire(server: OfflineServer,
                                                            client: openai.OpenAI) -> None:
    response = create(client)
    status, _type, body = exchange(server, "POST", "/_offline/clock",
                                   json.dumps({"advance_seconds": 29 * 86400}).encode(),
                                   {"Content-Type": "application/json"})
    assert status == 200 and body["now"] >= time.time() + 29 * 86400 - 60
    assert client.responses.retrieve(response.id).id == response.id
    server.advance_clock(days=2)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with refused(openai.NotFoundError, response.id):
        create(client, previous_response_id=response.id, input=outputs(response, ORDER))
    for bad in ({"advance_seconds": -1}, {"advance_seconds": "31d"}, {}):
        status, _type, body = exchange(server, "POST", "/_offline/clock",
                                       json.dumps(bad).encode(),
                                       {"Content-Type": "application/json"})
        assert status == 400 and error_fields(body)["param"] in ("advance_seconds", None)


# -- errors: JSON, in the OpenAI shape, from every path and method -------------------------------


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/nowhere", 404),
    ("POST", "/v1/chat/completions", 404),
    ("PUT", "/v1/responses/resp_x", 405),
    ("PATCH", "/v1/responses", 405),
    ("DELETE", "/v1/responses", 405),
    ("POST", "/v1/responses/resp_x/input_items", 405),
    ("GET", "/v1/responses/resp_x/cancel", 405),
    ("DELETE", "/v1/responses/resp_x", 404),
    ("GET", "/v1/responses/resp_x/input_items", 404),
    ("POST", "/v1/responses/resp_x/cancel", 404),
    ("GET", "/v1/responses", 400),      # the WebSocket mode's URL
    ("TRACE", "/v1/responses", 501),    # a method the standard library answers itself
])
def test_every_error_is_json_in_the_api_shape(server: OfflineServer, method, path,
                                              status) -> None:
    got, content_type, body = exchange(server, method, path)
    assert (got, content_type) == (status, "application/json")
    error_fields(body)   # checks the shape of the dialect's body


def test_routes_are_matched_before_the_body_is_read(server: OfflineServer) -> None:
    # A cancel with a body that is not JSON is still a cancel (of an unknown response).
    status, _type, body = exchange(server, "POST", "/v1/responses/resp_x/cancel", b"{not json",
                               {"Content-Type": "application/json"})
    assert status == 404 and error_fields(body)["code"] in ("not_found", GRPC_TEXT[404])
    status, _type, body = exchange(server, "POST", "/v1/responses", b"{not json",
                               {"Content-Type": "application/json"})
    assert status == 400 and "JSON" in error_fields(body)["message"]


def test_a_malformed_request_line_gets_json_too(server: OfflineServer) -> None:
    import socket

    host, port = server.base_url.removeprefix("http://").split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"GET /v1/responses with spaces HTTP/1.1\r\n\r\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        answer = b"".join(chunks).decode()
    head, _, body = answer.partition("\r\n\r\n")
    assert " 400 " in head.splitlines()[0] and "application/json" in head
    error_fields(body)


@pytest.mark.parametrize("param", ["conversation", "prompt"])
def test_parameters_the_stand_in_has_no_equivalent_for_are_refused(server: OfflineServer,
                                                                   param) -> None:
    value = {"conversation": "conv_1", "prompt": {"id": "pmpt_1"}}[param]
    status, _type, body = exchange(server, "POST", "/v1/responses", json.dumps(
        {"model": MODEL, "input": "hi", param: value}).encode(),
        {"Content-Type": "application/json"})
    assert status == 400 and error_fields(body)["param"] in (param, None)


# -- its lane: declared tools only, tool_choice, a plain answer outside the desk ----------------

def test_it_never_calls_a_tool_the_request_did_not_declare(client: openai.OpenAI) -> None:
    response = create(client, input="What's the weather in Lisbon?", tools=WEATHER)
    assert calls(response) == []
    assert "only play" in response.output_text and "refund desk" in response.output_text

    no_tools = create(client, input="What is 2+2?", tools=[])
    assert no_tools.output_text.strip() != "DONE" and "refund desk" in no_tools.output_text


def test_a_missing_desk_tool_is_described_not_called(client: openai.OpenAI) -> None:
    only_send = [t for t in DESK_TOOLS if t["name"] == "send_customer_message"]
    response = create(client, tools=only_send)
    assert calls(response) == []
    assert "does not let me call lookup_order" in response.output_text
    assert '"order_id": "B2001"' in response.output_text


def test_tool_choice_none_writes_instead_of_calling(client: openai.OpenAI) -> None:
    response = create(client, input="From: Ana <a@example.com>\n\nMy tray cracked.",
                      tool_choice="none")
    assert calls(response) == []
    assert 'tool_choice "none"' in response.output_text
    assert "Could you send me your order number?" in response.output_text


def test_tool_choice_required_and_named_functions_are_honoured(client: openai.OpenAI) -> None:
    assert calls(create(client, tool_choice="required")) == [
        ("lookup_order", {"order_id": "B2001"})]
    forced = create(client, tool_choice={"type": "function", "name": "check_refund_policy"})
    assert calls(forced) == [("check_refund_policy", {"order_id": "B2001"})]
    allowed = create(client, tool_choice={
        "type": "allowed_tools", "mode": "auto",
        "tools": [{"type": "function", "name": "send_customer_message"}]})
    assert calls(allowed) == [] and "lookup_order" in allowed.output_text


@pytest.mark.parametrize(("tools", "tool_choice", "match"), [
    (DESK_TOOLS, {"type": "function", "name": "get_weather"}, "not among the request's tools"),
    (WEATHER, "required", "only plays"),
    (WEATHER, {"type": "function", "name": "get_weather"}, "only plays"),
    (DESK_TOOLS, {"type": "function", "name": "issue_refund"}, "no call to issue_refund"),
    ([], "required", "declares no function tools"),
    (DESK_TOOLS, {"type": "web_search_preview"}, "only calls function tools"),
    (DESK_TOOLS, "sometimes", "tool_choice"),
])
def test_a_tool_choice_it_cannot_honour_is_a_400(client: openai.OpenAI, tools, tool_choice,
                                                 match) -> None:
    with refused(openai.BadRequestError, re.escape(match), param="tool_choice"):
        create(client, tools=tools, tool_choice=tool_choice)


def test_a_forced_call_with_no_order_to_look_up_is_refused(client: openai.OpenAI) -> None:
    # "required" may ask for the order number; a forced look-up has no order to look up.
    asked = create(client, input="Hello, my tray cracked.", tool_choice="required")
    assert [name for name, _ in calls(asked)] == ["send_customer_message"]
    with refused(openai.BadRequestError, "no call to lookup_order"):
        create(client, input="Hello, my tray cracked.",
               tool_choice={"type": "function", "name": "lookup_order"})


def test_instructions_reach_the_brain_for_that_request_only(client: openai.OpenAI,
                                                            seeing: SeeingBrain) -> None:
    first = create(client, instructions="You handle refunds.")
    assert seeing.seen[-1][0] == {"type": "message", "role": "system",
                                  "content": "You handle refunds."}
    create(client, input="Thanks", previous_response_id=first.id)
    assert all(item.get("role") != "system" for item in seeing.seen[-1])


# -- reading: per clause, English only, order numbers from the customer's words ------------------

def desk_turns(email: str, facts: dict[str, Any], sender: str = "Ana Ruiz <ana2024@example.com>"
               ) -> list[Reply]:
    """Drives the desk through one email, answering its look-ups; returns each step."""
    conversation: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": f"From: {sender}\nSubject: Help\n\n{email}"}]
    outputs = {"lookup_order": {"order_id": facts["order_id"], "customer": {"name": "Ana Ruiz"}},
               "check_refund_policy": {"facts": facts}, "send_customer_message": {"status": "sent"},
               "escalate": {"status": "escalated"}}
    steps = []
    for _ in range(6):
        reply = respond(conversation, DESK_TOOLS)
        steps.append(reply)
        if not reply.calls or reply.calls[0][0] == "issue_refund":
            return steps
        for n, (name, args) in enumerate(reply.calls):
            call_id = f"call_{len(conversation)}_{n}"
            conversation += [{"type": "function_call", "call_id": call_id, "name": name,
                              "arguments": json.dumps(args)},
                             {"type": "function_call_output", "call_id": call_id,
                              "output": json.dumps(outputs[name])}]
    return steps


def order_facts(*lines: tuple[str, str, bool]) -> dict[str, Any]:
    return {"order_id": "B2001", "delivered": True, "days_since_delivery": 2, "window_days": 30,
            "within_window": True, "warranty": [], "lines": [
                {"line": sku, "name": name, "final_sale": final, "price": 20.0,
                 "status": "final sale" if final else "refundable"}
                for sku, name, final in lines]}


TRAY_AND_CUPS = order_facts(("TRY-BMB", "Bamboo serving tray", False),
                            ("CUP-GLS-4", "Tumblers, pack of 4", False))


@pytest.mark.parametrize(("email", "expected"), [
    ("Order B2001: the tray showed up split in two.", [("TRY-BMB", "damaged")]),
    ("Order B2001. The serving tray came apart in the box, but the tumblers are perfect.",
     [("TRY-BMB", "damaged")]),
    ("Order B2001: the tumblers are still sealed and not for me; the tray is lovely, keeping it.",
     [("CUP-GLS-4", "changed_mind")]),
    ("Order B2001: the tray arrived with a dent, and I also no longer want the tumblers.",
     [("TRY-BMB", "damaged"), ("CUP-GLS-4", "changed_mind")]),
])
def test_each_clause_is_read_for_its_own_items(email, expected) -> None:
    steps = desk_turns(email, TRAY_AND_CUPS)
    name, args = steps[-1].calls[0]
    assert name == "issue_refund"
    assert [(line["line"], line["reason"]) for line in args["lines"]] == expected


def test_order_numbers_come_from_the_customers_words_never_the_address() -> None:
    steps = desk_turns("My tray cracked, please help.", TRAY_AND_CUPS,
                       sender="Ana Ruiz <ana2024@example.com>")
    assert [name for name, _ in steps[0].calls] == ["send_customer_message"]
    assert "order number" in steps[0].calls[0][1]["message"]
    assert "ANA2024" not in json.dumps([s.__dict__ for s in steps])
    # A number in a domain is not an order either, but one in the subject is theirs.
    conversation = [{"type": "message", "role": "user", "content":
                     "From: b2001@shop-a1043.example\nSubject: Order C3003\n\nIt broke."}]
    assert respond(conversation, DESK_TOOLS).calls == [("lookup_order", {"order_id": "C3003"})]


@pytest.mark.parametrize(("email", "language", "words"), [
    ("Hola, mi pedido B2001 llegó roto y quiero que me devuelvan el dinero, por favor.",
     "Spanish", "sobre el pedido B2001. Lo he pasado a una persona"),
    ("Bonjour, ma commande B2001 est arrivée cassée. Je veux être remboursé, merci.", "French",
     "au sujet de la commande B2001. Je l'ai transmis"),
    ("Hallo, meine Bestellung B2001 ist kaputt angekommen. Ich möchte mein Geld zurück.",
     "German", "zur Bestellung B2001. Ich habe sie an jemanden"),
    ("Olá, o meu pedido B2001 chegou partido e quero o meu dinheiro de volta, por favor.",
     "Portuguese", "sobre a encomenda B2001. Passei-a a uma pessoa"),
    ("注文B2001の商品が壊れて届きました。返金をお願いします。", None,
     "I can only read English"),
])
def test_other_languages_go_to_a_person_and_the_customer_hears_it_in_theirs(email, language,
                                                                            words) -> None:
    """Issue 38: the stand-in reads only English. It guesses at nothing, raises the ticket to a
    person (escalate, cannot_read) and tells the customer so in their own language where it
    has the words; the order number they gave is never asked for again."""
    steps = desk_turns(email, TRAY_AND_CUPS)
    names = [step.calls[0][0] if step.calls else None for step in steps]
    # (It looks the order up first where it could decline by dates alone: not here.)
    assert names == (["lookup_order", "check_refund_policy"] if language else []) + [
        "escalate", "send_customer_message", None]
    (raise_, step, note) = steps[-3:]
    [(name, args)] = raise_.calls
    assert name == "escalate" and args["kind"] == "cannot_read"
    assert (language or "a script") in args["reason"] and "B2001" in args["reason"]
    [(name, args)] = step.calls
    assert name == "send_customer_message" and words in args["message"]
    assert "order number" not in args["message"] and "?" not in args["message"]
    assert not note.calls and "no refund proposed" in note.text


def test_a_request_past_the_window_is_declined_in_the_customers_language() -> None:
    """Dates alone settle it, whatever the email says: no person needed, no question asked."""
    late = {**TRAY_AND_CUPS, "days_since_delivery": 45, "within_window": False,
            "warranty": ["Bamboo serving tray"]}
    steps = desk_turns("Hallo, ich möchte das Tablett aus der Bestellung B2001 zurückgeben, es "
                       "gefällt mir nicht. Viele Grüße", late)
    assert [s.calls[0][0] for s in steps[:3]] == ["lookup_order", "check_refund_policy",
                                                  "send_customer_message"]
    message = steps[2].calls[0][1]["message"]
    assert "vor 45 Tagen geliefert" in message and "bis 30 Tage" in message
    assert "Bamboo serving tray: Hier gilt die Herstellergarantie" in message
    assert "?" not in message and not steps[3].calls


def test_english_with_a_foreign_word_or_two_is_still_english() -> None:
    steps = desk_turns("Hola! Order B2001: the tray arrived smashed, muchas gracias.",
                       TRAY_AND_CUPS)
    assert steps[-1].calls[0][0] == "issue_refund"


def test_the_reader_knows_nothing_of_the_corpus_shop() -> None:
    """The brain corpus (tests/corpus) is read as an unseen shop: none of its order numbers,
    skus, customers' names or item names appears in the brain's or the reader's source."""
    source = "\n".join(Path(module.__file__).read_text().lower() for module in (brain, reader))
    corpus = Path(__file__).parents[1] / "corpus" / "shop"
    orders = json.loads((corpus / "orders.json").read_text())["orders"]
    names = set()
    for order in orders:
        names |= {order["order_id"].lower(), *order["customer"]["name"].lower().split()}
        for item in order["items"]:
            names |= {item["sku"].lower(), re.split(r"[,(]", item["name"].lower())[0].strip()}
    assert sorted(n for n in names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])",
                                                source)) == []


def test_the_lexicon_knows_nothing_of_the_samples() -> None:
    """No item, person, order or amount of the sample shop appears in the brain's source (nor
    in its reader's)."""
    source = "\n".join(Path(module.__file__).read_text().lower() for module in (brain, reader))
    orders = json.loads((PROJECT_ROOT / "data" / "orders.json").read_text())["orders"]
    words = set()
    for order in orders:
        words |= {order["order_id"].lower(), *order["customer"]["name"].lower().split()}
        for item in order["items"]:
            words |= {w for w in re.findall(r"[a-z]{5,}", item["name"].lower())}
            words.add(item["sku"].lower())
    words |= {"grind", "carafe", "94.95", "31.50", "48.00"}
    # Whole words only: "stand-in" is not the stand mixer.
    assert sorted(w for w in words if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", source)) \
        == []


# -- the simulated customer -----------------------------------------------------------------------

def persona(client: openai.OpenAI, *emails: tuple[str, str]) -> str:
    """The simulated customer's next reply to a transcript of (who, text) emails."""
    transcript = "\n\n".join(f"--- Email from {who} ---\n{text}" for who, text in emails)
    response = client.responses.create(model=MODEL, store=False, input=[
        {"type": "message", "role": "system", "content": customer_brief("Ana Ruiz", "The Shop")},
        {"type": "message", "role": "user", "content": transcript}])
    return response.output_text


ASKED = ("the customer", "Order B2001: the tray and the tumblers both arrived broken. I want all "
                         "$40.00 back.")


def test_the_customer_thanks_support_for_the_refund_asked_for(client: openai.OpenAI) -> None:
    refunded = ("support", "Hi Ana,\n\nI've refunded $40.00 to your original payment method.")
    reply = persona(client, ASKED, refunded)
    assert "$40.00" in reply and "Thanks" in reply and not brain._threats(reply)
    assert persona(client, ASKED, refunded, ("the customer", reply),
                   ("support", "Thank you for letting me know.")) == "DONE"


def test_the_customer_pushes_back_on_a_partial_refund_then_accepts(client: openai.OpenAI) -> None:
    partial = ("support", "Hi Ana,\n\nI've refunded $20.00 to your original payment method: "
                          "bamboo serving tray $20.00.\n\nOur team could not refund the tumblers. "
                          "Their note: They arrived whole.")
    first = persona(client, ASKED, partial)
    assert first.startswith("$20.00 is not acceptable.") and "$40.00" in first
    assert "could not refund the tumblers" in first
    assert set(brain._threats(first)) == {"a chargeback", "a bad review", "a manager"}
    held = ("support", "We've refunded $20.00, which is the most our refund policy allows.")
    second = persona(client, ASKED, partial, ("the customer", first), held)
    assert second.startswith("Fine. I'll take the refund") and not brain._threats(second)
    assert persona(client, ASKED, partial, ("the customer", first), held,
                   ("the customer", second), ("support", "Thank you.")) == "DONE"


def test_after_a_rejection_the_customer_never_claims_a_refund(client: openai.OpenAI) -> None:
    rejected = ("support", "Hi Ana,\n\nA member of our team reviewed your request for order "
                           "B2001, and we aren't able to issue this refund. Their note: Send a "
                           "photo of the damage\n\nI'm sorry.")
    first = persona(client, ASKED, rejected)
    assert first.startswith("No refund at all for order B2001?")
    assert '"Send a photo of the damage"' in first and brain._threats(first)
    held = ("support", "A member of our team reviewed your request and couldn't approve it.")
    second = persona(client, ASKED, rejected, ("the customer", first), held)
    assert second == "Fine. I'll send the photo, but I expect this sorted out quickly this time."
    for reply in (first, second):
        assert "take the refund" not in reply.lower() and "refunded" not in reply.lower()
        assert reply[0].isupper()


def test_the_customer_answers_a_question_from_the_team(client: openai.OpenAI) -> None:
    no_number = ("the customer", "My tray showed up split in two. Refund me.")
    asked = ("support", "Thanks for getting in touch. Could you send me your order number?")
    answer = persona(client, no_number, asked)
    assert "order number" in answer and not re.search(r"[A-Z]{1,3}-?\d{3,}", answer)
    what = ("support", "I'm sorry something isn't right with order B2001. Could you tell me "
                       "what happened?")
    told = persona(client, ("the customer", "Order B2001, I want my money back."), what)
    assert told.startswith("I told you in my first email")
    told = persona(client, ("the customer", "Order B2001: the tray arrived cracked."), what)
    assert told.startswith("I already told you: order B2001: the tray arrived cracked")


def test_the_customer_has_nothing_to_say_before_support_writes(client: openai.OpenAI) -> None:
    assert persona(client, ASKED) == "DONE"


def test_the_angry_sample_after_a_rejection_makes_sense(agent, model) -> None:
    """The reproduction: ``refund-agent angry``, then ``reject --note "Send a photo"``."""
    run = agent.advance(agent.start_sample("angry").id)
    [approval] = agent.store.approvals("pending")
    agent.decide(approval.id, approve=False, by="Dana Kim", note="Send a photo",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    run = converse(agent, run.id)

    assert run.status == RunStatus.DONE and agent.payments.refunds() == []
    replies = [s.data["text"] for s in agent.store.steps(run.id) if s.kind == "reply"]
    assert len(replies) == 2 and "Send a photo" in replies[0]
    assert all(r[0].isupper() and "take the refund" not in r.lower() for r in replies)
    assert any(s.kind == "customer_done" for s in agent.store.steps(run.id))
    notes = " ".join(s.data["text"] for s in agent.store.steps(run.id) if s.kind == "note")
    assert "a chargeback" in notes and "a manager" in notes


def test_brain_refusals_reach_the_client_as_400_not_500(tmp_path: Path) -> None:
    def refusing(conversation, tools):
        raise ApiError(400, "Not here.", param="tool_choice")

    with OfflineServer(tmp_path / "s.sqlite3", brain=refusing, faults=[]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        with refused(openai.BadRequestError, "Not here."):
            create(client)


@pytest.mark.parametrize("customer", ["Maya Chen", None, 42, ["Maya"], {"name": 7}])
def test_tool_outputs_of_any_shape_are_read_not_trusted(customer: Any) -> None:
    """A caller may send back any JSON as a tool's output; the model answers, never a 500."""
    conversation = [
        {"role": "user", "content": "From: Maya <maya.chen@example.com>\nOrder A1043 broke."},
        {"type": "function_call", "call_id": "c1", "name": "lookup_order",
         "arguments": json.dumps({"order_id": "A1043"})},
        {"type": "function_call_output", "call_id": "c1",
         "output": json.dumps({"order_id": "A1043", "customer": customer})},
    ]
    reply = respond(conversation, tool_schemas())
    assert isinstance(reply, Reply)
    assert reply.calls or reply.text
