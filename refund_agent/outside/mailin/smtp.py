"""Customers' mail over SMTP: an aiosmtpd server a mail system delivers to (or points a
forwarding rule at). A message gets its 250 only once it is recorded; if recording fails the
client is told to try again later (451), so nothing is lost.

It takes mail only for the desk's own addresses (the shop's support email, the From address,
and REFUND_AGENT_RECEIVE_ADDRESSES): any other recipient is refused at RCPT with 550, so the
listener is never anyone's relay or a way to open tickets in another desk's name. With
REFUND_AGENT_RECEIVE_USER set, a sender must log in (AUTH) before it may send anything.

aiosmtpd is an optional dependency (``pip install 'refund-agent[mail]'``); it is imported only
by ``refund-agent receive --smtp``.
"""

from __future__ import annotations

import hmac
import logging
import warnings
from collections.abc import Callable, Collection
from email.utils import parseaddr
from typing import Any

from ...errors import ConfigError
from ...store.mail import MailRow

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
        try:
            row = self._take(raw)
        except Exception as exc:  # noqa: BLE001 - the sender keeps it and retries
            log.exception("Could not record a message")
            return f"451 4.3.0 Not recorded, try again later ({type(exc).__name__})"
        self._report(row)
        return "250 2.0.0 Message accepted"


def _checker(user: str, password: str) -> Callable[..., Any]:
    """aiosmtpd's authenticator: only ``user`` with ``password`` (compared in constant time;
    neither is ever logged)."""
    from aiosmtpd.smtp import AuthResult, LoginPassword

    def check(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
        ok = isinstance(auth_data, LoginPassword) and \
            hmac.compare_digest(auth_data.login, user.encode()) and \
            hmac.compare_digest(auth_data.password, password.encode())
        return AuthResult(success=ok, handled=False)
    return check


def serve(host: str, port: int, take: Callable[[bytes], MailRow],
          report: Callable[[MailRow], None], desk: frozenset[str],
          login: tuple[str, str] | None = None, say: Callable[[str], None] = print) -> Any:
    """A started aiosmtpd Controller on ``host:port`` (``stop()`` it) taking mail for ``desk``
    (desk_addresses) only, and with ``login`` (user, password) only from who gives it;
    ConfigError without aiosmtpd, OSError when the address cannot be listened on."""
    try:
        from aiosmtpd.controller import Controller
    except ImportError:
        raise aiosmtpd_missing() from None
    auth: dict[str, Any] = {}
    if login:
        # The listener has no TLS of its own: the login travels as the mail does, so it is
        # for a trusted network or a TLS-terminating relay in front (docs/DESK.md). aiosmtpd
        # warns of that on every start; the docs say it once instead.
        auth = {"authenticator": _checker(*login), "auth_required": True,
                "auth_require_tls": False}
        logging.getLogger("mail.log").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS")
        controller = Controller(_Handler(take, report, desk, say), hostname=host, port=port,
                                data_size_limit=MAX_MESSAGE_BYTES, ready_timeout=10, **auth)
    try:
        controller.start()
    except RuntimeError as exc:   # aiosmtpd wraps a failed bind
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, OSError):
            raise cause from None
        raise
    return controller
