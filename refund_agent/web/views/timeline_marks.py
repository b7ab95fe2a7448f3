"""A run's timeline on one time axis: what happened, in which process, and the waits between.

Everything here is read from what the store already keeps, nothing new is recorded:

- each step's ``at`` (its commit time) and ``pid`` (the process that committed it);
- a ``response`` step's ``seconds``: the model request ended at the step, so it began
  ``seconds`` earlier;
- a ``call`` step and its ``result`` step (same ``call_id``): the tool call in between; a gated
  call (``issue_refund``) ends where its proposal was queued, since its result only comes once
  a person has decided;
- the approvals' ``requested_at`` and ``decided_at``: the wait for a person (still open when
  nobody has decided yet);
- ``decision``, ``restart``, ``refund`` and ``message`` steps: the decision, the takeover by
  another process (with what kind of process it was), the refund and the email out.

Two pure functions do the work: :func:`events` turns the records into typed :class:`Event`
values, and :func:`compress` lays their times on an axis where every quiet stretch longer than
a threshold is drawn at one fixed width (a break), so a wait of days does not squeeze a run's
seconds of work into a line. ``timeline_chart.py`` draws the result. (The ticket's list of
steps, one block each, is ``ticket.timeline``: this module is its picture.)
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any, Literal, get_args

from ...models import Approval, ApprovalStatus, Step, StepKind
from .format import money

# The lane of the wait: nobody's process holds a run while it waits for a person.
PERSON_LANE = "a person"

# The kinds of mark, in the legend's order. An ``email`` is the customer's (first email or
# reply); ``email_out`` the agent's to the customer.
MarkKind = Literal["email", "request", "tool", "wait", "decision", "resume", "refund",
                   "email_out", "error"]
KINDS: tuple[MarkKind, ...] = get_args(MarkKind)
KIND_LABELS = {"email": "email in", "request": "model request", "tool": "tool call",
               "wait": "wait for a person", "decision": "decision",
               "resume": "takeover", "refund": "refund",
               "email_out": "email out", "error": "error"}


@dataclass(frozen=True)
class Event:
    """One mark on the timeline.

    Attributes:
        kind: one of :data:`KINDS`.
        start: when it began (Unix seconds).
        end: when it ended; equal to ``start`` for an instant (a decision, a refund).
        pid: the process it happened in; None for the wait, which is no process's.
        label: what it was, in a few words.
        open: a wait nobody has ended yet (``end`` is the time the timeline was read).
    """

    kind: MarkKind
    start: float
    end: float
    pid: int | None
    label: str
    open: bool = False

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class _Reading:
    """What :func:`events` has read so far: the events, and the calls waiting for a result."""

    approvals: Mapping[str, Approval]       # by approval id
    out: list[Event] = field(default_factory=list)
    calls: dict[str, tuple[Step, str]] = field(default_factory=dict)  # call id -> step, name
    requests: int = 0
    # Proposals with no approval record to read (a hand-made history): approval id -> the
    # step that queued it, so the decision step ends their wait.
    asked: dict[str, Step] = field(default_factory=dict)


def _request(r: _Reading, step: Step) -> None:
    r.requests += 1
    seconds = max(0.0, float(step.data.get("seconds") or 0.0))
    r.out.append(Event("request", step.at - seconds, step.at, step.pid,
                       f"model request {r.requests}"))


def _call(r: _Reading, step: Step) -> None:
    r.calls[str(step.data.get("call_id"))] = (step, str(step.data.get("name", "tool")))


def _result(r: _Reading, step: Step) -> None:
    begun = r.calls.pop(str(step.data.get("call_id")), None)
    if begun is not None:
        r.out.append(Event("tool", begun[0].at, step.at, begun[0].pid, begun[1]))


def _approval(r: _Reading, step: Step) -> None:
    """A proposal: the gated call that made it ends here, and the wait for a person starts."""
    approval_id = str(step.data.get("approval_id", ""))
    approval = r.approvals.get(approval_id)
    # An approval's id is its call's key: the run's id, then the call's (models.call_key).
    call_id = approval.call_id if approval else next(
        (c for c in r.calls if approval_id.endswith(c)), None)
    if call_id is not None and call_id in r.calls:
        begun, name = r.calls.pop(call_id)
        r.out.append(Event("tool", begun.at, step.at, begun.pid,
                           f"{name}: proposed {money(step.data.get('amount'))}"))
    what = f"waited for a person on {money(step.data.get('amount'))}"
    if approval is None:
        r.asked[approval_id] = step
        r.out.append(Event("wait", step.at, step.at, None, what, open=True))
        return
    # The records' own times: requested_at and decided_at, as the decision wrote them.
    end = approval.decided_at
    r.out.append(Event("wait", approval.requested_at,
                       end if end is not None else approval.requested_at, None, what,
                       open=end is None))


def _decision(r: _Reading, step: Step) -> None:
    d = step.data
    verb = {ApprovalStatus.APPROVED: "approved", ApprovalStatus.REJECTED: "rejected",
            ApprovalStatus.ASKED: "asked the customer", ApprovalStatus.EXPIRED: "expired"}.get(
        d.get("decision"), str(d.get("decision")))
    by = f" by {d['by']}" if d.get("by") and d.get("decision") != ApprovalStatus.EXPIRED else ""
    asked = r.asked.pop(str(d.get("approval_id", "")), None)
    if asked is not None:   # no record: the wait ends at the decision's step
        r.out = [replace(e, end=step.at, open=False)
                 if e.kind == "wait" and e.open and e.start == asked.at else e for e in r.out]
    r.out.append(Event("decision", step.at, step.at, step.pid,
                       f"{verb}{by} (in process {step.pid})"))


def _restart(r: _Reading, step: Step) -> None:
    r.out.append(Event("resume", step.at, step.at, step.pid,
                       f"process {step.data.get('pid', step.pid)} took the run over from "
                       f"process {step.data.get('previous_pid')}"))


def _refund(r: _Reading, step: Step) -> None:
    d = step.data
    again = " (reused, not repeated)" if d.get("reused") else ""
    r.out.append(Event("refund", step.at, step.at, step.pid,
                       f"refund {d.get('refund_id')} {money(d.get('amount'))}{again}"))


def _instant(kind: MarkKind, label: Callable[[Mapping[str, Any]], str]
             ) -> Callable[[_Reading, Step], None]:
    return lambda r, step: r.out.append(Event(kind, step.at, step.at, step.pid,
                                              label(step.data)))


_Reader = Callable[[_Reading, Step], None]

# How each step kind shows on the timeline; None: not a mark of its own (the model's words,
# the desk's bookkeeping). tests/desk/test_step_tables.py checks every StepKind has a row.
TIMELINE_MARKS: dict[StepKind, _Reader | None] = {
    StepKind.EMAIL: _instant("email", lambda d: f"email from {d.get('from')}"),
    StepKind.REPLY: _instant("email", lambda d: "the customer replied"),
    StepKind.RESPONSE: _request,
    StepKind.CALL: _call,
    StepKind.RESULT: _result,
    StepKind.APPROVAL: _approval,
    StepKind.DECISION: _decision,
    StepKind.RESTART: _restart,
    StepKind.REFUND: _refund,
    StepKind.MESSAGE: _instant("email_out", lambda d: f"email to {d.get('to')}"),
    StepKind.ERROR: _instant("error", lambda d: str(d.get("message", "error"))[:80]),
    StepKind.REASONING: None, StepKind.TEXT: None, StepKind.NOTE: None,
    StepKind.RESENT: None, StepKind.STOPPED: None, StepKind.CUSTOMER_DONE: None,
    StepKind.ESCALATION: None, StepKind.HANDOFF: None, StepKind.SIGNOFF: None,
    StepKind.OWNER: None, StepKind.TIMEOUT: None,
}


def events(steps: Iterable[Step], approvals: Iterable[Approval] = (),
           now: float | None = None) -> list[Event]:
    """A run's marks, ordered by start time, from its steps and its approvals.

    ``now``: when the page read them; an approval nobody has decided is drawn waiting until
    then (without it, as an instant at its request).
    """
    reading = _Reading({a.id: a for a in approvals})
    for step in steps:
        reader = TIMELINE_MARKS.get(step.kind)
        if reader is not None:
            reader(reading, step)
    out = []
    for event in reading.out:
        if event.open and now is not None:
            event = replace(event, end=max(event.start, now))
        out.append(event)
    # Python's sort is stable: marks that start together keep the order of their steps.
    return sorted(out, key=lambda e: e.start)


# -- lanes ------------------------------------------------------------------------------

# What kind of process took a run over, as a restart step names it (Store.front).
FRONTS = {"page": "page", "terminal": "terminal", "worker": "worker"}


def lane_names(steps: Iterable[Step]) -> dict[int, str]:
    """``pid -> "process 8616 (terminal)"`` for every process that wrote a step, first one
    first; the kind of process is known from the restart steps (schema 15 onwards)."""
    fronts: dict[int, str] = {}
    order: list[int] = []
    for step in steps:
        if step.pid not in order:
            order.append(step.pid)
        if step.kind == StepKind.RESTART:
            for pid, front in ((step.data.get("pid"), step.data.get("front")),
                               (step.data.get("previous_pid"), step.data.get("previous_front"))):
                if isinstance(pid, int) and front in FRONTS:
                    fronts.setdefault(pid, FRONTS[front])
    return {pid: f"process {pid}" + (f" ({fronts[pid]})" if pid in fronts else "")
            for pid in order}


# -- the axis: real time, with long quiet stretches drawn as fixed-width breaks -----------


@dataclass(frozen=True)
class Break:
    """A quiet stretch longer than the threshold, drawn at the axis's fixed break width."""

    start: float   # the times it spans
    end: float
    x: float       # where it is drawn
    x2: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Axis:
    """Times and where they are drawn: ``xs[i]`` is the position of ``times[i]``."""

    times: tuple[float, ...]
    xs: tuple[float, ...]
    breaks: tuple[Break, ...]

    def x(self, t: float) -> float:
        """Where time ``t`` is drawn: linear between the two known times around it (inside a
        break, along the break's fixed width), clamped to the ends."""
        if not self.times:
            return 0.0
        if t <= self.times[0]:
            return self.xs[0]
        if t >= self.times[-1]:
            return self.xs[-1]
        i = bisect.bisect_right(self.times, t) - 1
        t0, t1, x0, x1 = self.times[i], self.times[i + 1], self.xs[i], self.xs[i + 1]
        return x0 + (x1 - x0) * (t - t0) / (t1 - t0)

    @property
    def width(self) -> float:
        return self.xs[-1] if self.xs else 0.0


