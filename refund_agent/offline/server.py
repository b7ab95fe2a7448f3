"""A local stand-in for the xAI/OpenAI Responses API.

``OfflineServer`` listens on loopback and answers ``POST /v1/responses`` (plain
JSON or server-sent events) and ``GET /v1/responses/{id}`` closely enough that
the unmodified ``openai`` SDK parses every reply. Decisions come from a *brain*
callable (``refund_agent.offline.brain.respond`` unless one is injected); this
module only handles protocol, storage, simulated usage/cost, latency and faults.

Only the standard library is used, and nothing else from ``refund_agent`` is
imported eagerly, so the server works before the rest of the package exists.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import events
from .events import ApiError, delta_delays, fault_error, normalize_input, not_found, validate_body

__all__ = [
    "FAULTS_ENV",
    "KNOWN_FAULTS",
    "RETENTION_SECONDS",
    "OfflineServer",
    "ResponseStore",
    "start_offline_server",
]

log = logging.getLogger(__name__)

FAULTS_ENV = "REFUND_AGENT_OFFLINE_FAULTS"
KNOWN_FAULTS = frozenset({"429", "500", "503", "cut"})
RETENTION_SECONDS = 30 * 86400
# A "cut" stream dies after this many delta events: enough for a client to have
# started rendering, so the test exercises a genuinely partial stream.
_CUT_AFTER_DELTAS = 3

Brain = Callable[[list[dict[str, Any]], list[dict[str, Any]]], events.ReplyLike]
Item = dict[str, Any]


# Walks previous_response_id links from one response back to the chain start.
_CHAIN_QUERY = """
WITH RECURSIVE chain(id, prev, created_at, input_items, response, depth) AS (
    SELECT id, previous_response_id, created_at, input_items, response, 0
    FROM responses WHERE id = ?
    UNION ALL
    SELECT r.id, r.previous_response_id, r.created_at, r.input_items, r.response, chain.depth + 1
    FROM responses r JOIN chain ON r.id = chain.prev
)
SELECT prev, created_at, input_items, response FROM chain ORDER BY depth DESC
"""


@dataclass(frozen=True)
class StoredResponse:
    """One persisted response: what it was asked (input items) and what it said."""

    input_items: list[Item]
    response: dict[str, Any]

    @property
    def conversation(self) -> list[Item]:
        """This turn's input items followed by its output items."""
        return self.input_items + self.response["output"]


