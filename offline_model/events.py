"""The Responses API wire format, as pure functions, for the offline server.

Requests: validation (including what the stand-in refuses, with a clear 400),
``input`` normalisation (compaction items expanded) and OpenAI-style error
bodies. Responses: output items built from a brain ``Reply``, simulated usage
and cost, the ``Response`` object in each status (queued, in progress,
completed, failed, cancelled), its expansion into the server-sent events the
``openai`` SDK expects (plus how latency is spread over them), input items as
``input_items.list`` pages them, and compaction. The HTTP server in
:mod:`offline_model.server` only decides *when* to send what.

Shapes follow the installed SDK's models in ``openai/types/responses`` (the
tests parse everything with ``_strict_response_validation=True``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = [
    "TERMINAL",
    "ApiError",
    "build_compaction",
    "compaction_item",
    "function_tool_names",
    "input_item_page",
    "listed_item",
    "ReplyLike",
    "build_output_items",
    "build_response",
    "build_usage",
    "cost_in_usd_ticks",
    "delta_delays",
    "encode_sse",
    "estimate_tokens",
    "fault_error",
    "INCLUDE_ENCRYPTED_REASONING",
    "new_id",
    "normalize_input",
    "not_found",
    "readable",
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


# The dialects the stand-in speaks: xAI (the default) and OpenAI. They differ in error bodies,
# id shapes and whether ``instructions`` may go with ``previous_response_id``.
XAI, OPENAI = "xai", "openai"
DIALECTS = (XAI, OPENAI)
# The gRPC status texts xAI puts in a flat error body's "code" (grpc.io status codes), by the
# HTTP status it answers with (docs.x.ai/developers/debugging).
GRPC_TEXT = {
    400: "Client specified an invalid argument",
    401: "The request does not have valid authentication credentials for the operation",
    403: "The caller does not have permission to execute the specified operation",
    404: "Some requested entity (e.g., file or directory) was not found",
    405: "The operation is not implemented or is not supported/enabled in this service",
    409: "The operation was aborted",
    415: "Client specified an invalid argument",
    422: "Client specified an invalid argument",
    429: "Some resource has been exhausted",
    500: "Internal error",
    503: "The service is currently unavailable",
}


class ApiError(Exception):
    """An HTTP error, answered in the dialect's shape (see :meth:`render`).

    OpenAI's is nested, ``{"error": {"message", "type", "param", "code"}}`` (``body``); xAI's is
    flat, ``{"code": "<gRPC status text>", "error": "<message>"}``, where an explicit ``code``
    (such as ``previous_response_not_found``) takes the gRPC text's place when ``flat_code`` is
    set.
    """

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
        self.message, self.code = message, code
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        self.headers = headers or {}
        self.flat_code = False

    def render(self, dialect: str) -> dict[str, Any]:
        """The body this error is answered with in ``dialect``."""
        if dialect != XAI:
            return self.body
        code = self.code if self.flat_code and self.code else GRPC_TEXT.get(
            self.status, "Unknown error")
        return {"code": code, "error": self.message}


def not_found(response_id: str, param: str | None) -> ApiError:
    """The 404 answered for an unknown, expired or unstored response."""
    return ApiError(
        404, f"Response with id '{response_id}' not found.", param=param, code="not_found"
    )


def normalize_input(value: Any) -> list[Item]:
    """Turns a request's ``input`` into a list of item dicts.

    A string becomes one user message; role-only messages gain
    ``"type": "message"``; a compaction item (from ``POST /responses/compact``)
    is expanded back into the conversation it stands for. Items are copied so
    the recorded body stays as sent.

    Raises:
        ApiError: 400 if ``input`` is neither a string nor a list of objects,
            or holds an item the stand-in cannot use.
    """
    if isinstance(value, str):
        return [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}
        ]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ApiError(
            400, "Invalid 'input': expected a string or an array of input items.", param="input"
        )
    items: list[Item] = []
    for item in value:
        kind = item.get("type", "message")
        if kind == "compaction":
            items = _expand_compaction(items, item)
        elif kind == "item_reference":
            raise ApiError(
                400,
                "The offline stand-in does not resolve 'item_reference' input items: send the "
                "item itself, or continue the conversation with 'previous_response_id'.",
                param="input",
                code="unsupported_parameter",
            )
        else:
            items.append({"type": "message", **item} if "type" not in item else dict(item))
    return items


# Parameters the stand-in has no equivalent for: refused by name rather than ignored.
_REFUSED_PARAMETERS = {
    "conversation": "the Conversations API ('conversation'); chain responses with "
    "'previous_response_id' instead",
    "prompt": "stored prompt templates ('prompt'); send the prompt text as input",
}
_TOOL_CHOICE_MODES = ("none", "auto", "required")
INCLUDE_ENCRYPTED_REASONING = "reasoning.encrypted_content"
# What the SDK's ResponseIncludable names. Only the encrypted reasoning changes anything here (the
# others concern tools and logprobs the stand-in does not have); any other value is a 400.
_INCLUDABLE = frozenset({
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url",
    "code_interpreter_call.outputs", INCLUDE_ENCRYPTED_REASONING,
    "message.output_text.logprobs",
})


def validate_body(body: Any, dialect: str = XAI) -> None:
    """Checks the parts of a create request the server relies on or cannot honour.

    xAI refuses ``instructions`` with ``previous_response_id``; OpenAI takes them.

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
    if dialect == XAI and body.get("previous_response_id") and body.get("instructions"):
        raise ApiError(
            400,
            "Parameter 'instructions' is not supported with 'previous_response_id': "
            "send instructions only on the first request of a conversation.",
            param="instructions",
        )
    _validate_tools(body)
    _validate_text_format(body.get("text"))
    _validate_include(body.get("include"))
    if body.get("background") and body.get("store") is False:
        raise ApiError(
            400,
            "Background mode requires 'store': true, since its result is fetched later with "
            "GET /responses/{id}.",
            param="background",
        )
    for name, what in _REFUSED_PARAMETERS.items():
        if body.get(name) is not None:
            raise ApiError(
                400,
                f"The offline stand-in does not support {what}.",
                param=name,
                code="unsupported_parameter",
            )


