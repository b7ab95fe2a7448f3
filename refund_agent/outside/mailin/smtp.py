"""Customers' mail over SMTP: an aiosmtpd server a mail system delivers to (or points a
forwarding rule at). A message gets its 250 only once it is recorded; if the store cannot
record it the client is told to try again later (451), so nothing is lost. A message that
cannot be read is recorded as unreadable and gets its 250 too: a retry would not mend it.

It takes mail only for the desk's own addresses (the shop's support email, the From address,
and REFUND_AGENT_RECEIVE_ADDRESSES): any other recipient is refused at RCPT with 550, so the
listener is never anyone's relay or a way to open tickets in another desk's name. With
REFUND_AGENT_RECEIVE_USER set, a sender must log in (AUTH) before it may send anything; its
logins are throttled per name as the desk's sign-in is (desk/accounts.py: each wrong password
past the first few makes that name wait twice as long, audited, and no other name), so it is
no machine for guessing the password.

It holds at most REFUND_AGENT_MAX_CONNECTIONS connections at once (by default derived from the
process's open-file limit, outside/listening.py); the others are answered 421 and closed, with
one line a minute saying so, so a flood of connections never takes the descriptors the process
needs, nor fills the log with tracebacks.

aiosmtpd is an optional dependency (``pip install 'refund-agent[mail]'``); it is imported only
by ``refund-agent receive --smtp``.
"""

from __future__ import annotations

import hmac
import logging
import math
import socket
import warnings
from collections.abc import Callable, Collection
from email.utils import parseaddr
from functools import cache
from typing import Any, Protocol

from ...errors import ConfigError, RefundAgentError, StoreError
from ..listening import Acceptor, Gate, connection_cap, open_file_limit
from .rows import MailRow

log = logging.getLogger(__name__)

# The largest message accepted (aiosmtpd's data_size_limit): attachments come in whole.
MAX_MESSAGE_BYTES = 25 * 1024 * 1024


def aiosmtpd_missing() -> ConfigError:
    return ConfigError("refund-agent receive --smtp needs the aiosmtpd library: "
                       "pip install 'refund-agent[mail]'.")


def desk_addresses(*addresses: str) -> frozenset[str]:
    """The addresses (and ``@domain``s) the listener takes mail for, compared casefolded;
    a display name around one ("Juniper & Pine <help@shop.example>") dropped, empty ones
    left out."""
    found = (parseaddr(a)[1] if "<" in a else a.strip() for a in addresses)
    return frozenset(a.casefold() for a in found if a)


def for_the_desk(recipient: str, desk: Collection[str]) -> bool:
    """Whether mail to ``recipient`` is the desk's: one of its addresses, or at one of its
    ``@domain``s (an address is compared whole, casefolded: mail systems treat case alike)."""
    address = recipient.strip().strip("<>").casefold()
    local, at, domain = address.rpartition("@")
    return bool(local and at) and (address in desk or at + domain in desk)


class _Handler:
    """aiosmtpd's handler: a recipient not the desk's is refused at RCPT; each message's DATA
    goes to ``take``; 250 once it returns."""

    def __init__(self, take: Callable[[bytes], MailRow], report: Callable[[MailRow], None],
                 desk: frozenset[str], say: Callable[[str], None]):
        self._take = take
        self._report = report
        self._desk = desk
        self._say = say

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any,  # noqa: N802
                          address: str, rcpt_options: list[str]) -> str:
        if not for_the_desk(address, self._desk):
            self._say(f"Refused mail for {address} from {envelope.mail_from or '(no sender)'}: "
                      "not an address of this desk.")
            return f"550 5.1.1 <{address}>: not an address of this desk"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        raw = envelope.original_content or envelope.content
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        sender = envelope.mail_from or "(no sender)"
        try:
            # take() records a message it cannot read as unreadable, so what it raises is
            # either the store's own failure or a fault no retry mends.
            row = self._take(raw)
        except StoreError as exc:
            # The store could not record it (a database down, a full disk): the sending
            # server keeps the message and retries, which is what can mend this.
            self._say(f"Could not record a message from {sender}: {_one_line(exc)}; the "
                      "sending server was told to try again later.")
            return "451 4.3.0 Not recorded, try again later"
        except Exception as exc:  # noqa: BLE001 - never a traceback, never 4xx for ever
            # Not the store's: the same bytes would fail the same way on every retry, so the
            # sender gets a permanent answer (a bounce its author sees) rather than days of
            # 451s.
            self._say(f"Could not take a message from {sender}: {type(exc).__name__}: "
                      f"{_one_line(exc)}; refused for good.")
            return "554 5.6.0 The message cannot be taken"
        self._report(row)
        return "250 2.0.0 Message accepted"


