"""Whether telemetry is on, read from OpenTelemetry's own environment variables only.

Pure: a mapping of variables in, :class:`Switches` out, so every rule is tested without an SDK.
Nothing new to learn: the names are the ones every OpenTelemetry SDK reads
(https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/), and the
content switch is the GenAI instrumentations' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The exporters this package builds itself; anything else is refused by name, in one line.
EXPORTERS = ("console", "otlp", "none")
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@dataclass(frozen=True)
class Switches:
    """What the environment asks for. ``traces``/``metrics``: an exporter name, or "" for
    none; ``problem``: a one-line reason nothing is turned on although something was asked."""

    traces: str = ""
    metrics: str = ""
    endpoint: str = ""          # OTLP/HTTP base (…/v1/traces and …/v1/metrics are added)
    traces_endpoint: str = ""   # a full URL for traces alone, used as given
    metrics_endpoint: str = ""
    service: str = "refund-agent"
    capture: bool = False
    disabled: bool = False
    problem: str = ""

    @property
    def wanted(self) -> bool:
        """Whether the environment turns anything on (the SDK is needed then)."""
        return not self.disabled and bool(self.traces or self.metrics)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _exporter(env: Mapping[str, str], name: str, default: str) -> tuple[str, str]:
    """The exporter a variable names ("" for none), and a problem if it names one we lack."""
    raw = env.get(name, "").strip().lower()
    chosen = raw or default
    # Several exporters may be listed ("console,otlp"); the first is used, said plainly.
    first = chosen.split(",")[0].strip()
    if first not in EXPORTERS:
        return "", (f"{name}={raw!r} is not supported here; use one of "
                    f"{', '.join(EXPORTERS)} (telemetry stays off).")
    return ("" if first == "none" else first), ""


def read(env: Mapping[str, str]) -> Switches:
    """The switches ``env`` sets.

    Off unless asked: ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (console, otlp,
    none) or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``…_TRACES_ENDPOINT``,
    ``…_METRICS_ENDPOINT``), which means otlp for the signals it covers. ``OTEL_SDK_DISABLED=
    true`` wins over everything. Only OTLP over HTTP (protobuf) is built here.
    """
    if _truthy(env.get("OTEL_SDK_DISABLED")):
        return Switches(disabled=True)
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    traces_at = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    metrics_at = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip()
    traces, problem = _exporter(env, "OTEL_TRACES_EXPORTER",
                                "otlp" if endpoint or traces_at else "none")
    metrics, other = _exporter(env, "OTEL_METRICS_EXPORTER",
                               "otlp" if endpoint or metrics_at else "none")
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip().lower()
    if "otlp" in (traces, metrics) and protocol != "http/protobuf":
        return Switches(problem=f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported "
                                "here; use http/protobuf (telemetry stays off).")
    if problem or other:
        return Switches(problem=problem or other)
    return Switches(traces=traces, metrics=metrics, endpoint=endpoint.rstrip("/"),
                    traces_endpoint=traces_at, metrics_endpoint=metrics_at,
                    service=env.get("OTEL_SERVICE_NAME", "").strip() or "refund-agent",
                    capture=_truthy(env.get(CAPTURE)))


def capture(env: Mapping[str, str]) -> bool:
    """Whether message content (emails, arguments, model text) may go into spans."""
    return _truthy(env.get(CAPTURE))
