"""How statuses look: a run's, a ticket's (what happened to it) and a decision's.

The page's tables of statuses; tests/desk/test_step_tables.py checks they are complete.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...desk.status import DeskStatus
from ...models import ApprovalStatus, RunStatus


@dataclass(frozen=True)
class StatusView:
    """How a run status is named and coloured."""

    label: str
    color: str   # a Streamlit Markdown colour: blue, orange, gray, green, red
    icon: str    # a Material icon name

    @property
    def badge(self) -> str:
        """Markdown for a coloured badge, e.g. ``:orange-badge[:material/pan_tool: Waiting]``."""
        return f":{self.color}-badge[:material/{self.icon}: {self.label}]"


STATUS: dict[RunStatus, StatusView] = {
    RunStatus.WORKING: StatusView("Working", "blue", "autorenew"),
    RunStatus.WAITING: StatusView("Waiting for approval", "orange", "pan_tool"),
    RunStatus.STOPPED: StatusView("Stopped", "gray", "pause_circle"),
    RunStatus.DONE: StatusView("Done", "green", "check_circle"),
    RunStatus.ASKED: StatusView("Waiting on customer", "violet", "contact_support"),
    RunStatus.FAILED: StatusView("Failed", "red", "error"),
}


@dataclass(frozen=True)
class DecisionView:
    """How a decision reads in the timeline (before "by NAME") and the box it is shown in."""

    verb: str
    tone: str   # the Streamlit message box: success, info, warning or error


# The page's one table of approval statuses. tests/desk/test_step_tables.py checks it is complete.
DECISIONS: dict[ApprovalStatus, DecisionView] = {
    ApprovalStatus.PENDING: DecisionView("Waiting for a decision", "warning"),
    ApprovalStatus.APPROVED: DecisionView("Approved", "success"),
    ApprovalStatus.REJECTED: DecisionView("Rejected", "error"),
    ApprovalStatus.ASKED: DecisionView("Sent back to the customer with a question", "info"),
    ApprovalStatus.EXPIRED: DecisionView("Expired: not decided in time, closed", "error"),
}


# What happened to a ticket (desk/status.py), each with its own badge.
DESK: dict[DeskStatus, StatusView] = {
    DeskStatus.WORKING: StatusView("Working", "blue", "autorenew"),
    DeskStatus.WAITING: StatusView("Waiting for approval", "orange", "pan_tool"),
    DeskStatus.PAID: StatusView("Paid", "green", "check_circle"),
    DeskStatus.PARTLY_PAID: StatusView("Partly paid", "green", "rule"),
    DeskStatus.REJECTED: StatusView("Rejected", "red", "cancel"),
    DeskStatus.ASKED: StatusView("Waiting on customer", "violet", "contact_support"),
    DeskStatus.EXPIRED: StatusView("Expired", "orange", "timer_off"),
    DeskStatus.DECLINED: StatusView("Declined by policy", "gray", "block"),
    DeskStatus.FAILED: StatusView("Failed", "red", "error"),
    DeskStatus.STOPPED: StatusView("Stopped", "gray", "pause_circle"),
}
ESCALATED = StatusView("Escalated", "red", "priority_high")


def desk_view(status: DeskStatus | str) -> StatusView:
    return DESK[DeskStatus(status)]


def status_view(status: RunStatus | str) -> StatusView:
    return STATUS[RunStatus(status)]
