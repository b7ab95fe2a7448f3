"""Rate limits as pure decisions: reading the providers' headers, the window of requests in
flight (additive increase, multiplicative decrease), the rolling budget, the backoff.

No clock, no lock, no I/O here: every function takes the time it needs and returns a new
value, so the property tests drive them through any sequence of answers. The limiter that
applies them to live requests is ``limiter.py``.

What the providers send (read 2026; docs/PROVIDERS.md, "Rate limits"):

- OpenAI (platform.openai.com/docs/guides/rate-limits): every answer carries
  ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
  ``x-ratelimit-reset-requests`` ("time until the limit resets to its initial state", written
  as a Go duration: ``1s``, ``6m0s``, ``12ms``) and the same three for ``-tokens``; a 429's
  body is ``{"error": {"type": "requests", "code": "rate_limit_exceeded", ...}}``. Its SDK
  reads ``retry-after-ms`` first, then ``retry-after`` (seconds or an HTTP date).
- xAI (docs.x.ai/developers/rate-limits): requests per second (a minute's budget / 60) and
  tokens per minute per model; past either, ``429 Too Many Requests``, its body in xAI's flat
  shape (``{"code": "Some resource has been exhausted", "error": "..."}``). The pages read
  document no rate-limit headers, so for xAI the 429 (and its ``retry-after``, when sent) is
  what slows the process; any ``x-ratelimit-*`` header it does send is read the same way.
"""

from __future__ import annotations

import email.utils
import math
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

# The SDK's own backoff numbers (openai/_constants.py), kept for answers without Retry-After.
INITIAL_BACKOFF, MAX_BACKOFF = 0.5, 8.0
# A Retry-After past this is not a rate limit to wait out in-process (the SDK's own bound).
MAX_RETRY_AFTER = 120.0
# No provider's pace needs more requests in flight than this from one process: the window
# starts here (no limit in practice) and is only lowered by 429s.
MOST_IN_FLIGHT = 256
# Tokens an answer is assumed to cost before it is known (OpenAI estimates a request's tokens
# the same way: its input's characters, plus what it may write).
OUTPUT_ESTIMATE = 1024
CHARS_PER_TOKEN = 4

# -- the headers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateHeaders:
    """What one answer said about the limits; None where it said nothing."""

    retry_after: float | None = None
    limit_requests: int | None = None
    limit_tokens: int | None = None
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests: float | None = None
    reset_tokens: float | None = None


_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")


def duration(text: str | None) -> float | None:
    """Seconds from a reset header: a Go duration (``6m0s``, ``1.5s``, ``12ms``) or a plain
    number of seconds; None when it is neither."""
    if text is None:
        return None
    text = text.strip().lower()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) and value >= 0 else None
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return round(sum(float(n) * _UNITS[u] for n, u in parts), 9)


