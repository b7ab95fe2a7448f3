"""The rate-limit decisions, pure: reading the headers, the window, the budget, the backoff.

Properties (Hypothesis): under any sequence of 429s and successes the window of requests in
flight stays within [1, most]; a budget admitted through ``Rolling.wait`` is never exceeded in
any window of its period, wherever that window starts.
"""

from __future__ import annotations

import email.utils

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refund_agent.providers import limits
from refund_agent.providers.limits import Headroom, Rolling, Window

# -- the headers ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1.0), ("6m0s", 360.0), ("12ms", 0.012), ("1.5s", 1.5), ("1h2m3s", 3723.0),
    ("0.25", 0.25), ("7", 7.0), ("59.99s", 59.99)])
def test_reset_durations_read_as_openai_writes_them(text, seconds):
    assert limits.duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [None, "", "soon", "1x", "-1", "nan", "1s later"])
def test_unreadable_durations_are_none(text):
    assert limits.duration(text) is None


def test_retry_after_prefers_milliseconds_then_seconds_then_a_date():
    now = 1_800_000_000.0
    assert limits.retry_after({"retry-after-ms": "250", "retry-after": "3"}, now) == 0.25
    assert limits.retry_after({"retry-after": "3"}, now) == 3.0
    date = email.utils.formatdate(now + 20, usegmt=True)
    assert limits.retry_after({"retry-after": date}, now) == pytest.approx(20.0)
    # Not positive, or unreadable: nothing said (the SDK ignores retry-after: 0 too).
    assert limits.retry_after({"retry-after": "0"}, now) is None
    assert limits.retry_after({"retry-after": "whenever"}, now) is None
    assert limits.retry_after({}, now) is None


def test_openais_headers_are_read_case_blind():
    headers = httpx2.Headers({
        "X-RateLimit-Limit-Requests": "5000", "x-ratelimit-remaining-requests": "4999",
        "x-ratelimit-reset-requests": "12ms", "x-ratelimit-limit-tokens": "160000",
        "x-ratelimit-remaining-tokens": "159976", "x-ratelimit-reset-tokens": "9ms",
        "retry-after-ms": "1500"})
    said = limits.read_headers(headers, 0.0)
    assert said == limits.RateHeaders(
        retry_after=1.5, limit_requests=5000, limit_tokens=160000, remaining_requests=4999,
        remaining_tokens=159976, reset_requests=0.012, reset_tokens=0.009)
    # Azure's "-1" (unknown) is no count at all.
    assert limits.read_headers({"x-ratelimit-remaining-tokens": "-1"}, 0.0).remaining_tokens \
        is None


# -- what the provider says is left ------------------------------------------------------------


def test_an_exhausted_count_waits_for_its_share_of_the_reset():
    said = limits.RateHeaders(limit_requests=10, remaining_requests=0, reset_requests=1.0)
    room = limits.headroom_from(said, 100.0, Headroom())
    # Ten come back over the second: the next one in a tenth of it, not the whole second.
    assert limits.headroom_wait(room, 100.0, 0) == pytest.approx(0.1)
    assert limits.headroom_wait(room, 100.1, 0) == pytest.approx(0.0, abs=1e-9)
    room = limits.headroom_spent(room, 100.1, 0)
    assert limits.headroom_wait(room, 100.1, 0) == pytest.approx(0.1)
    # Past the reset, the provider's count is whole again: nothing known, nothing to wait.
    assert limits.headroom_spent(room, 101.2, 0).requests is None


def test_without_a_limit_an_exhausted_count_waits_for_the_whole_reset():
    said = limits.RateHeaders(remaining_tokens=100, reset_tokens=6.0)
    room = limits.headroom_from(said, 0.0, Headroom())
    assert limits.headroom_wait(room, 0.0, 50) == 0.0
    assert limits.headroom_wait(room, 1.0, 500) == pytest.approx(5.0)


# -- the window ---------------------------------------------------------------------------------


def test_a_429_halves_what_was_in_flight_once_per_burst():
    window = Window(256.0, 256)
    cut = limits.after_limited(window, 0, in_flight=16)
    assert cut.allowed == 8 and cut.epoch == 1
    # The other requests of the same burst (sent in epoch 0) meet their 429s too: no new cut.
    assert limits.after_limited(cut, 0, in_flight=15) == cut
    again = limits.after_limited(cut, 1, in_flight=8)
    assert again.allowed == 4
    # Additive increase: one more after about a window's worth of answers (1/size each).
    grown = again
    for _ in range(5):
        grown = limits.after_success(grown)
    assert grown.allowed == 5


