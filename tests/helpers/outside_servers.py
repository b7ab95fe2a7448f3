"""The real outside servers the adapters are tested against, started on loopback by the tests.

- localstripe (a fake Stripe server others wrote, on PyPI) as a subprocess: :func:`localstripe`;
- aiosmtpd (a real SMTP server, also others') in a thread of the test process, keeping every
  message it accepted in a :class:`Mailbox`: :func:`smtp_server`.

tests/outside/test_stripe.py, tests/outside/test_smtp.py and
tests/reliability/test_crash_matrix_outside.py start them from here, one of each per module; the
helpers below make a paid charge there, list its refunds, and write a copy of the sample shop
whose orders name their Stripe payments. :class:`StripeProxy` stands between the adapter and
localstripe to lose, hold or replace the answer to a refund.
"""

from __future__ import annotations

import email
import email.policy
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .cli import DATA

STRIPE_KEY = "sk_test_refund_agent"
SMTP_USER, SMTP_PASSWORD = "desk", "s3cret pass"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, proc: subprocess.Popen, what: str) -> None:
    """Wait (20 s at most) until ``proc`` listens on ``port``; fail saying why if it exited."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not start listening on {port}")


# -- localstripe ---------------------------------------------------------------------------------

@contextmanager
def localstripe(workdir: Path) -> Iterator[str]:
    """localstripe on a free loopback port until the block ends: its base URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "localstripe", "--port", str(port),
                             "--from-scratch"], cwd=workdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port, proc, "localstripe")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def stripe_client(server: str, key: str = STRIPE_KEY) -> Any:
    import stripe
    return stripe.StripeClient(key, base_addresses={"api": server}, max_network_retries=0)


def charge(client: Any, cents: int = 8095, intent: bool = False) -> str:
    """A paid card payment at localstripe: a charge id, or a PaymentIntent id."""
    card = client.v1.payment_methods.create(params={"type": "card", "card": {
        "number": "4242424242424242", "exp_month": 12, "exp_year": 2030, "cvc": "123"}})
    if intent:
        pi = client.v1.payment_intents.create(params={"amount": cents, "currency": "usd",
                                                      "payment_method": card.id})
        return client.v1.payment_intents.confirm(pi.id).id
    return client.v1.charges.create(params={"amount": cents, "currency": "usd",
                                            "source": card.id}).id


def refunds_of(client: Any, ref: str) -> list[dict]:
    """Every refund localstripe holds for payment ``ref``."""
    field = "payment_intent" if ref.startswith("pi_") else "charge"
    return [r.to_dict() for r in client.v1.refunds.list(
        params={field: ref, "limit": 100}).auto_paging_iter()]


def shop_paid_with(tmp_path: Path, refs: dict[str, str]) -> Path:
    """A copy of the sample shop (``tmp_path / "data"``) whose orders were paid with the Stripe
    payments ``refs`` names (order id -> charge or PaymentIntent)."""
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    orders = json.loads((data / "orders.json").read_text())
    for o in orders["orders"]:
        if refs.get(o["order_id"]):
            o["payment_ref"] = refs[o["order_id"]]
    (data / "orders.json").write_text(json.dumps(orders))
    return data


def order_totals() -> dict[str, int]:
    """What each of the sample shop's orders took, in cents."""
    orders = json.loads((DATA / "orders.json").read_text())["orders"]
    return {o["order_id"]: round(o["total"] * 100) for o in orders}


# -- aiosmtpd ------------------------------------------------------------------------------------

class Mailbox:
    """aiosmtpd's handler: keeps each accepted message, with who logged in to send it.
    ``refuse_rcpt`` / ``refuse_data``: answers ("550 ...") given, one each, to the next
    recipients / messages instead of taking them, as a real server refuses."""

    def __init__(self) -> None:
        self.messages: list[email.message.Message] = []
        self.logins: list[str | None] = []
        self.refuse_rcpt: list[str] = []
        self.refuse_data: list[str] = []

    async def handle_RCPT(self, server, session, envelope, address, options):  # noqa: N802
        if self.refuse_rcpt:
            return self.refuse_rcpt.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        from aiosmtpd.smtp import LoginPassword
        if self.refuse_data:
            return self.refuse_data.pop(0)
        # policy.default unfolds headers as a mail client does (a long Message-ID is folded
        # before its "<", which RFC 5322 allows).
        self.messages.append(email.message_from_bytes(envelope.original_content,
                                                      policy=email.policy.default))
        auth = session.auth_data if session.authenticated else None
        self.logins.append(auth.login.decode() if isinstance(auth, LoginPassword) else None)
        return "250 Message accepted for delivery"

    def clear(self) -> None:
        self.messages.clear()
        self.logins.clear()
        self.refuse_rcpt.clear()
        self.refuse_data.clear()


def authenticate(server, session, envelope, mechanism, auth_data) -> Any:
    """aiosmtpd's authenticator: only SMTP_USER with SMTP_PASSWORD may send."""
    from aiosmtpd.smtp import AuthResult, LoginPassword
    ok = isinstance(auth_data, LoginPassword) and \
        (auth_data.login, auth_data.password) == (SMTP_USER.encode(), SMTP_PASSWORD.encode())
    return AuthResult(success=ok, handled=False, auth_data=auth_data)


@contextmanager
def smtp_server(**extra: Any) -> Iterator[tuple[int, Mailbox]]:
    """aiosmtpd on a free loopback port, login required, until the block ends: (port, mailbox).
    ``extra``: aiosmtpd's Controller options (the TLS ones; without them, login is allowed
    without TLS, as some relays do)."""
    from aiosmtpd.controller import Controller
    box, port = Mailbox(), free_port()
    options = extra or {"auth_require_tls": False}
    controller = Controller(box, hostname="127.0.0.1", port=port, authenticator=authenticate,
                            auth_required=True, **options)
    controller.start()
    try:
        yield port, box
    finally:
        controller.stop()


# -- a proxy in front of localstripe -------------------------------------------------------------

class StripeProxy(BaseHTTPRequestHandler):
    """Passes every request on to localstripe (``upstream``) and its answer back; a subclass
    says what happens to a refund request (``on_refund``): lost, held, or answered with a
    recorded error."""

    upstream = ""

    def forward(self, method: str, body: bytes) -> tuple[int, bytes]:
        """The request sent on to localstripe: its (status, body)."""
        request = urllib.request.Request(
            self.upstream + self.path, data=body or None, method=method,
            headers={k: v for k, v in self.headers.items()
                     if k.lower() in ("authorization", "content-type")})
        try:
            with urllib.request.urlopen(request) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def answer(self, status: int, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def hang_up(self) -> None:
        """No answer at all: the client sees the connection close."""
        self.close_connection = True

    def on_refund(self, body: bytes) -> None:
        self.answer(*self.forward("POST", body))

    def _relay(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if method == "POST" and self.path.startswith("/v1/refunds"):
            self.on_refund(body)
        else:
            self.answer(*self.forward(method, body))

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._relay("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._relay("POST")

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def proxy(handler: type[StripeProxy], upstream: str) -> Iterator[str]:
    """``handler`` in front of localstripe at ``upstream`` until the block ends: its base URL."""
    handler.upstream = upstream
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
