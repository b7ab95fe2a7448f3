"""The Responses API wire format, as pure functions, for the offline server.

Requests: validation, ``input`` normalisation and OpenAI-style error bodies.
Responses: output items built from a brain ``Reply``, simulated usage and
cost, the ``Response`` object, and its expansion into the server-sent events
the ``openai`` SDK expects (plus how latency is spread over them). The HTTP
server in :mod:`refund_agent.offline.server` only decides *when* to send what.

Shapes follow the installed SDK's models in ``openai/types/responses`` (the
tests parse everything with ``_strict_response_validation=True``).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = [
    "ApiError",
    "ReplyLike",
    "build_output_items",
    "build_response",
    "build_usage",
    "cost_in_usd_ticks",
    "delta_delays",
    "encode_sse",
    "estimate_tokens",
    "fault_error",
    "new_id",
    "normalize_input",
    "not_found",
    "split_words",
    "stream_events",
    "validate_body",
]

# Simulated Grok-like prices in USD per million tokens.
PRICE_INPUT_PER_M = 3.00
PRICE_CACHED_INPUT_PER_M = 0.75
PRICE_OUTPUT_PER_M = 15.00
# xAI reports cost in "ticks": 10^10 ticks = 1 USD.
TICKS_PER_USD = 10**10
_PRICES_PER_M = (PRICE_INPUT_PER_M, PRICE_CACHED_INPUT_PER_M, PRICE_OUTPUT_PER_M)

# Function-call arguments have no word structure, so stream them in slices.
_ARGUMENT_CHUNK = 16
# Share of the latency spent before the first delta ("time to first token").
_FIRST_TOKEN_SHARE = 0.3

Item = dict[str, Any]


class ReplyLike(Protocol):
    """What the server needs from a brain reply (``brain.Reply`` or a test fake)."""

    reasoning: str
    text: str | None
    calls: list[tuple[str, dict[str, Any]]]


class ApiError(Exception):
    """An HTTP error answered with an OpenAI-style ``{"error": {...}}`` body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        self.headers = headers or {}


def not_found(response_id: str, param: str | None) -> ApiError:
    """The 404 answered for an unknown, expired or unstored response."""
    return ApiError(
        404, f"Response with id '{response_id}' not found.", param=param, code="not_found"
    )


def normalize_input(value: Any) -> list[Item]:
    """Turns a request's ``input`` into a list of item dicts.

    A string becomes one user message; role-only messages gain
    ``"type": "message"``. Items are copied so the recorded body stays as sent.

    Raises:
        ApiError: 400 if ``input`` is neither a string nor a list of objects.
    """
    if isinstance(value, str):
        return [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}
        ]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ApiError(
            400, "Invalid 'input': expected a string or an array of input items.", param="input"
        )
    return [{"type": "message", **item} if "type" not in item else dict(item) for item in value]


def validate_body(body: Any) -> None:
    """Checks the parts of a create request the server relies on.

    Raises:
        ApiError: 400 with a message naming the offending parameter.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    for name in ("model", "input"):
        if body.get(name) is None:
            raise ApiError(
                400,
                f"Missing required parameter: '{name}'.",
                param=name,
                code="missing_required_parameter",
            )
    if not isinstance(body["model"], str) or not body["model"]:
        raise ApiError(400, "Invalid 'model': expected a non-empty string.", param="model")
    if not isinstance(body.get("tools") or [], list):
        raise ApiError(400, "Invalid 'tools': expected an array.", param="tools")
    if body.get("previous_response_id") and body.get("instructions"):
        raise ApiError(
            400,
            "Parameter 'instructions' is not supported with 'previous_response_id': "
            "send instructions only on the first request of a conversation.",
            param="instructions",
        )


def fault_error(fault: str) -> ApiError:
    """The error answered for a status fault, before anything is streamed."""
    # The SDK ignores `retry-after: 0` (it only honours positive delays) and would
    # back off 0.5 s+; `retry-after-ms: 1` makes its retries effectively immediate.
    headers = {"retry-after": "0", "retry-after-ms": "1"}
    if fault == "429":
        return ApiError(
            429,
            "Simulated rate limit.",
            kind="rate_limit_error",
            code="rate_limit_exceeded",
            headers=headers,
        )
    return ApiError(
        int(fault),
        f"Simulated server error {fault}.",
        kind="server_error",
        code="server_error",
        headers=headers,
    )


def new_id(prefix: str) -> str:
    """Returns a random identifier such as ``resp_<32 hex digits>``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def estimate_tokens(value: Any) -> int:
    """Estimates tokens as one per four characters.

    Args:
        value: A string (counted as is) or any JSON-serialisable value
            (counted by its compact JSON text).

    Returns:
        ``ceil(len(text) / 4)``.
    """
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    )
    return math.ceil(len(text) / 4)


