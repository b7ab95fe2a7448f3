"""Shared fixtures: every test gets its own output folder and its own offline model.

Nothing here touches the network: the agent talks to the offline stand-in over loopback through
the real openai SDK. The plain helpers the test modules share live in tests/helpers/ (no test
module imports another, or this file).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.cli import DATA, note_backend

from offline_model import OfflineServer, Reply
from offline_model.testing import ScriptedBrain, every_script_used
from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.providers.client import ModelAccess, open_model

# -- the stand-in's two dialects ----------------------------------------------------------------


@pytest.fixture(params=["xai", "openai"])
def dialect(request, monkeypatch) -> str:
    """Runs a test against the stand-in in each provider's dialect: every OfflineServer made
    without an explicit dialect reads REFUND_AGENT_OFFLINE_DIALECT."""
    monkeypatch.setenv("REFUND_AGENT_OFFLINE_DIALECT", request.param)
    return request.param


@pytest.fixture(autouse=True)
def _environment_restored():
    """Every test leaves os.environ as it found it: load_settings() loads a .env into it, and
    a variable that outlived its test (a model name, once) changed every later test and the
    notebooks' kernels in a serial run."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


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


_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps whether the test itself passed, for the checks its fixtures make afterwards."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[_PASSED] = report.passed


@pytest.fixture(autouse=True)
def _every_script_used(request):
    """Every scripted model a test makes (the ``scripted`` fixture's or its own ScriptedBrain)
    must have been asked for every step it was given: a spare step means the run did not go
    where the test thinks. Checked after a test that passed; a failure already says more."""
    with every_script_used() as made:
        yield
        if not request.node.stash.get(_PASSED, False):
            made.clear()


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
    """A throwaway PostgreSQL server for the session (tests/helpers/pg.py), or a skip saying why."""
    from helpers.pg import Cluster, find_bin

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
    from helpers.pg import Backend

    if request.param == "sqlite":
        return Backend("sqlite")
    return Backend("postgresql", request.getfixturevalue("pg_cluster"))


@pytest.fixture(scope="session")
def baselines(tmp_path_factory: pytest.TempPathFactory, backend):
    """Crash-free runs of each crash scenario on this backend (helpers.crash.Baselines), made
    once per session and scenario, on first use."""
    from helpers.crash import Baselines

    return Baselines(tmp_path_factory.mktemp(f"baselines-{backend.name}"), backend)


@pytest.fixture(autouse=True)
def _note_the_backend(request):
    """Note which backend this test runs on (helpers.cli.running_on, for the reliability log):
    its ``backend`` parameter (taken directly or through a fixture such as ``baselines``), else
    SQLite, where every other test keeps its store."""
    callspec = getattr(request.node, "callspec", None)
    note_backend(callspec.params.get("backend", "sqlite") if callspec else "sqlite")
    yield
    note_backend("sqlite")


# -- markers for a fast subset (./dev test --fast) ---------------------------------------------

# Whole modules whose tests kill processes, soak or generate hundreds of histories: the safety
# net for every change to the store or the agent, and most of the suite's time. Each with why.
SLOW_MODULES = {
    "test_crash_matrix",        # about 130 kill-and-resume cases, five processes each
    "test_crash_matrix_outside",  # the crash matrix again, on localstripe and aiosmtpd
    "test_soak",                # random kills and paused owners, on both engines
    "test_races",               # 140 rounds of racing processes
    "test_money_invariants",    # 500 generated money histories
    "test_migrate",             # copies whole stores between the engines
    "test_faults",              # a model fault at every turn of every scenario
    "test_hostile",             # hostile emails and tool calls, each a full run
    "test_power_loss",          # strace-recorded commands, hundreds of crash states recovered
    "test_cli_output",          # every command twice, once with its output closed mid-run
    "test_notebook_mutations",  # the notebook run eleven times, once per break and unbroken
    "test_fencing",             # paused owners woken after a takeover, skewed clocks
}


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