EVENTS = st.lists(st.one_of(
    st.just(("ok", 0, 0)),
    st.tuples(st.just("429"), st.integers(0, 50), st.integers(0, 300))), max_size=300)


@settings(max_examples=300, deadline=None)
@given(most=st.integers(1, 256), events=EVENTS)
def test_the_window_stays_within_one_and_its_most(most, events):
    window = Window(float(most), most)
    for kind, back, in_flight in events:
        if kind == "ok":
            window = limits.after_success(window)
        else:
            window = limits.after_limited(window, max(0, window.epoch - back % 2), in_flight)
        assert 1.0 <= window.size <= most
        assert 1 <= window.allowed <= most


@settings(max_examples=50, deadline=None)
@given(most=st.integers(2, 256), in_flight=st.integers(1, 256))
def test_after_a_429_the_window_grows_back_to_its_most(most, in_flight):
    window = limits.after_limited(Window(float(most), most), 0, in_flight)
    assert window.allowed <= max(1, min(most, in_flight) // 2 + 1)
    for _ in range(most * most):
        window = limits.after_success(window)
    assert window.allowed == most


# -- the budget ---------------------------------------------------------------------------------


def _admit_all(budget: Rolling, requests: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """Each request (gap after the previous, cost) sent as soon as the budget allows."""
    now, sent = 0.0, []
    for gap, cost in requests:
        now += gap
        while (wait := budget.wait(now, cost)) > 0:
            now += wait
        budget.charge(now, cost)
        sent.append((now, min(cost, budget.limit)))
    return sent


REQUESTS = st.lists(st.tuples(st.floats(0, 30, allow_nan=False), st.integers(1, 5000)),
                    max_size=120)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 20_000), period=st.sampled_from([1.0, 60.0]), requests=REQUESTS)
def test_a_budget_is_never_exceeded_in_any_window_of_its_period(limit, period, requests):
    sent = _admit_all(Rolling(limit, period), requests)
    # The window holding the most starts at a charge: check every such window.
    for start, _ in sent:
        inside = sum(cost for when, cost in sent if start <= when < start + period)
        assert inside <= limit


@settings(max_examples=100, deadline=None)
@given(limit=st.integers(1, 100), count=st.integers(1, 300))
def test_a_budget_lets_its_whole_limit_through(limit, count):
    """Never exceeded, and not wasted either: back to back, a period's limit goes at once."""
    sent = _admit_all(Rolling(limit, 60.0), [(0.0, 1)] * count)
    assert sum(1 for when, _ in sent if when < 60.0) == min(limit, count)


def test_an_estimate_is_replaced_by_the_usage():
    budget = Rolling(1000, 60.0)
    entry = budget.charge(0.0, 900)
    assert budget.wait(1.0, 200) > 0
    budget.amend(entry, 300)
    assert budget.wait(1.0, 200) == 0.0 and budget.used(1.0) == 300


def test_a_tokens_estimate_covers_the_body_the_chain_and_an_answer():
    assert limits.estimate_tokens(4000, None) == 1000 + limits.OUTPUT_ESTIMATE
    assert limits.estimate_tokens(4000, 9000) == 9000 + limits.OUTPUT_ESTIMATE


# -- the backoff and the learned pace --------------------------------------------------------


@given(retry=st.floats(0.001, 120), streak=st.integers(0, 50), rand=st.floats(0, 0.999))
def test_backoff_honours_retry_after_and_jitters(retry, streak, rand):
    delay = limits.backoff(retry, streak, rand)
    assert retry <= delay <= retry + 0.5
    bare = limits.backoff(None, streak, rand)
    base = min(limits.INITIAL_BACKOFF * 2 ** streak, limits.MAX_BACKOFF)
    assert base / 2 <= bare <= base


def test_the_pace_is_what_got_through_and_grows_by_one_when_calm():
    assert limits.learned_limit([0.1, 0.5, 1.05, 1.2, 1.9], now=2.0) == 3
    assert limits.learned_limit([], now=2.0) == 1
    assert limits.relearned(None, 1.03, 10) == (10, 1.03)
    # At the pace, a refusal is jitter: more room, the same pace; fewer through, a lower one.
    assert limits.relearned(10, 1.03, 9) == (10, pytest.approx(1.0506))
    assert limits.relearned(10, 1.14, 10)[1] == limits.MOST_MARGIN
    assert limits.relearned(10, 1.03, 6) == (6, 1.03)
    assert limits.probed_limit(10, calm=0.0) == 10
    assert limits.probed_limit(10, calm=limits.PROBE_EVERY * 2.5) == 12
