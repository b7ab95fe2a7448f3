"""Telemetry's fixtures: the loop's spans into the SDK's in-memory exporter, its metrics into
an in-memory reader, for one test (refund_agent.telemetry.use), then telemetry off again.

The store-credit agent (tests/helpers/credit.py) is the agent under test: it writes no span of
its own, so whatever the tests find, the loop made. The modules that need the otel extra skip
without it (pytest.importorskip at their top); the switches' rules are tested either way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.credit import CreditDesk

from refund_agent import ModelAccess, Settings, telemetry


@pytest.fixture(autouse=True)
def telemetry_off_after() -> Iterator[None]:
    """Whatever a test turned on is off for the next one (the choice is process-wide)."""
    telemetry.reset()
    yield
    telemetry.reset()


@pytest.fixture
def recorded() -> Any:
    from helpers.telemetry import Recorded  # needs the otel extra: its users skip without
    return Recorded()


@pytest.fixture
def recorded_content() -> Any:
    from helpers.telemetry import Recorded
    return Recorded(capture=True)


@pytest.fixture
def credit(settings: Settings, model: ModelAccess) -> CreditDesk:
    return CreditDesk(settings, model=model)


