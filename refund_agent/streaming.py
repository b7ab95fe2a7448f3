"""Talking to the model while a turn streams: live events, the Stop button, the lease heartbeat.

Everything here is I/O around one streamed request; what the request says and what its
response means are pure functions in turns.py, and the loop that uses both is in loop.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import httpx2  # the openai SDK's HTTP client, whose errors reading a raw stream raises
import openai
from openai.types.responses import Response

from .errors import LeaseLost, RefundAgentError, Stopped
from .models import Step
from .providers.limiter import Halted, Limiter
from .store import Lease, Store
from .telemetry import points
from .turns import usage_of


@dataclass(frozen=True)
class LiveEvent:
    """Something a front end may show as it happens.

    ``kind`` is "reasoning", "text" or "arguments" for streamed deltas (``text`` holds the
    delta), "call" when a function call starts streaming (``text`` is its name), and "step"
    when a timeline step has been committed (``step`` holds it).
    """

    run_id: str
    kind: str
    text: str = ""
    step: Step | None = None


OnEvent = Callable[[LiveEvent], None]


class Cancel:
    """A stop button for one advance: sets a flag and closes the in-flight stream.

    Closing the HTTP response makes the streaming loop fail at once, even if the model is in the
    middle of a long pause between events.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._stream: Any = None

    def set(self) -> None:
        self._event.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a dead stream must not hide the stop
                pass

    def is_set(self) -> bool:
        return self._event.is_set()

    def attach(self, stream: Any) -> None:
        self._stream = stream
        if self.is_set():
            stream.close()


class Heartbeat:
    """Renews a run's lease for one whole advance (every request it streams, every tool it
    runs), so a slow request never loses it; one thread per advance, not one per request.

    If a renewal finds the lease taken over (this process was paused past it), the stream open
    at the time (or the next one attached) is closed and :meth:`check` raises LeaseLost, so
    nothing from that response is used; between requests, the next write is refused anyway.
    """

    def __init__(self, store: Store, lease: Lease) -> None:
        self.store, self.lease = store, lease
        self.lost: LeaseLost | None = None
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._beat, daemon=True, name="lease-heartbeat")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def attach(self, stream: Any) -> None:
        """The stream a lost lease closes (None: no request is streaming)."""
        self._stream = stream
        if stream is not None and self.lost is not None:
            stream.close()

    def _beat(self) -> None:
        while not self._stop.wait(self.store.lease_seconds / 3):
            try:
                self.store.renew(self.lease)
            except LeaseLost as lost:
                self.lost = lost
                if self._stream is not None:
                    self._stream.close()
                return
            except RefundAgentError:
                continue  # a busy database: the next beat tries again

    def check(self) -> None:
        if self.lost is not None:
            raise self.lost


def _read_error(exc: Exception, stream: Any) -> openai.APIError:
    """The SDK's own error for a connection that timed out or broke while a body was read."""
    if isinstance(exc, httpx2.TimeoutException):
        return openai.APITimeoutError(request=stream.http_request)
    return openai.APIConnectionError(request=stream.http_request)


def sse_events(stream: Any) -> Iterator[dict[str, Any]]:
    """The JSON events of a server-sent-event stream (``data:`` lines, blank line between).

    A connection that times out or breaks raises the SDK's own errors, as its streams do.
    """
    data: list[str] = []
    lines = stream.iter_lines()
    while True:
        try:
            line = next(lines, None)
        except (httpx2.RequestError, httpx2.StreamError) as exc:
            raise _read_error(exc, stream) from exc
        if line is None:
            break
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            text = "\n".join(data)
            data = []
            if text.startswith("[DONE]"):
                return
            yield json.loads(text)
    if data and not data[0].startswith("[DONE]"):
        yield json.loads("\n".join(data))


# The SDK builds a type adapter for each type a response holds the first time it meets it, with
# nothing held meanwhile: 64 threads meeting their first response at once would each build them
# all (about 0.1 s of CPU apiece). Under this lock one builds them and the rest find them built;
# building a response holds the GIL anyway, so the lock costs no parallel work.
_building = threading.Lock()


def response_of(payload: dict[str, Any]) -> Response:
    """The SDK's ``Response`` for a response's JSON, built as leniently as the SDK builds it (a
    provider's own fields kept, a field it leaves out not an error)."""
    with _building:
        return Response.construct(**payload)


