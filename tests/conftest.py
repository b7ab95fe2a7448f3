"""Shared fixtures: every test gets its own output folder and its own offline model.

Nothing here touches the network: the agent talks to the offline stand-in over loopback through
the real openai SDK.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from refund_agent import Agent, Settings
from refund_agent.config import PROJECT_ROOT
from refund_agent.model import ModelAccess, open_model
from refund_agent.offline import OfflineServer
from refund_agent.offline.brain import Reply

DATA = PROJECT_ROOT / "data"


# -- the stand-in's two dialects ----------------------------------------------------------------

@pytest.fixture(params=["xai", "openai"])
def dialect(request, monkeypatch) -> str:
    """Runs a test against the stand-in in each provider's dialect: every OfflineServer made
    without an explicit dialect reads REFUND_AGENT_OFFLINE_DIALECT."""
    monkeypatch.setenv("REFUND_AGENT_OFFLINE_DIALECT", request.param)
    return request.param


def error_fields(raw: Any) -> dict[str, Any]:
    """An error body in either dialect as {"message", "code", "param", "flat"}.

    ``raw`` is the parsed body, its text, or an SDK exception (its response's text is read).
    xAI's flat body has no param; its code is the gRPC status text.
    """
    response = getattr(raw, "response", None)
    if response is not None:
        raw = response.text
    if isinstance(raw, (str, bytes)):
        raw = json.loads(raw)
    inner = raw.get("error")
    if isinstance(inner, dict):
        assert set(raw) == {"error"} and set(inner) == {"message", "type", "param", "code"}
        return {**inner, "flat": False}
    assert set(raw) == {"code", "error"} and isinstance(inner, str), raw
    return {"message": inner, "code": raw["code"], "param": None, "flat": True}


@contextmanager
def refused(kind: type[BaseException], fragment: str | None = None, *, param: str | None = None,
            code: str | None = None) -> Iterator[Any]:
    """pytest.raises for an SDK status error, checked in the dialect the server speaks: the
    message holds ``fragment`` (a regular expression); in OpenAI's dialect, the nested body
    names ``param`` and ``code``; in xAI's, the body is flat (which carries neither)."""
    with pytest.raises(kind) as caught:
        yield caught
    fields = error_fields(caught.value)
    if fragment is not None:
        assert re.search(fragment, fields["message"]), fields
    flat = os.environ.get("REFUND_AGENT_OFFLINE_DIALECT", "xai") != "openai"
    assert fields["flat"] is flat, fields
    if not flat and param is not None:
        assert fields["param"] == param, fields
    if not flat and code is not None:
        assert fields["code"] == code, fields


@pytest.fixture(autouse=True)
def _no_real_key(monkeypatch):
    """Tests must never reach Grok, whatever the developer's shell or .env holds."""
    monkeypatch.setenv("XAI_API_KEY", "")
    monkeypatch.setenv("OPENAI_API_KEY", "")
    # Nor Stripe or a mail server: the stand-ins, unless a test points at its own servers.
    monkeypatch.setenv("REFUND_AGENT_PAYMENTS", "")
    monkeypatch.setenv("REFUND_AGENT_EMAIL", "")
    monkeypatch.delenv("REFUND_AGENT_PROVIDER", raising=False)
    monkeypatch.delenv("REFUND_AGENT_OFFLINE_DIALECT", raising=False)
    for name in ("REFUND_AGENT_CRASH_AT", "CRASH_AFTER_REFUND", "REFUND_AGENT_OFFLINE_FAULTS",
                 "REFUND_AGENT_OFFLINE_LATENCY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(api_key="", data_dir=DATA, output_dir=tmp_path / "output", max_retries=2,
                    timeout=30.0)


@pytest.fixture
def model(settings: Settings) -> ModelAccess:
    """The offline model for this test's output folder (``model.server.requests`` = bodies)."""
    return open_model(settings)


@pytest.fixture
def agent(settings: Settings, model: ModelAccess) -> Agent:
    return Agent(settings, model=model)


def cli_env(output_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for a ``refund-agent`` subprocess writing into ``output_dir``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("REFUND_AGENT_CRASH_AT", "CRASH_AFTER_REFUND", "XAI_API_KEY")}
    env.update({"REFUND_AGENT_OUTPUT": str(output_dir), "REFUND_AGENT_DATA": str(DATA),
                "XAI_API_KEY": "", "REFUND_AGENT_MAX_RETRIES": "2", "PYTHONUNBUFFERED": "1",
                **extra})   # extra may name another shop's data
    return env


def run_cli(output_dir: Path, *args: str, timeout: float = 60, **extra: str
            ) -> subprocess.CompletedProcess[str]:
    """Run ``python -m refund_agent ARGS`` as a new process, as a user would."""
    return subprocess.run([sys.executable, "-m", "refund_agent", *args], capture_output=True,
                          text=True, timeout=timeout, env=cli_env(output_dir, **extra),
                          cwd=PROJECT_ROOT)


class ScriptedBrain:
    """A model that says exactly what the test tells it to, then finishes.

    ``seen`` keeps every conversation it was shown, so a test can check what went back to it.
    """

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict]] = []

    def __call__(self, conversation, tools):
        self.seen.append(conversation)
        return self.replies.pop(0) if self.replies else Reply("done", "Finished.")


