"""OpenTelemetry traces and metrics for any agent on the loop, off unless asked for.

The loop, its store and its outside systems call the small functions of :mod:`.points`; each
asks :func:`active` first. Off (the default) it is :data:`OFF`, whose every method does nothing,
and OpenTelemetry is never imported: ``import refund_agent.loop`` stays as cheap as before, and
an advance pays one attribute read per point. On, :mod:`.otel` (the only module importing the
SDK) makes the spans and counts the metrics. What turns it on (docs/TELEMETRY.md):

- OpenTelemetry's own variables (:mod:`.switches`): ``OTEL_TRACES_EXPORTER``,
  ``OTEL_METRICS_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` …, ``OTEL_SDK_DISABLED``;
- a TracerProvider the application already installed globally (someone lifting the loop into
  their service): the loop's spans join theirs, and nothing of its own is set up;
- :func:`use`, for tests and applications that hand their providers over explicitly.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from . import switches

log = logging.getLogger(__name__)


class NullSpan:
    """The part of OpenTelemetry's Span the loop uses, doing nothing (telemetry off)."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: dict[str, Any] | None = None) -> None:
        pass

    def is_recording(self) -> bool:
        return False


NULL_SPAN = NullSpan()
_NOTHING = nullcontext(NULL_SPAN)   # reusable: entering a nullcontext changes nothing


class Telemetry:
    """Telemetry off: every method is a no-op (the real one is otel.OtelTelemetry)."""

    on = False
    capture = False   # message content in spans (OTEL_INSTRUMENTATION_GENAI_CAPTURE_…)

    def span(self, name: str, attributes: dict[str, Any], *, parent: str | None = None,
             client: bool = False, start: float | None = None
             ) -> AbstractContextManager[Any]:
        """A span made current for the block; ``parent``: a stored trace context (its run's)
        to join instead of the current one, which is then linked; ``start``: its start, in
        seconds since 1970, when it began before the block did."""
        return _NOTHING

    def record(self, name: str, attributes: dict[str, Any], *, parent: str | None,
               start: float, end: float) -> None:
        """A span that already happened (a wait for a person), from ``start`` to ``end``."""

    def current(self) -> Any:
        """The current span (to add attributes and events to), or the null one."""
        return NULL_SPAN

    def fail(self, span: Any, kind: str, description: str = "") -> None:
        """Mark ``span`` failed: ``error.type`` ``kind``, status ERROR."""

    def carrier(self) -> str | None:
        """The current span's W3C trace context, as stored with a run (None when off)."""
        return None

    def add(self, name: str, value: float, attributes: dict[str, Any] | None = None) -> None:
        """Add to the counter ``name`` (see otel.COUNTERS)."""

    def measure(self, name: str, value: float,
                attributes: dict[str, Any] | None = None) -> None:
        """Record ``value`` in the histogram ``name`` (see otel.HISTOGRAMS)."""

    def watch(self, store: Any) -> None:
        """Read the gauges (runs by status, proposals waiting) from ``store`` when collected."""

    def flush(self) -> None:
        """Export what is buffered (before a short process ends)."""


OFF = Telemetry()
_active: Telemetry | None = None


def active() -> Telemetry:
    """Telemetry as this process has it: decided once, at first use, from the environment."""
    global _active
    if _active is None:
        _active = _resolve(os.environ)
    return _active


def _installed_provider() -> Any | None:
    """A TracerProvider the application set globally, or None. Only looked for when the
    application already imported OpenTelemetry: otherwise there can be none, and importing it
    here would cost every process that never asked for telemetry."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    # The API's placeholders (nothing installed yet) are not a provider of the application's.
    if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return None
    return provider


def _resolve(env: Any) -> Telemetry:
    wanted = switches.read(env)
    if wanted.disabled:
        return OFF
    installed = _installed_provider()
    if installed is None and not wanted.wanted:
        if wanted.problem:
            log.warning(wanted.problem)
        return OFF
    try:
        from . import otel
    except ImportError as exc:
        log.warning("Telemetry was asked for, but OpenTelemetry is not installed (%s): "
                    "pip install 'refund-agent[otel]'. Carrying on without it.", exc.name)
        return OFF
    return otel.from_switches(wanted, installed)


def use(tracer_provider: Any = None, meter_provider: Any = None, *,
        capture: bool | None = None) -> Telemetry:
    """Send the loop's spans and metrics to these providers (an application's, or a test's
    in-memory ones), whatever the environment says; returns the telemetry now active."""
    global _active
    from . import otel
    _active = otel.OtelTelemetry(
        tracer_provider, meter_provider,
        switches.capture(os.environ) if capture is None else capture)
    return _active


def reset() -> None:
    """Forget the decision (tests): the next :func:`active` reads the environment again."""
    global _active
    if _active is not None:
        _active.flush()
    _active = None


def flush() -> None:
    """Export what is buffered, if telemetry is on (the CLI calls it before exiting)."""
    if _active is not None:
        _active.flush()


# The points the loop and its floors call (imported last: they use active() above); the
# loop's own by name (telemetry.advancing, ...), the floors' as points.*.
from . import points as points  # noqa: E402
from .points import advancing, decided, starting, traced_call  # noqa: E402

__all__ = ["OFF", "NULL_SPAN", "Telemetry", "active", "advancing", "decided", "flush",
           "points", "reset", "starting", "traced_call", "use"]
