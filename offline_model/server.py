"""A local stand-in for the xAI/OpenAI Responses API.

``OfflineServer`` listens on loopback and answers every Responses endpoint the
``openai`` SDK calls closely enough that the unmodified SDK parses every reply:

- ``POST /v1/responses`` (plain JSON or server-sent events; ``background`` too,
  queued and finished in a worker thread; ``include=["reasoning.encrypted_content"]``
  seals each reasoning item, and sealed items sent back as input are verified, so a
  client may keep the whole history itself with ``store: false``),
- ``GET /v1/responses/{id}`` (JSON, or the events replayed with ``stream=true``
  and ``starting_after``), ``DELETE /v1/responses/{id}``,
- ``POST /v1/responses/{id}/cancel``, ``GET /v1/responses/{id}/input_items``
  (cursor pagination), ``POST /v1/responses/input_tokens`` and
  ``POST /v1/responses/compact``.

Requests are routed before any body is read, and every error, from any path or
method, is JSON in the dialect's shape, never HTML: xAI's flat ``{"code": "<gRPC status
text>", "error": "<message>"}`` (the default), or OpenAI's nested ``{"error": {...}}``
(``dialect="openai"`` or ``REFUND_AGENT_OFFLINE_DIALECT=openai``). The xAI dialect also
answers with UUID response ids and ``call-<8 hex>-<n>`` call ids, returns the encrypted
reasoning of grok-4.7 unasked, refuses ``instructions`` with ``previous_response_id``, and
refuses a reasoning effort the model does not take (its own catalogue, models.py); the
OpenAI dialect refuses ``include`` of the encrypted reasoning on a model without reasoning.
``POST /_offline/clock`` moves the server's clock forward (tests age stored
responses past their 30 days with it; :meth:`OfflineServer.advance_clock` in-process).
Decisions come from a *brain* callable (``offline_model.brain.respond``
unless one is injected); this module only handles protocol, storage, simulated
usage/cost, latency and faults.

Only the standard library is used, and nothing from the agent: the package stands on its
own, for anyone testing a Responses API client.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import os
import re
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

from . import events, pacing, sealing
from .events import (
    TERMINAL,
    ApiError,
    delta_delays,
    fault_error,
    normalize_input,
    not_found,
    validate_body,
)
from .models import model_info

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
RATE_LIMIT_ENV = "REFUND_AGENT_OFFLINE_RATE_LIMIT"
DIALECT_ENV = "REFUND_AGENT_OFFLINE_DIALECT"
# "credits": a 429 saying the team is out of credits (not worth retrying). "422": a request
# refused for good (xAI: "a field in the POST request body has an invalid format"), as a
# transcript the provider cannot read is refused however often it is sent. "ok": no fault, to
# place a later one (the transcript resent after a 404, not the request that got the 404).
# "failed": accepted, then failed while generating (status "failed"; streamed, response.failed).
KNOWN_FAULTS = frozenset({"422", "429", "500", "503", "cut", "credits", "failed", "ok"})
# How a continuation of a gone stored response is refused: a 404 naming the id (both
# dialects), a bare 404 that names nothing (only a retrieve tells), or xAI's 400
# previous_response_not_found (its WebSocket-mode documentation).
GONE_FORMS = ("404", "404-bare", "400")
RETENTION_SECONDS = 30 * 86400
# A "cut" stream dies after this many delta events: enough for a client to have
# started rendering, so the test exercises a genuinely partial stream.
_CUT_AFTER_DELTAS = 3
# How long the in-memory prompt cache keeps a conversation it has processed (server clock).
PROMPT_CACHE_SECONDS = 3600.0

# respond(conversation, tools), optionally also taking a tool_choice keyword.
Brain = Callable[..., events.ReplyLike]
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
SELECT id, prev, created_at, input_items, response FROM chain ORDER BY depth DESC
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
        # The key that seals reasoning. Kept with the responses so a blob handed out before a
        # restart (or by another process on the same file) still opens a month later.
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL)"
        )
        self._db.execute(
            "INSERT OR IGNORE INTO secrets VALUES ('reasoning', ?)", (os.urandom(32),)
        )
        self.secret: bytes = self._db.execute(
            "SELECT value FROM secrets WHERE name = 'reasoning'"
        ).fetchone()[0]

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
                unknown, deleted or expired, since the conversation can't be
                rebuilt; 400 if ``response_id`` has not finished (a background
                response still queued or in progress, or one that failed or
                was cancelled).
        """
        with self._lock:
            rows = self._db.execute(_CHAIN_QUERY, (response_id,)).fetchall()
        # The oldest row must be a chain start (no previous), else a link is missing.
        if not rows or rows[0][1] is not None or any(self._expired(row[2]) for row in rows):
            raise not_found(response_id, "previous_response_id")
        chain = [StoredResponse(json.loads(row[3]), json.loads(row[4])) for row in rows]
        status = chain[-1].response.get("status", "completed")
        if status != "completed":
            raise ApiError(
                400,
                f"Response '{response_id}' is {status}; a conversation can only continue from "
                "a completed response.",
                param="previous_response_id",
            )
        return chain

    def lineage(self, response_id: str) -> list[tuple[str, StoredResponse]]:
        """The stored turns that make up ``response_id``'s input, oldest first, with their ids.

        Unlike :meth:`chain` this tolerates a broken chain: turns before a
        deleted or expired ancestor are simply gone.

        Raises:
            ApiError: 404 if ``response_id`` itself is unknown, deleted or expired.
        """
        self.get(response_id)
        with self._lock:
            rows = self._db.execute(_CHAIN_QUERY, (response_id,)).fetchall()
        turns: list[tuple[str, StoredResponse]] = []
        for row_id, _prev, created_at, input_items, response in reversed(rows):  # newest first
            if self._expired(created_at):
                break
            turns.append((row_id, StoredResponse(json.loads(input_items), json.loads(response))))
        return turns[::-1]

    def replace(
        self, response: dict[str, Any], *, only_from: Iterable[str] | None = None
    ) -> bool:
        """Overwrites a stored response (a background one changing status).

        Args:
            response: The new state; its ``id`` names the row.
            only_from: If given, the write happens only while the stored status
                is one of these, so a cancel and a finishing job cannot both win.

        Returns:
            Whether the row was written.
        """
        with self._lock:
            row = self._db.execute(
                "SELECT response FROM responses WHERE id = ?", (response["id"],)
            ).fetchone()
            if row is None:
                return False
            if only_from is not None and json.loads(row[0]).get("status") not in set(only_from):
                return False
            self._db.execute(
                "UPDATE responses SET response = ? WHERE id = ?",
                (json.dumps(response), response["id"]),
            )
            return True

    def delete(self, response_id: str) -> None:
        """Deletes a stored response.

        Raises:
            ApiError: 404 if unknown, already deleted or expired.
        """
        self.get(response_id)
        with self._lock:
            self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))

    def close(self) -> None:
        """Closes the database connection."""
        with self._lock:
            self._db.close()

    def _expired(self, created_at: float) -> bool:
        return self._clock() - created_at > RETENTION_SECONDS


