"""How an advance that raised leaves its run, the loop's decision: stopped (Ctrl+C, the Stop
button), or failed with a message a person can act on (stored.py's words for a provider's
refusal; a hand-over to a person when money already moved and no retry can cure it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import openai

from .. import turns
from ..errors import EndRun, Stopped
from ..models import RunStatus, StepKind
from ..store import Lease
from ..streaming import Cancel
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
