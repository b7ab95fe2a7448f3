"""Telemetry on: the one module that imports OpenTelemetry (the API and, when this process sets
providers up itself, the SDK and its exporters).

Providers come from one of three places, in this order: :func:`refund_agent.telemetry.use`
(a test's in-memory ones, an application's), a TracerProvider the application installed
globally, or the environment's switches (switches.py), for which this module builds its own:
a BatchSpanProcessor to the console (stderr, so a command's ``--json`` stays parseable) or to
OTLP over HTTP, and a periodic metric reader likewise. Its own are flushed by
:meth:`OtelTelemetry.flush` (the CLI calls it on exit) and shut down at exit by the SDK.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

try:   # the otel extra; telemetry.__init__ turns this into one warning and carries on
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:
    raise ImportError(f"refund_agent's telemetry needs OpenTelemetry ({exc.name} is missing): "
                      "pip install 'refund-agent[otel]'", name=exc.name) from None

from .points import error_type
from .switches import Switches

SCOPE = "refund_agent"
log = logging.getLogger(__name__)
PROPAGATOR = TraceContextTextMapPropagator()

# name -> (unit, description). GenAI names are the conventions' own (gen-ai-metrics.md).
COUNTERS = {
    "refund_agent.model.requests": ("{request}", "Model requests, by model and error.type."),
    "refund_agent.model.cost": ("USD", "What model requests cost, as the provider reported."),
    "refund_agent.model.rate_limited": ("{response}", "429 rate limits met (providers/limiter)."),
    "refund_agent.model.retries": ("{request}", "Requests sent again after a 429 or a 5xx."),
    "refund_agent.runs.ended": ("{run}", "Advances that left a run, by the status it was left in."),
    "refund_agent.proposals": ("{proposal}", "Proposals queued for a person."),
    "refund_agent.decisions": ("{decision}", "Decisions made, by which way."),
    "refund_agent.effects": ("{effect}", "Outside effects through the ledger, by reuse."),
    "refund_agent.decisions.amount": ("{cent}", "What approved proposals move, in cents."),
    "refund_agent.lease.takeovers": ("{takeover}", "Runs taken over from another process."),
}
HISTOGRAMS = {
    "gen_ai.client.token.usage": ("{token}", "Tokens per model request, by gen_ai.token.type."),
    "gen_ai.client.operation.duration": ("s", "Model request duration."),
    "refund_agent.decision.wait": ("s", "How long a proposal waited for its decision."),
    "refund_agent.proposal.amount": ("{cent}", "What a proposal moves, in cents."),
}


def _build(wanted: Switches) -> tuple[Any, Any]:
    """This process's own providers, as the switches ask (None for a signal left off)."""
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({"service.name": wanted.service})
    tracer_provider = meter_provider = None
    if wanted.traces:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        if wanted.traces == "console":
            exporter: Any = ConsoleSpanExporter(out=sys.stderr)
        else:   # the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, headers, timeout
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            exporter = OTLPSpanExporter()
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    if wanted.metrics:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )
        if wanted.metrics == "console":
            metric_exporter: Any = ConsoleMetricExporter(out=sys.stderr)
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
            metric_exporter = OTLPMetricExporter()
        meter_provider = MeterProvider(
            metric_readers=[PeriodicExportingMetricReader(metric_exporter)], resource=resource)
    return tracer_provider, meter_provider


def from_switches(wanted: Switches, installed: Any | None) -> OtelTelemetry:
    """Telemetry as the environment asks, or into the application's installed provider."""
    if installed is not None:
        # The application's providers: its exporters, its resource, its shutdown.
        return OtelTelemetry(installed, metrics.get_meter_provider(), wanted.capture,
                             owned=False)
    tracer_provider, meter_provider = _build(wanted)
    return OtelTelemetry(tracer_provider, meter_provider, wanted.capture, owned=True)


