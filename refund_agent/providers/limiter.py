"""One limiter per process and provider that every model request passes through.

A run's turn takes a slot for its request (``Limiter.slot``, held until the answer's stream
ends); every attempt the SDK sends (``ProviderClient._send_request``) is admitted by
:meth:`Limiter.send`: it waits out a pause, the configured budget (requests and tokens per
minute) and what the provider's headers say is left, then sends, reads the answer's headers,
and on a 429 that is a rate limit pauses the whole process (Retry-After, or backoff with
jitter), halves the window of requests in flight and sends the same request again. So a 429
slows every run, not just the one that met it, and no run fails or repeats a call for one: a
refused request was not processed, and it is sent again as it was.

The decisions are the pure functions of ``limits.py``; this module holds the state, the lock
and the waiting.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import openai

from ..telemetry import points
from . import limits
from .limits import Headroom, Rolling, Window

Stop = Callable[[], bool]
# Runs whose last request's tokens are remembered, for the next one's estimate.
_REMEMBERED = 4096
_POLL = 0.1  # how often a waiting request looks at its stop button


class Halted(openai.OpenAIError):
    """A request waiting for its turn was stopped (the Stop button, a lost lease).

    An ``OpenAIError``, so the SDK passes it through untouched instead of retrying it.
    """


@dataclass
class Ticket:
    """One run's request slot: what the limiter knows of the request it is for."""

    key: str | None
    stop: Stop | None
    epoch: int = 0
    holding: bool = False
    entries: list[list[float]] = field(default_factory=list)


_local = threading.local()


def current() -> Ticket | None:
    """The slot this thread holds, if any."""
    return getattr(_local, "ticket", None)