def function_tool_names(tools: Any) -> list[str]:
    """The names of the function tools a request declares, in order."""
    return [
        tool["name"]
        for tool in tools or []
        if isinstance(tool, dict) and tool.get("type") == "function" and tool.get("name")
    ]


def _validate_tools(body: dict[str, Any]) -> None:
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(
        isinstance(tool, dict) and isinstance(tool.get("type"), str) for tool in tools
    ):
        raise ApiError(400, "Invalid 'tools': expected an array of tool objects.", param="tools")
    for index, tool in enumerate(tools):
        if tool["type"] == "function" and not (
            isinstance(tool.get("name"), str) and tool["name"]
        ):
            raise ApiError(
                400,
                f"Missing required parameter: 'tools[{index}].name'.",
                param=f"tools[{index}].name",
                code="missing_required_parameter",
            )
    declared = set(function_tool_names(tools))
    choice = body.get("tool_choice")
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICE_MODES:
            raise ApiError(
                400,
                f"Invalid 'tool_choice': expected one of {list(_TOOL_CHOICE_MODES)} or an object.",
                param="tool_choice",
            )
        if choice == "required" and not declared:
            raise ApiError(
                400,
                "'tool_choice' is 'required' but the request declares no function tools.",
                param="tool_choice",
            )
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "function":
        if choice.get("name") not in declared:
            raise ApiError(
                400,
                f"Tool choice names function {choice.get('name')!r}, which is not among the "
                "request's tools.",
                param="tool_choice",
            )
    elif kind == "allowed_tools":
        allowed = choice.get("tools")
        if choice.get("mode", "auto") not in ("auto", "required") or not isinstance(
            allowed, list
        ):
            raise ApiError(
                400,
                "Invalid 'tool_choice': allowed_tools needs a mode ('auto' or 'required') and "
                "a list of tools.",
                param="tool_choice",
            )
        for tool in allowed:
            if not isinstance(tool, dict) or tool.get("type") != "function" or (
                tool.get("name") not in declared
            ):
                raise ApiError(
                    400,
                    f"Invalid 'tool_choice': allowed tool {tool!r} is not a function tool the "
                    "request declares (the stand-in only calls function tools).",
                    param="tool_choice",
                )
    else:
        raise ApiError(
            400,
            f"The offline stand-in only calls function tools; 'tool_choice' of type {kind!r} "
            "is not supported.",
            param="tool_choice",
            code="unsupported_parameter",
        )


