"""Telemetry in tests: the loop's spans into the SDK's in-memory exporter and its metrics into an
in-memory reader (refund_agent.telemetry.use), and spans read back from a process's console
exporter output. Needs the otel extra."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from refund_agent import telemetry


class Recorded:
    """What the loop reported during a test: ``spans`` (finished, in order), ``metrics()``."""

    def __init__(self, capture: bool = False) -> None:
        self.exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        telemetry.use(tracer_provider, MeterProvider(metric_readers=[self.reader]),
                      capture=capture)

    @property
    def spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[Any]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def metrics(self) -> dict[str, list[Any]]:
        """Each metric's data points by name, as a collection reads them now."""
        found: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def total(self, name: str, **attributes: Any) -> float:
        """A counter's sum (or a histogram's) over the points with these attributes."""
        points = [p for p in self.metrics().get(name, [])
                  if all(p.attributes.get(k) == v for k, v in attributes.items())]
        return sum(getattr(p, "value", None) if hasattr(p, "value") else p.sum
                   for p in points)



def values(span: Any) -> str:
    """Every attribute and event attribute of ``span``, as one text to search."""
    found = [dict(span.attributes or {})]
    found += [dict(e.attributes or {}) for e in span.events]
    return json.dumps(found, default=str)


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans a ConsoleSpanExporter wrote into ``text`` (one JSON object each, among
    whatever else the process printed), in the order written."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := text.find("{\n", at)) >= 0:
        try:
            found, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at += 1
            continue
        if isinstance(found, dict) and "context" in found and "name" in found:
            spans.append(found)
        at = end
    return spans
