"""The shop's timeout policy (shop.json "timeouts"): what happens to a refund nobody decides.

After ``remind_owner_after_hours`` the ticket's owner is reminded (nobody owns it: the desk is);
after ``escalate_after_hours`` a lead is brought in (an escalation); after the approval window
(REFUND_AGENT_APPROVAL_DAYS) the refund expires and the customer is told, as before. Each step
happens once per refund: the store records it under a key (approval, step), so two workers, a
restarted one and a cron job can all apply the policy and each step is written once. Times are
measured by the database's clock, which wrote the request time.

Pure functions here; the desk's store applies them (records/timeouts.py) and the worker,
``refund-agent work`` and ``refund-agent expire`` call it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

REMIND, ESCALATE = "remind", "escalate"
STEPS = (REMIND, ESCALATE)
# The escalation a timeout raises (models.KIND_LABELS names it).
TIMEOUT = "timeout"


@dataclass(frozen=True)
class TimeoutPolicy:
    """Seconds after the request at which each step is due (None: the step is off)."""

    remind_after: float | None
    escalate_after: float | None

    def due(self, waited: float, done: Collection[str]) -> list[str]:
        """The steps due after ``waited`` seconds and not done yet, in order."""
        after = {REMIND: self.remind_after, ESCALATE: self.escalate_after}
        return [step for step in STEPS
                if after[step] is not None and waited >= after[step] and step not in done]


def human_duration(seconds: float) -> str:
    """``40 min``, ``3 h``, ``2 days``: a wait as people say it (never "0 h")."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return "under a minute"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"


def step_note(step: str, waited: float, owner: str | None) -> str:
    """What the audit and the ticket say when a step is taken."""
    wait = human_duration(waited)
    if step == REMIND:
        return (f"waiting {wait} for a decision: reminded {owner}, who owns the ticket" if owner
                else f"waiting {wait} for a decision and nobody owns the ticket: reminded "
                     "the desk")
    return f"waiting {wait} for a decision: escalated to a lead"
