"""Where the loop reports: one small function per point, each a no-op while telemetry is off.

Span names and ``gen_ai.*`` attributes follow the OpenTelemetry GenAI semantic conventions
(semantic-conventions-genai v0.1.0, status Development): ``invoke_agent {agent}`` per advance,
``chat {model}`` per model request, ``execute_tool {tool}`` per call. What they do not cover is
in the project's namespace, ``refund_agent.*`` (docs/TELEMETRY.md has the table): the proposal,
the wait for a person, the decision, the resume, the effect's key and whether it was reused,
an outcome left unknown. Content (emails, arguments, outputs, model text) goes in only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

The objects passed in are duck-typed (a Run, a Call, a Tool, an Approval): this package imports
nothing of the project, so every floor may call it.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

from . import _NOTHING as NULL_CONTEXT
from . import active

NS = "refund_agent"
# The provider table's names as the conventions spell them (gen_ai.provider.name).
PROVIDERS = {"xai": "x_ai", "openai": "openai"}
# The advance in progress (its provider, for the chat spans it makes): set by advancing.
_provider: ContextVar[str] = ContextVar("refund_agent_provider", default="x_ai")
# A takeover the lease's acquisition just made (run id, what to say), for the advance's span.
_taken: ContextVar[tuple[str, dict[str, Any]] | None] = ContextVar("refund_agent_taken",
                                                                   default=None)


def _host(store: Any) -> str:
    """This machine as the store's leases name it (REFUND_AGENT_HOST_ID, else host and boot)."""
    return str(getattr(store, "host", "") or socket.gethostname())


def _content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


# -- a run's start, and its advances ------------------------------------------------------


def _create(create: Callable[..., Any], **fields: Any) -> Any:
    return create(**fields)


@contextmanager
def starting(agent: str) -> Iterator[Callable[..., Any]]:
    """The span of a run's creation, whose context the run keeps (runs.trace_context): every
    later advance, decision and resume of the run, in any process, is its child. Yields how to
    call the store's ``create_run``: with that context, naming the new run on the span."""
    tel = active()
    if not tel.on:
        yield _create
        return
    with tel.span(f"{NS}.start {agent}", {"gen_ai.agent.name": agent}) as span:
        def create(create_run: Callable[..., Any], **fields: Any) -> Any:
            run = create_run(**fields, trace_context=tel.carrier())
            span.set_attribute("gen_ai.conversation.id", run.id)
            return run
        yield create


def advancing(loop: Any, run: Any, lease: Any) -> AbstractContextManager[Any]:
    """``invoke_agent {agent}`` around one advance, a child of the run's stored context (the
    same trace across the pause, whichever process resumes it, days later)."""
    tel = active()
    if not tel.on:
        return NULL_CONTEXT
    return _advancing(tel, loop, run, lease)


@contextmanager
def _advancing(tel: Any, loop: Any, run: Any, lease: Any) -> Iterator[Any]:
    tel.watch(loop.store)   # its gauges (runs by status, proposals waiting), read when collected
    provider = PROVIDERS.get(loop.settings.provider, loop.settings.provider)
    _provider.set(provider)
    attributes = {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": loop.agent_name,
        "gen_ai.conversation.id": run.id, "gen_ai.provider.name": provider,
        "gen_ai.request.model": loop.settings.model,
        f"{NS}.resume": run.last_response_id is not None, f"{NS}.resume.pid": os.getpid(),
        f"{NS}.resume.host": _host(loop.store), f"{NS}.lease.epoch": lease.epoch,
    }
    with tel.span(f"invoke_agent {loop.agent_name}", attributes,
                  parent=getattr(run, "trace_context", None)) as span:
        # Taken over as the lease was acquired (or claimed), just before this span began.
        taken = _taken.get()
        if taken is not None and taken[0] == run.id:
            span.add_event(f"{NS}.takeover", taken[1])
            span.set_attribute(f"{NS}.takeover", True)
        _taken.set(None)
        if getattr(run, "trace_context", None) is None and (here := tel.carrier()):
            # A run made without a trace (by mail, or before telemetry was on): this advance
            # starts it, and the run's later decisions and advances join it.
            loop.store.keep_trace_context(run.id, here)
        yield span


def run_left(run: Any) -> None:
    """The run as an advance left it: on the advance's span, and counted."""
    tel = active()
    if not tel.on:
        return
    span = tel.current()
    span.set_attribute(f"{NS}.run.status", str(run.status))
    if str(run.status) == "failed":
        tel.fail(span, "run_failed", run.error or "")
    tel.add(f"{NS}.runs.ended", 1, {"gen_ai.agent.name": run.agent,
                                    f"{NS}.run.status": str(run.status)})


