"""Which of OpenTelemetry's own variables turn telemetry on, and how (telemetry/switches.py,
pure): off unless asked, OTEL_SDK_DISABLED over everything, an OTLP endpoint meaning otlp for
the signals it covers, anything this package does not build refused in one line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from refund_agent.telemetry import OFF, _resolve
from refund_agent.telemetry.switches import CAPTURE, read

NAMES = ["OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
         "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
         "OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_PROTOCOL", CAPTURE, "PATH", "HOME"]
VALUES = st.sampled_from(["", "console", "otlp", "none", "zipkin", "true", "TRUE", "false",
                          "http://127.0.0.1:4318", "grpc", "http/protobuf", "console,otlp"])
ENVS = st.dictionaries(st.sampled_from(NAMES), VALUES)


def test_nothing_set_is_off():
    assert not read({}).wanted and read({}).problem == ""


def test_each_switch():
    assert read({"OTEL_TRACES_EXPORTER": "console"}).traces == "console"
    assert read({"OTEL_TRACES_EXPORTER": "console"}).metrics == ""
    endpoint = read({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert (endpoint.traces, endpoint.metrics) == ("otlp", "otlp")
    assert endpoint.endpoint == "http://collector:4318"
    only_traces = read({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert (only_traces.traces, only_traces.metrics) == ("otlp", "")
    assert read({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_METRICS_EXPORTER":
                 "none"}).metrics == ""
    assert read({"OTEL_TRACES_EXPORTER": "console", CAPTURE: "true"}).capture
    assert read({"OTEL_SERVICE_NAME": "desk-eu", "OTEL_TRACES_EXPORTER": "console"}
                ).service == "desk-eu"
    grpc = read({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL":
                 "grpc"})
    assert not grpc.wanted and "http/protobuf" in grpc.problem


@given(ENVS)
def test_disabled_wins_over_everything(env):
    env = {**env, "OTEL_SDK_DISABLED": "true"}
    assert not read(env).wanted and _resolve(env) is OFF


@given(ENVS)
def test_on_only_when_an_exporter_or_endpoint_asks(env):
    switches = read(env)
    asked = (any(env.get(name, "") not in ("", "none") for name in NAMES[:2])
             or any(env.get(name, "") for name in NAMES[2:5]))
    if not asked:
        assert not switches.wanted
    if switches.wanted:
        assert {switches.traces, switches.metrics} - {""} <= {"console", "otlp"}
        assert switches.problem == ""
    else:
        assert switches.traces == switches.metrics == ""


@given(ENVS)
def test_a_problem_is_one_line_and_leaves_it_off(env):
    switches = read(env)
    if switches.problem:
        assert "\n" not in switches.problem and not switches.wanted
        assert "telemetry stays off" in switches.problem


@given(ENVS)
def test_content_only_with_its_switch(env):
    switches = read(env)
    if switches.wanted:
        assert switches.capture is (env.get(CAPTURE, "").lower() == "true")
