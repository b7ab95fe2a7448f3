"""Model access: Grok through the openai SDK, or the offline stand-in over loopback.

Both paths use the same ``openai.OpenAI`` client and the same Responses API calls; only the
base URL and key differ. That is what lets every test exercise the real SDK without a network.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2
import openai

from ..config import Settings
from .table import RESUME, ProviderError, read_error, worth_retrying

if TYPE_CHECKING:  # the stand-in is imported only when it is started (offline_server)
    from offline_model import OfflineServer

_servers: dict[str, OfflineServer] = {}
_lock = threading.Lock()


def offline_server(settings: Settings) -> OfflineServer:
    """The process's offline model for this output folder, started on first use.

    One server per state file and process: every agent in the process shares it, and a new
    process starts its own on the same file, so stored responses outlive the process.
    """
    # Imported here, not at the top: with a key set the stand-in (a package of its own, about
    # 5,000 lines) is never loaded.
    from offline_model import start_offline_server

    state = settings.output_dir / "offline-model.sqlite3"
    key = f"{state}|{settings.provider}"  # the stand-in speaks the provider's dialect
    with _lock:
        server = _servers.get(key)
        if server is not None and not state.exists():
            # The output folder was deleted under us (a test or notebook starting afresh);
            # the old server would keep writing to a file nobody else can see.
            server.close()
            server = None
        if server is None:
            server = start_offline_server(state, latency=settings.offline_latency,
                                          dialect=settings.provider)
            _servers[key] = server
        return server


class ProviderClient(openai.OpenAI):
    """The SDK's client, retrying only what is worth retrying.

    The SDK retries every 429, but a 429 that says the team is out of credits will say the same
    five times over (each after a longer wait), so its body is read first and such an answer is
    not retried. Rate limits and 5xx are retried as before, and so is a connection cut before
    the answer starts.
    """

    def _should_retry(self, response: httpx2.Response) -> bool:
        if response.status_code == 429:
            try:
                body = response.read()
            except (httpx2.HTTPError, httpx2.StreamError):
                body = b""
            if not worth_retrying(response.status_code, body):
                return False
        return super()._should_retry(response)


def unreachable(exc: BaseException) -> str | None:
    """``"HOST (why)"`` when a request never reached the provider (its name did not resolve,
    the connection was refused or timed out); None when it did and broke later, or for any
    other error. Read from the exceptions the SDK's client chained, innermost last."""
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    if not any(isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout) for e in chain):
        return None
    why = "could not connect"
    for e in chain:
        if isinstance(e, socket.gaierror):
            why = "name not resolved"
        elif isinstance(e, ConnectionRefusedError):
            why = "connection refused"
        elif isinstance(e, httpx2.ConnectTimeout | TimeoutError):
            why = "timed out connecting"
        elif isinstance(e, OSError) and e.strerror and why == "could not connect":
            why = e.strerror.lower()
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None)
    host = "the provider"
    if url is not None and url.host:
        host = url.host + (f":{url.port}" if url.port else "")
    return f"{host} ({why})"


def provider_error(exc: openai.APIError, provider: str,
                   response_id: str | None = None) -> ProviderError:
    """What an SDK error means, read from the body the provider actually sent."""
    if isinstance(exc, openai.APIConnectionError):
        if where := unreachable(exc):
            return ProviderError(None, None, f"could not reach {where}", "unreachable", True,
                                 f"Check the network (or REFUND_AGENT_BASE_URL). {RESUME}")
        return ProviderError(None, None, "", "connection", True, f"Retried. {RESUME}")
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    body: Any = exc.body
    if response is not None:
        try:
            body = response.text
        except (httpx2.ResponseNotRead, httpx2.StreamError):
            pass
    if isinstance(body, dict) and isinstance(body.get("response"), dict):
        body = body["response"].get("error") or body  # a stream's response.failed event
    return read_error(status, body, settings_hint=provider, response_id=response_id)


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
        client = ProviderClient(base_url=settings.offline_url, api_key="offline-stand-in",
                               **common)
        return ModelAccess(client, settings.model_label, None)
    if settings.offline:
        server = offline_server(settings)
        client = ProviderClient(base_url=server.base_url, api_key="offline-stand-in", **common)
        return ModelAccess(client, settings.model_label, server)
    client = ProviderClient(base_url=settings.base_url, api_key=settings.api_key, **common)
    return ModelAccess(client, settings.model_label, None)
