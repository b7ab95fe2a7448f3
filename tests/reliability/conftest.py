"""The reliability suites: real processes killed at every crash point, races between
processes, generated money histories, power cuts and soaks. Slow by being here: ``./dev test
--fast`` leaves this folder out, the whole suite (and CI) runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)