def _validate_include(include: Any) -> None:
    if include is None:
        return
    if not isinstance(include, list) or not all(isinstance(value, str) for value in include):
        raise ApiError(400, "Invalid 'include': expected an array of strings.", param="include")
    unknown = [value for value in include if value not in _INCLUDABLE]
    if unknown:
        raise ApiError(
            400,
            f"Invalid 'include' value {unknown[0]!r}: expected some of {sorted(_INCLUDABLE)}.",
            param="include",
        )


def _validate_text_format(text: Any) -> None:
    if text is None:
        return
    if not isinstance(text, dict):
        raise ApiError(400, "Invalid 'text': expected an object.", param="text")
    kind = (text.get("format") or {}).get("type", "text")
    if kind != "text":
        raise ApiError(
            400,
            f"The offline stand-in cannot produce structured output (text.format type {kind!r}): "
            "it only writes plain text, so responses.parse(text_format=...) and JSON modes "
            "are refused. Set XAI_API_KEY to use Grok.",
            param="text.format",
            code="unsupported_parameter",
        )


def fault_error(fault: str, dialect: str = XAI) -> ApiError:
    """The error answered for a status fault, before anything is streamed."""
    # The SDK ignores `retry-after: 0` (it only honours positive delays) and would
    # back off 0.5 s+; `retry-after-ms: 1` makes its retries effectively immediate.
    headers = {"retry-after": "0", "retry-after-ms": "1"}
    if fault == "credits":
        # A team out of credits: a 429 that no retry will cure (each provider's own words).
        if dialect == XAI:
            return ApiError(
                429,
                "Your team 0a1b2c3d-stand-in has either used all available credits or reached "
                "its monthly spending limit. To continue making API requests, please purchase "
                "more credits or raise your spending limit.",
                headers=headers,
            )
        return ApiError(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            kind="insufficient_quota",
            code="insufficient_quota",
            headers=headers,
        )
    if fault == "422":
        # xAI documents the status and its cause only (docs.x.ai/developers/debugging); the
        # words are the JSON deserializer's, as such 422 bodies read. No retry cures it.
        return ApiError(
            422,
            "Failed to deserialize the JSON body into the target type: input[3]: data did not "
            "match any variant of untagged enum ModelInput at line 1 column 2048",
        )
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


def response_id(dialect: str) -> str:
    """A response id in the dialect's shape: a UUID at xAI, ``resp_<hex>`` at OpenAI."""
    return str(uuid.uuid4()) if dialect == XAI else new_id("resp")


def call_ids(dialect: str) -> Iterator[str]:
    """The call ids of one response: xAI's ``call-<8 hex>-<index>`` (as in its reasoning guide,
    ``call-5faadddf-0``), or OpenAI's ``call_<hex>``."""
    stem = uuid.uuid4().hex[:8]
    index = 0
    while True:
        yield f"call-{stem}-{index}" if dialect == XAI else new_id("call")
        index += 1


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


def build_output_items(reply: ReplyLike, dialect: str = XAI) -> list[Item]:
    """Turns a brain reply into completed output items.

    Order is reasoning, then message, then one function call per requested call,
    mirroring how reasoning models emit their output.

    Args:
        reply: The brain's decision.
        dialect: whose call-id shape to use.

    Returns:
        Output items as Responses API dicts.
    """
    items: list[Item] = []
    ids = call_ids(dialect)
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
                "call_id": next(ids),
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
    # The encrypted reasoning stands for reasoning already counted (its summary here), so it is
    # left out: a conversation costs the same whether the server or the client keeps it.
    conversation, output = readable(conversation), readable(output)
    cached_prefix = readable(cached_prefix)
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


