"""Telemetry across processes, switched on as a user switches it on (OpenTelemetry's own
variables), in new processes: a refund and its approval in a later ``refund-agent approve``
share one trace; a kill mid-effect and the resume that reuses the effect stay in it; OTLP over
HTTP reaches a receiver on loopback, decoded with opentelemetry-proto; off, and without the
extra, nothing of OpenTelemetry is even imported and every command works as before."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto", reason="the otel extra is not installed")

from helpers.cli import run_cli  # noqa: E402
from helpers.process import KILLED, expect_ok, run_python  # noqa: E402
from helpers.telemetry import console_spans  # noqa: E402
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (  # noqa: E402
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)

# Every OTEL_ variable of the environment the tests run in is replaced by the test's own.
OFF = {"OTEL_TRACES_EXPORTER": "", "OTEL_METRICS_EXPORTER": "", "OTEL_SDK_DISABLED": "",
       "OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "",
       "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "",
       "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": ""}
CONSOLE = {**OFF, "OTEL_TRACES_EXPORTER": "console"}


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    return span.get("attributes") or {}


def test_an_approval_in_a_later_process_joins_the_runs_trace(tmp_path):
    first = run_cli(tmp_path, **CONSOLE)
    expect_ok(first, "refund-agent")
    second = run_cli(tmp_path, "approve", "--as", "Dana Kim", **CONSOLE)
    expect_ok(second, "refund-agent approve")
    before, after = console_spans(first.stderr), console_spans(second.stderr)
    names = [s["name"] for s in before]
    assert "invoke_agent refunds" in names and "refund_agent.start refunds" in names
    assert {"execute_tool lookup_order", "execute_tool issue_refund"} <= set(names)
    trace_ids = {s["context"]["trace_id"] for s in before + after}
    assert len(trace_ids) == 1, "the approving process's spans are in another trace"
    (start,) = (s for s in before if s["name"] == "refund_agent.start refunds")
    (wait,) = (s for s in after if s["name"] == "refund_agent.wait")
    (decision,) = (s for s in after if s["name"] == "refund_agent.decision refunds")
    assert wait["parent_id"] == decision["parent_id"] == start["context"]["span_id"]
    assert _attributes(decision)["refund_agent.decision.by"] == "Dana Kim"
    assert _attributes(wait)["refund_agent.wait.seconds"] > 0
    resumed = [s for s in after if s["name"] == "invoke_agent refunds"]
    assert [_attributes(s)["refund_agent.resume"] for s in resumed] == [True]
    refund = next(s for s in after if s["name"] == "execute_tool issue_refund")
    assert _attributes(refund)["gen_ai.tool.call.id"]
    assert _attributes(refund)["refund_agent.effect.reused"] is False
    for span in before + after:
        if span["name"].startswith(("invoke_agent", "chat", "execute_tool")):
            assert _attributes(span)["gen_ai.operation.name"] == span["name"].split()[0]
    assert "Hello" not in first.stderr and "arrived" not in first.stderr   # no email text


# One command of the store-credit agent's chain, as in tests/loop/test_credit_crash.py.
COMMAND = r"""
import sys
from helpers.credit import ANA, EMAIL, CreditDesk
desk = CreditDesk()
command = sys.argv[1]
if command == "start":
    desk.advance(desk.start(ANA, EMAIL).id)
elif command == "approve":
    (pending,) = desk.store.approvals("pending")
    desk.approve(pending.id, pending.fingerprint, by="Dana Kim")
    desk.advance(pending.run_id)
else:
    for run in desk.resumable():
        desk.advance(run.id)
"""


def test_a_kill_mid_effect_then_a_resume_that_reuses_it_stay_in_one_trace(tmp_path):
    """An agent of one's own gets the spans with no code of its own, flushed at exit."""
    start = run_python(COMMAND, tmp_path, "start", **CONSOLE)
    expect_ok(start, "start")
    killed = run_python(COMMAND, tmp_path, "approve", REFUND_AGENT_CRASH_AT="after_credit",
                        **CONSOLE)
    assert killed.returncode == KILLED   # its spans die with it: it never exported them
    resumed = run_python(COMMAND, tmp_path, "resume", **CONSOLE)
    expect_ok(resumed, "resume")
    spans = console_spans(resumed.stderr)
    (advance,) = (s for s in spans if s["name"] == "invoke_agent store-credit")
    assert _attributes(advance)["refund_agent.lease.epoch"] == 3   # start, approve, resume
    assert [e["name"] for e in advance["events"]] == ["refund_agent.takeover"]
    (credit,) = (s for s in spans if s["name"] == "execute_tool issue_credit")
    assert _attributes(credit)["refund_agent.effect.reused"] is True
    assert {s["context"]["trace_id"] for s in console_spans(start.stderr) + spans} == {
        advance["context"]["trace_id"]}
    again = console_spans(run_python(COMMAND, tmp_path, "resume", **CONSOLE).stderr)
    assert again == []   # nothing left to resume: no span at all


class Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps each POST's path and body, answers 200."""

    received: list[tuple[str, bytes]]

    def do_POST(self) -> None:  # noqa: N802 (the handler's name is the stdlib's)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    received: list[tuple[str, bytes]] = []
    handler = type("Handler", (Receiver,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


def test_otlp_over_http_reaches_a_receiver_on_loopback(tmp_path, receiver):
    url, received = receiver
    proc = run_cli(tmp_path, **{**OFF, "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                                "OTEL_SERVICE_NAME": "desk-test"})
    expect_ok(proc, "refund-agent")
    assert {path for path, _ in received} == {"/v1/traces", "/v1/metrics"}
    spans, service = [], set()
    for _, body in (r for r in received if r[0] == "/v1/traces"):
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service |= {a.value.string_value for a in resource.resource.attributes
                        if a.key == "service.name"}
            spans += [s for scope in resource.scope_spans for s in scope.spans]
    assert service == {"desk-test"}
    by_name = {s.name: s for s in spans}
    chat = next(s for s in spans if s.name.startswith("chat "))
    attributes = {a.key: a.value for a in chat.attributes}
    assert attributes["gen_ai.operation.name"].string_value == "chat"
    assert attributes["gen_ai.usage.input_tokens"].int_value > 0
    assert "invoke_agent refunds" in by_name and "execute_tool issue_refund" in by_name
    assert len({s.trace_id for s in spans}) == 1
    metrics = set()
    for _, body in (r for r in received if r[0] == "/v1/metrics"):
        request = ExportMetricsServiceRequest.FromString(body)
        metrics |= {m.name for r in request.resource_metrics for s in r.scope_metrics
                    for m in s.metrics}
    assert {"refund_agent.model.requests", "gen_ai.client.token.usage",
            "refund_agent.proposals", "refund_agent.proposals.waiting"} <= metrics


CHECK_NOTHING_LOADED = r"""
import sys
from helpers.credit import ANA, EMAIL, CreditDesk
from refund_agent import telemetry
desk = CreditDesk()
run = desk.advance(desk.start(ANA, EMAIL).id)
assert run.status == "waiting", run.status
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print("loaded:", loaded, "on:", telemetry.active().on)
"""


def test_off_by_default_nothing_of_opentelemetry_is_imported(tmp_path):
    proc = run_python(CHECK_NOTHING_LOADED, tmp_path, **OFF)
    expect_ok(proc, "a ticket with telemetry off")
    assert "loaded: [] on: False" in proc.stdout


def test_sdk_disabled_wins_over_every_other_switch(tmp_path):
    proc = run_python(CHECK_NOTHING_LOADED, tmp_path,
                      **{**CONSOLE, "OTEL_SDK_DISABLED": "true"})
    expect_ok(proc, "a ticket with the SDK disabled")
    assert "loaded: [] on: False" in proc.stdout and console_spans(proc.stderr) == []


# The extra not installed: every import of OpenTelemetry fails, as on a machine without it.
WITHOUT_THE_EXTRA = r"""
import sys
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
""" + CHECK_NOTHING_LOADED


def test_without_the_extra_everything_works_and_says_so_once(tmp_path):
    proc = run_python(WITHOUT_THE_EXTRA, tmp_path, **CONSOLE)
    expect_ok(proc, "a ticket without the otel extra")
    assert "loaded: [] on: False" in proc.stdout
    assert proc.stderr.count("OpenTelemetry is not installed") == 1
    assert "pip install 'refund-agent[otel]'" in proc.stderr


def test_an_application_asking_for_telemetry_without_the_extra_is_told_how_to_install_it(
        tmp_path):
    blocked = WITHOUT_THE_EXTRA.split("sys.meta_path.insert(0, NotInstalled())")[0]
    script = blocked + """sys.meta_path.insert(0, NotInstalled())
from refund_agent import telemetry
try:
    telemetry.use()
except ImportError as exc:
    print("refused:", exc)
"""
    proc = run_python(script, tmp_path)
    expect_ok(proc, "telemetry.use() without the otel extra")
    assert "refused: refund_agent's telemetry needs OpenTelemetry" in proc.stdout
    assert "pip install 'refund-agent[otel]'" in proc.stdout


INSTALLED_BY_THE_APPLICATION = r"""
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)   # the application's, before the loop is used
from helpers.credit import ANA, EMAIL, CreditDesk
desk = CreditDesk()
with trace.get_tracer("app").start_as_current_span("handle ticket") as mine:
    desk.advance(desk.start(ANA, EMAIL).id)
spans = exporter.get_finished_spans()
print("names:", sorted({s.name.split()[0] for s in spans}))
print("one trace:", {s.context.trace_id for s in spans} == {mine.get_span_context().trace_id})
"""


def test_a_provider_the_application_installed_is_used(tmp_path):
    proc = run_python(INSTALLED_BY_THE_APPLICATION, tmp_path, **OFF)
    expect_ok(proc, "the loop in an application with its own provider")
    assert ("names: ['chat', 'execute_tool', 'handle', 'invoke_agent', 'refund_agent.start']"
            in proc.stdout)
    assert "one trace: True" in proc.stdout


def test_an_unknown_exporter_is_one_line_and_the_ticket_goes_on(tmp_path):
    proc = run_python(CHECK_NOTHING_LOADED, tmp_path, **{**OFF, "OTEL_TRACES_EXPORTER": "zipkin"})
    expect_ok(proc, "a ticket with an exporter this package does not build")
    assert "loaded: [] on: False" in proc.stdout
    assert proc.stderr.count("OTEL_TRACES_EXPORTER='zipkin' is not supported here") == 1