def build_output_items(reply: ReplyLike) -> list[Item]:
    """Turns a brain reply into completed output items.

    Order is reasoning, then message, then one function call per requested call,
    mirroring how reasoning models emit their output.

    Args:
        reply: The brain's decision.

    Returns:
        Output items as Responses API dicts.
    """
    items: list[Item] = []
    if reply.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": new_id("rs"),
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
                "status": "completed",
            }
        )
    if reply.text:
        items.append(
            {
                "type": "message",
                "id": new_id("msg"),
                "role": "assistant",
                "status": "completed",
                "content": [_output_text(reply.text)],
            }
        )
    for name, arguments in reply.calls:
        items.append(
            {
                "type": "function_call",
                "id": new_id("fc"),
                "call_id": new_id("call"),
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
        )
    return items


def build_usage(
    conversation: list[Item], output: list[Item], cached_prefix: list[Item]
) -> dict[str, Any]:
    """Computes simulated token usage and xAI-style cost.

    Args:
        conversation: Everything the brain saw (input side).
        output: The output items produced.
        cached_prefix: The leading part of ``conversation`` that was already
            processed under the same prompt cache key (empty for a cache miss).

    Returns:
        A ``ResponseUsage`` dict with an extra ``cost_in_usd_ticks`` integer.
    """
    input_tokens = estimate_tokens(conversation)
    # The JSON of a list prefix is never longer than the JSON of the whole list,
    # but clamp anyway so cached <= input always holds.
    cached = min(estimate_tokens(cached_prefix), input_tokens) if cached_prefix else 0
    output_tokens = estimate_tokens(output)
    reasoning_text = "".join(
        part["text"] for item in output if item["type"] == "reasoning" for part in item["summary"]
    )
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": estimate_tokens(reasoning_text) if reasoning_text else 0
        },
        "total_tokens": input_tokens + output_tokens,
        "cost_in_usd_ticks": cost_in_usd_ticks(input_tokens - cached, cached, output_tokens),
    }


def cost_in_usd_ticks(uncached_input: int, cached_input: int, output: int) -> int:
    """Prices tokens at the simulated Grok rates, in integer ticks.

    Args:
        uncached_input: Input tokens not served from the prompt cache.
        cached_input: Input tokens served from the prompt cache.
        output: Output tokens, reasoning included.

    Returns:
        Cost in ticks (10^10 per USD).
    """
    # Per-token prices are whole ticks (e.g. $3/M = 30,000 ticks), so stay in integers.
    per_token = [round(price * TICKS_PER_USD / 1_000_000) for price in _PRICES_PER_M]
    return sum(
        count * ticks
        for count, ticks in zip((uncached_input, cached_input, output), per_token, strict=True)
    )


def build_response(
    body: dict[str, Any],
    *,
    response_id: str,
    created_at: float,
    output: list[Item],
    usage: dict[str, Any],
) -> dict[str, Any]:
    """Assembles a completed ``Response`` object, echoing request settings.

    Args:
        body: The request body (already validated).
        response_id: The new ``resp_…`` identifier.
        created_at: Creation time from the server's clock.
        output: Completed output items.
        usage: Usage dict from :func:`build_usage`.

    Returns:
        A dict that parses as ``openai.types.responses.Response``.
    """
    created = int(created_at)
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "completed_at": created,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "metadata": body.get("metadata") or {},
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": "default",
        "store": body.get("store", True) is not False,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": body.get("user"),
    }


