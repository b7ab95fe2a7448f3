"""A package that installs: the defaults that let `pip install .` run from any folder.

Before, the defaults were the checkout's folders: installed, `refund-agent` in an empty folder
stopped with "Data folder not found: .../site-packages/data", pointed at the data it wrote its
store into site-packages/output/, and the page could not be started at all (app.py was not
shipped). Now the sample shop ships in the package (pyproject.toml maps data/ onto
refund_agent.sample_shop), runs write to ./output of the folder you run in, and
`refund-agent web` serves the page shipped in the package.

Here in process where possible; .ci/run's plain-install check does the same with a real wheel
in a fresh virtual environment, from an empty folder.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from helpers.cli import DATA, PROJECT_ROOT, cli_env
from helpers.outside_servers import free_port
from helpers.page import wait_until_served

import refund_agent
from refund_agent import Settings, load_settings
from refund_agent import config as config_module
from refund_agent.cli import main
from refund_agent.desk import Agent, DeskStore, Shop
from refund_agent.errors import ConfigError


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch) -> Path:
    """An empty folder to run in, with neither REFUND_AGENT_DATA nor REFUND_AGENT_OUTPUT."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("REFUND_AGENT_DATA", raising=False)
    monkeypatch.delenv("REFUND_AGENT_OUTPUT", raising=False)
    return folder


def test_the_store_goes_to_output_of_the_folder_you_run_in(elsewhere):
    settings = load_settings()
    assert settings.output_dir == elsewhere / "output"
    assert Settings().output_dir == elsewhere / "output"   # made in code, the same default
    agent = Agent(settings)
    run = agent.start_sample("damaged")                      # boundary 1: the run is stored
    assert (elsewhere / "output" / "refund-agent.sqlite3").is_file()
    assert agent.store.run(run.id).sender == "maya.chen@example.com"


def test_without_REFUND_AGENT_DATA_the_sample_shop_is_found(elsewhere):
    settings = load_settings()
    assert settings.data_dir == Settings().data_dir
    shop = Shop(settings.data_dir)
    assert shop.samples["damaged"].sender == "maya.chen@example.com"


def test_an_installed_package_reads_the_shop_shipped_inside_it(elsewhere, tmp_path, monkeypatch):
    """A wheel's layout: no checkout around the package, the shop in refund_agent/sample_shop/
    (a folder without __init__.py, found through refund_agent's own path)."""
    site = tmp_path / "site-packages"
    shutil.copytree(DATA, site / "refund_agent" / "sample_shop")
    monkeypatch.setattr(config_module, "PROJECT_ROOT", site)   # no pyproject.toml: installed
    monkeypatch.setattr(refund_agent, "__path__", [*refund_agent.__path__,
                                                    str(site / "refund_agent")])
    assert load_settings().data_dir == site / "refund_agent" / "sample_shop"


