"""What Stripe reports after the fact: ``refund-agent webhooks --port N``.

A refund Stripe accepted can still fail later (the card was closed, say) or be cancelled; Stripe
then sends ``refund.failed`` or ``refund.updated`` (``charge.refund.updated`` on older API
versions) to the webhook endpoint the team configured.
This small server checks each delivery's ``Stripe-Signature`` (an HMAC-SHA256 of
``"{t}.{payload}"`` under the endpoint's signing secret, with a timestamp tolerance: see
https://docs.stripe.com/webhooks#verify-events) with the stripe library's
``Webhook.construct_event``, and records the event once in the store: an audit line, and for a
failed or cancelled refund the ticket marked for a person on the desk. A delivery that does not
verify is refused (400) and changes nothing; a redelivered event is recorded once.

What each answer tells Stripe, which retries anything but a 2xx for three days: 400 for what
can never be recorded (no valid signature, a body that is not a refund event of the shape
Stripe sends, no body), 413 for a body over :data:`MAX_BODY`, 503 only for what a retry can fix
(the store could not take it). No answer prints a traceback: one line per refusal or record.

The endpoint faces the internet (through a TLS proxy), so it is served by Tornado, not
``http.server``: one event loop holds every connection, each with a deadline for its headers
and another for its body (:data:`READ_TIMEOUT`), so a client that sends headers and then
nothing, or a body a byte a minute, is dropped instead of holding a thread; the store is
written from a small pool of threads, so a slow store never stalls the reading. It holds at most
REFUND_AGENT_MAX_CONNECTIONS connections at once (by default derived from the process's
open-file limit, outside/listening.py): the others are answered 503 at once and closed (Stripe
retries), and said in one line a minute, so a flood of connections never leaves the process
without descriptors or fills the log with tracebacks.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler, stream_request_body

from ..errors import RefundAgentError
from .listening import Acceptor, Gate, connection_cap, open_file_limit
from .stripe import CALL_ID, FAILED_STATES, stripe  # stripe.py guards the optional import

# Each carries a refund object. Endpoints on API versions before 2024-10-28.acacia get refund.*
# events only for refunds without a charge, and charge.refund.updated for card refunds
# (https://docs.stripe.com/changelog/acacia/2024-10-28/refund-webhook-update), so all three count.
REFUND_EVENTS = ("refund.updated", "refund.failed", "charge.refund.updated")
MAX_BODY = 1024 * 1024   # Stripe's events are a few kilobytes
MAX_HEADERS = 64 * 1024
# Seconds a client has to send its headers, and then again its body: Stripe sends both at once.
READ_TIMEOUT = 10.0
# Threads that write to the store: deliveries are rare, and the store serialises writes anyway.
STORE_THREADS = 4
# The answer to a connection past the cap, sent before its request is read: Stripe retries a
# 503 later, as it retries any answer but a 2xx.
_BUSY = json.dumps({"message": "Too many connections at once: nothing was recorded; send it "
                               "again later."}).encode()
TOO_MANY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Retry-After: 60\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
            % (len(_BUSY), _BUSY))


def failure_note(refund: dict[str, Any], kind: str) -> str:
    """What the desk says about a refund Stripe reports failed or cancelled."""
    status = refund.get("status") or "failed"
    reason = refund.get("failure_reason")
    why = f" ({reason.replace('_', ' ')})" if reason else ""
    amount = int(refund.get("amount") or 0) / 100
    order = (refund.get("metadata") or {}).get("order_id")
    on = f" on order {order}" if order else ""
    return (f"Stripe reports refund {refund.get('id')}{on} of ${amount:,.2f} {status}{why} "
            f"({kind}): the customer was told it was issued, but the money did not go back. "
            "A person needs to take this ticket over (refund another way, or ask the "
            "customer for other details).")


def refund_problem(event: dict[str, Any]) -> str | None:
    """Why a signed refund event can never be recorded, or None: the fields read from it must
    have the types Stripe documents (https://docs.stripe.com/api/refunds/object). A retry of
    the same bytes would be refused the same way, so the answer is a 400, not a 5xx."""
    if not isinstance(event.get("id"), str) or not event["id"]:
        return "the event has no id"
    data = event.get("data")
    refund = data.get("object") if isinstance(data, dict) else None
    if not isinstance(refund, dict):
        return "the event has no data.object"
    if not isinstance(refund.get("id"), str) or not refund["id"]:
        return "data.object has no refund id"
    amount = refund.get("amount")
    if amount is not None and (isinstance(amount, bool) or not isinstance(amount, int)
                               or amount < 0):
        return f"amount must be a whole number of cents, got {json.dumps(amount)[:40]}"
    for name in ("status", "failure_reason"):
        if refund.get(name) is not None and not isinstance(refund[name], str):
            return f"{name} must be text"
    metadata = refund.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return "metadata must be an object"
    for name in (CALL_ID, "order_id"):
        if (metadata or {}).get(name) is not None and not isinstance(metadata[name], str):
            return f"metadata.{name} must be text"
    return None


def length_answer(length: str | None, limit: int = MAX_BODY) -> tuple[int, str] | None:
    """What to answer from the ``Content-Length`` header alone, before any body is read, or
    None to read it: Stripe always sends one, a whole number of bytes (no chunked bodies)."""
    if length is None or not re.fullmatch(r"[0-9]+", length) or int(length) == 0:
        return 400, ("Send one Stripe event as the body, with its Content-Length: nothing was "
                     "recorded.")
    if int(length) > limit:
        return 413, f"The body is over {limit:,} bytes; a Stripe event is a few kilobytes."
    return None


def handle(store: Any, secret: str, payload: bytes, signature: str | None
           ) -> tuple[int, str]:
    """(HTTP status, one-line answer) for one delivery; records a refund event once.

    Raises:
        RefundAgentError: the store could not take it (the server answers 503).
    """
    try:
        event = stripe.Webhook.construct_event(payload, signature, secret)
        event = event.to_dict()   # a StripeObject is not a dict; its data is
    except stripe.SignatureVerificationError:
        return 400, ("The Stripe-Signature does not verify with STRIPE_WEBHOOK_SECRET (or is "
                     "too old): nothing was recorded.")
    except RecursionError:   # a signed body of a million "[": nested past any real event
        return 400, "The body is not a Stripe event (nested too deeply): nothing was recorded."
    except (ValueError, AttributeError, TypeError):   # not JSON, or JSON but not an object
        return 400, "The body is not a Stripe event (not a JSON object): nothing was recorded."
    kind = event.get("type")
    if kind not in REFUND_EVENTS:
        return 200, f"Ignored {str(kind)[:60]}: only {', '.join(REFUND_EVENTS)} matter here."
    if problem := refund_problem(event):
        return 400, f"Not a refund event Stripe sends ({problem}): nothing was recorded."
    refund = event["data"]["object"]
    status = refund.get("status")
    failed = kind == "refund.failed" or status in FAILED_STATES
    approval_id = (refund.get("metadata") or {}).get(CALL_ID)
    note = failure_note(refund, kind) if failed else \
        f"Stripe reports refund {refund['id']} {status} ({kind})."
    new = store.record_provider_event(
        event["id"], "stripe", kind, refund["id"], status, approval_id, note, refund,
        needs_person=failed)
    what = f"{kind} for refund {refund['id']} ({status})"
    return 200, (f"Recorded {what}." if new else f"Already recorded {what}.")


def _deliver(store: Any, secret: str, payload: bytes, signature: str | None
             ) -> tuple[int, str]:
    """:func:`handle`, with what went wrong answered in one line (run in a store thread)."""
    try:
        return handle(store, secret, payload, signature)
    except RefundAgentError as exc:
        # The store could not take it (unreachable, locked): a 5xx makes Stripe deliver the
        # event again later, for up to three days.
        return 503, f"Not recorded, Stripe will send it again: {exc}"
    except Exception as exc:  # noqa: BLE001 - a server thread has nobody to raise to
        # A bug, not the event's fault: Stripe retries, which helps once it is fixed.
        return 500, f"Not recorded ({type(exc).__name__}: {exc}); Stripe will send it again."


@stream_request_body   # prepare() sees the headers before any body is read
class _Delivery(RequestHandler):
    """One POST from Stripe: the body read within its deadline, then recorded in a thread."""

    SUPPORTED_METHODS = ("POST",)

    def initialize(self, server: WebhookServer) -> None:
        self.server = server
        self.chunks: list[bytes] = []

    def prepare(self) -> None:
        headers = self.request.headers
        early = length_answer(headers.get("Content-Length"), self.server.max_body)
        if early:
            self._answer(*early)
            # Tornado reads the body after prepare() with these same headers, and would answer
            # a bad length with a second, bare 400 of its own, or read a body nobody wants: it
            # is told there is none, and closes the connection once the answer is out.
            headers.pop("Transfer-Encoding", None)
            headers["Content-Length"] = "0"

    def data_received(self, chunk: bytes) -> None:
        self.chunks.append(chunk)   # at most Content-Length bytes: Tornado reads no more

    async def post(self) -> None:
        loop = asyncio.get_running_loop()
        status, text = await loop.run_in_executor(
            self.server.pool, _deliver, self.server.store, self.server.secret,
            b"".join(self.chunks), self.request.headers.get("Stripe-Signature"))
        self._answer(status, text)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Tornado's own refusals (405 for a GET) and anything unforeseen, in one line."""
        if status_code == 405:
            self._answer(405, "Only POST: send one Stripe event as the body.")
        else:
            self._answer(status_code, "The delivery could not be read; nothing was recorded.")

    def _answer(self, status: int, text: str) -> None:
        if status != 200 or text.startswith("Recorded"):
            print(f"{time.strftime('%H:%M:%S')} {status} {text}", file=sys.stderr, flush=True)
        self.clear()
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": text}))


class _CountedHTTPServer(HTTPServer):
    """Tornado's HTTP server, each connection counted out of the gate when it closes (the
    Acceptor counted it in)."""

    gate: Gate

    def on_close(self, server_conn: Any) -> None:
        self.gate.leave()
        super().on_close(server_conn)


def _say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)