class ResponseStore:
    """SQLite persistence (WAL) for stored responses, with a 30-day lifetime.

    Each row keeps only its own turn; a conversation is rebuilt by walking
    ``previous_response_id`` links with one recursive query, so storage and
    lookup stay linear in the chain length.
    """

    def __init__(self, path: Path, clock: Callable[[], float]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._lock = threading.Lock()
        # One connection shared by handler threads; the lock serialises use.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        for attempt in range(50):
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                # Processes switching a new file to WAL at the same moment are told "locked"
                # at once (SQLite skips its busy handler there): retry briefly.
                if "locked" not in str(exc) or attempt == 49:
                    raise
                time.sleep(0.01 * (1 + attempt % 5))
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses ("
            " id TEXT PRIMARY KEY, previous_response_id TEXT, created_at REAL NOT NULL,"
            " input_items TEXT NOT NULL, response TEXT NOT NULL)"
        )

    def save(self, created_at: float, input_items: list[Item], response: dict[str, Any]) -> None:
        """Persists a response together with the input items of its turn."""
        row = (
            response["id"],
            response["previous_response_id"],
            created_at,
            json.dumps(input_items),
            json.dumps(response),
        )
        with self._lock:
            self._db.execute("INSERT INTO responses VALUES (?, ?, ?, ?, ?)", row)

    def get(self, response_id: str) -> dict[str, Any]:
        """Returns a live stored response.

        Raises:
            ApiError: 404 if unknown, never stored, or expired.
        """
        with self._lock:
            row = self._db.execute(
                "SELECT created_at, response FROM responses WHERE id = ?", (response_id,)
            ).fetchone()
        if row is None or self._expired(row[0]):
            raise not_found(response_id, None)
        return json.loads(row[1])

    def chain(self, response_id: str) -> list[StoredResponse]:
        """Returns the chain ending at ``response_id``, oldest first.

        Raises:
            ApiError: 404 naming ``response_id`` if it or any ancestor is
                unknown or expired, since the conversation can't be rebuilt.
        """
        with self._lock:
            rows = self._db.execute(_CHAIN_QUERY, (response_id,)).fetchall()
        # The oldest row must be a chain start (no previous), else a link is missing.
        if not rows or rows[0][0] is not None or any(self._expired(row[1]) for row in rows):
            raise not_found(response_id, "previous_response_id")
        return [StoredResponse(json.loads(row[2]), json.loads(row[3])) for row in rows]

    def close(self) -> None:
        """Closes the database connection."""
        with self._lock:
            self._db.close()

    def _expired(self, created_at: float) -> bool:
        return self._clock() - created_at > RETENTION_SECONDS


@dataclass(frozen=True)
class _Created:
    """A response ready to send, with what must be stored once it's delivered."""

    response: dict[str, Any]
    input_items: list[Item]
    created_at: float


class OfflineServer:
    """Loopback HTTP server speaking the Responses API for the ``openai`` SDK.

    Args:
        state_path: SQLite file holding stored responses (parents created).
        latency: Seconds a reply takes; streamed replies spread it over deltas.
        faults: Initial fault queue (``"429"``, ``"500"``, ``"503"``, ``"cut"``);
            ``None`` reads the comma-separated ``REFUND_AGENT_OFFLINE_FAULTS``.
        clock: Time source for ``created_at`` and the 30-day expiry.
        brain: ``respond(conversation, tools)``; defaults to
            ``refund_agent.offline.brain.respond``, imported on first use.
        port: Port to bind on 127.0.0.1; 0 picks a free one.

    Attributes:
        requests: Every JSON body received at ``POST /v1/responses``, in order.
    """

    def __init__(
        self,
        state_path: Path,
        *,
        latency: float = 0.0,
        faults: list[str] | None = None,
        clock: Callable[[], float] = time.time,
        brain: Brain | None = None,
        port: int = 0,
    ) -> None:
        self.state_path = Path(state_path)
        self.latency = latency
        self.clock = clock
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self._brain = brain
        self._lock = threading.Lock()
        self._faults: deque[str] = deque()
        self.inject(*(faults if faults is not None else _faults_from_env()))
        self._store: ResponseStore | None = None
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the SDK's ``base_url`` (after :meth:`start`)."""
        if self._httpd is None:
            raise RuntimeError("OfflineServer is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> OfflineServer:
        """Opens the store, binds 127.0.0.1 and serves in a daemon thread."""
        if self._httpd is not None:
            return self
        self._store = ResponseStore(self.state_path, self.clock)
        self._httpd = _HTTPServer(("127.0.0.1", self.port), _Handler, self)
        # A short poll interval keeps close() (which waits for the loop to notice) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="offline-responses", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops serving, drops open connections and closes the store. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            httpd.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._store is not None:
            self._store.close()
            self._store = None

    def inject(self, *faults: str) -> None:
        """Appends faults to the queue; each ``POST /v1/responses`` consumes one.

        Raises:
            ValueError: For a fault name not in ``KNOWN_FAULTS``.
        """
        unknown = [fault for fault in faults if fault not in KNOWN_FAULTS]
        if unknown:
            raise ValueError(f"unknown faults {unknown}; expected some of {sorted(KNOWN_FAULTS)}")
        with self._lock:
            self._faults.extend(faults)

    def __enter__(self) -> OfflineServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- used by the request handler -------------------------------------

    def record(self, body: dict[str, Any]) -> str | None:
        """Records a create request and pops the next fault, atomically."""
        with self._lock:
            self.requests.append(body)
            return self._faults.popleft() if self._faults else None

    def create(self, body: dict[str, Any]) -> _Created:
        """Runs one create request through the brain.

        Raises:
            ApiError: 400 for invalid bodies, 404 for unusable chains, 500 if
                the brain fails.
        """
        validate_body(body)
        input_items = normalize_input(body["input"])
        previous = body.get("previous_response_id")
        chain = self._require_store().chain(previous) if previous else []
        history = [item for turn in chain for item in turn.conversation]
        conversation = history + input_items
        reply = self._think(conversation, body.get("tools") or [])
        output = events.build_output_items(reply)
        key = body.get("prompt_cache_key")
        # Continuing a chain last processed under the same key hits the cache
        # for the whole earlier conversation; anything else is a miss.
        cache_hit = (
            bool(chain) and key is not None and chain[-1].response.get("prompt_cache_key") == key
        )
        usage = events.build_usage(conversation, output, history if cache_hit else [])
        created_at = self.clock()
        response = events.build_response(
            body,
            response_id=events.new_id("resp"),
            created_at=created_at,
            output=output,
            usage=usage,
        )
        return _Created(response, input_items, created_at)

    def persist(self, created: _Created) -> None:
        """Stores a delivered response unless it was created with ``store: false``."""
        if created.response["store"]:
            self._require_store().save(created.created_at, created.input_items, created.response)

    def retrieve(self, response_id: str) -> dict[str, Any]:
        """Returns a stored response (404 ``ApiError`` if unavailable)."""
        return self._require_store().get(response_id)

    def _think(self, conversation: list[Item], tools: list[dict[str, Any]]) -> events.ReplyLike:
        """Calls the brain; its failures become a non-retryable 500."""
        try:
            brain = self._brain or _default_brain()
            # Deep copies so a brain that mutates its arguments can't alter what gets stored.
            return brain(copy.deepcopy(conversation), copy.deepcopy(tools))
        except Exception as exc:
            log.exception("offline brain failed")
            # Brains are deterministic, so tell the SDK that retrying is pointless.
            raise ApiError(
                500,
                f"The offline model failed: {type(exc).__name__}: {exc}",
                kind="server_error",
                code="server_error",
                headers={"x-should-retry": "false"},
            ) from exc

    def _require_store(self) -> ResponseStore:
        if self._store is None:
            raise ApiError(503, "The offline server is shutting down.", kind="server_error")
        return self._store


def start_offline_server(state_path: Path, **kw: Any) -> OfflineServer:
    """Creates and starts an :class:`OfflineServer` (keywords as its constructor)."""
    return OfflineServer(state_path, **kw).start()


def _default_brain() -> Brain:
    # Imported lazily: the server must import (and run with an injected brain)
    # even before brain.py exists.
    from .brain import respond

    return respond


def _faults_from_env() -> list[str]:
    raw = os.environ.get(FAULTS_ENV, "")
    return [fault.strip() for fault in raw.split(",") if fault.strip()]


class _HTTPServer(ThreadingHTTPServer):
    """Threading HTTP server that knows its app and its open connections."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], app: OfflineServer
    ) -> None:
        self.app = app
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def track(self, connection: socket.socket, alive: bool) -> None:
        """Adds or removes a client connection from the open set."""
        with self._connections_lock:
            (self._connections.add if alive else self._connections.discard)(connection)

    def drop_connections(self) -> None:
        """Shuts down keep-alive connections so their threads stop serving a closed app."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the peer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Client disconnects are routine; keep the console quiet.
        log.debug("offline server: error while handling a request", exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """Maps HTTP requests onto :class:`OfflineServer`; owns all socket I/O."""

    protocol_version = "HTTP/1.1"  # keep-alive + chunked streaming, like the real API
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # Each event is its own small write; with Nagle's algorithm on, the client's delayed
        # ACK would hold every response back by about 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, alive=True)

    def finish(self) -> None:
        self.server.track(self.connection, alive=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silences the default per-request stderr lines."""

    def do_POST(self) -> None:
        """Routes ``/v1/responses`` and ``/_offline/faults``."""
        path = urlsplit(self.path).path.rstrip("/")
        try:
            body = self._read_json()
            if path == "/v1/responses":
                self._create(body)
            elif path == "/_offline/faults":
                self._add_faults(body)
            else:
                raise ApiError(404, f"Unknown path {path!r}.")
        except ApiError as err:
            self._send_json(err.status, err.body, err.headers)
        except Exception as exc:  # a server bug must not kill the connection silently
            log.exception("offline server: request failed")
            self._send_json(500, ApiError(500, f"Internal error: {exc}", kind="server_error").body)

    def do_GET(self) -> None:
        """Routes ``/v1/responses/{id}`` (JSON, or replayed SSE with ``?stream=true``)."""
        url = urlsplit(self.path)
        path = url.path.rstrip("/")
        try:
            if path == "/_offline/health":
                self._send_json(200, {"ok": True})
            elif path.startswith("/v1/responses/"):
                response = self.server.app.retrieve(path.removeprefix("/v1/responses/"))
                query = parse_qs(url.query)
                if query.get("stream") == ["true"]:
                    after = int(query.get("starting_after", ["-1"])[0])
                    self._stream(
                        e for e in events.stream_events(response) if e["sequence_number"] > after
                    )
                else:
                    self._send_json(200, response)
            else:
                raise ApiError(404, f"Unknown path {path!r}.")
        except ApiError as err:
            self._send_json(err.status, err.body, err.headers)

    def _create(self, body: Any) -> None:
        app = self.server.app
        fault = app.record(body) if isinstance(body, dict) else None
        if fault in ("429", "500", "503"):
            raise fault_error(fault)
        created = app.create(body)
        if body.get("stream"):
            self._stream_created(created, cut=fault == "cut")
        elif fault == "cut":
            self._abort()  # no answer at all: the client sees a dropped connection
        else:
            if app.latency > 0:
                time.sleep(app.latency)
            app.persist(created)
            self._send_json(200, created.response)

    def _stream_created(self, created: _Created, *, cut: bool) -> None:
        """Streams a new response; it's stored just before ``response.completed``.

        Storing before the final event means a client that reacts to
        ``response.completed`` can immediately continue the chain; a cut stream
        never gets there, so nothing is stored.
        """
        app = self.server.app
        stream = list(events.stream_events(created.response))
        delays = delta_delays(stream, app.latency)

        def paced() -> Iterator[dict[str, Any]]:
            deltas_sent = 0
            for event, delay in zip(stream, delays, strict=True):
                if cut and (
                    deltas_sent >= _CUT_AFTER_DELTAS or event["type"] == "response.completed"
                ):
                    return
                if delay:
                    time.sleep(delay)
                if event["type"] == "response.completed":
                    app.persist(created)
                deltas_sent += event["type"].endswith(".delta")
                yield event

        self._stream(paced(), complete=not cut)

    def _add_faults(self, body: Any) -> None:
        faults = body.get("faults") if isinstance(body, dict) else None
        if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
            raise ApiError(400, 'Expected a body like {"faults": ["429", "cut"]}.', param="faults")
        try:
            self.server.app.inject(*faults)
        except ValueError as exc:
            raise ApiError(400, str(exc), param="faults") from exc
        self._send_json(200, {"queued": faults})

    def _read_json(self) -> Any:
        """Reads and parses the request body.

        Raises:
            ApiError: 400 if the body isn't valid JSON.
        """
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ApiError(
                400, f"We could not parse the JSON body of your request: {exc}."
            ) from exc

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, stream: Iterable[dict[str, Any]], *, complete: bool = True) -> None:
        """Writes events as chunked ``text/event-stream``.

        Args:
            stream: Events to send (sleeps happen inside the iterable).
            complete: False to drop the connection after the events instead of
                ending the chunked body, which the SDK reports as a broken
                connection (``APIConnectionError``).
        """
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex}")
        self.end_headers()
        try:
            for event in stream:
                data = events.encode_sse(event)
                self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()  # push each event now so streaming is visible
            if complete:
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._abort()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away; nothing to do
        except Exception:
            # Headers are already out, so an error body is impossible: cut instead.
            log.exception("offline server: stream failed")
            self._abort()

    def _abort(self) -> None:
        """Drops the connection mid-message (no terminating chunk)."""
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
