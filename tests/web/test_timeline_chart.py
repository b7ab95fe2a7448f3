"""A run's timeline on one axis (issue 47): the marks read from hand-made steps and approvals,
the axis that draws long waits as fixed-width breaks (with a Hypothesis property), and the
chart's spec and its words. No Streamlit, no store: the browser test draws it for real."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_agent.models import Approval, Step, StepKind
from refund_agent.web.views import timeline_chart as chart
from refund_agent.web.views import timeline_marks as marks
from refund_agent.web.views.timeline_marks import Event, axis_for, compress, events

T0 = 1_800_000_000.0
WAIT = 3 * 86400 + 4 * 3600          # three days and four hours
A, B = 4242, 5151                    # the proposing process, the approving one
APPROVAL_ID = "run_1-call_refund"


def step(i: int, at: float, kind: StepKind, process: int = A, **data) -> Step:
    """Step ``i``, committed ``at`` seconds after T0 by ``process``."""
    return Step(id=i, run_id="run_1", at=T0 + at, pid=process, kind=kind, data=data)


def approval(decided: bool = True) -> Approval:
    return Approval(id=APPROVAL_ID, run_id="run_1", response_id="resp_3", call_id="call_refund",
                    order_id="A1043", amount_cents=4800, proposed_cents=4800, summary="s",
                    customer="maya@example.com", status="approved" if decided else "pending",
                    requested_at=T0 + 3.01, requested_pid=A,
                    decided_by="Dana Kim" if decided else None,
                    decided_at=T0 + 3.02 + WAIT if decided else None,
                    decided_pid=B if decided else None, note=None, lines=[])


def history(decided: bool = True) -> list[Step]:
    """Maya's ticket: proposed in process A, approved days later in process B, which then
    takes the run over, refunds and emails."""
    steps = [
        step(1, 0.0, StepKind.EMAIL, **{"from": "maya@example.com", "body": "cracked"}),
        step(2, 1.2, StepKind.REASONING, text="look it up"),
        step(3, 1.2, StepKind.CALL, call_id="call_lookup", name="lookup_order", arguments="{}"),
        step(4, 1.2, StepKind.RESPONSE, response_id="r1", seconds=1.2),
        step(5, 1.25, StepKind.RESULT, call_id="call_lookup", name="lookup_order", output={}),
        step(6, 3.0, StepKind.CALL, call_id="call_refund", name="issue_refund", arguments="{}"),
        step(7, 3.0, StepKind.RESPONSE, response_id="r2", seconds=1.7),
        step(8, 3.01, StepKind.APPROVAL, approval_id=APPROVAL_ID, amount=48.0),
    ]
    if decided:
        later = 3.02 + WAIT
        steps += [
            step(9, later, StepKind.DECISION, B, approval_id=APPROVAL_ID, decision="approved",
                 by="Dana Kim", amount=48.0),
            step(10, later + 0.01, StepKind.RESTART, B, pid=B, previous_pid=A, front="page",
                 previous_front="terminal"),
            step(11, later + 0.02, StepKind.RESULT, B, call_id="call_refund",
                 name="issue_refund", output={"status": "refunded"}),
            step(12, later + 0.02, StepKind.REFUND, B, refund_id="re_1", amount=48.0,
                 reused=False),
            step(13, later + 1.0, StepKind.CALL, B, call_id="call_mail",
                 name="send_customer_message", arguments="{}"),
            step(14, later + 1.0, StepKind.RESPONSE, B, response_id="r3", seconds=0.9),
            step(15, later + 1.1, StepKind.RESULT, B, call_id="call_mail",
                 name="send_customer_message", output={}),
            step(16, later + 1.1, StepKind.MESSAGE, B, to="maya@example.com", body="done"),
        ]
    return steps


# -- the marks ----------------------------------------------------------------------------


def test_the_marks_of_a_run_approved_days_later_in_another_process():
    got = events(history(), [approval()])
    assert [(e.kind, e.pid) for e in got] == [
        ("email", A), ("request", A), ("tool", A), ("request", A), ("tool", A), ("wait", None),
        ("decision", B), ("resume", B), ("refund", B), ("request", B), ("tool", B),
        ("email_out", B)]
    request = got[1]
    # A response step is committed when the request ends; it began ``seconds`` before.
    assert (request.start, request.end) == (T0 + 0.0, T0 + 1.2)
    lookup, refund_call = got[2], got[4]
    assert (lookup.label, lookup.start, lookup.end) == ("lookup_order", T0 + 1.2, T0 + 1.25)
    # The gated call ends where its proposal was queued, not at its result days later.
    assert refund_call.label == "issue_refund: proposed $48.00"
    assert refund_call.end == T0 + 3.01
    wait = got[5]
    assert (wait.start, wait.end, wait.open) == (T0 + 3.01, T0 + 3.02 + WAIT, False)
    assert got[6].label == f"approved by Dana Kim (in process {B})"
    assert got[7].label == f"process {B} took the run over from process {A}"
    assert got[8].label == "refund re_1 $48.00"


def test_a_wait_nobody_ended_runs_to_now_and_says_so():
    now = T0 + 3.01 + 7200
    wait = next(e for e in events(history(decided=False), [approval(False)], now=now)
                if e.kind == "wait")
    assert (wait.start, wait.end, wait.open) == (T0 + 3.01, now, True)
    rows = chart.rows_text(events(history(False), [approval(False)], now=now), {})
    assert any(row.endswith("waited for a person on $48.00 · 2 h 0 min so far") for row in rows)


def test_without_the_approval_records_the_steps_alone_draw_the_wait():
    wait = next(e for e in events(history()) if e.kind == "wait")
    assert (wait.start, wait.end, wait.open) == (T0 + 3.01, T0 + 3.02 + WAIT, False)


def test_lanes_are_named_by_process_and_its_kind_from_the_restart_step():
    assert marks.lane_names(history()) == {A: f"process {A} (terminal)",
                                           B: f"process {B} (page)"}
    # Before schema 15 a restart named no kinds: the pid alone.
    old = [step(1, 0, StepKind.EMAIL), step(2, 5, StepKind.RESTART, B, pid=B, previous_pid=A)]
    assert marks.lane_names(old) == {A: f"process {A}", B: f"process {B}"}


@pytest.mark.parametrize("seconds, text", [(0.64, "0.6 s"), (42, "42 s"), (200, "3 min 20 s"),
                                           (5 * 3600 + 720, "5 h 12 min"), (WAIT, "3 d 4 h")])
def test_durations_read_in_their_two_largest_units(seconds, text):
    assert marks.duration_text(seconds) == text


# -- the axis -------------------------------------------------------------------------------


def test_a_wait_of_days_is_one_break_and_the_work_keeps_its_proportions():
    got = events(history(), [approval()])
    axis = axis_for(got)
    (gap,) = axis.breaks
    assert math.isclose(gap.seconds, WAIT + 0.01, abs_tol=1e-6)
    # The work takes 3.01 s before the wait and 1.1 s after it: a break is drawn a quarter as
    # wide as that, so the chart is about 5.1 units wide, not three days.
    assert math.isclose(gap.x2 - gap.x, 0.25 * 4.11, rel_tol=1e-6)
    assert math.isclose(axis.width, 4.11 + 0.25 * 4.11, rel_tol=1e-6)
    assert math.isclose(axis.x(T0 + 1.2) - axis.x(T0), 1.2, abs_tol=1e-6)


def test_the_axis_refuses_a_width_or_threshold_that_is_not_positive():
    with pytest.raises(ValueError):
        compress([1.0, 2.0], threshold=0, width=1)
    with pytest.raises(ValueError):
        compress([1.0, 2.0], threshold=1, width=-1)


times = st.lists(st.floats(min_value=0, max_value=1e7, allow_nan=False), max_size=40)


@given(times, st.floats(min_value=0.01, max_value=1e5), st.floats(min_value=0.01, max_value=1e5))
def test_the_axis_keeps_order_draws_long_gaps_at_one_width_short_ones_to_scale(
        ts, threshold, width):
    axis = compress(ts, threshold, width)
    assert list(axis.times) == sorted(set(ts))
    assert not axis.times or axis.xs[0] == 0
    long = []
    for (t0, t1), (x0, x1) in zip(pairwise(axis.times), pairwise(axis.xs), strict=True):
        # Floating point: a drawn length is exact to the precision of where it is drawn.
        slack = 1e-9 * max(1.0, abs(x1), abs(t1))
        assert x1 >= x0                                  # order kept
        if t1 - t0 > threshold:
            assert math.isclose(x1 - x0, width, abs_tol=slack)   # every long gap: one width
            long.append((t0, t1))
        else:
            assert math.isclose(x1 - x0, t1 - t0, abs_tol=slack)  # shorter ones to scale
    assert [(b.start, b.end) for b in axis.breaks] == long
    # Breaks overlap neither one another nor any time on the axis.
    for earlier, later in pairwise(axis.breaks):
        assert earlier.x2 <= later.x
    for gap in axis.breaks:
        assert not any(gap.x < x < gap.x2 for x in axis.xs)


@given(times.filter(lambda ts: len(set(ts)) >= 2), st.lists(
    st.floats(min_value=-10, max_value=1e7 + 10, allow_nan=False), min_size=2, max_size=10))
def test_any_two_times_keep_their_order_on_the_axis(ts, probes):
    axis = compress(ts, 60.0, 5.0)
    for a, b in pairwise(sorted(probes)):
        assert axis.x(a) <= axis.x(b) + 1e-9


# -- the chart and its words ------------------------------------------------------------------


def test_the_chart_has_a_lane_per_process_the_wait_and_its_break_label():
    got = events(history(), [approval()])
    axis, lanes = axis_for(got), marks.lane_names(history())
    spec = chart.chart_spec(got, axis, lanes)
    band, label, bars, points = spec["layer"]
    assert [r["text"] for r in label["data"]["values"]] == ["⋯ waited 3 d 4 h ⋯"]
    assert bars["encoding"]["y"]["sort"] == [marks.PERSON_LANE, f"process {A} (terminal)",
                                             f"process {B} (page)"]
    drawn = bars["data"]["values"] + points["data"]["values"]
    assert len(drawn) == len(got)
    assert {r["lane"] for r in drawn} == set(bars["encoding"]["y"]["sort"])
    # Instants are points; so is a span too thin to see as a bar (the proposal's 10 ms).
    assert {r["label"] for r in points["data"]["values"]} == {
        "email from maya@example.com", "issue_refund: proposed $48.00",
        f"approved by Dana Kim (in process {B})",
        f"process {B} took the run over from process {A}", "refund re_1 $48.00",
        "email to maya@example.com"}
    assert {r["kind"] for r in bars["data"]["values"]} == {"model request", "wait for a person",
                                                           "tool call"}
    assert spec["usermeta"]["embedOptions"]["renderer"] == "svg"


def test_a_gap_outside_any_wait_is_labelled_as_time_passing():
    quiet = [Event("request", T0, T0 + 2, A, "model request 1"),
             Event("request", T0 + 7202, T0 + 7203, B, "model request 2")]
    axis = axis_for(quiet)
    assert chart.break_label(axis.breaks[0], quiet) == "⋯ 2 h 0 min later ⋯"


def test_the_summary_names_the_lanes_the_wait_the_decision_and_the_takeover():
    got = events(history(), [approval()])
    said = chart.summary(got, axis_for(got), marks.lane_names(history()))
    assert said == (f"2 processes: process {A} (terminal), process {B} (page); "
                    f"waited 3 d 4 h; approved by Dana Kim (in process {B}); "
                    f"process {B} took the run over from process {A}.")