def taken_over(run_id: str, agent: str, previous_pid: int | None, cut_off: bool) -> None:
    """Another process's run taken over (a resume, a restart after a crash): counted, and
    told to the advance's span that follows (:func:`advancing`)."""
    tel = active()
    if not tel.on:
        return
    _taken.set((run_id, {f"{NS}.takeover.previous_pid": previous_pid or 0,
                         f"{NS}.takeover.cut_off": cut_off}))
    tel.add(f"{NS}.lease.takeovers", 1, {"gen_ai.agent.name": agent, f"{NS}.cut_off": cut_off})


# -- model requests -------------------------------------------------------------------


def chat(client: Any, params: dict[str, Any]) -> AbstractContextManager[Any]:
    """``chat {model}`` around one streamed request (a CLIENT span)."""
    tel = active()
    if not tel.on:
        return NULL_CONTEXT
    model = params.get("model", "")
    url = urlsplit(str(getattr(client, "base_url", "")))
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat",
                                  "gen_ai.provider.name": _provider.get(),
                                  "gen_ai.request.model": model,
                                  "gen_ai.conversation.id": params.get("prompt_cache_key", ""),
                                  "server.address": url.hostname or ""}
    if url.port:
        attributes["server.port"] = url.port
    if tel.capture:
        attributes["gen_ai.input.messages"] = _content(params.get("input", []))
    return _timed(tel, f"chat {model}", attributes)


# Pure, so the failure path of a span never imports OpenTelemetry itself.
def error_type(exc: BaseException) -> str:
    """error.type: a provider's HTTP status when it sent one, else the exception's class."""
    status = getattr(exc, "status_code", None)
    return str(status) if isinstance(status, int) else type(exc).__qualname__


@contextmanager
def _timed(tel: Any, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    started = time.monotonic()
    keys = {k: attributes[k] for k in ("gen_ai.operation.name", "gen_ai.provider.name",
                                       "gen_ai.request.model")}
    error = None
    try:
        with tel.span(name, attributes, client=True) as span:
            yield span
    except BaseException as exc:
        error = error_type(exc)
        raise
    finally:
        if error:
            keys["error.type"] = error
        tel.measure("gen_ai.client.operation.duration", time.monotonic() - started, keys)
        tel.add(f"{NS}.model.requests", 1, keys)


def answered(span: Any, response: Any, usage: Callable[[], dict[str, int]]) -> None:
    """What the response said: its id and model, its tokens and cost (``usage``: read only
    now, with telemetry on)."""
    tel = active()
    if not tel.on or not span.is_recording():
        return
    found = usage()
    attributes = {"gen_ai.response.id": getattr(response, "id", "") or "",
                  "gen_ai.response.model": getattr(response, "model", "") or "",
                  "gen_ai.usage.input_tokens": found.get("input_tokens", 0),
                  "gen_ai.usage.output_tokens": found.get("output_tokens", 0),
                  f"{NS}.usage.cached_tokens": found.get("cached_tokens", 0),
                  f"{NS}.cost_usd": found.get("cost_ticks", 0) / 1e10}
    span.set_attributes(attributes)
    if tel.capture:
        span.set_attribute("gen_ai.output.messages", _content(
            [item.model_dump() if hasattr(item, "model_dump") else item
             for item in response.output or []]))
    keys = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": _provider.get(),
            "gen_ai.request.model": attributes["gen_ai.response.model"]}
    for kind in ("input", "output"):
        tel.measure("gen_ai.client.token.usage", found.get(f"{kind}_tokens", 0),
                    {**keys, "gen_ai.token.type": kind})
    tel.add(f"{NS}.model.cost", attributes[f"{NS}.cost_usd"], keys)


def rate_limited() -> None:
    tel = active()
    if tel.on:
        tel.add(f"{NS}.model.rate_limited", 1)
        tel.current().add_event(f"{NS}.rate_limited")


def retried(status: int) -> None:
    tel = active()
    if tel.on:
        tel.add(f"{NS}.model.retries", 1, {"http.response.status_code": status})


# -- tool calls -----------------------------------------------------------------------


def tool_span(call: Any, tool: Any) -> AbstractContextManager[Any]:
    """``execute_tool {tool}`` around one call's function."""
    tel = active()
    if not tel.on:
        return NULL_CONTEXT
    return _tool(tel, call, tool)


