"""Work finds someone who can decide it: who may approve a waiting refund, as pure functions.

A refund above an approver's limit is not stuck with them, nor does it wait for a hand-off: it
is offered to every approver whose limit covers it and to the leads. "Covers" counts as the
limit itself does (rules.limit_problem): what that person already approved on the order plus
this refund, against their limit. The one who opened the ticket is left out, as the decision
would refuse them (rules.own_ticket_problem). Each approver's queue then lists first what they
can decide, and for the rest names who can.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .identity import same_person
from .rules import handoff_needed, own_ticket_problem


@dataclass(frozen=True)
class Decider:
    """A person who may approve refunds: their name and limit (None: a lead, no limit)."""

    name: str
    limit_cents: int | None

    @property
    def lead(self) -> bool:
        return self.limit_cents is None


def covers(person: Decider, amount_cents: int, approved_before_cents: int = 0) -> bool:
    """Whether ``person``'s limit covers paying ``amount_cents`` more on the order, with what
    they approved on it before (the per-order sum the decision itself checks)."""
    return not handoff_needed(amount_cents, person.limit_cents, approved_before_cents)


def offered_to(people: Iterable[Decider], amount_cents: int,
               approved_by: Mapping[str, int], raised_by: str | None = None) -> list[Decider]:
    """Who a refund is offered to: every approver whose limit covers it, smallest limit first
    (the nearest fit; a larger limit stays free for larger refunds), then the leads.

    Args:
        people: every account that may approve.
        amount_cents: what the refund pays.
        approved_by: name -> what that person approved on the order before, in cents.
        raised_by: the account that opened the ticket, who may not approve its refund.
    """
    fit = [p for p in people
           if covers(p, amount_cents, _before(approved_by, p.name))
           and own_ticket_problem(p.name, raised_by) is None]
    return sorted(fit, key=lambda p: (p.lead, p.limit_cents or 0, p.name.casefold()))


def _before(approved_by: Mapping[str, int], name: str) -> int:
    # By person, not spelling, as the store counts a limit (identity.same_person).
    return sum(cents for who, cents in approved_by.items() if same_person(who, name))


def decider_label(person: Decider) -> str:
    """``Ana Ruiz (up to $100.00)`` or ``Lee Park (lead)``."""
    if person.lead:
        return f"{person.name} (lead)"
    return f"{person.name} (up to ${(person.limit_cents or 0) / 100:,.2f})"


@dataclass(frozen=True)
class Offer:
    """A waiting refund as one person's queue shows it."""

    approval_id: str
    mine: bool                       # the reader can decide it (always, with no reader)
    deciders: tuple[Decider, ...]    # everyone it is offered to, nearest fit first

    def others_text(self, reader: str | None = None) -> str:
        """``Can decide: Sam Cho (up to $100.00), Lee Park (lead)``, the reader left out."""
        others = [decider_label(d) for d in self.deciders
                  if reader is None or not same_person(d.name, reader)]
        return "Can decide: " + (", ".join(others) if others else "nobody yet (add a lead)")


def offers(reader: Decider | None, waiting: Sequence[tuple[str, str, int, str | None]],
           people: Sequence[Decider],
           approved_by: Callable[[str], Mapping[str, int]]) -> list[Offer]:
    """The reader's queue: each waiting refund with who it is offered to, those the reader can
    decide first, then the rest (each part oldest first, as given).

    Args:
        reader: who reads the queue (None: the demo, or a list for nobody in particular).
        waiting: (approval id, order id, amount in cents, who opened the ticket) per refund.
        people: every account.
        approved_by: order id -> name -> cents that person approved on it before.
    """
    found = []
    for approval_id, order_id, cents, raised_by in waiting:
        deciders = tuple(offered_to(people, cents, approved_by(order_id), raised_by))
        mine = reader is None or any(same_person(d.name, reader.name) for d in deciders)
        found.append(Offer(approval_id, mine, deciders))
    return [o for o in found if o.mine] + [o for o in found if not o.mine]