class WebhookServer:
    """The webhook endpoint, bound at construction (so a taken port fails at once), served by
    :meth:`serve_forever` until :meth:`shutdown` (from another thread) or Ctrl+C.

    Args:
        read_timeout: seconds a client has for its headers, and again for its body.
        max_body: the largest body read (413 above it).
        max_connections: the most connections held at once (0: derived from the open-file
            limit); ConfigError if the limit cannot hold them.
    """

    def __init__(self, store: Any, secret: str, host: str, port: int, *,
                 read_timeout: float = READ_TIMEOUT, max_body: int = MAX_BODY,
                 max_connections: int = 0) -> None:
        self.store, self.secret, self.max_body = store, secret, max_body
        self.read_timeout = read_timeout
        self.gate = Gate("The webhook server",
                         connection_cap(open_file_limit(), max_connections), _say)
        self._sockets = bind_sockets(port, address=host)
        self.server_port: int = self._sockets[0].getsockname()[1]
        self.pool = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="webhook-store")
        self._app = Application([(r"/.*", _Delivery, {"server": self})],
                                log_function=lambda _handler: None)  # the answers say it all
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = threading.Event()
        self._done = threading.Event()

    def serve_forever(self) -> None:
        try:
            asyncio.run(self._serve())
        finally:
            self._done.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        # Tornado's limits: the headers' and body's deadlines, their sizes (a body over ours is
        # answered 413 by prepare() before Tornado would refuse it).
        http = _CountedHTTPServer(self._app, idle_connection_timeout=self.read_timeout,
                                  body_timeout=self.read_timeout, max_header_size=MAX_HEADERS,
                                  max_body_size=self.max_body)
        http.gate = self.gate

        def take(conn: Any, address: Any) -> None:
            http.handle_stream(IOStream(conn, max_buffer_size=http.max_buffer_size,
                                        read_chunk_size=http.read_chunk_size), address)

        # Accepted here rather than by Tornado's own loop, which retries an accept the system
        # refused (no descriptor left) at once, logging a traceback each time.
        accepting = [Acceptor(self._loop, sock, self.gate, take, TOO_MANY)
                     for sock in self._sockets]
        for acceptor in accepting:
            acceptor.start()
        try:
            if not self._stopping.is_set():   # shutdown() may have come before the loop
                await self._stop.wait()
        finally:
            for acceptor in accepting:
                acceptor.stop()
            for sock in self._sockets:
                sock.close()
            await http.close_all_connections()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop :meth:`serve_forever` (called from another thread) and wait for it."""
        self._stopping.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
            self._done.wait(timeout)

    def server_close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self.pool.shutdown(wait=False)


def serve(store: Any, secret: str, host: str, port: int, *,
          read_timeout: float = READ_TIMEOUT, max_body: int = MAX_BODY,
          max_connections: int = 0) -> WebhookServer:
    """The webhook server, bound and ready (``serve_forever`` runs it)."""
    return WebhookServer(store, secret, host, port, read_timeout=read_timeout,
                         max_body=max_body, max_connections=max_connections)