@contextmanager
def _tool(tel: Any, call: Any, tool: Any) -> Iterator[Any]:
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                  "gen_ai.tool.call.id": call.call_id, "gen_ai.tool.type": "function",
                  f"{NS}.call.key": call.key or call.call_id}
    if tool is not None:
        attributes["gen_ai.tool.description"] = tool.description
        attributes[f"{NS}.tool.kind"] = str(tool.kind)
    if tel.capture:
        attributes["gen_ai.tool.call.arguments"] = call.arguments
    with tel.span(f"execute_tool {call.name}", attributes) as span:
        try:
            yield span
        except BaseException:
            if tool is not None and str(tool.kind) != "read_only":
                # It may have happened or not: the ledger (once per key) settles it on the
                # next advance, which runs the call again under the same key.
                span.set_attribute(f"{NS}.effect.outcome", "unknown")
            raise


def traced_call(method: Callable[..., Any]) -> Callable[..., Any]:
    """Loop._run_call in its ``execute_tool`` span: what the call returned, too."""
    @functools.wraps(method)
    def run_call(loop: Any, run: Any, lease: Any, call: Any) -> Any:
        if not active().on:
            return method(loop, run, lease, call)
        with tool_span(call, loop.tools.get(call.name)) as span:
            result = method(loop, run, lease, call)
            if isinstance(result, str):
                if active().capture:
                    span.set_attribute("gen_ai.tool.call.result", result)
            else:   # Waiting: the run pauses for a person
                span.set_attribute(f"{NS}.wait.approval.id", result.approval_id)
                span.add_event(f"{NS}.wait.started", {f"{NS}.approval.id": result.approval_id})
            return result
    return run_call


def proposed(approval: Any, agent: str = "") -> None:
    """A proposal queued for a person (boundary 4)."""
    tel = active()
    if not tel.on:
        return
    attributes = {f"{NS}.approval.id": approval.id,
                  f"{NS}.approval.fingerprint": approval.fingerprint}
    if approval.has_amount:
        attributes[f"{NS}.approval.amount_cents"] = approval.amount_cents
    span = tel.current()
    span.set_attributes(attributes)
    span.add_event(f"{NS}.proposal", attributes)
    tel.add(f"{NS}.proposals", 1)
    if approval.has_amount:
        tel.measure(f"{NS}.proposal.amount", approval.amount_cents)


def effect(log: str, key: str, reused: bool) -> None:
    """An outside effect through the ledger (boundary 6): its key, and whether a record under
    it already existed (then nothing was done again)."""
    tel = active()
    if not tel.on:
        return
    attributes = {f"{NS}.effect.key": key, f"{NS}.effect.reused": reused,
                  f"{NS}.effect.log": log}
    span = tel.current()
    span.set_attributes(attributes)
    span.add_event(f"{NS}.effect", attributes)
    tel.add(f"{NS}.effects", 1, {f"{NS}.effect.log": log, f"{NS}.effect.reused": reused})


def outcome_unknown(key: str, note: str) -> None:
    """An effect whose outcome nobody knows yet (a payment provider that never answered)."""
    tel = active()
    if tel.on:
        span = tel.current()
        span.set_attribute(f"{NS}.effect.outcome", "unknown")
        span.add_event(f"{NS}.effect.unknown", {f"{NS}.effect.key": key,
                                                **({f"{NS}.note": note} if tel.capture else {})})


# -- people ---------------------------------------------------------------------------


def decided(loop: Any, approval: Any) -> None:
    """A person's decision (approved, rejected, asked): the wait that ended, as a span from the
    proposal to the decision, and the decision's own, both in the run's trace."""
    tel = active()
    if not tel.on:
        return
    tel.watch(loop.store)
    agent, way = loop.agent_name, str(approval.status)
    now = time.time()
    decided_at = approval.decided_at or now
    waited = max(0.0, decided_at - approval.requested_at)
    common = {"gen_ai.agent.name": agent, "gen_ai.conversation.id": approval.run_id,
              f"{NS}.approval.id": approval.id}
    # Read only with telemetry on: the decision joins its run's trace.
    parent = loop.store.run(approval.run_id).trace_context
    tel.record(f"{NS}.wait", {**common, f"{NS}.wait.seconds": waited}, parent=parent,
               start=approval.requested_at, end=decided_at)
    with tel.span(f"{NS}.decision {agent}", {
            **common, f"{NS}.decision": way, f"{NS}.decision.by": approval.decided_by or "",
            f"{NS}.decision.waited_seconds": waited, f"{NS}.decision.pid": os.getpid(),
            f"{NS}.decision.host": _host(loop.store)}, parent=parent):
        pass
    tel.measure(f"{NS}.decision.wait", waited, {"gen_ai.agent.name": agent,
                                                f"{NS}.decision": way})
    tel.add(f"{NS}.decisions", 1, {"gen_ai.agent.name": agent, f"{NS}.decision": way})
    if way == "approved" and approval.has_amount:
        tel.add(f"{NS}.decisions.amount", approval.amount_cents, {"gen_ai.agent.name": agent})
