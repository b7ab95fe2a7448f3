"""A scripted model for tests: it says exactly what the test tells it to, in order.

A test gives :class:`ScriptedBrain` its steps, one :class:`~offline_model.Reply` per request the
model will be asked, and passes it as the server's ``brain``; once the steps are used up it
finishes ("Finished."). A step the model was never asked for means the test did not go where
its author thought (the run paused, failed or finished early), so a spare step is an error:

- ``brain.assert_all_used()`` raises :class:`UnusedSteps` listing them;
- ``with brain:`` checks on a clean exit;
- inside ``with every_script_used():`` every ScriptedBrain made is checked on a clean exit
  (a test suite can wrap each test in it, as this project's tests/conftest.py does).

Spare steps are reported once, by whichever check finds them first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from .brain import Reply

__all__ = ["ScriptedBrain", "UnusedSteps", "every_script_used"]

# The open every_script_used() blocks, innermost last: each collects the brains made inside it.
_watching: list[list[ScriptedBrain]] = []


class UnusedSteps(AssertionError):
    """A script ended with steps the model was never asked for."""


class ScriptedBrain:
    """A model that says exactly what the test tells it to, then finishes.

    Attributes:
        replies: the steps not yet said, next first.
        seen: every conversation it was shown, so a test can check what went back to it.
    """

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict[str, Any]]] = []
        self._total = len(replies)
        self._reported = False   # a spare step is reported once (a test may expect it)
        # The server answers each request in its own thread: one step per request, in order.
        self._lock = threading.Lock()
        for made in _watching:
            made.append(self)

    def __call__(self, conversation: list[dict[str, Any]], tools: Any) -> Reply:
        with self._lock:
            self.seen.append(conversation)
            return self.replies.pop(0) if self.replies else Reply("done", "Finished.")

    def unused_message(self) -> str | None:
        """What is left of the script, said for a failing test; None when all was said or
        the spare steps were already reported."""
        with self._lock:
            left = list(self.replies)
        if not left or self._reported:
            return None
        first = self._total - len(left) + 1
        steps = "\n".join(f"  step {first + i}: {step!r}" for i, step in enumerate(left))
        return (f"{len(left)} of {self._total} script steps were never asked for (the model "
                f"was asked {len(self.seen)} times); remove them or find why the run stopped:"
                f"\n{steps}")

    def assert_all_used(self) -> None:
        """Raises :class:`UnusedSteps`, listing them, if any step was never asked for."""
        message = self.unused_message()
        if message is not None:
            self._reported = True
            raise UnusedSteps(message)

    def __enter__(self) -> ScriptedBrain:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:  # a failure already under way says more than the spare steps
            self.assert_all_used()


@contextmanager
def every_script_used() -> Iterator[list[ScriptedBrain]]:
    """Collects every ScriptedBrain made inside the block and, on a clean exit, raises
    :class:`UnusedSteps` for those with steps left (all of them, in one message)."""
    made: list[ScriptedBrain] = []
    _watching.append(made)
    try:
        yield made
    finally:
        _watching.remove(made)
    messages = []
    for brain in made:
        message = brain.unused_message()
        if message is not None:
            brain._reported = True
            messages.append(message)
    if messages:
        raise UnusedSteps("\n".join(messages))
