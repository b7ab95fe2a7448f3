"""How an advance leaves its run, the loop's decision: paused, finished, or, when it raised,
stopped (Ctrl+C, the Stop button) or failed with a message a person can act on (stored.py's
words for a provider's refusal; a hand-over to a person when the run's effects already did
what no retry should repeat unannounced, Loop.money_moved)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import openai

from .. import turns
from ..errors import EndRun, Stopped
from ..models import Run, RunStatus, StepKind
from ..store import Lease, Store
from ..streaming import Cancel
from ..telemetry import points
from .client import provider_error
from .stored import refused_after_payment, refused_transcript, still_gone

if TYPE_CHECKING:
    from ..loop import Loop


@dataclass(frozen=True)
class Ending:
    """How an advance that did not finish or pause leaves the run (stopped, failed)."""

    status: RunStatus
    error: str | None
    step: turns.StepData | None = None


def ending_for(loop: Loop, exc: BaseException, run_id: str, lease: Lease,
               cancel: Cancel | None) -> Ending:
    """How an advance of ``loop`` that raised ``exc`` leaves the run."""
    if isinstance(exc, EndRun):
        return Ending(RunStatus(exc.status), exc.error)
    stopped = Ending(RunStatus.STOPPED, None, (StepKind.STOPPED, {}))
    if isinstance(exc, Stopped | KeyboardInterrupt):
        return stopped
    if isinstance(exc, turns.NoTranscript):
        return Ending(RunStatus.FAILED, loop.hand_over(run_id, lease, str(exc)))
    if not isinstance(exc, openai.APIError):
        return Ending(RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
    if cancel and cancel.is_set():
        return stopped
    previous = loop.store.run(run_id).last_response_id
    error = provider_error(exc, loop.settings.provider, previous)
    if error.kind == "bad_reasoning":
        return Ending(RunStatus.FAILED, loop.hand_over(run_id, lease, refused_transcript(error)))
    if error.permanent and loop.money_moved(run_id):
        # Resume would send the same request and meet the same refusal: the customer, whose
        # money moved, would never be told. A person takes the ticket instead.
        return Ending(RunStatus.FAILED,
                      loop.hand_over(run_id, lease, refused_after_payment(error)))
    if error.kind == "response_gone":
        return Ending(RunStatus.FAILED, still_gone(previous, error))
    return Ending(RunStatus.FAILED, error.plain())


def end_run(store: Store, lease: Lease,
            end: turns.Released | turns.Waiting | turns.Finished | Ending) -> Run:
    """Leave the run as ``end`` says (giving up its lease, unless a commit already did), and
    return it as that left it (on the advance's span too, when telemetry is on)."""
    run = _end_run(store, lease, end)
    points.run_left(run)
    return run


def _end_run(store: Store, lease: Lease,
             end: turns.Released | turns.Waiting | turns.Finished | Ending) -> Run:
    match end:
        case turns.Released(run=run):
            return run
        case turns.Waiting(released=True):   # the proposal's commit paused it and let it go
            return store.run(lease.run_id)
        case turns.Waiting():
            return store.release(lease, RunStatus.WAITING)
        case turns.Finished(status=status):
            return store.release(lease, status)
        case Ending(status=status, error=error, step=step):
            if error and step is None:
                step = (StepKind.ERROR, {"message": error})
            return store.release(lease, status, error, step)
    raise TypeError(f"not an end: {end!r}")
