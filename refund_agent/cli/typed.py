"""Durations a person types on the command line, as argparse types: bounded, so a wrong one
is a usage mistake said in one line (exit 2), never a worker that waits for ever (``nan``
compares false with everything), a busy loop (``0``) or a wait too long for the clock."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from ..config import CONCURRENCY_MOST

DAY = 86400.0


def span_problem(seconds: float, low: float, high: float, low_included: bool) -> str | None:
    """Why ``seconds`` is not a duration from ``low`` to ``high``, or None."""
    above = seconds >= low if low_included else seconds > low
    if math.isfinite(seconds) and above and seconds <= high:
        return None
    days = high / DAY
    top = f"{high:.0f} ({days:g} day{'' if days == 1 else 's'})"
    if low_included:
        return f"must be a number of seconds from {low:g} to {top}"
    return f"must be a number of seconds above {low:g}, at most {top}"


def seconds(low: float, high: float, low_included: bool = True) -> Callable[[str], float]:
    """An argparse type: a number of seconds from ``low`` (or above it) to ``high``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if problem := span_problem(value, low, high, low_included):
            raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
        return value
    parse.__name__ = "seconds"   # argparse names the type in its messages
    return parse


# ``--idle-exit``: 0 exits as soon as there is nothing to do; a month at most.
IDLE_EXIT = seconds(0, 30 * DAY)
# ``--every``: how often to poll a mailbox; never a busy loop, at most once a day.
POLL_EVERY = seconds(0, DAY, low_included=False)
# ``work --grace``: how long runs in flight get to finish once asked to stop; an hour at most.
GRACE = seconds(0, 3600)


def CONCURRENCY(text: str) -> int:  # noqa: N802 - an argparse type, named like the others
    """``work --concurrency``: a whole number of runs from 1 to CONCURRENCY_MOST."""
    if not text.strip().isdigit() or not 1 <= int(text) <= CONCURRENCY_MOST:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of runs from 1 to {CONCURRENCY_MOST}, got {text!r}")
    return int(text)


CONCURRENCY.__name__ = "runs"
