"""``refund-agent doctor`` against the stand-in in both dialects (base_url pointed at it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from offline_model import OfflineServer
from refund_agent import Settings
from refund_agent.desk.tools import tool_schemas
from refund_agent.providers import doctor

# The desk's tools, as the terminal hands them in (cli/admin.py:doctor).
TOOLS = tool_schemas()


def diagnose(settings: Settings):
    return doctor.diagnose(settings, TOOLS)


def report(settings: Settings):
    return doctor.report(settings, TOOLS)


@pytest.fixture
def stand_in(settings: Settings, dialect: str) -> Iterator:
    opened: list[OfflineServer] = []

    def make(**options) -> tuple[Settings, OfflineServer]:
        server = OfflineServer(settings.output_dir / "doctor.sqlite3", faults=[],
                               **options).start()
        opened.append(server)
        keyed = settings.with_(api_key="test-key", provider=dialect, base_url=server.base_url,
                               model="grok-4.7" if dialect == "xai" else "gpt-5-mini")
        return keyed, server

    yield make
    for server in opened:
        server.close()


def _by_name(checks) -> dict:
    return {c.name: c for c in checks}


def test_without_a_key_it_explains_the_stand_in_and_how_to_switch(tmp_path):
    done = run_cli(tmp_path / "out", "doctor")
    assert done.returncode == 0, done.stderr
    assert "offline stand-in" in done.stdout and "not a language model" in done.stdout
    assert "XAI_API_KEY" in done.stdout and "OPENAI_API_KEY" in done.stdout
    assert "REFUND_AGENT_PROVIDER=openai" in done.stdout


def test_with_a_key_every_check_passes_through_the_terminal(tmp_path, stand_in, dialect):
    keyed, server = stand_in()
    key = {"xai": "XAI_API_KEY", "openai": "OPENAI_API_KEY"}[dialect]
    done = run_cli(tmp_path / "out", "doctor", **{
        key: "test-key", "REFUND_AGENT_PROVIDER": dialect,
        "REFUND_AGENT_BASE_URL": server.base_url})
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("key", "model", "effort", "storage", "streaming"):
        assert f"ok   {name}:" in done.stdout, done.stdout
    assert "Everything works." in done.stdout
    sent = server.requests[-1]
    assert sent["stream"] is True and sent["reasoning"] == {"effort": "low"}


def test_a_zero_retention_team_is_told_what_to_set(stand_in):
    keyed, server = stand_in(zero_retention=True)
    checks = _by_name(diagnose(keyed))
    assert checks["storage"].ok is False
    assert "REFUND_AGENT_ZERO_RETENTION=1" in checks["storage"].detail
    assert checks["streaming"].ok and checks["model"].ok   # checked again with store=false
    lines, ok = report(keyed)
    assert not ok and any("FAIL storage" in line for line in lines)


def test_out_of_credits_is_said_and_not_retried(stand_in):
    keyed, server = stand_in()
    server.inject("credits")
    checks = _by_name(diagnose(keyed))
    assert checks["key"].ok is False and "out of credits" in checks["key"].detail
    assert len(server.requests) == 1 and checks["streaming"].ok is None


def test_a_model_that_takes_no_effort_is_sent_none(stand_in, dialect):
    keyed, server = stand_in()
    keyed = keyed.with_(model="grok-4" if dialect == "xai" else "gpt-4.1")
    checks = _by_name(diagnose(keyed))
    assert checks["effort"].ok and "does not take 'low'" in checks["effort"].detail
    assert "reasoning" not in server.requests[-1]
    assert all(c.ok for c in checks.values())


def test_an_unknown_model_is_tried_without_an_effort(stand_in):
    keyed, server = stand_in()
    checks = _by_name(diagnose(keyed.with_(model="brand-new-model")))
    assert checks["effort"].ok is None and "does not know" in checks["effort"].detail
    assert checks["model"].ok and "reasoning" not in server.requests[-1]


# -- the agent's own request, and a host that cannot be reached (issue 33 items 9 and 11) ---------

def test_the_doctor_sends_the_agents_own_parameter_set(stand_in, dialect):
    """What the doctor tries is what the agent sends (the same builder, not a copy): a doctor
    that left out ``include`` said ok for gpt-4o while every first request was refused."""
    from refund_agent.desk import Agent

    keyed, server = stand_in()
    assert all(c.ok for c in diagnose(keyed)), diagnose(keyed)
    doctor = server.requests[-1]
    agent = Agent(keyed)
    agent.advance(agent.start_sample("damaged").id)
    first = next(b for b in server.requests if b.get("tools"))
    assert set(doctor) == set(first)
    for name in ("model", "store", "stream", "parallel_tool_calls", "tools", "reasoning",
                 "include"):
        assert doctor.get(name) == first.get(name), name


def test_gpt_4o_is_ok_and_asked_for_no_encrypted_reasoning(stand_in):
    keyed, server = stand_in()
    if keyed.provider != "openai":
        pytest.skip("an OpenAI model")
    checks = _by_name(diagnose(keyed.with_(model="gpt-4o")))
    assert all(c.ok for c in checks.values()), checks
    assert "include" not in server.requests[-1]


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("where, said", [
    ("refused", "could not reach 127.0.0.1:{port} (connection refused)"),
    # .invalid never resolves (RFC 6761), so no network is needed to see it fail.
    ("unresolved", "could not reach api.refund-agent-test.invalid (name not resolved)"),
])
def test_no_network_names_the_host_it_could_not_reach(settings, where, said):
    port = _closed_port()
    base = {"refused": f"http://127.0.0.1:{port}/v1",
            "unresolved": "https://api.refund-agent-test.invalid/v1"}[where]
    keyed = settings.with_(api_key="test-key", base_url=base)
    lines, ok = report(keyed)
    text = "\n".join(lines)
    assert not ok and said.format(port=port) in text, text
    assert "connection broke" not in text and "Resume" not in text
    assert "FAIL streaming" not in text


def test_the_doctor_sends_the_tools_it_is_handed(stand_in):
    """The doctor knows no agent: an agent of one's own checks its provider with its own
    tools (none at all, here), and the request carries exactly those."""
    keyed, server = stand_in()
    assert all(c.ok for c in doctor.diagnose(keyed, []))
    assert server.requests[-1]["tools"] == []