def stream_events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Expands a completed response into the SSE events of its generation.

    The order matches what ``openai.lib.streaming.responses`` accumulates:
    ``response.created``, ``response.in_progress``, then for each output item
    ``output_item.added`` → part/delta/done events → ``output_item.done``, and
    finally ``response.completed`` carrying ``response`` unchanged.

    Args:
        response: A completed response from :func:`build_response`.

    Yields:
        Event dicts with ``type`` and a ``sequence_number`` counting from 0.
    """
    pending = {
        **response,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "completed_at": None,
    }
    raw: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    for index, item in enumerate(response["output"]):
        raw.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": _in_progress(item),
            }
        )
        raw.extend(_item_body_events(index, item))
        raw.append({"type": "response.output_item.done", "output_index": index, "item": item})
    raw.append({"type": "response.completed", "response": response})
    for sequence_number, event in enumerate(raw):
        yield {**event, "sequence_number": sequence_number}


def delta_delays(stream: list[dict[str, Any]], latency: float) -> list[float]:
    """Spreads ``latency`` over a stream: part before the first delta, the rest evenly.

    Returns:
        Seconds to sleep before each event (all zero when ``latency`` is 0).
    """
    deltas = [i for i, event in enumerate(stream) if event["type"].endswith(".delta")]
    delays = [0.0] * len(stream)
    if latency <= 0 or not deltas:
        return delays
    share = latency * (1 - _FIRST_TOKEN_SHARE) / len(deltas)
    for i in deltas:
        delays[i] = share
    delays[deltas[0]] += latency * _FIRST_TOKEN_SHARE
    return delays


def encode_sse(event: dict[str, Any]) -> bytes:
    """Serialises one event as ``event: <type>`` / ``data: <json>`` plus a blank line."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def split_words(text: str) -> list[str]:
    """Splits text into word chunks (each keeps its trailing whitespace).

    ``"".join(split_words(text)) == text`` always holds.
    """
    return [chunk for chunk in re.split(r"(?<=\s)(?=\S)", text) if chunk] or [text]


def _output_text(text: str) -> Item:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _in_progress(item: Item) -> Item:
    """Returns the skeleton announced by ``output_item.added`` (no text yet)."""
    skeleton = {**item, "status": "in_progress"}
    if item["type"] == "reasoning":
        skeleton["summary"] = []
    elif item["type"] == "message":
        skeleton["content"] = []
    elif item["type"] == "function_call":
        skeleton["arguments"] = ""
    return skeleton


def _item_body_events(index: int, item: Item) -> list[dict[str, Any]]:
    """Dispatches to the per-item-type event builder."""
    if item["type"] == "reasoning":
        return _reasoning_events(index, item)
    if item["type"] == "message":
        return _message_events(index, item)
    return _function_call_events(index, item)


def _reasoning_events(index: int, item: Item) -> list[dict[str, Any]]:
    where = {"item_id": item["id"], "output_index": index}
    events: list[dict[str, Any]] = []
    for summary_index, part in enumerate(item["summary"]):
        at = {**where, "summary_index": summary_index}
        events.append(
            {
                "type": "response.reasoning_summary_part.added",
                **at,
                "part": {"type": "summary_text", "text": ""},
            }
        )
        events.extend(
            {"type": "response.reasoning_summary_text.delta", **at, "delta": chunk}
            for chunk in split_words(part["text"])
        )
        events.append({"type": "response.reasoning_summary_text.done", **at, "text": part["text"]})
        events.append({"type": "response.reasoning_summary_part.done", **at, "part": part})
    return events


def _message_events(index: int, item: Item) -> list[dict[str, Any]]:
    where = {"item_id": item["id"], "output_index": index}
    events: list[dict[str, Any]] = []
    for content_index, part in enumerate(item["content"]):
        at = {**where, "content_index": content_index}
        events.append({"type": "response.content_part.added", **at, "part": _output_text("")})
        events.extend(
            {"type": "response.output_text.delta", **at, "delta": chunk, "logprobs": []}
            for chunk in split_words(part["text"])
        )
        events.append(
            {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []}
        )
        events.append({"type": "response.content_part.done", **at, "part": part})
    return events


def _function_call_events(index: int, item: Item) -> list[dict[str, Any]]:
    where = {"item_id": item["id"], "output_index": index}
    arguments = item["arguments"]
    chunks = [
        arguments[i : i + _ARGUMENT_CHUNK] for i in range(0, len(arguments), _ARGUMENT_CHUNK)
    ] or [""]
    events: list[dict[str, Any]] = [
        {"type": "response.function_call_arguments.delta", **where, "delta": chunk}
        for chunk in chunks
    ]
    events.append(
        {"type": "response.function_call_arguments.done", **where, "arguments": arguments}
    )
    return events
