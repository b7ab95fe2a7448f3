"""What happened to a ticket, in the words a support lead uses: a pure function of the run and
its refund approvals.

The run's own status says where the agent is (working, waiting, done); a lead needs to know
what the customer got. A finished run is told apart by its latest proposal: paid in full, paid
in part (lines declined), rejected, expired, or no proposal at all (the policy allowed no
refund). Nothing here reads the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from ..models import Approval, Run, RunStatus


class DeskStatus(StrEnum):
    WORKING = "working"
    WAITING = "waiting"          # a refund waits for a person's decision
    PAID = "paid"
    PARTLY_PAID = "partly_paid"  # approved with some lines declined
    REJECTED = "rejected"
    ASKED = "asked"              # a person asked the customer a question; their reply continues
    EXPIRED = "expired"          # nobody decided in time
    DECLINED = "declined"        # finished without a proposal: the policy allowed no refund
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True)
class ApprovalFacts:
    """The few facts of a run's latest approval the status turns on (a row the store reads)."""

    status: str            # pending, approved, rejected, asked, expired
    amount_cents: int
    proposed_cents: int
    declined_lines: int = 0

    @classmethod
    def of(cls, approval: Approval) -> ApprovalFacts:
        return cls(approval.status, approval.amount_cents, approval.proposed_cents,
                   len(approval.declined))


def desk_status(run_status: RunStatus | str, latest: ApprovalFacts | None) -> DeskStatus:
    """The ticket's status for the desk, from the run's status and its latest approval."""
    status = RunStatus(run_status)
    if status in (RunStatus.WORKING, RunStatus.FAILED, RunStatus.STOPPED, RunStatus.WAITING,
                  RunStatus.ASKED):
        return DeskStatus(status.value)
    if latest is None:
        return DeskStatus.DECLINED
    if latest.status == "approved":
        partial = latest.declined_lines > 0 or latest.amount_cents < latest.proposed_cents
        return DeskStatus.PARTLY_PAID if partial else DeskStatus.PAID
    if latest.status == "rejected":
        return DeskStatus.REJECTED
    if latest.status == "expired":
        return DeskStatus.EXPIRED
    if latest.status == "asked":
        return DeskStatus.ASKED
    # A finished run whose latest approval is still pending: a crash between the decision
    # and the run's status; the recovery at start-up picks it up. It is waiting meanwhile.
    return DeskStatus.WAITING


def run_desk_status(run: Run, approvals: Sequence[Approval]) -> DeskStatus:
    """:func:`desk_status` from a run and all its approvals (any order)."""
    latest = max(approvals, key=lambda a: a.requested_at, default=None)
    return desk_status(run.status, ApprovalFacts.of(latest) if latest else None)


# Audit events whose amount is money a person approved or the payment provider paid out. Every
# other event's amount (requested, asked, rejected, expired, handed_off, taken, ...) is only
# what was proposed: shown plain, it read as if the customer had been paid.
PAYING_EVENTS = frozenset({"approved", "issued", "reused"})
# The tickets whose amount was paid (the others show what the latest proposal asked for).
PAID_STATUSES = frozenset({DeskStatus.PAID, DeskStatus.PARTLY_PAID})
PROPOSED = "proposed"   # how an amount that moved no money is marked, in every front end
PAID = "paid"


def amount_is(*, event: str | None = None, desk: str | None = None) -> str:
    """``paid`` or ``proposed``: whether an audit event's (or a ticket's) amount moved money."""
    if event is not None:
        return PAID if event in PAYING_EVENTS else PROPOSED
    return PAID if desk in PAID_STATUSES else PROPOSED


def amount_label(amount: float | None, is_: str) -> str:
    """``$48.00`` when it was paid, ``$48.00 (proposed)`` when no money moved; empty for None."""
    if amount is None:
        return ""
    return f"${amount:,.2f}" + ("" if is_ == PAID else f" ({PROPOSED})")


# What puts a ticket in front of a person: nobody decided it, the run cannot go on alone, or
# the agent (or an approver over their limit) asked for a lead.
NEEDS_PERSON = frozenset({DeskStatus.EXPIRED, DeskStatus.FAILED, DeskStatus.STOPPED})


def needs_person(status: DeskStatus, open_escalations: int) -> bool:
    """Whether the ticket belongs in the lead's *needs a person* view."""
    return status in NEEDS_PERSON or open_escalations > 0


def customer_name(name: str | None, address: str) -> str:
    """One display form per customer: the name they gave, else the address (a run started
    without a name stores the address as its name)."""
    name = (name or "").strip()
    return name if name and name != address else address