def readable(items: list[Item]) -> list[Item]:
    """``items`` without the encrypted content of reasoning items (copies where it is dropped)."""
    return [
        {k: v for k, v in item.items() if k != "encrypted_content"}
        if item.get("type") == "reasoning" and "encrypted_content" in item
        else item
        for item in items
    ]


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
    usage: dict[str, Any] | None,
    status: str = "completed",
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Assembles a ``Response`` object, echoing request settings.

    Args:
        body: The request body (already validated).
        response_id: The new ``resp_…`` identifier.
        created_at: Creation time from the server's clock.
        output: Output items (empty until a background response completes).
        usage: Usage dict from :func:`build_usage`, or None while there is none.
        status: ``completed``, or for background responses ``queued``,
            ``in_progress``, ``failed`` or ``cancelled``.
        error: The ``{"code", "message"}`` of a failed response.

    Returns:
        A dict that parses as ``openai.types.responses.Response``.
    """
    created = int(created_at)
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "completed_at": created if status == "completed" else None,
        "status": status,
        "background": bool(body.get("background")),
        "error": error,
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


# Statuses after which a response no longer changes.
TERMINAL = frozenset({"completed", "failed", "cancelled", "incomplete"})
# The event that closes a stream, by final status (a cancelled stream just ends).
_CLOSING_EVENT = {
    "completed": "response.completed",
    "failed": "response.failed",
    "incomplete": "response.incomplete",
}


def stream_events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Expands a response into the SSE events of its generation so far.

    The order matches what ``openai.lib.streaming.responses`` accumulates:
    ``response.created`` (then ``response.queued`` for a background response),
    ``response.in_progress``, then for each output item
    ``output_item.added`` → part/delta/done events → ``output_item.done``, and
    finally ``response.completed`` carrying ``response`` unchanged
    (``response.failed`` for a failed one; a cancelled one just ends). A
    response still queued or in progress yields only the events up to its
    status, so the same numbering continues once it finishes.

    Args:
        response: A response from :func:`build_response`.

    Yields:
        Event dicts with ``type`` and a ``sequence_number`` counting from 0.
    """
    status = response["status"]
    background = response.get("background", False)
    pending = {
        **response,
        "status": "queued" if background else "in_progress",
        "output": [],
        "usage": None,
        "completed_at": None,
        "error": None,
    }
    raw: list[dict[str, Any]] = [{"type": "response.created", "response": pending}]
    if background:
        raw.append({"type": "response.queued", "response": pending})
    if status != "queued":
        raw.append(
            {"type": "response.in_progress", "response": {**pending, "status": "in_progress"}}
        )
    if status in TERMINAL:
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
        if status in _CLOSING_EVENT:
            raw.append({"type": _CLOSING_EVENT[status], "response": response})
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
        # Real streams may announce an incomplete blob here; clients must take the one from
        # output_item.done or response.completed, so the skeleton carries none at all.
        skeleton.pop("encrypted_content", None)
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


# -- input items, as GET /responses/{id}/input_items lists them ------------------------------

_ID_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
}
_PAGE_DEFAULT, _PAGE_MAX = 20, 100


def listed_item(item: Item, owner: str, index: int) -> Item:
    """One input item in the shape ``input_items.list`` returns, with an ``id``.

    Items sent without an id get one derived from the response that received
    them and their position, so the same item keeps the same id on every call
    (which cursor pagination needs) without storing anything extra.
    """
    kind = item.get("type", "message")
    item_id = item.get("id")
    if not (isinstance(item_id, str) and item_id):
        digest = hashlib.sha256(f"{owner}:{index}".encode()).hexdigest()[:32]
        item_id = f"{_ID_PREFIX.get(kind, 'item')}_{digest}"
    listed: Item = {**item, "type": kind, "id": item_id}
    if kind == "message":
        content = item.get("content")
        parts = [content] if isinstance(content, str) else list(content or [])
        if item.get("role") == "assistant":
            listed["content"] = [
                part if isinstance(part, dict) and part.get("type") == "refusal"
                else _output_text(part if isinstance(part, str) else part.get("text", ""))
                for part in parts
            ]
        else:
            listed["role"] = item.get("role", "user")
            listed["content"] = [
                {"type": "input_text", "text": part} if isinstance(part, str) else part
                for part in parts
            ]
        listed.setdefault("status", "completed")
    elif kind in ("function_call", "function_call_output"):
        listed.setdefault("status", "completed")
    return listed