def retry_after(headers: Mapping[str, str], now_epoch: float) -> float | None:
    """Seconds to wait, as the SDK reads them: ``retry-after-ms``, then ``retry-after`` in
    seconds or as an HTTP date; None when absent, unreadable or not positive."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            continue
        return value if math.isfinite(value) and value > 0 else None
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return when - now_epoch if when > now_epoch else None


def _count(raw: str | None) -> int | None:
    try:
        value = int(float(raw)) if raw is not None else None
    except ValueError:
        return None
    return value if value is None or value >= 0 else None  # Azure sends -1 for "unknown"


def read_headers(headers: Mapping[str, str], now_epoch: float) -> RateHeaders:
    """The rate-limit headers of one answer (names compared as the mapping compares them:
    httpx's headers ignore case)."""
    return RateHeaders(
        retry_after=retry_after(headers, now_epoch),
        limit_requests=_count(headers.get("x-ratelimit-limit-requests")),
        limit_tokens=_count(headers.get("x-ratelimit-limit-tokens")),
        remaining_requests=_count(headers.get("x-ratelimit-remaining-requests")),
        remaining_tokens=_count(headers.get("x-ratelimit-remaining-tokens")),
        reset_requests=duration(headers.get("x-ratelimit-reset-requests")),
        reset_tokens=duration(headers.get("x-ratelimit-reset-tokens")),
    )


# -- what the provider says is left ------------------------------------------------------------


@dataclass(frozen=True)
class Count:
    """One of the provider's counts (requests or tokens) as its latest answer gave it.

    OpenAI's reset is "the time until the limit resets to its initial state", replenished as
    time passes: ``limit - left`` come back over the reset, at ``rate`` a second (None when
    the answer gave no limit: then only the whole reset is known).
    """

    left: float
    as_of: float
    full_at: float
    rate: float | None = None

    def now_left(self, now: float) -> float:
        return self.left + (self.rate or 0.0) * max(0.0, now - self.as_of)


def count_from(remaining: int | None, limit: int | None, reset: float | None,
               now: float) -> Count | None:
    """The count an answer's headers give (None when it gave no remaining)."""
    if remaining is None:
        return None
    reset = reset or 0.0
    rate = (limit - remaining) / reset if limit is not None and limit > remaining and reset > 0 \
        else None
    return Count(float(remaining), now, now + reset, rate)


def count_wait(count: Count | None, now: float, need: float) -> float:
    """Seconds until ``need`` fits the count (0.0: now, or the count is unknown or whole)."""
    if count is None or now >= count.full_at:
        return 0.0
    left = count.now_left(now)
    if left >= need:
        return 0.0
    if count.rate:
        return min((need - left) / count.rate, count.full_at - now)
    return count.full_at - now


def count_spent(count: Count | None, now: float, cost: float) -> Count | None:
    """The count once ``cost`` is sent (forgotten once it is whole again)."""
    if count is None or now >= count.full_at:
        return None
    return replace(count, left=count.now_left(now) - cost, as_of=now)


@dataclass(frozen=True)
class Headroom:
    """What the provider's latest headers say is left, less what was sent since."""

    requests: Count | None = None
    tokens: Count | None = None


def headroom_from(headers: RateHeaders, now: float, old: Headroom) -> Headroom:
    """The headroom an answer's headers give; what they do not say is kept from ``old``."""
    requests = count_from(headers.remaining_requests, headers.limit_requests,
                          headers.reset_requests, now)
    tokens = count_from(headers.remaining_tokens, headers.limit_tokens,
                        headers.reset_tokens, now)
    return Headroom(requests or old.requests, tokens or old.tokens)


def headroom_wait(room: Headroom, now: float, tokens: int) -> float:
    """Seconds until the provider's counts have room for one more request of ``tokens``."""
    return max(count_wait(room.requests, now, 1.0), count_wait(room.tokens, now, tokens))


def headroom_spent(room: Headroom, now: float, tokens: int) -> Headroom:
    """The headroom once a request of ``tokens`` is sent."""
    return Headroom(count_spent(room.requests, now, 1.0), count_spent(room.tokens, now, tokens))


# -- the pace learned from 429s ------------------------------------------------------------------

# xAI's limit is per second (its minute's budget / 60), OpenAI's per minute: a 429 is read as
# "no more than what got through in the last second", sent evenly with a little room for the
# network's jitter, and one more a second is tried after every PROBE_EVERY seconds without one.
PACE_PERIOD = 1.0
PACE_MARGIN = 1.03
MOST_MARGIN = 1.15
PROBE_EVERY = 30.0


def learned_limit(accepted: Iterable[float], now: float, span: float = PACE_PERIOD) -> int:
    """What the provider let through in the ``span`` before ``now``, per PACE_PERIOD (at
    least 1)."""
    count = sum(1 for when in accepted if now - when < span)
    return max(1, round(count * PACE_PERIOD / span))


def relearned(base: int | None, margin: float, counted: int,
              budget: int | None = None) -> tuple[int, float]:
    """The pace (a count per PACE_PERIOD, and the room kept) after a 429 of which
    ``counted`` had got through.

    Sent at the pace, a second holds ``base - 1`` or ``base`` of them by our clock: a refusal
    then is the network's jitter (requests sent evenly arrive a little less so), answered by
    keeping a little more room (2 % more, up to MOST_MARGIN); fewer than that means the
    provider allows fewer now, and the pace becomes what got through.

    Before any 429 the pace is our own budget's (``budget`` a period, None when there is
    none), so the first 429 is judged against it: sent at the budget's full pace, a request
    that crossed the provider's minute a moment early on the network is refused from a second
    that held ``budget`` of ours, and only ``budget - 1`` got through. Read as the provider's
    limit, that one refusal would halve a pace of 2 a second for PROBE_EVERY seconds.
    """
    if base is None:
        base = budget
    if base is None or counted < base - 1:
        return counted, margin
    return base, min(MOST_MARGIN, margin * 1.02)


def probed_limit(base: int, calm: float, every: float = PROBE_EVERY) -> int:
    """Additive increase: one more a second for every ``every`` seconds without a 429."""
    return base + int(max(0.0, calm) // every)


# -- the window of requests in flight (AIMD) ---------------------------------------------------


@dataclass(frozen=True)
class Window:
    """How many requests may be in flight: lowered by half on a 429, raised by one for every
    window's worth of answers that were not (TCP's congestion avoidance, per answer).

    ``epoch`` counts the decreases: a 429 for a request sent before the latest decrease was
    already answered by it (the requests of one burst meet their 429s together), so it does not
    halve the window again.
    """

    size: float = float(MOST_IN_FLIGHT)
    most: int = MOST_IN_FLIGHT
    epoch: int = 0

    @property
    def allowed(self) -> int:
        return max(1, min(self.most, math.floor(self.size)))


def after_success(window: Window) -> Window:
    """Additive increase: +1 over a window's worth of answers, never past ``most``."""
    return replace(window, size=min(float(window.most), window.size + 1.0 / window.size))


def after_limited(window: Window, sent_in_epoch: int, in_flight: int) -> Window:
    """Multiplicative decrease: half of what was in flight (at least 1), once per burst."""
    if sent_in_epoch < window.epoch:
        return window
    size = max(1.0, min(window.size, float(max(1, in_flight))) / 2.0)
    return replace(window, size=size, epoch=window.epoch + 1)


# -- the budget ---------------------------------------------------------------------------------


class Rolling:
    """At most ``limit`` (requests or tokens) in any ``period`` seconds, counted exactly.

    A charge made at ``t`` counts while ``now - t < period``. Admitting only what fits with
    every charge of the last period means no window of that length, wherever it starts, holds
    more than ``limit`` (two charges within ``period`` of each other were counted together at
    the later one). A token bucket would not do: it lets a full bucket plus a period's refill
    through in one minute, twice the budget. One cost above ``limit`` is charged as ``limit``
    (it goes alone, or it would never go).
    """

    def __init__(self, limit: int, period: float = 60.0) -> None:
        if limit < 1 or not period > 0:
            raise ValueError(f"a budget needs a limit of 1 or more and a period above 0, got "
                             f"{limit} per {period}s")
        self.limit, self.period = limit, period
        self._charges: deque[list[float]] = deque()  # [time, cost], oldest first
        self._used = 0.0

    def _forget(self, now: float) -> None:
        while self._charges and now - self._charges[0][0] >= self.period:
            self._used -= self._charges.popleft()[1]
        if not self._charges:
            self._used = 0.0  # no drift from float sums

    def used(self, now: float) -> float:
        self._forget(now)
        return self._used

    def wait(self, now: float, cost: float) -> float:
        """Seconds until ``cost`` fits (0.0: it fits now)."""
        self._forget(now)
        cost = min(cost, self.limit)
        over = self._used + cost - self.limit
        if over <= 0:
            return 0.0
        freed = 0.0
        for when, charged in self._charges:
            freed += charged
            if freed >= over:
                return max(when + self.period - now, 1e-9)
        return self.period  # unreachable: everything charged frees within a period

    def charge(self, now: float, cost: float) -> list[float]:
        """Counts ``cost`` at ``now`` (call only when :meth:`wait` said 0); returns the entry,
        for :meth:`amend`."""
        entry = [now, min(cost, self.limit)]
        self._charges.append(entry)
        self._used += entry[1]
        return entry

    def amend(self, entry: list[float], cost: float) -> None:
        """Replaces an estimate with what was really spent (an answer's usage)."""
        if entry in self._charges:
            self._used += cost - entry[1]
            entry[1] = cost


def estimate_tokens(body_bytes: int, last_total: int | None) -> int:
    """A request's tokens before it is sent: its own characters, or what the run's previous
    request cost when larger (a continued chain counts the stored input too), plus an answer."""
    return max(body_bytes // CHARS_PER_TOKEN, last_total or 0) + OUTPUT_ESTIMATE


# -- backoff ------------------------------------------------------------------------------------


def backoff(retry_after_s: float | None, streak: int, rand: float) -> float:
    """Seconds every request of the process waits after a 429.

    ``Retry-After`` is honoured (never less), with up to a tenth more (at most 0.5 s) so the
    waiting requests do not all return in the same instant; without it, the SDK's exponential
    backoff (0.5 s doubling to 8 s) with equal jitter. ``rand`` is uniform in [0, 1).
    """
    if retry_after_s is not None and retry_after_s > 0:
        return retry_after_s + rand * min(0.1 * retry_after_s, 0.5)
    base = min(INITIAL_BACKOFF * 2.0 ** min(streak, 16), MAX_BACKOFF)
    return base * (0.5 + 0.5 * rand)
