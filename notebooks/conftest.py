"""pytest settings for the notebooks (walkthrough, beyond), which nbval runs cell by cell.

nbval starts the notebook's kernel as a child of pytest, so the kernel (and every process the
notebook starts) inherits the environment set here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_scratch: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if not (config.option.nbval or config.option.nbval_lax):
        return
    # The stored outputs come from the offline stand-in. A key in the shell or in .env would send
    # the walkthrough to Grok, whose answers differ (and cost money), so the check always runs
    # offline. An empty variable wins over .env, which is loaded without overriding.
    os.environ["XAI_API_KEY"] = ""
    for name in ("REFUND_AGENT_CRASH_AT", "CRASH_AFTER_REFUND", "REFUND_AGENT_OFFLINE_FAULTS",
                 "REFUND_AGENT_MODEL", "REFUND_AGENT_REASONING_EFFORT", "REFUND_AGENT_DATA"):
        os.environ.pop(name, None)
    # nbval opens the sanitize file relative to the current directory; pyproject.toml names it
    # relative to the project root, so resolve it there when pytest runs from elsewhere.
    path = config.option.nbval_sanitize_with
    if path and not Path(path).is_file() and (config.rootpath / path).is_file():
        config.option.nbval_sanitize_with = str(config.rootpath / path)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Start the kernel with TMPDIR in a scratch folder that is deleted after the session.

    The notebook writes into a fresh temporary folder each time it runs, which is right for a
    reader; under pytest, this keeps test runs from piling those folders up.
    """
    if item.path.suffix != ".ipynb" or getattr(item.parent, "kernel", True) is not None:
        return (yield)
    old = os.environ.get("TMPDIR")
    _scratch.append(tempfile.mkdtemp(prefix="nbval-walkthrough-"))
    os.environ["TMPDIR"] = _scratch[-1]
    try:
        return (yield)
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _scratch:
        shutil.rmtree(path, ignore_errors=True)
