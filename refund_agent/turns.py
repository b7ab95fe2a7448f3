"""One model turn as data: what the next request sends, and what its response means.

Everything here is a pure function of what it is given (no store, no network, no clock), so
each is unit-tested with hand-made responses (tests/loop/test_turns.py). The loop (loop.py)
reads the store, calls these, streams the request (streaming.py) and commits what they return.

A turn of the loop ends in one of three values, never in an exception:

- :class:`NextInput`: items to send in the next request (the email, call outputs, replies);
- :class:`Waiting`: a call waits for a person's decision, so the run pauses durably;
- :class:`Finished`: the last response made no calls and nothing is waiting to be sent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import NoTranscript
from .models import Reply, Run, RunStatus, StepKind
from .providers.table import estimate_cost_ticks

# The model's own text (a note for the team, a reasoning summary, a call's arguments as the
# timeline shows them) is kept up to this many characters on the timeline, the rest cut with
# a marker saying how much: a note ends a turn, so there is no call to fail and no way to ask
# for a shorter one, and a 2 MB argument would freeze the page that draws it.
MAX_MODEL_TEXT_CHARS = 10_000
# Asked for where the response would not carry it otherwise (store=false, or a model that does
# not return it unasked; see providers.needs_include), so the transcript holds each reasoning
# item with the encrypted reasoning the provider needs to read it back when the run sends its
# history itself.
INCLUDE = ["reasoning.encrypted_content"]

StepData = tuple[StepKind, dict[str, Any]]


@dataclass(frozen=True)
class NextInput:
    """Send these items next; ``reply_ids`` are the customer replies they carry."""

    items: list[dict[str, Any]]
    reply_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Waiting:
    """A call waits for a person: the run pauses (RunStatus.WAITING) until a decision.
    ``released``: the proposal's own transaction paused the run and gave up the lease."""

    approval_id: str
    released: bool = False


@dataclass(frozen=True)
class Finished:
    """Nothing more to send: the run is done, or waits on the customer's answer."""

    status: RunStatus = RunStatus.DONE


@dataclass(frozen=True)
class Released:
    """The run ended with the commit of its last response, which also gave up the lease."""

    run: Run


TurnResult = NextInput | Waiting | Finished


@dataclass(frozen=True)
class ReadResponse:
    """What one response means for the store: its calls, its timeline steps, its cost and
    the transcript items it adds (what the request sent, then what came back)."""

    response_id: str
    calls: list[tuple[str, str, str]]     # (call id, name, arguments)
    steps: list[StepData]
    usage: dict[str, int]
    transcript: list[tuple[str, dict[str, Any]]]


def user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def first_input(run: Run, system: str) -> list[dict[str, Any]]:
    """The first request's input: the system prompt as an item (xAI refuses ``instructions``
    beside ``previous_response_id`` later on), then the customer's email with its headers."""
    email = f"From: {run.sender_name} <{run.sender}>\nSubject: {run.subject}\n\n{run.email}"
    return [{"type": "message", "role": "system", "content": system}, user_message(email)]


def replies_input(replies: Sequence[Reply]) -> NextInput:
    """The customer's unsent replies, one user message each."""
    return NextInput([user_message(f"The customer wrote back:\n\n{r.text}") for r in replies],
                     [r.id for r in replies])