def test_a_missing_shipped_shop_is_one_line_naming_the_way_out(elsewhere, tmp_path,
                                                                 monkeypatch, capsys):
    monkeypatch.setattr(config_module, "PROJECT_ROOT", tmp_path / "site-packages")
    monkeypatch.setattr(refund_agent, "__path__", [str(tmp_path / "nowhere")])
    with pytest.raises(ConfigError, match="reinstall refund-agent, or set REFUND_AGENT_DATA"):
        config_module.sample_shop()
    assert main(["runs"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: The package's copy of data/ is missing") and err.count("\n") == 1


def test_every_file_of_the_shipped_folders_is_in_the_package_data():
    """A file added to data/, .streamlit/ or tests/corpus/ that no package-data glob matches
    would be left out of the wheel, and only an installed desk would miss it."""
    setuptools = _setuptools_table()
    assert setuptools["package-dir"] == {"refund_agent.sample_shop": "data",
                                         "refund_agent.web.streamlit_config": ".streamlit",
                                         "refund_agent.evals.brain_corpus": "tests/corpus"}
    shipped = _shipped_files()
    for folder in setuptools["package-dir"].values():
        assert any(name.startswith(f"{folder}/") for _, name in shipped), folder
    for package, name in shipped:
        assert package in setuptools["packages"], (name, package)
        globs = setuptools["package-data"].get(package, [])
        assert any(fnmatch.fnmatch(Path(name).name, g) for g in globs), (name, package, globs)


def test_a_dotenv_in_the_folder_you_run_in_is_read(elsewhere, monkeypatch):
    # setenv first, so that monkeypatch restores the variable's absence afterwards: load_dotenv
    # writes into os.environ, and a leak would change the model of every later test.
    monkeypatch.setenv("REFUND_AGENT_MODEL", "")
    monkeypatch.delenv("REFUND_AGENT_MODEL")
    (elsewhere / ".env").write_text("REFUND_AGENT_MODEL=grok-from-dotenv\n")
    assert load_settings().model == "grok-from-dotenv"


# -- refund-agent web -------------------------------------------------------------------------


def test_web_passes_streamlit_options_on_and_theirs_win():
    from refund_agent.web.app import SCRIPT, desk_options, env_name, streamlit_command

    options = desk_options()   # the checkout's .streamlit/config.toml, as flags
    assert options["server.fileWatcherType"] == "none" and options["runner.postScriptGC"] is False
    command = streamlit_command(["--server.port", "8600", "--server.fileWatcherType=poll"],
                                options, {env_name("theme.primaryColor"): "#000000"})
    assert command[:5] == [sys.executable, "-m", "streamlit", "run", str(SCRIPT)]
    assert "--runner.postScriptGC=false" in command and "--server.address=localhost" in command
    assert "--server.fileWatcherType=none" not in command          # given on the command line
    assert not any(c.startswith("--theme.primaryColor") for c in command)   # given as STREAMLIT_
    assert command[-3:] == ["--server.port", "8600", "--server.fileWatcherType=poll"]
    assert env_name("runner.postScriptGC") == "STREAMLIT_RUNNER_POST_SCRIPT_GC"


def test_refund_agent_web_serves_the_page_from_an_empty_folder(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    env = cli_env(tmp_path / "unused")
    for name in ("REFUND_AGENT_DATA", "REFUND_AGENT_OUTPUT"):
        env.pop(name)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    port, log = free_port(), tmp_path / "web.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "refund_agent", "web", "--server.port",
                                 str(port), "--server.headless", "true"], cwd=folder, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        assert wait_until_served(proc, f"http://127.0.0.1:{port}/", log, timeout=60) == "ok"
        proc.send_signal(signal.SIGTERM)   # reaches Streamlit itself: the command became it
        assert proc.wait(timeout=15) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert list(folder.iterdir()) == []    # nothing written where nothing was asked for


def test_postgresql_without_its_extra_says_how_to_install_it(monkeypatch, tmp_path):
    """A plain `pip install .` has no psycopg: a PostgreSQL URL is then one line naming the
    extra, before any connection is tried (the stripe extra's twin is in test_smtp.py)."""
    from refund_agent.errors import StoreError
    from refund_agent.store import Store, postgres

    monkeypatch.setattr(postgres, "psycopg", None)   # as without the [postgres] extra
    with pytest.raises(StoreError, match=r"psycopg is not installed.*refund-agent\[postgres\]"):
        Store("postgresql://desk@127.0.0.1:1/desk")


# -- the wheel ------------------------------------------------------------------------------------


def _setuptools_table() -> dict:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _shipped_files() -> list[tuple[str, str]]:
    """Every tracked file of the folders package-dir ships, as (package, path in the checkout),
    the package being the one its own folder is: tests/corpus/shop/x.json is in
    refund_agent.evals.brain_corpus.shop."""
    out = []
    for package, folder in _setuptools_table()["package-dir"].items():
        tracked = subprocess.run(["git", "ls-files", folder], cwd=PROJECT_ROOT, text=True,
                                 capture_output=True, check=True).stdout.split()
        for name in tracked or [str(p.relative_to(PROJECT_ROOT))       # no git (a tarball)
                                for p in (PROJECT_ROOT / folder).rglob("*") if p.is_file()]:
            inside = Path(name).relative_to(folder).parent.parts
            out.append((".".join([package, *inside]), name))
    return out


def test_every_folder_that_ships_data_is_a_package_of_its_own():
    """setuptools takes every folder under a package for a package: one it is not told about
    (tests/corpus/shop/ was) still ships, with a 40-line "Package would be ignored" warning on
    every install, `./dev web`'s and `./dev test`'s first run included."""
    packages = set(_setuptools_table()["packages"])
    missing = sorted({package for package, _ in _shipped_files()} - packages)
    assert not missing, f"folders with data but not in [tool.setuptools] packages: {missing}"


def _build_setuptools_ok() -> bool:
    """Whether this interpreter's setuptools meets pyproject.toml's build requirement."""
    try:
        import setuptools
    except ImportError:
        return False
    need = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["build-system"]
    floor = next(r.split(">=")[1] for r in need["requires"] if r.startswith("setuptools>="))
    have = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
    return have >= tuple(int(p) for p in floor.split("."))


def _offline_build_options() -> tuple[list[str], dict[str, str]] | None:
    """How pip builds the wheel here without the network, or None when it cannot: with this
    environment's setuptools if it is new enough, else in pip's usual isolated environment
    filled only from the local (file://) package indexes pip is configured with."""
    if _build_setuptools_ok():
        return ["--no-build-isolation"], {}
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], text=True,
                            capture_output=True).stdout
    indexes = list(dict.fromkeys(re.findall(r"file://[^\s']+", config)))
    if not indexes:
        return None
    options = ["--index-url", indexes[0]]
    for url in indexes[1:]:
        options += ["--extra-index-url", url]
    # No pip configuration at all: an index or find-links on the network it may name is not
    # consulted, and PIP_* settings of the shell do not add one back.
    return options, {"PIP_CONFIG_FILE": os.devnull}