def _one_line(exc: BaseException) -> str:
    """An error's message on one line, for the listener's output."""
    return " ".join(str(exc).split())[:300] or type(exc).__name__


class LoginThrottle(Protocol):
    """The desk's sign-in throttle (desk/accounts.Throttle), as the listener uses it: read a
    name's standing (``.wait``: seconds before its password is checked again), then count a
    wrong password or forget its failures."""

    def tries(self, name: str) -> Any: ...

    def failed(self, tries: Any, who: str, client: str, why: str) -> float: ...

    def succeeded(self, tries: Any) -> None: ...


# Past the cap (421: the service is not available now, the client tries again later).
TOO_MANY = b"421 4.3.2 Too many connections at once; try again later\r\n"
# Longest login name kept for the throttle and the audit: a name is a few words, and a client
# may send anything.
LONGEST_LOGIN = 64


def login_name(raw: bytes) -> str:
    """A login as sent, made fit for the throttle and the audit: text (undecodable bytes
    replaced), control characters dropped, spaces collapsed, at most LONGEST_LOGIN."""
    text = raw.decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(text.split())[:LONGEST_LOGIN]


def _checker(user: str, password: str, throttle: LoginThrottle | None, gate: Gate
             ) -> Callable[..., Any]:
    """aiosmtpd's authenticator: only ``user`` with ``password`` (compared in constant time;
    neither is ever logged), each name tried throttled by ``throttle``: while a name waits,
    454 (try later) and its password is not checked; a wrong one is counted and audited."""
    from aiosmtpd.smtp import AuthResult, LoginPassword

    def check(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        name = login_name(auth_data.login)
        peer = session.peer[0] if isinstance(session.peer, tuple) else session.peer
        try:
            tries = throttle.tries(name) if throttle else None
            if tries is not None and tries.wait > 0:
                return AuthResult(success=False, handled=False, message=(
                    f"454 4.7.0 Too many wrong passwords for this name; its password is "
                    f"checked again in {math.ceil(tries.wait)} s"))
            right_user = hmac.compare_digest(auth_data.login, user.encode())
            ok = hmac.compare_digest(auth_data.password, password.encode()) and right_user
            if throttle and ok:
                throttle.succeeded(tries)
            elif throttle:
                throttle.failed(tries, name, f"smtp {peer}",
                                "wrong password" if right_user else "no such login")
        except RefundAgentError as exc:   # the store is unreachable or locked
            problem = str(exc)
            gate.fault("store", lambda n, again: (
                f"{gate.name} could not check {n} login{'s' * (n != 1)}{again}: the store "
                f"answered {problem}; senders are told to try again later."))
            return AuthResult(success=False, handled=False,
                              message="454 4.3.0 Cannot check logins now; try again later")
        return AuthResult(success=ok, handled=False)
    return check


@cache
def _listener_class() -> type:
    """aiosmtpd's Controller, its connections accepted by the listener's own loop (made here,
    as aiosmtpd is imported only when the listener starts).

    asyncio's server accepts up to a hundred connections in a row, several times over, before
    the first of them reaches any code of the listener's: a cap counted there would come too
    late, and asyncio logs a traceback for each accept the system refuses. So the listener binds
    its sockets and accepts itself (listening.Acceptor: past the cap, 421 and closed at once),
    and hands each connection it keeps to aiosmtpd (``connect_accepted_socket``).
    """
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import SMTP
    from tornado.netutil import bind_sockets

    class CountedSMTP(SMTP):
        """One connection's session, counted out of the gate when it closes."""

        gate: Gate

        def connection_lost(self, error: Exception | None) -> None:
            self.gate.leave()
            super().connection_lost(error)

    class Listening:
        """What aiosmtpd keeps as its server: the bound sockets and their acceptors."""

        def __init__(self, acceptors: list[Acceptor]) -> None:
            self.acceptors = acceptors

        def close(self) -> None:
            for acceptor in self.acceptors:
                acceptor.stop()
                acceptor.sock.close()

        async def wait_closed(self) -> None:
            return None

    class Listener(Controller):
        def __init__(self, gate: Gate, handler: Any, **kwargs: Any) -> None:
            super().__init__(handler, **kwargs)
            self.gate = gate

        def factory(self) -> Any:
            smtp = CountedSMTP(self.handler, **self.SMTP_kwargs)
            smtp.gate = self.gate
            return smtp

        def _create_server(self) -> Any:   # aiosmtpd's hook for how it listens
            return self._listen()

        async def _listen(self) -> Listening:
            acceptors = [Acceptor(self.loop, sock, self.gate, self._take, TOO_MANY)
                         for sock in bind_sockets(self.port, address=self.hostname)]
            for acceptor in acceptors:
                acceptor.start()
            return Listening(acceptors)

        def _take(self, conn: socket.socket, address: Any) -> None:
            task = self.loop.create_task(
                self.loop.connect_accepted_socket(self._factory_invoker, conn))
            task.add_done_callback(self._taken)

        def _taken(self, task: Any) -> None:
            if not task.cancelled() and (exc := task.exception()) is not None:
                self.gate.fault("take", lambda n, again: (
                    f"{self.gate.name} dropped {n} connection{'s' * (n != 1)}{again}: "
                    f"{type(exc).__name__}: {exc}."))

    return Listener


def serve(host: str, port: int, take: Callable[[bytes], MailRow],
          report: Callable[[MailRow], None], desk: frozenset[str],
          login: tuple[str, str] | None = None, say: Callable[[str], None] = print, *,
          throttle: LoginThrottle | None = None, max_connections: int = 0) -> Any:
    """A started aiosmtpd Controller on ``host:port`` (``stop()`` it) taking mail for ``desk``
    (desk_addresses) only, and with ``login`` (user, password) only from who gives it, its
    tries throttled per name by ``throttle``; at most ``max_connections`` at once (0: derived
    from the open-file limit). ConfigError without aiosmtpd or for a cap the limit cannot
    hold, OSError when the address cannot be listened on."""
    try:
        import aiosmtpd.controller  # noqa: F401 - only to say it is missing, here
    except ImportError:
        raise aiosmtpd_missing() from None
    gate = Gate("The SMTP listener", connection_cap(open_file_limit(), max_connections), say)
    auth: dict[str, Any] = {}
    if login:
        # The listener has no TLS of its own: the login travels as the mail does, so it is
        # for a trusted network or a TLS-terminating relay in front (docs/DESK.md). aiosmtpd
        # warns of that on every start; the docs say it once instead.
        auth = {"authenticator": _checker(*login, throttle, gate), "auth_required": True,
                "auth_require_tls": False}
        logging.getLogger("mail.log").setLevel(logging.ERROR)
        # aiosmtpd warns of it for every connection (each gets its own session object, made
        # in the listener's thread), not once: for the life of the process, then.
        warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS")
    # The greeting's name, looked up once: aiosmtpd would otherwise ask the resolver on every
    # connection, in the event loop, a flood's worth of lookups.
    controller = _listener_class()(
        gate, _Handler(take, report, desk, say), hostname=host, port=port,
        server_hostname=socket.getfqdn(), data_size_limit=MAX_MESSAGE_BYTES,
        ready_timeout=10, **auth)
    try:
        controller.start()
    except RuntimeError as exc:   # aiosmtpd wraps a failed bind
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, OSError):
            raise cause from None
        raise
    return controller