def call_output(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def build_request(*, model: str, run_id: str, items: list[dict[str, Any]],
                  tools: list[dict[str, Any]], previous_response_id: str | None,
                  zero_retention: bool, include: bool, effort: str | None,
                  history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The parameters of ``responses.create`` for one turn.

    The request continues the stored response with ``previous_response_id``, unless zero
    retention is on: then nothing is stored and ``history`` (the run's transcript) goes along
    each time.
    """
    params: dict[str, Any] = {
        "model": model, "input": items, "tools": tools,
        "store": not zero_retention, "stream": True,
        "parallel_tool_calls": False, "prompt_cache_key": run_id,
    }
    if include:
        params["include"] = INCLUDE
    if zero_retention:
        params["input"] = list(history or []) + items
    elif previous_response_id:
        params["previous_response_id"] = previous_response_id
    if effort:
        params["reasoning"] = {"effort": effort}
    return params


def resend_request(params: dict[str, Any], history: list[dict[str, Any]],
                   items: list[dict[str, Any]]) -> dict[str, Any]:
    """The same turn sent from the run's transcript, because its stored response is gone.

    Stored again, so the run chains from the new response.
    """
    again = {key: value for key, value in params.items() if key != "previous_response_id"}
    again.update(input=history + items, store=True)
    return again


def capped(text: str) -> str:
    """The model's text for the timeline, cut at MAX_MODEL_TEXT_CHARS with a marker."""
    if len(text) <= MAX_MODEL_TEXT_CHARS:
        return text
    cut = len(text) - MAX_MODEL_TEXT_CHARS
    return f"{text[:MAX_MODEL_TEXT_CHARS]} [... {cut:,} more characters not kept]"


def usage_of(response: Any, model: str = "") -> dict[str, int]:
    """Tokens and cost from a response; xAI reports cost as ``cost_in_usd_ticks``.

    A provider that reports no cost (OpenAI) gets an estimate from the price table in
    providers/table.py, marked ``cost_estimated`` so front ends can say so.
    """
    usage = response.usage
    if usage is None:
        return {}
    details = getattr(usage, "input_tokens_details", None)
    ticks = getattr(usage, "cost_in_usd_ticks", None)
    if ticks is None and usage.model_extra:
        ticks = usage.model_extra.get("cost_in_usd_ticks")
    cached = getattr(details, "cached_tokens", 0) or 0
    found = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
             "cached_tokens": cached, "cost_ticks": int(ticks or 0)}
    if ticks is None:
        estimate = estimate_cost_ticks(model or getattr(response, "model", "") or "",
                                       usage.input_tokens, cached, usage.output_tokens)
        if estimate is not None:
            found.update(cost_ticks=estimate, cost_estimated=1)
    return found


def transcript_digest(entries: list[tuple[str, dict[str, Any]]]) -> str:
    """SHA-256 over one response's transcript items (origin and item, canonical JSON).

    Kept in the response's timeline step, written in the same transaction as the items, so an
    item changed, added or removed afterwards (a hand edit, a bad restore, a tampered reasoning
    blob) is found before the transcript is ever sent. It detects changes, it does not
    authenticate: whoever can rewrite the store can rewrite the step too.
    """
    digest = hashlib.sha256()
    for origin, item in entries:
        digest.update(json.dumps([origin, item], sort_keys=True, ensure_ascii=False,
                                 separators=(",", ":")).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def read_response(response: Any, items: list[dict[str, Any]], *, model: str,
                  seconds: float) -> ReadResponse:
    """What a completed response means: calls to save, steps to show, usage, transcript.

    Args:
        response: the SDK's ``Response``.
        items: what the request added to the conversation (its input, without the history).
        model: the model asked, for the cost estimate of providers that report none.
        seconds: how long the request took.
    """
    steps: list[StepData] = []
    calls: list[tuple[str, str, str]] = []
    text = ""
    for item in response.output:
        if item.type == "reasoning":
            # Some models return a summary, others the reasoning text itself, others
            # (encrypted) nothing readable at all; show whatever is readable.
            parts = [*(item.summary or []), *(item.content or [])]
            summary = " ".join(p.text for p in parts)
            if summary.strip():
                steps.append((StepKind.REASONING, {"text": capped(summary)}))
        elif item.type == "message":
            text += "".join(getattr(c, "text", "") or "" for c in item.content)
        elif item.type == "function_call":
            calls.append((item.call_id, item.name, item.arguments))
            # The timeline shows the arguments; the call runs (and is refused, when too
            # long) from the calls table, which keeps them whole.
            steps.append((StepKind.CALL, {"call_id": item.call_id, "name": item.name,
                                          "arguments": capped(item.arguments)}))
    if text.strip():
        # Text next to calls is commentary; text with no calls ends the turn: the note.
        steps.append((StepKind.TEXT if calls else StepKind.NOTE, {"text": capped(text.strip())}))
    usage = usage_of(response, model)
    # What this request added to the conversation, then every output item as it arrived
    # (to_dict keeps exactly the fields the API sent, encrypted reasoning included).
    transcript = [*(("input", item) for item in items),
                  *(("output", item.to_dict(mode="json")) for item in response.output)]
    steps.append((StepKind.RESPONSE, {"response_id": response.id, "seconds": round(seconds, 3),
                                      **usage, "transcript_digest": transcript_digest(transcript)}))
    return ReadResponse(response.id, calls, steps, usage, transcript)


# How long providers keep a stored response (both xAI and OpenAI: 30 days).
STORED_RESPONSE_DAYS = 30


def history(run: Run, entries: Sequence[Any], steps: Sequence[Any]) -> list[dict[str, Any]]:
    """The run's transcript as input items, checked to reach from the first request to the
    run's last response.

    Raises:
        NoTranscript: the run started before transcripts were kept (an upgraded store), or
            its transcript does not end at the run's last response, or was changed.
    """
    why = transcript_problem(run, entries, steps)
    if why:
        raise NoTranscript(
            f"Run {run.id} needs its own transcript (its stored response "
            f"{run.last_response_id} is gone, or zero retention is on), but {why}, so it "
            f"cannot continue; stored responses expire after {STORED_RESPONSE_DAYS} days.")
    return [entry.item for entry in entries]


def transcript_problem(run: Run, entries: Sequence[Any], steps: Sequence[Any]) -> str | None:
    """Why the run's transcript cannot stand in for its stored response, or None.

    Args:
        run: the run.
        entries: its transcript (Store.transcript), oldest first.
        steps: its timeline (the response steps carry each response's digest).
    """
    if not run.transcript_complete:
        return "the run started before refund-agent kept transcripts"
    if not entries or entries[-1].response_id != run.last_response_id:
        return ("its transcript does not end at that response (the store was edited, or "
                "restored from an older copy)")
    digests = {s.data["response_id"]: s.data["transcript_digest"] for s in steps
               if s.kind == StepKind.RESPONSE and s.data.get("transcript_digest")}
    if not digests:
        return None   # written before transcripts were checked
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for entry in entries:
        groups.setdefault(entry.response_id, []).append((entry.origin, entry.item))
    for response_id, group in groups.items():
        expected = digests.get(response_id)
        if expected is not None and transcript_digest(group) != expected:
            return (f"its transcript was changed after it was written (an item of "
                    f"response {response_id} differs from what was sent or received)")
    missing = [rid for rid in digests if rid not in groups]
    if missing:
        return f"its transcript lost the items of response {missing[0]}"
    return None
