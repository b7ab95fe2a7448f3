"""Who may own a ticket, and who may change its owner: pure rules, no store.

Every ticket has at most one owner, an account (in the demo, with no accounts, nobody owns
anything: an owner is someone who signed in). Anyone signed in may claim a ticket nobody has,
or assign it to themselves; a lead may assign any ticket to any account, taking it from
whoever had it; the owner may release their ticket, and releasing someone else's is a lead's
act. The store applies these under the ticket's lock (desk/records/owners.py), so the owner a rule
was checked against is the owner it changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Action = Literal["assign", "claim", "release"]
# The audit's event for each action (the past tense the audit log uses).
EVENTS: dict[str, str] = {"assign": "assigned", "claim": "claimed", "release": "released"}
# How far ahead someone may be away: longer is not out of office but gone (remove the account
# or hand the tickets over), and a date typed as 9999-12-31 is a slip, not a plan.
AWAY_DAYS_MAX = 366


@dataclass(frozen=True)
class OwnerChange:
    """One person's attempt to change a ticket's owner.

    Attributes:
        run_id: the ticket.
        action: assign (to ``to``), claim (for ``by``) or release.
        by: the signed-in account acting.
        by_lead: whether ``by`` is a lead (an account without a limit).
        to: the account assigned to (assign only); it must exist (the caller checks).
    """

    run_id: str
    action: Action
    by: str
    by_lead: bool
    to: str | None = None
    instead_of: str | None = None    # assigned to ``to`` for this account, who is away

    @property
    def event(self) -> str:
        return EVENTS[self.action]

    @property
    def new_owner(self) -> str | None:
        """Who owns the ticket once this change is made."""
        if self.action == "release":
            return None
        return self.by if self.action == "claim" else self.to

    def note(self, was: str | None) -> str:
        """The audit line's note: who has it now, and who had it."""
        before = f" (was {was})" if was and was != self.new_owner else ""
        if self.action == "release":
            theirs = f" ({was}'s)" if was and was != self.by else ""
            return f"released the ticket{theirs}; nobody owns it now"
        if self.action == "claim":
            return f"claimed the ticket{before}"
        away = f" for {self.instead_of}, who is away" if self.instead_of else ""
        return f"assigned the ticket to {self.to}{away}{before}"


def owner_problem(change: OwnerChange, current: str | None) -> str | None:
    """Why ``change`` may not be made while ``current`` owns the ticket, or None.

    Doing again what is already so (claiming your own ticket, releasing one nobody has) is
    not a problem: it changes nothing, as a repeated decision does.
    """
    who = change.by
    if change.action == "assign" and not change.to:
        return "Name the account to assign the ticket to."
    target = change.new_owner
    if current == target:
        return None
    if change.by_lead:
        return None        # a lead assigns to anyone, takes over and releases any ticket
    if change.action == "assign" and change.to != who:
        return (f"Only a lead assigns a ticket to someone else; {who} may claim it for "
                "themselves.")
    if current is not None and current != who:
        if change.action == "release":
            return (f"This ticket is {current}'s: releasing someone else's ticket is a "
                    "lead's act.")
        return (f"This ticket is already {current}'s; they (or a lead) can release it or "
                "assign it to you.")
    return None


def owner_text(d: dict) -> str:
    """A ticket's owner change in a few words, as the timeline (page and terminal) says it."""
    if d.get("event") == "released":
        return f"Released by {d.get('by')}" + (f" (was {d['was']}'s)" if d.get("was") and
                                               d.get("was") != d.get("by") else "")
    if d.get("event") == "claimed":
        return f"Claimed by {d.get('by')}" + (f" (was {d['was']}'s)" if d.get("was") else "")
    return f"Assigned to {d.get('owner')} by {d.get('by')}" + (
        f" (was {d['was']}'s)" if d.get("was") else "")


def at_most_one_owner(events: list[tuple[str, str | None]]) -> str | None:
    """The owner a ticket's audited changes leave, replayed in order: (event, new owner) pairs
    as the store's steps record them. Used by the tests to check the store against its log."""
    owner: str | None = None
    for event, new_owner in events:
        owner = None if event == "released" else new_owner
    return owner


# -- out of office ---------------------------------------------------------------------------
#
# An account away until a time names a delegate: while it is away its tickets are the
# delegate's to work (the delegate's "mine" lists them), a ticket assigned to it goes to the
# delegate, a timeout reminder reaches the delegate, and the refunds offered to it are offered
# to the delegate instead (who decides them within their own limit). The audit names both.


def stand_in(account: str | None, away: dict[str, str]) -> str | None:
    """Who acts for ``account`` now: itself, or its delegate (a delegate away too hands on to
    theirs; a circle of people all away ends at the last one before it closes).

    ``away``: account -> delegate, for the accounts away right now."""
    seen: list[str] = []
    current = account
    while current is not None and current in away and current not in seen:
        seen.append(current)
        nxt = away[current]
        if nxt in seen:
            break
        current = nxt
    return current


def away_problem(account: str, delegate: str | None, until: float, now: float) -> str | None:
    """Why ``account`` may not be away until ``until`` with ``delegate``, or None."""
    if not delegate:
        return "Name the account that takes your tickets and approvals (--to NAME)."
    if delegate.casefold() == account.casefold():
        return "Name someone else: your tickets and approvals go to the delegate."
    return until_problem(until, now)


def until_problem(until: float, now: float) -> str | None:
    """Why someone may not be away until ``until`` (seconds since 1970), or None: it has
    passed, or it is more than a year ahead."""
    if not until > now:   # NaN too
        return "The date you are away until has passed; give one in the future."
    if until - now > AWAY_DAYS_MAX * 86400:
        return (f"Out of office is for a date within a year ({AWAY_DAYS_MAX} days); someone "
                "gone for longer hands their tickets over instead.")
    return None


def for_whom(owner: str | None, acting: str | None) -> str:
    """``Kim Vo (for Ana Ruiz, away)`` when someone acts for the owner, else the owner."""
    if owner is None or acting is None or acting == owner:
        return owner or ""
    return f"{acting} (for {owner}, away)"
