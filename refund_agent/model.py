"""Model access: Grok through the openai SDK, or the offline stand-in over loopback.

Both paths use the same ``openai.OpenAI`` client and the same Responses API calls; only the
base URL and key differ. That is what lets every test exercise the real SDK without a network.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import openai

from .config import Settings
from .offline import OfflineServer, start_offline_server

_servers: dict[str, OfflineServer] = {}
_lock = threading.Lock()


def offline_server(settings: Settings) -> OfflineServer:
    """The process's offline model for this output folder, started on first use.

    One server per state file and process: every agent in the process shares it, and a new
    process starts its own on the same file, so stored responses outlive the process.
    """
    state = settings.output_dir / "offline-model.sqlite3"
    with _lock:
        server = _servers.get(str(state))
        if server is not None and not state.exists():
            # The output folder was deleted under us (a test or notebook starting afresh);
            # the old server would keep writing to a file nobody else can see.
            server.close()
            server = None
        if server is None:
            server = start_offline_server(state, latency=settings.offline_latency)
            _servers[str(state)] = server
        return server


@dataclass
class ModelAccess:
    client: openai.OpenAI
    label: str
    server: OfflineServer | None


def open_model(settings: Settings) -> ModelAccess:
    """An SDK client for Grok, or for the offline stand-in when no key is set."""
    common = {"max_retries": settings.max_retries, "timeout": settings.timeout}
    if settings.offline and settings.offline_url:
        # One offline service for every host (see the README's PostgreSQL section): a run
        # continued on another host finds its stored responses there, as it would at xAI.
        client = openai.OpenAI(base_url=settings.offline_url, api_key="offline-stand-in",
                               **common)
        return ModelAccess(client, settings.model_label, None)
    if settings.offline:
        server = offline_server(settings)
        client = openai.OpenAI(base_url=server.base_url, api_key="offline-stand-in", **common)
        return ModelAccess(client, settings.model_label, server)
    client = openai.OpenAI(base_url=settings.base_url, api_key=settings.api_key, **common)
    return ModelAccess(client, settings.model_label, None)
