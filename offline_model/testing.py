"""A model that says exactly what the test tells it to (the ``scripted`` fixture uses it)."""

from __future__ import annotations

from offline_model.brain import Reply


class ScriptedBrain:
    """A model that says exactly what the test tells it to, then finishes.

    ``seen`` keeps every conversation it was shown, so a test can check what went back to it.
    """

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict]] = []

    def __call__(self, conversation, tools):
        self.seen.append(conversation)
        return self.replies.pop(0) if self.replies else Reply("done", "Finished.")
