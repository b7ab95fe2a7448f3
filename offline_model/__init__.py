"""A local stand-in for the xAI/OpenAI Responses API, for testing any client without a network.

It needs only the standard library (the agent loads it only when no API key is set). To test
your own Responses API client against it, in-process or as ``python -m offline_model --port N``::

    from offline_model import Reply, start_offline_server
    from offline_model.testing import ScriptedBrain

    brain = ScriptedBrain(Reply("look it up", calls=[("lookup", {"id": "A1"})]))
    with brain, start_offline_server(tmp_path / "responses.sqlite3", brain=brain) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")
        ...  # your client's requests; brain.seen holds what the model was shown

Without ``brain=`` it answers with its own deterministic support desk (docs/OFFLINE-MODEL.md).
"""

from .brain import Reply
from .server import OfflineServer, start_offline_server

__all__ = ["OfflineServer", "Reply", "start_offline_server"]
