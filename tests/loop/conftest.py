"""The loop's own fixtures: a small agent that is not the refund desk (tests/helpers/credit.py),
with the offline model or a scripted one. tests/loop needs nothing of the desk (its ``agent``
and ``scripted`` fixtures in tests/conftest.py are the desk's; test_layout.py checks)."""

from __future__ import annotations

import openai
import pytest
from helpers.credit import CreditDesk

from offline_model import OfflineServer, Reply
from offline_model.testing import ScriptedBrain
from refund_agent import Loop, ModelAccess, Settings


@pytest.fixture
def credit(settings: Settings, model: ModelAccess) -> CreditDesk:
    return CreditDesk(settings, model=model)


@pytest.fixture
def scripted_credit(settings: Settings):
    """Make an agent (CreditDesk unless ``agent=`` names another Loop) whose offline model
    follows a script: ``desk, brain, server = make(*replies)``."""
    servers: list[OfflineServer] = []

    def make(*replies: Reply, agent: type[Loop] = CreditDesk
             ) -> tuple[Loop, ScriptedBrain, OfflineServer]:
        brain = ScriptedBrain(*replies)
        server = OfflineServer(settings.output_dir / "scripted.sqlite3", brain=brain).start()
        servers.append(server)
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        return agent(settings, model=ModelAccess(client, "scripted", server)), brain, server

    yield make
    for server in servers:
        server.close()