@pytest.mark.slow   # a real wheel build: about 3 s, longer with a fresh build environment
def test_the_wheel_builds_without_warnings_and_carries_the_data(tmp_path):
    how = _offline_build_options()
    if how is None:
        pytest.skip("no setuptools>=77 here and no local package index to build the wheel "
                    "offline; .ci/run's plain `pip install .` builds it")
    options, env_changes = how
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | env_changes
    # From a copy of what the build reads, so that its build/ and egg-info land there and not
    # in the checkout, where another build may be running.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (PROJECT_ROOT / name).exists():
            shutil.copy(PROJECT_ROOT / name, source / name)
    folders = {"refund_agent", "offline_model", *_setuptools_table()["package-dir"].values()}
    for folder in folders:
        shutil.copytree(PROJECT_ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-v",
         "--wheel-dir", str(wheels), *options, str(source)],
        text=True, capture_output=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output[-3000:]
    assert "Package would be ignored" not in output and "as data is deprecated" not in output, (
        output[output.find("would be ignored") - 500:][:2000])
    (wheel,) = wheels.glob("refund_agent-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for package, name in _shipped_files():
        inside = f"{package.replace('.', '/')}/{Path(name).name}"
        assert inside in names, f"{name} is not in the wheel as {inside}"


_WITHOUT = """import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None   # as if the extra were not installed: importing it fails
from refund_agent.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(("missing", "env", "args", "extra"), [
    ("psycopg", {"REFUND_AGENT_DATABASE_URL": "postgresql://x@127.0.0.1:1/db"}, ["runs"],
     "postgres"),
    ("stripe", {"REFUND_AGENT_PAYMENTS": "stripe", "STRIPE_API_KEY": "sk_test_x"}, [],
     "stripe"),
])
def test_a_setting_that_needs_an_extra_names_it_in_one_line(tmp_path, missing, env, args,
                                                            extra):
    """psycopg and stripe are extras (aiosmtpd's case: tests/outside/test_mailin_parse.py): a
    plain `pip install .` that is asked for PostgreSQL or Stripe says which extra to install,
    in one line, before any ticket is started."""
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT, missing, *args], capture_output=True, text=True,
        env={**cli_env(tmp_path / "out"), **env}, timeout=300)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"pip install 'refund-agent[{extra}]'" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    store = tmp_path / "out" / "refund-agent.sqlite3"
    assert not store.exists() or DeskStore(store).runs() == []   # no ticket was started


def test_a_stand_in_pace_in_the_wrong_form_is_one_line_naming_the_setting(tmp_path):
    """The stand-in reads REFUND_AGENT_OFFLINE_RATE_LIMIT when it starts (old code: a
    ValueError traceback); the ticket it was started for waits, saved, for a resume."""
    result = subprocess.run(
        [sys.executable, "-m", "refund_agent"], capture_output=True, text=True, timeout=300,
        env={**cli_env(tmp_path / "out"), "REFUND_AGENT_OFFLINE_RATE_LIMIT": "fast"})
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: REFUND_AGENT_OFFLINE_RATE_LIMIT: a rate limit is a count per time, like 60/min,"
        " 10/s or 600/10min; got 'fast'."]