def compress(times: Iterable[float], threshold: float, width: float) -> Axis:
    """Lay ``times`` on an axis: each gap between two consecutive distinct times is drawn as
    long as it lasted, unless it is longer than ``threshold`` seconds; then it is drawn
    ``width`` long and recorded as a :class:`Break`. The first time is drawn at 0.

    Order is kept (a later time is never drawn before an earlier one) and breaks never overlap
    one another or any time: each lies strictly between two consecutive ones.
    """
    if threshold <= 0 or width <= 0:
        raise ValueError("threshold and width must be positive")
    ordered = sorted(set(times))
    xs: list[float] = []
    breaks: list[Break] = []
    for i, t in enumerate(ordered):
        if i == 0:
            xs.append(0.0)
            continue
        gap = t - ordered[i - 1]
        if gap > threshold:
            xs.append(xs[-1] + width)
            breaks.append(Break(ordered[i - 1], t, xs[-2], xs[-1]))
        else:
            xs.append(xs[-1] + gap)
    return Axis(tuple(ordered), tuple(xs), tuple(breaks))


# A quiet stretch longer than this is drawn as a break: a person's decision, a customer's
# reply, a server that was down. The model requests and tool calls in between take seconds.
BREAK_AFTER = 60.0
# A break is drawn a quarter as wide as the run's working time (at least a second), so it
# reads as a pause beside the work whatever the run's length.
BREAK_SHARE = 0.25


def break_width(times: Sequence[float], threshold: float = BREAK_AFTER) -> float:
    """The one width every break of a chart is drawn at (see BREAK_SHARE)."""
    ordered = sorted(set(times))
    worked = sum(b - a for a, b in pairwise(ordered) if b - a <= threshold)
    return max(1.0, BREAK_SHARE * worked)


def axis_for(marks: Sequence[Event], threshold: float = BREAK_AFTER) -> Axis:
    """The axis for a run's marks: every start and end is a time on it."""
    times = [t for e in marks for t in (e.start, e.end)]
    return compress(times, threshold, break_width(times, threshold))


def duration_text(seconds: float) -> str:
    """``3 d 4 h``, ``5 h 12 min``, ``3 min 20 s``, ``42 s``, ``0.6 s``: the two largest
    units (tenths under ten seconds, where model requests and tool calls fall)."""
    if seconds < 9.95:
        return f"{max(0.0, seconds):.1f} s"
    s = int(round(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {s} s"
    return f"{s} s"