@dataclass(frozen=True)
class _Turn:
    """A validated create request with the conversation it continues."""

    body: dict[str, Any]
    input_items: list[Item]
    chain: list[StoredResponse]

    @property
    def history(self) -> list[Item]:
        return [item for turn in self.chain for item in turn.conversation]


@dataclass(frozen=True)
class _Created:
    """A response ready to send, with what must be stored once it's delivered."""

    response: dict[str, Any]
    input_items: list[Item]
    created_at: float


def _failed(created: _Created) -> _Created:
    """The response as the API reports one that failed mid-generation: status "failed", an
    error, no output; streamed, it ends with ``response.failed``. Never stored, so nothing
    can continue from it."""
    response = {**created.response, "status": "failed", "output": [], "usage": None,
                "error": {"code": "server_error",
                          "message": "The model failed to generate a response."}}
    return _Created(response, created.input_items, created.created_at)


class OfflineServer:
    """Loopback HTTP server speaking the Responses API for the ``openai`` SDK.

    Args:
        state_path: SQLite file holding stored responses (parents created).
        latency: Seconds a reply takes; streamed replies spread it over deltas,
            background ones spend it queued.
        faults: Initial fault queue (``"422"``, ``"429"``, ``"500"``, ``"503"``, ``"cut"``,
            ``"credits"``, ``"failed"``, ``"ok"``);
            ``None`` reads the comma-separated ``REFUND_AGENT_OFFLINE_FAULTS``.
        clock: Time source for ``created_at`` and the 30-day expiry (moved
            forward by :meth:`advance_clock`).
        brain: ``respond(conversation, tools)``; defaults to
            ``offline_model.brain.respond``, imported on first use. A
            brain that also takes a ``tool_choice`` keyword is given the
            request's. Its tool calls are sent as they are: the default brain
            calls only declared tools, and a test brain may deliberately not.
        port: Port to bind; 0 picks a free one.
        host: Address to bind: 127.0.0.1 (loopback, the default), or an address of this
            machine (``0.0.0.0``: every IPv4 interface) for one stand-in that several hosts
            reach (REFUND_AGENT_OFFLINE_URL; docs/MANY-MACHINES.md).
        dialect: ``"xai"`` or ``"openai"``; None reads ``REFUND_AGENT_OFFLINE_DIALECT``
            (default xai).
        gone_as: how a continuation of a gone stored response is refused (``GONE_FORMS``).
        zero_retention: the team keeps no data: requests with ``store: true`` are refused.
        rate_limit: past this pace (``"60/min"``, ``"10/s"``; pacing.py) a create request is
            answered 429 with the dialect's headers, and every answer carries them; None: no
            limit. ``pace`` then counts what was accepted and refused.

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
        dialect: str | None = None,
        gone_as: str = "404",
        zero_retention: bool = False,
        host: str = "127.0.0.1",
        rate_limit: str | None = None,
    ) -> None:
        self.dialect = (dialect or os.environ.get(DIALECT_ENV, "").strip().lower()
                        or events.XAI)
        if self.dialect not in events.DIALECTS:
            raise ValueError(f"unknown dialect {self.dialect!r}; expected xai or openai")
        if gone_as not in GONE_FORMS:
            raise ValueError(f"unknown gone_as {gone_as!r}; expected one of {GONE_FORMS}")
        self.gone_as = gone_as
        self.zero_retention = zero_retention
        self.state_path = Path(state_path)
        self.latency = latency
        self.clock = clock
        self.clock_offset = 0.0
        self.port = port
        self.host = host
        self.requests: list[dict[str, Any]] = []
        self.pace = pacing.Pace(pacing.parse_rate(rate_limit)) if rate_limit else None
        self._brain = brain
        self._lock = threading.Lock()
        self._faults: deque[str] = deque()
        self.inject(*(faults if faults is not None else _faults_from_env()))
        self._store: ResponseStore | None = None
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        # Background responses this process is working on: id -> its cancel signal.
        self._jobs: dict[str, threading.Event] = {}
        # prompt_cache_key -> (when, fingerprints of the last conversation processed under it).
        self._prompt_cache: dict[str, tuple[float, list[str]]] = {}

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``, the SDK's ``base_url`` (after :meth:`start`).

        Bound to every interface, it names loopback: that always reaches it from this machine,
        while the address other hosts use depends on the network.
        """
        if self._httpd is None:
            raise RuntimeError("OfflineServer is not started")
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self._httpd.server_address[1]}/v1"

    def start(self) -> OfflineServer:
        """Opens the store, binds ``host`` (127.0.0.1 by default) and serves in a daemon thread."""
        if self._httpd is not None:
            return self
        self._store = ResponseStore(self.state_path, self.now)
        self._httpd = _HTTPServer((self.host, self.port), _Handler, self)
        # A short poll interval keeps close() (which waits for the loop to notice) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="offline-responses", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops serving, drops open connections and closes the store. Idempotent.

        Background responses still queued or in progress are marked failed: no
        process will finish them.
        """
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            httpd.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            jobs, self._jobs = dict(self._jobs), {}
        for response_id, cancel in jobs.items():
            cancel.set()
            self._fail(response_id, "The offline server shut down before this background "
                       "response finished.")
        if self._store is not None:
            self._store.close()
            self._store = None

    def now(self) -> float:
        """The server's time: its clock plus however far tests moved it."""
        return self.clock() + self.clock_offset

    def advance_clock(self, seconds: float = 0.0, *, days: float = 0.0) -> float:
        """Moves the server's time forward, so stored responses age (31 days expires them).

        Returns:
            The server's new time.

        Raises:
            ValueError: For a negative or non-finite move (time only goes forward here).
        """
        step = float(seconds) + float(days) * 86400
        if not step >= 0 or step == float("inf"):
            raise ValueError(f"the clock only moves forward by a finite amount, not {step!r}")
        with self._lock:
            self.clock_offset += step
        return self.now()

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
            ApiError: 400 for invalid or unsupported bodies, 404 for unusable
                chains, 500 if the brain fails.
        """
        turn = self._prepare(body)
        created_at = self.now()
        response = self._answer(turn, events.response_id(self.dialect), created_at)
        return _Created(response, turn.input_items, created_at)

    def persist(self, created: _Created) -> None:
        """Stores a delivered response unless it was created with ``store: false``."""
        if created.response["store"]:
            self._require_store().save(created.created_at, created.input_items, created.response)

    def queue(self, body: dict[str, Any]) -> dict[str, Any]:
        """Stores a ``background`` request as queued and starts working on it.

        The worker marks it in progress, spends the server's latency (a cancel
        ends the wait), asks the brain and stores the completed (or failed)
        response, unless it was cancelled or deleted meanwhile.

        Returns:
            The queued response.

        Raises:
            ApiError: As :meth:`create`, for anything wrong with the request.
        """
        turn = self._prepare(body)
        created_at = self.now()
        queued = events.build_response(
            body,
            response_id=events.response_id(self.dialect),
            created_at=created_at,
            output=[],
            usage=None,
            status="queued",
        )
        cancel = threading.Event()
        with self._lock:
            self._jobs[queued["id"]] = cancel
        self._require_store().save(created_at, turn.input_items, queued)
        threading.Thread(
            target=self._work,
            args=(turn, queued, cancel),
            name=f"offline-background-{queued['id'][-8:]}",
            daemon=True,
        ).start()
        return queued

    def retrieve(self, response_id: str) -> dict[str, Any]:
        """Returns a stored response (404 ``ApiError`` if unavailable)."""
        return self._require_store().get(response_id)

    def delete(self, response_id: str) -> dict[str, Any]:
        """Deletes a stored response (stopping it if it runs in the background).

        Returns:
            The deletion object ``{"id", "object": "response", "deleted": true}``.

        Raises:
            ApiError: 404 if unknown, already deleted or expired.
        """
        self._require_store().delete(response_id)
        with self._lock:
            cancel = self._jobs.pop(response_id, None)
        if cancel is not None:
            cancel.set()
        return {"id": response_id, "object": "response", "deleted": True}

    def cancel(self, response_id: str) -> dict[str, Any]:
        """Cancels a background response that is queued or in progress.

        A finished one (completed, failed or already cancelled) is returned as
        it is, so cancelling twice is harmless.

        Raises:
            ApiError: 404 if unknown; 400 if it was not created with ``background``.
        """
        store = self._require_store()
        response = store.get(response_id)
        if not response.get("background"):
            raise ApiError(
                400,
                "Only responses created with background=true can be cancelled; this one "
                "finished when it was created.",
            )
        if response["status"] not in TERMINAL:
            cancelled = {**response, "status": "cancelled"}
            if store.replace(cancelled, only_from=("queued", "in_progress")):
                with self._lock:
                    cancel = self._jobs.pop(response_id, None)
                if cancel is not None:
                    cancel.set()
                return cancelled
            response = store.get(response_id)  # it finished first
        return response

    def input_items(self, response_id: str) -> list[Item]:
        """Every input item of a response, oldest first, as ``input_items.list`` shows them.

        That is what the model read: the items of earlier responses in its chain
        (their inputs and outputs, while still stored) and the request's own input.

        Raises:
            ApiError: 404 if the response is unknown, deleted or expired.
        """
        turns = self._require_store().lineage(response_id)
        items: list[Item] = []
        for position, (owner, turn) in enumerate(turns):
            items += [
                events.listed_item(item, owner, index)
                for index, item in enumerate(turn.input_items)
            ]
            if position < len(turns) - 1:
                items += turn.response["output"]
        return items

    def count_input_tokens(self, body: Any) -> dict[str, Any]:
        """``POST /responses/input_tokens``: what a create request would bill as input.

        Raises:
            ApiError: 400 for an invalid body, 404 for an unusable chain.
        """
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.")
        # Only what shapes the input counts; output settings (text format, tool choice) don't.
        counted = {key: body[key] for key in ("tools", "previous_response_id") if key in body}
        turn = self._prepare({**counted, "model": body.get("model") or "offline",
                              "input": body.get("input") or []})
        conversation = turn.history + turn.input_items
        tokens = events.estimate_tokens(conversation)
        return {"object": "response.input_tokens", "input_tokens": tokens}

    def compact(self, body: Any) -> dict[str, Any]:
        """``POST /responses/compact``: the whole conversation folded into one compaction item.

        Sending that item as input later (alone, or after the user messages)
        gives the brain the same conversation back.

        Raises:
            ApiError: 400 for an invalid body, 404 for an unusable chain.
        """
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.")
        turn = self._prepare({**body, "input": body.get("input") or []})
        conversation = turn.history + turn.input_items
        output = [events.compaction_item(conversation)]
        usage = events.build_usage(conversation, output, [])
        return events.build_compaction(output, created_at=self.now(), usage=usage)

    # -- internals ---------------------------------------------------------

    def _prepare(self, body: dict[str, Any]) -> _Turn:
        """Validates a request and loads the chain it continues."""
        validate_body(body, self.dialect)
        self._check_model(body)
        if self.zero_retention and body.get("store", True) is not False:
            raise ApiError(
                403 if self.dialect == events.XAI else 400,
                "This team has zero data retention enabled: requests must set store=false "
                "(nothing is kept for previous_response_id).",
                param="store",
            )
        self._verify_reasoning(body["input"])
        input_items = normalize_input(body["input"])
        previous = body.get("previous_response_id")
        chain = self._chain(previous) if previous else []
        return _Turn(body, input_items, chain)

    def _chain(self, previous: str) -> list[StoredResponse]:
        """The stored chain ``previous`` ends, refused in the form ``gone_as`` names if gone."""
        try:
            return self._require_store().chain(previous)
        except ApiError as err:
            if err.status != 404 or self.gone_as == "404":
                raise
            if self.gone_as == "404-bare":
                raise ApiError(404, "Not found.", code="not_found") from None
            gone = ApiError(400, f"Previous response with id '{previous}' not found.",
                            param="previous_response_id", code="previous_response_not_found")
            gone.flat_code = True
            raise gone from None

    def _check_model(self, body: dict[str, Any]) -> None:
        """Refuses a reasoning effort the model does not take, and (OpenAI) the encrypted
        reasoning of a model without reasoning, as the provider would.

        The catalogue is models.MODELS; a model it does not list is served as it is.
        """
        info = model_info(body["model"])
        asked = events.INCLUDE_ENCRYPTED_REASONING in (body.get("include") or [])
        if asked and info is not None and not info.reasoning and self.dialect == events.OPENAI:
            # OpenAI's words and shape for include on gpt-4o, gpt-4o-mini, gpt-4.1
            # (pydantic/pydantic-ai#2865, microsoft/agent-framework#7483); xAI documents
            # nothing for its models, so the xAI dialect keeps serving it.
            raise ApiError(400, "Encrypted content is not supported with this model.",
                           param="include")
        effort = (body.get("reasoning") or {}).get("effort")
        if effort is None or info is None or effort in info.efforts:
            return
        if self.dialect == events.XAI:
            if not info.efforts:
                message = f"Model {body['model']} does not support parameter reasoningEffort."
            else:
                message = (f"Argument not supported on this model: reasoning.effort "
                           f"{effort!r} (takes {', '.join(info.efforts)}).")
            raise ApiError(400, message, param="reasoning.effort")
        raise ApiError(
            400,
            f"Unsupported value: 'reasoning.effort' does not support {effort!r} with this "
            "model." if info.efforts else
            "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
            param="reasoning.effort",
            code="unsupported_value" if info.efforts else "unsupported_parameter",
        )

    def _verify_reasoning(self, raw_input: Any) -> None:
        """Refuses input reasoning items whose encrypted content does not verify (a 400).

        A client keeping its own history sends each reasoning item back with the blob it was
        given; one that was edited, truncated or moved to another item is an error, as at
        real providers, never silently ignored.
        """
        if not isinstance(raw_input, list):
            return
        secret = self._require_store().secret
        for index, item in enumerate(raw_input):
            if not isinstance(item, dict) or item.get("type") != "reasoning":
                continue
            if "encrypted_content" not in item or item["encrypted_content"] is None:
                continue  # nothing sealed to check; the brain reads only the conversation
            try:
                sealing.open_sealed(secret, str(item.get("id", "")), item["encrypted_content"])
            except sealing.SealError as exc:
                raise ApiError(
                    400,
                    f"The encrypted content of reasoning item {item.get('id')!r} "
                    f"(input[{index}]) could not be verified or decrypted: {exc}.",
                    param=f"input[{index}].encrypted_content",
                    code="invalid_encrypted_content",
                ) from None

    def _seal_reasoning(self, body: dict[str, Any], output: list[Item]) -> None:
        """Adds ``encrypted_content`` to reasoning items when the request included it, or
        unasked for a model that returns it by default (xAI's grok-4.7)."""
        if events.INCLUDE_ENCRYPTED_REASONING not in (body.get("include") or []):
            info = model_info(str(body.get("model")))
            if not (self.dialect == events.XAI and info and info.encrypted_by_default):
                return
        secret = self._require_store().secret
        for item in output:
            if item["type"] == "reasoning":
                text = " ".join(part["text"] for part in item["summary"])
                item["encrypted_content"] = sealing.seal(secret, item["id"], {"reasoning": text})

    def _cached_prefix(self, turn: _Turn, conversation: list[Item]) -> list[Item]:
        """The leading part of ``conversation`` the prompt cache already holds.

        Continuing a chain last processed under the same key hits the cache for the whole
        earlier conversation, as before. A request that sends the history itself
        (``store: false``, or after a stored response expired) hits it for the longest prefix
        equal to the last conversation processed under its ``prompt_cache_key`` within
        :data:`PROMPT_CACHE_SECONDS`: the cache is in memory, keyed by content, and never
        stored with the responses.
        """
        key = turn.body.get("prompt_cache_key")
        if key is None:
            return []
        if turn.chain:
            same_key = turn.chain[-1].response.get("prompt_cache_key") == key
            return turn.history if same_key else []
        with self._lock:
            at, seen = self._prompt_cache.get(key, (0.0, []))
        if self.now() - at > PROMPT_CACHE_SECONDS:
            return []
        shared = 0
        for mine, theirs in zip(_fingerprints(conversation), seen, strict=False):
            if mine != theirs:
                break
            shared += 1
        return conversation[:shared]

    def _remember(self, key: Any, conversation: list[Item]) -> None:
        if isinstance(key, str):
            with self._lock:
                self._prompt_cache[key] = (self.now(), _fingerprints(conversation))

    def _answer(self, turn: _Turn, response_id: str, created_at: float) -> dict[str, Any]:
        """Asks the brain and builds the completed response."""
        body, history = turn.body, turn.history
        conversation = history + turn.input_items
        seen = conversation
        if body.get("instructions"):
            # Instructions apply to this request only; the brain reads them as a system message.
            seen = [
                {"type": "message", "role": "system", "content": body["instructions"]},
                *conversation,
            ]
        reply = self._think(seen, body.get("tools") or [], body.get("tool_choice"))
        output = events.build_output_items(reply, self.dialect)
        self._seal_reasoning(body, output)
        usage = events.build_usage(conversation, output, self._cached_prefix(turn, conversation))
        if self.dialect == events.OPENAI:
            usage.pop("cost_in_usd_ticks", None)  # OpenAI reports tokens, never a cost
        self._remember(body.get("prompt_cache_key"), conversation + output)
        return events.build_response(
            body, response_id=response_id, created_at=created_at, output=output, usage=usage
        )

    def _work(self, turn: _Turn, queued: dict[str, Any], cancel: threading.Event) -> None:
        """A background response's worker thread."""
        response_id = queued["id"]
        try:
            store = self._require_store()
            if not store.replace({**queued, "status": "in_progress"}, only_from=("queued",)):
                return
            if cancel.wait(self.latency):
                return
            try:
                done = self._answer(turn, response_id, queued["created_at"])
            except ApiError as err:
                self._fail(response_id, err.body["error"]["message"])
                return
            store.replace(done, only_from=("in_progress",))
        except Exception as exc:  # a bug, or the store closed under us
            log.debug("offline background response %s stopped", response_id, exc_info=True)
            try:
                self._fail(response_id, f"Internal error: {type(exc).__name__}: {exc}")
            except Exception:
                pass  # the store is gone: close() has already marked it failed
        finally:
            with self._lock:
                self._jobs.pop(response_id, None)

    def _fail(self, response_id: str, message: str) -> None:
        """Marks a background response that is still queued or in progress as failed."""
        try:
            store = self._require_store()
            response = store.get(response_id)
        except ApiError:
            return
        failed = {**response, "status": "failed",
                  "error": {"code": "server_error", "message": message}}
        store.replace(failed, only_from=("queued", "in_progress"))

    def _think(
        self, conversation: list[Item], tools: list[dict[str, Any]], tool_choice: Any
    ) -> events.ReplyLike:
        """Calls the brain; its failures become a non-retryable 500.

        A refusal the brain raises itself (an ``ApiError``, say a forced tool
        it cannot call) is passed on as it is.
        """
        try:
            brain = self._brain or _default_brain()
            # Deep copies so a brain that mutates its arguments can't alter what gets stored.
            args = (copy.deepcopy(conversation), copy.deepcopy(tools))
            if _takes_tool_choice(brain):
                return brain(*args, tool_choice=copy.deepcopy(tool_choice))
            return brain(*args)
        except ApiError:
            raise
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


def _fingerprints(items: list[Item]) -> list[str]:
    """One comparable text per item, blind to key order and to encrypted reasoning.

    An item the client kept and sent back (parsed and re-serialised by its SDK) then matches
    the item this server produced.
    """
    return [json.dumps(item, sort_keys=True) for item in events.readable(items)]


def _takes_tool_choice(brain: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(brain).parameters
    except (TypeError, ValueError):
        return False
    return "tool_choice" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def start_offline_server(state_path: Path, **kw: Any) -> OfflineServer:
    """Creates and starts an :class:`OfflineServer` (keywords as its constructor)."""
    return OfflineServer(state_path, **kw).start()


def _default_brain() -> Brain:
    # Looked up when a server starts without a brain of its own (the package's __init__ has
    # already loaded brain.py for Reply), so a patched ``brain.respond`` is the one used.
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


# Routes, matched on the path alone before any body is read: (method, pattern) -> handler name.
_RESPONSE_PATH = r"/v1/responses/(?P<id>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(pattern + r"\Z"), name)
    for method, pattern, name in (
        ("POST", r"/v1/responses", "_create"),
        ("POST", r"/v1/responses/input_tokens", "_count_tokens"),
        ("POST", r"/v1/responses/compact", "_compact"),
        ("POST", _RESPONSE_PATH + r"/cancel", "_cancel"),
        ("GET", _RESPONSE_PATH + r"/input_items", "_list_input_items"),
        ("GET", _RESPONSE_PATH, "_retrieve"),
        ("DELETE", _RESPONSE_PATH, "_delete"),
        ("GET", r"/v1/responses", "_websocket"),
        ("GET", r"/_offline/health", "_health"),
        ("POST", r"/_offline/faults", "_add_faults"),
        ("POST", r"/_offline/clock", "_advance_clock"),
    )
]
# How long a stream of an unfinished background response waits for it, at most.
_BACKGROUND_STREAM_WAIT = 600.0
_POLL_SECONDS = 0.02


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

    # -- dispatch --------------------------------------------------------------

    def _dispatch(self) -> None:
        """Routes on method and path first; only then is a body read, if the route takes one."""
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        try:
            allowed = []
            for method, pattern, name in _ROUTES:
                match = pattern.match(path)
                if match is None:
                    continue
                if method == self.command:
                    getattr(self, name)(**match.groupdict(), query=parse_qs(url.query))
                    return
                allowed.append(method)
            self._discard_body()
            if allowed:
                raise ApiError(
                    405,
                    f"Method {self.command} is not allowed on {path}; use "
                    f"{' or '.join(sorted(set(allowed)))}.",
                    headers={"Allow": ", ".join(sorted(set(allowed)))},
                )
            raise ApiError(404, f"Unknown path {path!r}.", code="unknown_url")
        except ApiError as err:
            self._send_json(err.status, err.render(self.server.app.dialect), err.headers)
        except Exception as exc:  # a server bug must not kill the connection silently
            log.exception("offline server: request failed")
            self._send_json(500, ApiError(500, f"Internal error: {exc}", kind="server_error")
                            .render(self.server.app.dialect))

    # Every method goes through the same router, which answers unknown ones in JSON.
    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = _dispatch

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """JSON instead of the standard library's HTML, for the errors it raises itself.

        (A malformed request line, an over-long header, a method with no ``do_`` handler.)
        """
        self.close_connection = True
        error = ApiError(code, message or explain or "Bad request.")
        body = error.render(self.server.app.dialect)
        try:
            data = json.dumps(body).encode()
            self.send_response(code, message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(data)
        except OSError:
            pass  # the client is gone

    # -- routes ------------------------------------------------------------------

    def _create(self, query: dict[str, list[str]]) -> None:
        body = self._read_json()
        app = self.server.app
        limited: dict[str, str] = {}
        if app.pace is not None:  # before anything is processed: a refusal leaves no trace
            verdict = app.pace.take()
            if not verdict.accepted:
                raise pacing.refusal(verdict, app.dialect, app.pace.rate)
            limited = pacing.headers(verdict, app.dialect)
        fault = app.record(body) if isinstance(body, dict) else None
        if fault in ("422", "429", "500", "503", "credits"):
            raise fault_error(fault, app.dialect)
        if isinstance(body, dict) and body.get("background"):
            if fault == "cut":
                validate_body(body)
                self._abort()  # dropped before anything was queued
                return
            queued = app.queue(body)
            if body.get("stream"):
                self._stream(self._follow(queued["id"], after=-1), headers=limited)
            else:
                self._send_json(200, queued, limited)
            return
        created = app.create(body)
        if fault == "failed":   # accepted, then failed while generating: status "failed"
            created = _failed(created)
        if body.get("stream"):
            self._stream_created(created, cut=fault == "cut", headers=limited)
        elif fault == "cut":
            self._abort()  # no answer at all: the client sees a dropped connection
        else:
            if app.latency > 0:
                time.sleep(app.latency)
            if fault != "failed":
                app.persist(created)
            self._send_json(200, created.response, limited)

    def _retrieve(self, id: str, query: dict[str, list[str]]) -> None:
        """``GET /v1/responses/{id}``: JSON, or the events replayed with ``?stream=true``."""
        response = self.server.app.retrieve(id)
        if query.get("stream", ["false"])[0].lower() != "true":
            self._send_json(200, response)
            return
        raw_after = query.get("starting_after", ["-1"])[0]
        try:
            after = int(raw_after)
        except ValueError as exc:
            raise ApiError(
                400, f"Invalid 'starting_after': expected an integer, got {raw_after!r}.",
                param="starting_after",
            ) from exc
        self._stream(self._follow(id, after=after))

    def _delete(self, id: str, query: dict[str, list[str]]) -> None:
        self._send_json(200, self.server.app.delete(id))

    def _cancel(self, id: str, query: dict[str, list[str]]) -> None:
        self._discard_body()  # the SDK may send an empty body; nothing in it matters
        self._send_json(200, self.server.app.cancel(id))

    def _list_input_items(self, id: str, query: dict[str, list[str]]) -> None:
        items = self.server.app.input_items(id)
        self._send_json(200, events.input_item_page(items, query))

    def _count_tokens(self, query: dict[str, list[str]]) -> None:
        self._send_json(200, self.server.app.count_input_tokens(self._read_json()))

    def _compact(self, query: dict[str, list[str]]) -> None:
        self._send_json(200, self.server.app.compact(self._read_json()))

    def _websocket(self, query: dict[str, list[str]]) -> None:
        raise ApiError(
            400,
            "The offline stand-in does not speak the Responses WebSocket mode "
            "(client.responses.connect); use POST /v1/responses, streaming or not.",
            code="unsupported_parameter",
        )

    def _health(self, query: dict[str, list[str]]) -> None:
        self._send_json(200, {"ok": True})

    def _add_faults(self, query: dict[str, list[str]]) -> None:
        body = self._read_json()
        faults = body.get("faults") if isinstance(body, dict) else None
        if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
            raise ApiError(400, 'Expected a body like {"faults": ["429", "cut"]}.', param="faults")
        try:
            self.server.app.inject(*faults)
        except ValueError as exc:
            raise ApiError(400, str(exc), param="faults") from exc
        self._send_json(200, {"queued": faults})

    def _advance_clock(self, query: dict[str, list[str]]) -> None:
        body = self._read_json()
        seconds = body.get("advance_seconds") if isinstance(body, dict) else None
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ApiError(
                400, 'Expected a body like {"advance_seconds": 2678400}.', param="advance_seconds"
            )
        try:
            now = self.server.app.advance_clock(seconds)
        except ValueError as exc:
            raise ApiError(400, str(exc), param="advance_seconds") from exc
        self._send_json(200, {"now": now})

    # -- streams -----------------------------------------------------------------

    def _stream_created(self, created: _Created, *, cut: bool,
                        headers: dict[str, str] | None = None) -> None:
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

        self._stream(paced(), complete=not cut, headers=headers)

    def _follow(self, response_id: str, *, after: int) -> Iterator[dict[str, Any]]:
        """The events of a stored response after ``after``, following it until it finishes.

        A completed response is replayed at once; a background one still queued
        or in progress sends what has happened so far, then the rest as it does.
        A deleted one ends the stream early.
        """
        app = self.server.app
        deadline = time.monotonic() + _BACKGROUND_STREAM_WAIT
        sent = after
        while True:
            try:
                response = app.retrieve(response_id)
            except ApiError:
                return
            for event in events.stream_events(response):
                if event["sequence_number"] > sent:
                    sent = event["sequence_number"]
                    yield event
            if response["status"] in TERMINAL or time.monotonic() > deadline:
                return
            time.sleep(_POLL_SECONDS)

    # -- I/O ---------------------------------------------------------------------

    def _read_json(self) -> Any:
        """Reads and parses the request body.

        Raises:
            ApiError: 400 if the body isn't valid JSON.
        """
        raw = self._read_body()
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ApiError(
                400, f"We could not parse the JSON body of your request: {exc}."
            ) from exc

    def _read_body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError as exc:
            self.close_connection = True
            raise ApiError(400, "Invalid Content-Length header.") from exc
        return self.rfile.read(length) if length > 0 else b""

    def _discard_body(self) -> None:
        """Reads and drops a body nobody needs, so the keep-alive connection stays in step."""
        try:
            self._read_body()
        except ApiError:
            pass

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

    def _stream(self, stream: Iterable[dict[str, Any]], *, complete: bool = True,
                headers: dict[str, str] | None = None) -> None:
        """Writes events as chunked ``text/event-stream``.

        Args:
            stream: Events to send (sleeps happen inside the iterable).
            complete: False to drop the connection after the events instead of
                ending the chunked body, which the SDK reports as a broken
                connection (``APIConnectionError``).
            headers: more headers to send (the rate-limit mode's).
        """
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
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
