"""bench/burst.py: its pure arithmetic, and a tiny burst end to end (SMTP in, `work` drains).

The figures themselves are the benchmark's (docs/PERFORMANCE.md); these check that what it
computes is what it says, and that a burst received over SMTP drains every ticket to its pause.
"""

from __future__ import annotations

import json
import math

import pytest
from burst import (
    ideal_seconds,
    main,
    memory_per_run,
    merged,
    message,
    per_bucket,
    rate_bound_seconds,
    table,
    window_use,
)
from hypothesis import given
from hypothesis import strategies as st


@given(st.integers(1, 10_000), st.floats(0.01, 20), st.integers(1, 256))
def test_the_ideal_is_every_request_waited_for_once_spread_over_the_slots(requests, latency, c):
    ideal = ideal_seconds(requests, latency, c)
    assert math.isclose(ideal * c, requests * latency)
    # one more slot never makes the ideal slower: in the ideal of c slots, c + 1 slots wait out
    # at least every request's latency (pure arithmetic on the given numbers; no clock is read)
    more = ideal_seconds(requests, latency, c + 1)
    assert math.isclose(more * (c + 1), requests * latency) and ideal * (c + 1) >= more * (c + 1)


def test_the_rate_bound_is_the_requests_over_the_limit():
    # 300 requests at 120 in each 60: the bound, at that rate, sends exactly the 300
    bound = rate_bound_seconds(300, 120, 60.0)
    assert bound / 60.0 * 120 == 300 and rate_bound_seconds(600, 120, 60.0) == 2 * bound


def test_memory_per_run_is_the_extra_peak_over_the_extra_runs():
    assert memory_per_run(200.0, 170.0, 31) == 1.0
    with pytest.raises(ValueError):
        memory_per_run(200.0, 170.0, 1)


@given(st.lists(st.floats(0, 600, allow_nan=False), min_size=1, max_size=400),
       st.integers(1, 200), st.floats(1, 120))
def test_window_use_counts_each_whole_window_and_never_the_partial_last(times, limit, period):
    use = window_use(times, limit, period)
    start, end = min(times), max(times)
    assert len(use) == int((end - start) // period)
    # every accepted request of a whole window is counted in exactly one
    counted = sum(round(u * limit) for u in use)
    assert counted == sum(1 for t in times if t - start < len(use) * period)


def test_a_full_window_reads_as_all_of_the_limit():
    times = [i * 0.5 for i in range(120)] + [60.0 + i * 0.5 for i in range(60)] + [130.0]
    assert window_use(times, 120, 60.0) == [1.0, 0.5]
    assert window_use([], 10, 60.0) == []


def test_per_bucket_counts_every_time_once_from_the_first():
    assert per_bucket([5.0, 5.5, 14.9, 15.0, 40.0], 10.0) == [3, 1, 0, 1]
    assert per_bucket([], 10.0) == []


def test_merge_replaces_only_the_rows_measured_again():
    old = [{"concurrency": 1, "v": "old"}, {"concurrency": 64, "v": "old"}]
    new = [{"concurrency": 64, "v": "new"}]
    assert merged(old, new, ("concurrency",)) == [{"concurrency": 1, "v": "old"},
                                                   {"concurrency": 64, "v": "new"}]


def test_each_email_is_a_new_ticket_on_an_order_of_its_own():
    one, two = message(0), message(1)
    assert one["Message-ID"] != two["Message-ID"]
    assert "B00001" in one.get_content() and "B00002" in two.get_content()
    assert "In-Reply-To" not in one


@pytest.mark.slow   # three processes start and a stand-in answers: about 15-40 s on 2 cores
@pytest.mark.timeout(180)
def test_a_tiny_burst_received_over_smtp_drains_every_ticket_to_its_pause(tmp_path, capsys):
    out = tmp_path / "burst.json"
    assert main(["--emails", "6", "--emails-at-1", "2", "--concurrency", "1,3", "--latency",
                 "0.05", "--idle-runs", "1", "--parts", "project", "--json", str(out),
                 "--markdown", "-"]) == 0
    results = json.loads(out.read_text())
    rows = {r["concurrency"]: r for r in results["project"]}
    assert rows[1]["tickets"] == 2 and rows[3]["tickets"] == 6
    for r in rows.values():
        # every ticket reached the proposal and waits for a person; three requests each
        assert r["statuses"] == {"waiting": r["tickets"]}
        assert r["store_statuses"] == {"waiting": r["tickets"]}
        assert r["requests"] == 3 * r["tickets"]
    assert "| 3 | 6 |" in table(results)
    assert set(results["memory_per_run_kb"]) == {"3"}
    assert "| concurrency |" in capsys.readouterr().out


def test_a_latency_of_zero_is_a_usage_error_not_a_division_by_zero(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--latency", "0", "--parts", "project"])
    assert exit_.value.code == 2
    assert "--latency is above 0" in capsys.readouterr().err