class OtelTelemetry:
    """Telemetry on (see refund_agent.telemetry.Telemetry for what each method does)."""

    on = True

    def __init__(self, tracer_provider: Any, meter_provider: Any, capture: bool = False, *,
                 owned: bool = False) -> None:
        self.capture = capture
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._owned = owned
        self.tracer = (tracer_provider or trace.NoOpTracerProvider()).get_tracer(SCOPE)
        meter = (meter_provider or metrics.NoOpMeterProvider()).get_meter(SCOPE)
        self._counters = {name: meter.create_counter(name, unit, text)
                          for name, (unit, text) in COUNTERS.items()}
        self._histograms = {name: meter.create_histogram(name, unit, text)
                            for name, (unit, text) in HISTOGRAMS.items()}
        # Stores whose gauges are read at collection, by where they are (several agents of
        # one process may share one). Held: a command's last collection, as it exits, comes
        # after its agent is gone.
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()
        meter.create_observable_gauge("refund_agent.runs", [self._runs], "{run}",
                                      "Runs by agent and status, as the store holds them.")
        meter.create_observable_gauge("refund_agent.proposals.waiting", [self._waiting],
                                      "{proposal}", "Proposals waiting for a person.")
        meter.create_observable_gauge("refund_agent.proposals.oldest_wait", [self._oldest],
                                      "s", "How long the oldest waiting proposal has waited.")

    # -- spans --------------------------------------------------------------------------

    def _context(self, carrier: str | None) -> Any:
        if not carrier:
            return None
        try:
            return PROPAGATOR.extract(json.loads(carrier))
        except (ValueError, TypeError):
            return None   # a context written by hand or damaged: a trace of its own

    @contextmanager
    def span(self, name: str, attributes: dict[str, Any], *, parent: str | None = None,
             client: bool = False, start: float | None = None) -> Iterator[Any]:
        context, links = self._context(parent), []
        if context is not None:
            here = trace.get_current_span().get_span_context()
            stored = trace.get_current_span(context).get_span_context()
            if here.is_valid and here.trace_id != stored.trace_id:
                links.append(Link(here))   # the request (a page's, a worker's) that did this
        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        with self.tracer.start_as_current_span(
                name, context=context, kind=kind, attributes=attributes, links=links,
                start_time=None if start is None else int(start * 1e9),
                record_exception=True, set_status_on_exception=True) as span:
            try:
                yield span
            except BaseException as exc:
                span.set_attribute("error.type", error_type(exc))
                raise

    def record(self, name: str, attributes: dict[str, Any], *, parent: str | None,
               start: float, end: float) -> None:
        span = self.tracer.start_span(name, context=self._context(parent),
                                      attributes=attributes, start_time=int(start * 1e9))
        span.end(end_time=int(max(end, start) * 1e9))

    def current(self) -> Any:
        return trace.get_current_span()

    def carrier(self) -> str | None:
        if not trace.get_current_span().get_span_context().is_valid:
            return None
        found: dict[str, str] = {}
        PROPAGATOR.inject(found)
        return json.dumps(found, sort_keys=True) if found else None

    def fail(self, span: Any, kind: str, description: str = "") -> None:
        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR, description or None))

    # -- metrics ------------------------------------------------------------------------

    def add(self, name: str, value: float, attributes: dict[str, Any] | None = None) -> None:
        self._counters[name].add(value, attributes)

    def measure(self, name: str, value: float,
                attributes: dict[str, Any] | None = None) -> None:
        self._histograms[name].record(value, attributes)

    def watch(self, store: Any) -> None:
        with self._lock:
            self._stores[str(store.path)] = store

    def _gauges(self) -> list[Any]:
        with self._lock:
            stores = list(self._stores.values())
        counts = []
        for store in stores:
            try:
                counts.append(store.telemetry_counts())
            except Exception as exc:   # a store busy or gone: no gauge this time, one line
                log.warning("Telemetry could not read %s: %s", store.path, exc)
        return counts

    def _runs(self, _options: CallbackOptions) -> Iterator[Observation]:
        for counts in self._gauges():
            for (agent, status), n in counts.runs.items():
                yield Observation(n, {"gen_ai.agent.name": agent,
                                      "refund_agent.run.status": status})

    def _waiting(self, _options: CallbackOptions) -> Iterator[Observation]:
        for counts in self._gauges():
            for agent, n in counts.waiting.items():
                yield Observation(n, {"gen_ai.agent.name": agent})

    def _oldest(self, _options: CallbackOptions) -> Iterator[Observation]:
        for counts in self._gauges():
            for agent, age in counts.oldest_wait.items():
                yield Observation(age, {"gen_ai.agent.name": agent})

    def flush(self) -> None:
        for provider in (self._tracer_provider, self._meter_provider):
            force = getattr(provider, "force_flush", None)
            if force is not None:
                force()