def input_item_page(items: list[Item], query: dict[str, list[str]]) -> dict[str, Any]:
    """One page of ``items`` (oldest first, each with an ``id``) as a list object.

    Args:
        items: Every input item of the response, oldest first.
        query: The parsed query string: ``after`` (an item id), ``limit``
            (1 to 100, default 20) and ``order`` (``asc`` or ``desc``, the default).

    Raises:
        ApiError: 400 for a bad limit or order, or an ``after`` that names no item.
    """
    order = query.get("order", ["desc"])[0]
    if order not in ("asc", "desc"):
        raise ApiError(400, "Invalid 'order': expected 'asc' or 'desc'.", param="order")
    raw_limit = query.get("limit", [str(_PAGE_DEFAULT)])[0]
    try:
        limit = int(raw_limit)
    except ValueError:
        limit = 0
    if not 1 <= limit <= _PAGE_MAX:
        raise ApiError(
            400,
            f"Invalid 'limit': expected an integer from 1 to {_PAGE_MAX}, got {raw_limit!r}.",
            param="limit",
        )
    ordered = items if order == "asc" else items[::-1]
    start = 0
    after = query.get("after", [None])[0]
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise ApiError(
                400, f"Invalid 'after': no input item with id {after!r}.", param="after"
            )
        start = ids.index(after) + 1
    page = ordered[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(ordered),
    }


# -- compaction ----------------------------------------------------------------------------

# A compaction item's "encrypted_content" is, here, the conversation itself in base64 JSON:
# opaque to the client, as the real one is, and expanded back when it is sent as input.
_COMPACTION_PREFIX = "offline-compaction-v1:"


def build_compaction(
    output: list[Item], *, created_at: float, usage: dict[str, Any]
) -> dict[str, Any]:
    """The ``CompactedResponse`` whose ``output`` is :func:`compaction_item`'s one item."""
    return {
        "id": new_id("resp"),
        "object": "response.compaction",
        "created_at": int(created_at),
        "output": output,
        "usage": usage,
    }


def compaction_item(conversation: list[Item]) -> Item:
    """The single compaction item that carries ``conversation``."""
    payload = base64.b64encode(json.dumps(conversation).encode()).decode()
    return {
        "type": "compaction",
        "id": new_id("cmp"),
        "encrypted_content": _COMPACTION_PREFIX + payload,
    }


def _expand_compaction(before: list[Item], item: Item) -> list[Item]:
    """Replaces a compaction item by the conversation it carries.

    User messages sent just before it that the conversation already holds are
    dropped, so following the "user messages, then the compaction item" recipe
    does not repeat them.
    """
    content = item.get("encrypted_content")
    try:
        if not isinstance(content, str) or not content.startswith(_COMPACTION_PREFIX):
            raise ValueError("not an offline compaction")
        decoded = json.loads(base64.b64decode(content.removeprefix(_COMPACTION_PREFIX)))
        if not isinstance(decoded, list) or not all(isinstance(i, dict) for i in decoded):
            raise ValueError("not a list of items")
    except (ValueError, TypeError) as exc:
        raise ApiError(
            400,
            "Invalid compaction item: its encrypted_content was not produced by this offline "
            f"stand-in's /responses/compact ({exc}).",
            param="input",
        ) from exc
    held = {_user_text(i) for i in decoded if _user_text(i) is not None}
    return [i for i in before if _user_text(i) not in held] + decoded


def _user_text(item: Item) -> str | None:
    if item.get("type", "message") != "message" or item.get("role") != "user":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
