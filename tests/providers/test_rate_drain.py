"""A drain under a rate limit, simulated: the real ``Limiter`` and the stand-in's real ``Pace``
driven by one virtual clock, no threads and no sleeps, so any sequence of 429s replays exactly.

Clients at concurrency 64 each take a ticket, wait for a place and for the limiter's
admission, send (it reaches the provider after a generated network delay), and hear back after
1 s (a 429 at once). The provider allows the budget in any 60 s, as the stand-in does, and
refuses besides the first request arriving after each generated time (what a request
overtaken on the network, or a provider counting its minute differently, does at a minute's
edge).

Properties: our own sends never exceed the budget in any minute nor its sixtieth in any
second; at least 90 % of the requests the provider allows over the drain are used, however
the 429s fall (one 429 costs its Retry-After and a little pace, not a tenth of the drain).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_model.pacing import Pace, Rate, Verdict, headers
from refund_agent.providers.limiter import Limiter, Ticket

RPM, REQUESTS, CONCURRENCY, LATENCY = 120, 300, 64, 1.0


class _Blocked(Exception):
    """The limiter would wait: ``seconds`` (None: until a place is given back)."""

    def __init__(self, seconds: float | None) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def drain(refuse_at: list[float], seed: int, most_delay: float = 0.05, rpm: int = RPM,
          requests: int = REQUESTS) -> tuple[list[float], list[float], float]:
    """Runs the drain; returns our sends' times, the accepted arrivals' times and the drain's
    seconds (the last answer). Network delays are uniform in [0, most_delay], from ``seed``."""
    now = [0.0]
    limiter = Limiter(rpm, clock=lambda: now[0], wall=lambda: 0.0, rand=lambda: 0.5)

    def blocked(stop, seconds):  # what Limiter._wait would wait for, handed to the scheduler
        raise _Blocked(seconds)

    limiter._wait = blocked
    pace = Pace(Rate(rpm, 60.0), clock=lambda: now[0])
    delays = random.Random(seed)
    refusals = sorted(refuse_at)
    events: list[tuple[float, int, str, object]] = []
    seq = [0]

    def at(when: float, what: str, data: object = None) -> None:
        seq[0] += 1
        heapq.heappush(events, (when, seq[0], what, data))

    # Threads waiting on the limiter's condition all wake and one gets through: here they wait
    # in line and the first one asks again when the limiter said, or when a place comes back.
    want_slot: deque[Ticket] = deque()
    want_send: deque[Ticket] = deque()
    next_pump = [math.inf]  # one pending wake-up, the earliest asked for

    def wake(when: float) -> None:
        if when < next_pump[0]:
            next_pump[0] = when
            at(when, "pump")

    def pump() -> None:
        moved = True
        while moved:
            moved = False
            while want_slot:
                try:
                    limiter._acquire(want_slot[0])
                except _Blocked as wait:
                    if wait.seconds:
                        wake(now[0] + wait.seconds)
                    break
                want_send.append(want_slot.popleft())
                moved = True
            while want_send:
                ticket = want_send[0]
                try:
                    entry = limiter.admit(ticket, 100)
                except _Blocked as wait:
                    wake(now[0] + (wait.seconds or 0.01))
                    break
                want_send.popleft()
                sends.append(now[0])
                at(now[0] + delays.uniform(0.0, most_delay), "arrive",
                   (ticket, entry, ticket.epoch))
                moved = True

    sends: list[float] = []
    last = 0.0
    for _ in range(min(CONCURRENCY, requests)):
        want_slot.append(Ticket(None, None))
    started = CONCURRENCY
    pump()
    while events:
        now[0], _, what, data = heapq.heappop(events)
        if what == "pump":
            if now[0] != next_pump[0]:
                continue  # an earlier wake-up came first and asked for its own
            next_pump[0] = math.inf
        elif what == "arrive":
            ticket, entry, epoch = data
            if refusals and now[0] >= refusals[0]:
                refusals.pop(0)
                verdict = Verdict(False, rpm, 0, 0.0, 0.0)
            else:
                verdict = pace.take()
            at(now[0] + (LATENCY if verdict.accepted else 0.01), "answer",
               (ticket, entry, epoch, verdict))
        elif what == "answer":
            ticket, entry, epoch, verdict = data
            limiter.observe(200 if verdict.accepted else 429, headers(verdict, "xai"), epoch,
                            not verdict.accepted, entry)
            last = now[0]
            limiter._release(ticket)
            if not verdict.accepted:  # sent again as it was, once a place comes back (_again)
                want_slot.append(ticket)
            elif started < requests:  # the client's next ticket
                started += 1
                want_slot.append(Ticket(None, None))
        pump()
    return sends, pace.accepted, last


def most_in_any(times: list[float], period: float) -> int:
    times, most, first = sorted(times), 0, 0
    for i, when in enumerate(times):
        while when - times[first] >= period:
            first += 1
        most = max(most, i - first + 1)
    return most


def share_used(accepted: list[float], virtual_end: float, rpm: int = RPM) -> float:
    """Requests the provider accepted, over the requests it allowed until the drain's end on
    the simulation's virtual clock (a count against a count: no real time is read)."""
    allowed = rpm * virtual_end / 60.0
    return len(accepted) / allowed


def test_without_a_429_the_drain_uses_the_whole_budget():
    sends, accepted, virtual_end = drain([], 1, most_delay=0.0)
    assert len(accepted) == REQUESTS
    assert share_used(accepted, virtual_end) >= 0.97


@pytest.mark.parametrize("edge", [60.0, 120.0])
def test_one_429_at_a_minute_edge_costs_little(edge):
    sends, accepted, virtual_end = drain([edge], 2)
    assert len(accepted) == REQUESTS
    assert share_used(accepted, virtual_end) >= 0.95


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 140.0), max_size=3), st.integers(0, 2**32),
       st.floats(0.0, 0.2))
def test_429s_never_break_the_budget_nor_waste_a_tenth_of_it(refuse_at, seed, most_delay):
    sends, accepted, virtual_end = drain(refuse_at, seed, most_delay)
    assert len(accepted) == REQUESTS
    assert most_in_any(sends, 60.0) <= RPM
    assert most_in_any(sends, 1.0) <= RPM // 60
    assert share_used(accepted, virtual_end) >= 0.90
