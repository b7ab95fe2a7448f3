"""Customers' mail over SMTP: an aiosmtpd server a mail system delivers to (or points a
forwarding rule at). A message gets its 250 only once it is recorded; if recording fails the
client is told to try again later (451), so nothing is lost.

aiosmtpd is an optional dependency (``pip install 'refund-agent[mail]'``); it is imported only
by ``refund-agent receive --smtp``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...errors import ConfigError
from ...store.mail import MailRow

log = logging.getLogger(__name__)

# The largest message accepted (aiosmtpd's data_size_limit): attachments come in whole.
MAX_MESSAGE_BYTES = 25 * 1024 * 1024


def aiosmtpd_missing() -> ConfigError:
    return ConfigError("refund-agent receive --smtp needs the aiosmtpd library: "
                       "pip install 'refund-agent[mail]'.")


class _Handler:
    """aiosmtpd's handler: each message's DATA goes to ``take``; 250 once it returns."""

    def __init__(self, take: Callable[[bytes], MailRow], report: Callable[[MailRow], None]):
        self._take = take
        self._report = report

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


def serve(host: str, port: int, take: Callable[[bytes], MailRow],
          report: Callable[[MailRow], None]) -> Any:
    """A started aiosmtpd Controller on ``host:port`` (``stop()`` it); ConfigError without
    aiosmtpd, OSError when the address cannot be listened on."""
    try:
        from aiosmtpd.controller import Controller
    except ImportError:
        raise aiosmtpd_missing() from None
    controller = Controller(_Handler(take, report), hostname=host, port=port,
                            data_size_limit=MAX_MESSAGE_BYTES, ready_timeout=10)
    try:
        controller.start()
    except RuntimeError as exc:   # aiosmtpd wraps a failed bind
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, OSError):
            raise cause from None
        raise
    return controller