class Limiter:
    """The process's pace towards one provider (see the module docstring).

    Args:
        rpm: requests per minute never to exceed (0: no budget of our own).
        tpm: tokens per minute never to exceed (0: none); a request counts its estimate
            (``limits.estimate_tokens``) until its usage is known.
        most: the most requests in flight the window allows.
        clock: monotonic seconds; ``wall`` the epoch (for HTTP-date Retry-After).
        rand: uniform [0, 1) for the jitter.
    """

    def __init__(self, rpm: int = 0, tpm: int = 0, *, most: int = limits.MOST_IN_FLIGHT,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 rand: Callable[[], float] = random.random) -> None:
        self._cond = threading.Condition()
        self.clock, self.wall, self.rand = clock, wall, rand
        self.window = Window(float(most), most)
        self.in_flight = 0
        self.paused_until = 0.0
        self.room = Headroom()
        self.requests = Rolling(rpm, 60.0) if rpm else None
        # xAI's per-second limit is the minute's budget / 60: never a minute's share at once.
        self.per_second = Rolling(math.ceil(rpm / 60), 1.0) if rpm else None
        self.tokens = Rolling(tpm, 60.0) if tpm else None
        # The pace a 429 taught (limits.learned_limit), as a spacing between sends (one per
        # period / limit): a burst after a pause would reach the provider in an order of its
        # own, the first ones later than the next ones. No spacing until the first 429.
        self.pace = Rolling(1, 1e-9)
        self.pace_base: int | None = None
        self.margin = limits.PACE_MARGIN
        self.last_limited = 0.0
        # (from, to): the span whose accepted sends give the pace, counted once the pause
        # ends (by then the requests sent with the refused one have been answered too).
        self._learning: tuple[float, float] | None = None
        # The last seconds' attempts, [when sent, refused]: what got through before a 429.
        self._sends: deque[list[float]] = deque()
        self.streak = 0        # 429s in a row, for backoff without Retry-After
        self.limited = 0       # 429s met (rate limits), for a progress line
        self.sent = 0          # attempts sent
        self._last: OrderedDict[str, int] = OrderedDict()

    # -- slots -----------------------------------------------------------------------------

    @contextmanager
    def slot(self, key: str | None = None, stop: Stop | None = None) -> Iterator[Ticket]:
        """Holds one of the window's places in flight for the block (one streamed request)."""
        ticket = Ticket(key, stop)
        self._acquire(ticket)
        previous, _local.ticket = current(), ticket
        try:
            yield ticket
        finally:
            _local.ticket = previous
            self._release(ticket)

    def _acquire(self, ticket: Ticket) -> None:
        with self._cond:
            while True:
                now = self.clock()
                if now >= self.paused_until and self.in_flight < self.window.allowed:
                    self.in_flight += 1
                    ticket.holding, ticket.epoch = True, self.window.epoch
                    return
                self._wait(ticket.stop, max(self.paused_until - now, 0.0) or None)

    def _release(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket.holding:
                ticket.holding = False
                self.in_flight -= 1
                self._cond.notify_all()

    def _wait(self, stop: Stop | None, seconds: float | None) -> None:
        """Waits (lock held) for a change or ``seconds``; raises Halted once ``stop`` says so."""
        if stop is not None and stop():
            raise Halted("Stopped while waiting for the provider's rate limit.")
        if stop is not None:
            seconds = _POLL if seconds is None else min(seconds, _POLL)
        self._cond.wait(seconds)

    # -- attempts ---------------------------------------------------------------------------

    def admit(self, ticket: Ticket | None, body_bytes: int) -> list[float]:
        """Waits until one attempt fits the pause, the budgets and the provider's headroom,
        then counts it (the lock is held from the last check to the count); returns its
        entry in the log of sends."""
        stop = ticket.stop if ticket else None
        with self._cond:
            cost = 0
            if self.tokens is not None or self.room.tokens is not None:
                last = self._last.get(ticket.key) if ticket and ticket.key else None
                cost = limits.estimate_tokens(body_bytes, last)
            while True:
                now = self.clock()
                wait = max(self.paused_until - now,
                           limits.headroom_wait(self.room, now, cost),
                           self.requests.wait(now, 1) if self.requests else 0.0,
                           self.per_second.wait(now, 1) if self.per_second else 0.0,
                           self.tokens.wait(now, cost) if self.tokens else 0.0,
                           self._pace_wait(now))
                if wait <= 0:
                    break
                self._wait(stop, wait)
            if self.requests is not None and self.per_second is not None:
                self.requests.charge(now, 1)
                self.per_second.charge(now, 1)
            if self.tokens is not None and ticket is not None:
                ticket.entries = [self.tokens.charge(now, cost)]
            elif self.tokens is not None:
                self.tokens.charge(now, cost)
            self.pace.charge(now, 1)
            self.room = limits.headroom_spent(self.room, now, cost)
            self.sent += 1
            keep = now - 2 * limits.PACE_PERIOD
            if self._learning is not None:
                keep = min(keep, self._learning[0])
            while self._sends and self._sends[0][0] < keep:
                self._sends.popleft()
            entry = [now, 0.0]
            self._sends.append(entry)
            return entry

    def _pace_wait(self, now: float) -> float:
        if self._learning is not None and now >= self.paused_until:
            start, end = self._learning
            self._learning = None
            counted = limits.learned_limit(
                (t for t, refused in self._sends if not refused and start < t <= end),
                end, end - start)
            budget = self.per_second.limit if self.per_second else None
            self.pace_base, self.margin = limits.relearned(self.pace_base, self.margin, counted,
                                                           budget)
        if self.pace_base is None:
            return 0.0
        limit = limits.probed_limit(self.pace_base, now - self.last_limited)
        self.pace.period = limits.PACE_PERIOD * self.margin / limit
        return self.pace.wait(now, 1)

    def observe(self, status: int, headers: Any, sent_in_epoch: int, limited: bool,
                entry: list[float] | None = None) -> None:
        """Learns from one answer: its headers, and whether it was a rate limit.

        ``entry`` is the request's in the log of sends. The provider counts requests as they
        arrive and answers a refusal at once, while an accepted request answers when its
        stream ends; requests sent together reach it in an order of their own. So what got
        through is counted when the pause ends: every request sent in the second before the
        refusal came back (at most a quarter second after the refused one was sent) that was
        not refused, answered yet or not.
        """
        with self._cond:
            now = self.clock()
            said = limits.read_headers(headers, self.wall())
            self.room = limits.headroom_from(said, now, self.room)
            if limited:
                self.limited += 1
                points.rate_limited()
                if entry is not None:
                    entry[1] = 1.0
                delay = limits.backoff(said.retry_after, self.streak, self.rand())
                self.streak += 1
                last_pause_end = self.paused_until
                self.paused_until = max(self.paused_until, now + delay)
                before = self.window.epoch
                self.window = limits.after_limited(self.window, sent_in_epoch, self.in_flight)
                sent_at = entry[0] if entry is not None else now
                # Once a burst, what got through is the pace. Sent up to a quarter second after
                # the refused one, another may have come first; our own pause is no part of
                # the span (fewer were sent then, not fewer allowed).
                end = min(now, sent_at + limits.PACE_PERIOD / 4)
                start = max(end - limits.PACE_PERIOD, last_pause_end)
                if self.window.epoch != before and end - start >= limits.PACE_PERIOD / 4:
                    self._learning = (start, end)
                    self.last_limited = now
            elif status < 400:
                self.streak = 0
                self.window = limits.after_success(self.window)
            self._cond.notify_all()

    def settle(self, ticket: Ticket, total_tokens: int | None) -> None:
        """Replaces the request's token estimate with its usage, remembered for the run."""
        if total_tokens is None:
            return
        with self._cond:
            for entry in ticket.entries:
                if self.tokens is not None:
                    self.tokens.amend(entry, total_tokens)
            ticket.entries = []
            if ticket.key:
                self._last[ticket.key] = total_tokens
                self._last.move_to_end(ticket.key)
                while len(self._last) > _REMEMBERED:
                    self._last.popitem(last=False)

    def send(self, attempt: Callable[[], Any], body_bytes: int,
             is_rate_limit: Callable[[Any], bool], free_retries: int, patience: float) -> Any:
        """Sends one request, again after every rate-limit 429, and returns the answer.

        A 429 is sent again ``free_retries`` times whatever the wait, and after that while the
        waits for this request stay within ``patience`` seconds; past both, the 429 is
        returned for the SDK to raise (the run fails resumably, as any provider error).
        """
        ticket = current()
        retries, waited = 0, 0.0
        while True:
            sent = self.admit(ticket, body_bytes)
            epoch = ticket.epoch if ticket else self.window.epoch
            response = attempt()
            limited = response.status_code == 429 and is_rate_limit(response)
            self.observe(response.status_code, response.headers, epoch, limited, sent)
            if not limited:
                return response
            if ticket is not None:  # a refused request spent no tokens
                with self._cond:
                    for entry in ticket.entries:
                        if self.tokens is not None:
                            self.tokens.amend(entry, 0)
            if retries >= free_retries and waited >= patience:
                return response
            response.close()
            retries += 1
            points.retried(429)
            started = self.clock()
            self._again(ticket)
            waited += self.clock() - started

    def _again(self, ticket: Ticket | None) -> None:
        """Gives the slot back and waits for a place again (the window was just lowered)."""
        if ticket is None:
            with self._cond:
                while self.clock() < self.paused_until:
                    self._wait(None, self.paused_until - self.clock())
            return
        self._release(ticket)
        self._acquire(ticket)

    def stats(self) -> dict[str, float]:
        """For a progress line: in flight, allowed, 429s met, seconds of pause left."""
        with self._cond:
            return {"in_flight": self.in_flight, "allowed": self.window.allowed,
                    "limited": self.limited, "sent": self.sent,
                    "pace": float(self.pace_base or 0),
                    "paused": max(0.0, self.paused_until - self.clock())}


_limiters: dict[tuple[str, int, int], Limiter] = {}
_registry_lock = threading.Lock()


def limiter_for(base_url: str, rpm: int = 0, tpm: int = 0) -> Limiter:
    """The process's limiter for one provider endpoint and budget: every client opened on it
    shares it, so every run of the process is slowed by any one's 429."""
    key = (base_url, rpm, tpm)
    with _registry_lock:
        limiter = _limiters.get(key)
        if limiter is None:
            limiter = _limiters[key] = Limiter(rpm, tpm)
        return limiter
