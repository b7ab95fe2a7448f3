"""Model access: Grok through the openai SDK, or the offline stand-in over loopback.

Both paths use the same ``openai.OpenAI`` client and the same Responses API calls; only the
base URL and key differ. That is what lets every test exercise the real SDK without a network.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2
import openai

from ..config import Settings
from ..errors import ConfigError
from ..telemetry import points
from .limiter import Limiter, limiter_for
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
    # The stand-in speaks the provider's dialect, at the pace it is set to.
    key = f"{state}|{settings.provider}|{settings.offline_rate_limit}"
    with _lock:
        server = _servers.get(key)
        if server is not None and not state.exists():
            # The output folder was deleted under us (a test or notebook starting afresh);
            # the old server would keep writing to a file nobody else can see.
            server.close()
            server = None
        if server is None:
            try:
                server = start_offline_server(state, latency=settings.offline_latency,
                                              dialect=settings.provider,
                                              rate_limit=settings.offline_rate_limit or None)
            except ValueError as exc:   # the stand-in reads the pace; its words name the form
                raise ConfigError(f"REFUND_AGENT_OFFLINE_RATE_LIMIT: {exc}.") from None
            _servers[key] = server
        return server


class ProviderClient(openai.OpenAI):
    """The SDK's client, retrying only what is worth retrying, at the process's pace.

    The SDK retries every 429, but a 429 that says the team is out of credits will say the same
    five times over (each after a longer wait), so its body is read first and such an answer is
    not retried. 5xx are retried as before, and so is a connection cut before the answer starts.

    With a ``limiter`` (``open_model`` always gives one), every attempt passes through it
    (``limiter.py``): it waits its turn, and a rate-limit 429 is sent again by the limiter,
    which slows every run of the process, instead of by the SDK, which would slow this one.
    """

    def __init__(self, *args: Any, limiter: Limiter | None = None, patience: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limiter = limiter
        self.patience = patience

    def _should_retry(self, response: httpx2.Response) -> bool:
        if response.status_code == 429:
            if self.limiter is not None:
                return False  # the limiter retried it already, as far as it may
            if not _rate_limited(response):
                return False
        again = super()._should_retry(response)
        if again:
            points.retried(response.status_code)
        return again

    def _send_request(self, request: httpx2.Request, *, stream: bool,
                      **kwargs: Any) -> httpx2.Response:
        send = super()._send_request
        if self.limiter is None:
            return send(request, stream=stream, **kwargs)
        try:
            size = len(request.content)
        except httpx2.RequestNotRead:
            size = 0
        return self.limiter.send(lambda: send(request, stream=stream, **kwargs), size,
                                 _rate_limited, self.max_retries, self.patience)


def _rate_limited(response: httpx2.Response) -> bool:
    """Whether a 429 is a rate limit (worth waiting out), not a lack of credits."""
    try:
        body = response.read()
    except (httpx2.HTTPError, httpx2.StreamError):
        body = b""
    return worth_retrying(response.status_code, body)


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
    common: dict[str, Any] = {"max_retries": settings.max_retries, "timeout": settings.timeout,
                              "patience": settings.rate_patience}
    if settings.offline and settings.offline_url:
        # One offline service for every host (see the README's PostgreSQL section): a run
        # continued on another host finds its stored responses there, as it would at xAI.
        client = ProviderClient(base_url=settings.offline_url, api_key="offline-stand-in",
                               limiter=_limiter(settings, settings.offline_url, ""), **common)
        return ModelAccess(client, settings.model_label, None)
    if settings.offline:
        server = offline_server(settings)
        with _lock:  # one per stand-in: a later one on the same port starts afresh
            limiter = _stand_in_limiters.get(server)
            if limiter is None:
                limiter = Limiter(settings.rate_rpm, settings.rate_tpm)
                _stand_in_limiters[server] = limiter
        client = ProviderClient(base_url=server.base_url, api_key="offline-stand-in",
                                limiter=limiter, **common)
        return ModelAccess(client, settings.model_label, server)
    client = ProviderClient(base_url=settings.base_url, api_key=settings.api_key,
                            limiter=_limiter(settings, settings.base_url, settings.api_key),
                            **common)
    return ModelAccess(client, settings.model_label, None)


_stand_in_limiters: weakref.WeakKeyDictionary[OfflineServer, Limiter] = \
    weakref.WeakKeyDictionary()


def _limiter(settings: Settings, base_url: str, key: str) -> Limiter:
    """The process's limiter for this endpoint and team (a provider limits each team: the
    key's digest tells them apart, the key itself is never kept), shared by every client
    opened on them."""
    team = hashlib.sha256(key.encode()).hexdigest()[:16]
    return limiter_for(f"{base_url}|{team}", settings.rate_rpm, settings.rate_tpm)