def stream_response(client: openai.OpenAI, run_id: str, params: dict[str, Any],
                    emit: OnEvent | None, cancel: Cancel | None, heartbeat: Heartbeat) -> Any:
    """One response: streamed with its deltas surfaced while someone watches (``emit``), asked
    for whole when nobody does (a worker's runs); returns the completed response.

    The SDK sends the request (retries, timeouts, errors as ever), but what comes back is read
    here as plain JSON: typing every event as a pydantic object, most of them deltas or
    echoes of the whole response, cost more CPU than anything else in a turn. Only the
    final response becomes the SDK's ``Response``. The input items and tool schemas go as
    ``extra_body``, already plain JSON, which skips the SDK's walk over them looking for
    fields to rename (there are none in them).

    Why whole when nobody watches: a streamed reply arrives as dozens of small reads, each
    passed up through the HTTP layers, and that was most of a worker's CPU (about 10 ms a reply
    streamed against 2 ms whole, docs/PERFORMANCE.md). The cost: until the reply's first byte
    nothing can be closed, so a Stop or a lost lease takes effect when the reply arrives (it is
    then not used), rather than at the next event.

    With the client's process-wide limiter (providers/limiter.py), the request holds one of
    its places in flight until its stream ends, and waits for it first (a Stop or a lost
    lease ends that wait); its usage then replaces the estimate the budget counted.
    """
    limiter: Limiter | None = getattr(client, "limiter", None)

    def stop() -> bool:
        return bool(cancel and cancel.is_set()) or heartbeat.lost is not None

    try:
        with (limiter.slot(run_id, stop) if limiter else nullcontext() as ticket,
              points.chat(client, params) as span):
            final = _request(client, run_id, params, emit, cancel, heartbeat)
            points.answered(span, final, lambda: usage_of(final, params.get("model", "")))
            if limiter and ticket:
                usage = getattr(final, "usage", None)
                limiter.settle(ticket, getattr(usage, "total_tokens", None))
            return final
    except Halted:
        heartbeat.check()
        raise Stopped from None


def _request(client: openai.OpenAI, run_id: str, params: dict[str, Any], emit: OnEvent | None,
             cancel: Cancel | None, heartbeat: Heartbeat) -> Any:
    """The request and what it returns (stream_response's body, inside its place in flight)."""
    params = {**params, "stream": emit is not None}
    body = {key: params.pop(key) for key in ("input", "tools") if key in params}
    raw = client.responses.with_streaming_response.create(
        **params, extra_body=body or None)
    stream = raw.__enter__()
    heartbeat.attach(stream)
    if cancel:
        cancel.attach(stream)
    try:
        final = (_events(stream, run_id, emit, cancel) if emit is not None
                 else _whole(stream))
    except (openai.APIError, httpx2.HTTPError, httpx2.StreamError):
        heartbeat.check()   # the stream was closed because the run was lost
        if cancel and cancel.is_set():
            raise Stopped from None
        raise
    finally:
        heartbeat.attach(None)
        raw.__exit__(None, None, None)
    heartbeat.check()
    if cancel and cancel.is_set():
        raise Stopped   # stopped while the reply came: it is not used
    if final is None:
        raise openai.APIConnectionError(
            message="The model stream ended before the response was complete.",
            request=stream.http_request)
    return final


def _events(stream: Any, run_id: str, emit: OnEvent, cancel: Cancel | None) -> Any:
    """A streamed reply: its deltas surfaced as they come; the completed response, or None."""
    final = None
    for event in sse_events(stream):
        if cancel and cancel.is_set():
            raise Stopped
        kind = event.get("type")
        if kind in ("response.reasoning_summary_text.delta",
                    "response.reasoning_text.delta"):
            emit(LiveEvent(run_id, "reasoning", event.get("delta") or ""))
        elif kind == "response.output_text.delta":
            emit(LiveEvent(run_id, "text", event.get("delta") or ""))
        elif (kind == "response.output_item.added"
              and (event.get("item") or {}).get("type") == "function_call"):
            emit(LiveEvent(run_id, "call", event["item"].get("name") or ""))
        elif kind == "response.function_call_arguments.delta":
            emit(LiveEvent(run_id, "arguments", event.get("delta") or ""))
        elif kind in ("response.completed", "response.incomplete"):
            # xAI documents response.incomplete as a terminal event carrying the
            # output (cut short by a limit); its items are kept like a completed one's.
            final = response_of(event["response"])
        elif kind in ("response.failed", "error"):
            raise openai.APIError(f"The model stream ended with {kind}.",
                                  request=stream.http_request, body=event)
    return final


def _whole(stream: Any) -> Any:
    """A reply asked for whole: one body. A completed or incomplete response is kept as the
    streamed ones are; a failed one raises as a stream's ``response.failed`` does."""
    try:
        payload = json.loads(stream.read())
    except (httpx2.RequestError, httpx2.StreamError) as exc:
        raise _read_error(exc, stream) from exc
    except ValueError:
        raise openai.APIConnectionError(
            message="The model's reply was not the JSON of a response.",
            request=stream.http_request) from None
    if not isinstance(payload, dict) or payload.get("status") == "failed":
        raise openai.APIError("The model's response failed.", request=stream.http_request,
                              body=payload)
    return response_of(payload)
