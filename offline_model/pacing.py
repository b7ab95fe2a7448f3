"""The stand-in's rate-limit mode: past a set pace, 429 with the provider's headers.

``--rate-limit 60/min`` (or ``OfflineServer(rate_limit="60/min")``) accepts at most 60 create
requests in any 60 seconds, counted exactly (a sliding window of the accepted ones); the next
is answered 429 until the oldest leaves the window. Refused requests are not processed (no
response, no stored item, nothing in ``OfflineServer.requests``): a client may send them again.

Each dialect answers as its provider does (docs/PROVIDERS.md, "Rate limits"):

- ``openai``: every answer, accepted or refused, carries ``x-ratelimit-limit-requests``,
  ``x-ratelimit-remaining-requests`` and ``x-ratelimit-reset-requests`` (the time until the
  count is back to its initial state, written like OpenAI's ``1s``, ``6m0s``, ``12ms``); a 429
  adds ``retry-after`` (whole seconds) and ``retry-after-ms`` (what the openai SDK reads first)
  and OpenAI's body (``"type": "requests"``, ``"code": "rate_limit_exceeded"``).
- ``xai``: its documentation names no rate-limit headers, so none on accepted answers; a 429
  says ``retry-after`` in whole seconds, its body in xAI's flat shape.

The accepted and refused requests' times are kept (``Pace.accepted``, ``Pace.refused``) so tests
and benchmarks count on the stand-in's side what the provider would have seen.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .events import OPENAI, ApiError

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*\.?\d*)\s*(s|sec|second|m|min|minute|h|hour)s?\s*$",
                   re.I)
_SECONDS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
            "h": 3600.0, "hour": 3600.0}


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` requests in any ``period`` seconds."""

    limit: int
    period: float

    def __str__(self) -> str:
        return f"{self.limit}/{self.period:g}s"


def parse_rate(text: str) -> Rate:
    """``60/min``, ``10/s``, ``600/10min``, ``1000/h`` as a :class:`Rate`.

    Raises:
        ValueError: anything else, naming the forms it takes.
    """
    match = _RATE.match(text or "")
    if match:
        count, scale, unit = match.groups()
        period = (float(scale) if scale else 1.0) * _SECONDS[unit.lower()]
        if int(count) >= 1 and period > 0:
            return Rate(int(count), period)
    raise ValueError(f"a rate limit is a count per time, like 60/min, 10/s or 600/10min; "
                     f"got {text!r}")


def go_duration(seconds: float) -> str:
    """Seconds the way OpenAI writes its reset headers: ``12ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60.0)
    rest = math.ceil(rest * 1000) / 1000
    if minutes:
        return f"{int(minutes)}m{rest:g}s"
    return f"{rest:g}s"


@dataclass(frozen=True)
class Verdict:
    """One request's answer from the pace: accepted or not, and what the headers say."""

    accepted: bool
    limit: int
    remaining: int
    reset: float        # seconds until every place is free again
    retry_after: float  # seconds until the next place is free (0 when there is one)


class Pace:
    """The sliding window of accepted requests, shared by every connection of the server."""

    def __init__(self, rate: Rate, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.clock = rate, clock
        self._lock = threading.Lock()
        self._window: deque[float] = deque()
        self.accepted: list[float] = []
        self.refused: list[float] = []

    def take(self) -> Verdict:
        """Counts one create request: accepted if the window has a place, else refused."""
        with self._lock:
            now = self.clock()
            while self._window and now - self._window[0] >= self.rate.period:
                self._window.popleft()
            accepted = len(self._window) < self.rate.limit
            if accepted:
                self._window.append(now)
                self.accepted.append(now)
            else:
                self.refused.append(now)
            remaining = self.rate.limit - len(self._window)
            reset = self._window[-1] + self.rate.period - now if self._window else 0.0
            retry = 0.0 if remaining else self._window[0] + self.rate.period - now
            return Verdict(accepted, self.rate.limit, remaining, max(reset, 0.0),
                           max(retry, 0.0))


def headers(verdict: Verdict, dialect: str) -> dict[str, str]:
    """The rate-limit headers an answer carries in ``dialect``."""
    sent: dict[str, str] = {}
    if dialect == OPENAI:
        sent = {"x-ratelimit-limit-requests": str(verdict.limit),
                "x-ratelimit-remaining-requests": str(verdict.remaining),
                "x-ratelimit-reset-requests": go_duration(verdict.reset)}
    if not verdict.accepted:
        sent["retry-after"] = str(max(1, math.ceil(verdict.retry_after)))
        if dialect == OPENAI:
            sent["retry-after-ms"] = str(max(1, math.ceil(verdict.retry_after * 1000)))
    return sent


def refusal(verdict: Verdict, dialect: str, rate: Rate) -> ApiError:
    """The 429 a request past the pace is answered with, headers included."""
    if dialect == OPENAI:
        return ApiError(
            429,
            f"Rate limit reached for requests on the offline stand-in: Limit {rate.limit}, "
            f"Used {rate.limit}, Requested 1. Please try again in "
            f"{go_duration(verdict.retry_after)}.",
            kind="requests", code="rate_limit_exceeded",
            headers=headers(verdict, dialect))
    return ApiError(
        429,
        f"Too many requests: the offline stand-in's team is past its rate limit of {rate}. "
        "Please retry later.",
        headers=headers(verdict, dialect))
