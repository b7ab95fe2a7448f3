"""The page as Streamlit runs it: ``refund-agent web`` from any folder (an installed package)
and a checkout's ``app.py`` both run :data:`SCRIPT`, with the desk's Streamlit settings.

The script has a folder of its own because Streamlit puts the folder of the script it runs
first on ``sys.path``: run from ``refund_agent/web/``, the page's ``queue.py`` would stand in
for the standard library's ``queue`` in every import after it.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...config import shipped_folder

SCRIPT = Path(__file__).with_name("streamlit_app.py")


def desk_options() -> dict[str, Any]:
    """The desk's Streamlit settings: the checkout's ``.streamlit/config.toml``, which ships in
    the package, as ``{"server.fileWatcherType": "none", ...}``."""
    folder = shipped_folder("refund_agent.web.streamlit_config", ".streamlit", "config.toml")
    with open(folder / "config.toml", "rb") as file:
        return dict(_flatten(tomllib.load(file)))


def _flatten(table: Mapping[str, Any], prefix: str = ""):
    for key, value in table.items():
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def env_name(option: str) -> str:
    """The variable Streamlit reads for ``option``: server.fileWatcherType ->
    STREAMLIT_SERVER_FILE_WATCHER_TYPE."""
    # Streamlit's own rule (config_option.env_var): dots to "_", then camelCase to snake_case.
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", option.replace(".", "_"))
    return "STREAMLIT_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).upper()


def streamlit_command(args: list[str], options: Mapping[str, Any],
                      env: Mapping[str, str]) -> list[str]:
    """``python -m streamlit run SCRIPT`` with the desk's ``options`` as flags, then ``args``.

    Without a checkout there is no ``.streamlit/`` in the folder you run in, so the desk's
    settings go on the command line. Whatever the person gives wins: an option in ``args``
    (``--server.port 8600``) or a ``STREAMLIT_*`` variable in ``env`` leaves the desk's value
    out. (A ``.streamlit/config.toml`` of their own ranks below flags in Streamlit, so it
    cannot change these few; the flags can.)
    """
    given = {arg[2:].split("=", 1)[0] for arg in args if arg.startswith("--")}
    flags = [f"--{name}={_flag_value(value)}" for name, value in options.items()
             if name not in given and env_name(name) not in env]
    return [sys.executable, "-m", "streamlit", "run", str(SCRIPT), *flags, *args]


def _flag_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