@pytest.fixture
def scripted(settings):
    """Make an agent whose offline model follows a script: ``agent, brain, server = make(...)``."""
    import openai

    servers: list[OfflineServer] = []

    def make(*replies: Reply) -> tuple[Agent, ScriptedBrain, OfflineServer]:
        brain = ScriptedBrain(*replies)
        server = OfflineServer(settings.output_dir / "scripted.sqlite3", brain=brain).start()
        servers.append(server)
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        return Agent(settings, model=ModelAccess(client, "scripted", server)), brain, server

    yield make
    for server in servers:
        server.close()


# -- the two store backends ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL server for the session (tests/pg.py), or a skip saying why."""
    from pg import Cluster, find_bin

    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install -e '.[dev]' (or '.[postgres]')")
    bin_dir = find_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl were not found (/usr/lib/postgresql/*/bin "
                    "or PATH): install Debian's postgresql package to run the PostgreSQL tests")
    cluster = Cluster(bin_dir).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def backend(request):
    """Where the store lives: each test using this runs once per backend."""
    from pg import Backend

    if request.param == "sqlite":
        return Backend("sqlite")
    return Backend("postgresql", request.getfixturevalue("pg_cluster"))


# The backend the current test runs on, for the reliability log (test_crash_matrix.record).
_RUNNING_ON = {"backend": "sqlite"}


@pytest.fixture(autouse=True)
def _note_the_backend(request):
    """Note which backend this test runs on: its ``backend`` parameter (taken directly or
    through a fixture such as ``baselines``), else SQLite, where every other test keeps its
    store."""
    callspec = getattr(request.node, "callspec", None)
    _RUNNING_ON["backend"] = (callspec.params.get("backend", "sqlite") if callspec
                              else "sqlite")
    yield
    _RUNNING_ON["backend"] = "sqlite"


def running_on() -> str:
    """"sqlite" or "postgresql": the backend of the test running now."""
    return _RUNNING_ON["backend"]


# -- markers for a fast subset (./dev test --fast) ---------------------------------------------

# Whole modules whose tests kill processes, soak or generate hundreds of histories: the safety
# net for every change to the store or the agent, and most of the suite's time.
SLOW_MODULES = {"test_crash_matrix", "test_soak", "test_races", "test_money_invariants",
                "test_migrate", "test_faults", "test_hostile", "test_power_loss",
                "test_cli_output"}


def pytest_collection_modifyitems(config, items):
    """Mark tests by what they need, so ``-m "not slow and not browser and not postgres"``
    (``./dev test --fast``) leaves out the long ones without a marker in every file."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if "playwright" in names:
            item.add_marker(pytest.mark.browser)
        if "pg_cluster" in names or (callspec and callspec.params.get("backend") == "postgresql"):
            item.add_marker(pytest.mark.postgres)
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
