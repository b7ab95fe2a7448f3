"""The inbox: a ticket's entry, the status filters with their counts, the page range."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ...desk.status import DeskStatus, amount_is, amount_label, customer_name
from ...models import InboxRow, RunStatus
from .format import ago, md, shorten
from .status import ESCALATED, desk_view, status_view


def run_label(row: InboxRow, now: float | None = None,
              names: Mapping[str, str] | None = None, owner: str | None = None) -> str:
    """The inbox entry for a run: who, which order and how much, status, age (Markdown).

    The order and amount come first after the name: a customer with a dozen tickets about the
    same mixer is told apart by them, not by the subject.
    """
    run = row.run
    # One display form per customer: the name they gave on any ticket (``names``), else here.
    known = (names or {}).get(run.sender.casefold())
    who = md(customer_name(known or run.sender_name, run.sender))
    order = f" · {md(row.order_id)}" if row.order_id else ""
    # A rejected, expired or still-waiting proposal paid nothing: its amount says so.
    paid = amount_is(desk=row.desk or row.run.desk_status)
    amount = (f" · {md(amount_label(row.amount_cents / 100, paid))}"
              if row.amount_cents is not None else "")
    badge = desk_view(row.desk).badge if row.desk else status_view(run.status).badge
    escalated = f" {ESCALATED.badge}" if row.escalations else ""
    owned = f" · :material/person: {md(owner)}" if owner else ""
    return (f"**{who}**{order}{amount}  \n"
            f"{badge}{escalated}{owned} · {ago(run.created_at, now)} · "
            f"{md(shorten(run.subject, 40))}")


# Whose tickets the inbox shows, once people sign in: (key, label).
OWNER_FILTERS = (("everyone", "Everyone's"), ("mine", "Mine"), ("unassigned", "Unassigned"))


@dataclass(frozen=True)
class InboxFilter:
    """One status filter of the inbox: its label and the run statuses it shows."""

    key: str
    label: str
    statuses: tuple[RunStatus, ...]


INBOX_FILTERS = (
    InboxFilter("all", "All", ()),
    InboxFilter("waiting", "Waiting for approval", (RunStatus.WAITING,)),
    InboxFilter("asked", "Waiting on customer", (RunStatus.ASKED,)),
    InboxFilter("working", "Working", (RunStatus.WORKING,)),
    InboxFilter("done", "Done", (RunStatus.DONE,)),
    InboxFilter("failed", "Failed or stopped", (RunStatus.FAILED, RunStatus.STOPPED)),
)


def filter_label(f: InboxFilter, counts: Mapping[RunStatus, int]) -> str:
    """``Waiting for approval 12``: a filter with how many tickets it holds."""
    n = sum(counts.values()) if not f.statuses else sum(counts[s] for s in f.statuses)
    return f"{f.label} {n}"


@dataclass(frozen=True)
class DeskFilter:
    """One filter of the inbox by what happened: its label and the desk statuses it shows
    (``needs`` for the lead's *needs a person* view, ``escalated`` for open escalations)."""

    key: str
    label: str
    statuses: tuple[DeskStatus, ...] = ()
    needs: bool = False
    escalated: bool = False

    def shows(self, status: DeskStatus, escalations: int) -> bool:
        from ...desk.status import needs_person
        if self.needs:
            return needs_person(status, escalations)
        if self.escalated:
            return escalations > 0
        return not self.statuses or status in self.statuses

    def selection(self) -> tuple[tuple[DeskStatus, ...] | None, bool]:
        """What :meth:`shows` selects, as Store.desk_page takes it: (statuses, or any with an
        open escalation); None: every status. tests/desk/test_desk.py checks the two agree."""
        from ...desk.status import NEEDS_PERSON
        if self.needs:
            return tuple(sorted(NEEDS_PERSON)), True
        if self.escalated:
            return (), True
        return (self.statuses or None), False


DESK_FILTERS = (
    DeskFilter("needs", "Needs a person", needs=True),
    DeskFilter("all", "All"),
    DeskFilter("escalated", "Escalated", escalated=True),
    DeskFilter("waiting", "Waiting for approval", (DeskStatus.WAITING,)),
    DeskFilter("asked", "Waiting on customer", (DeskStatus.ASKED,)),
    DeskFilter("working", "Working", (DeskStatus.WORKING,)),
    DeskFilter("paid", "Paid", (DeskStatus.PAID,)),
    DeskFilter("partly_paid", "Partly paid", (DeskStatus.PARTLY_PAID,)),
    DeskFilter("rejected", "Rejected", (DeskStatus.REJECTED,)),
    DeskFilter("expired", "Expired", (DeskStatus.EXPIRED,)),
    DeskFilter("declined", "Declined by policy", (DeskStatus.DECLINED,)),
    DeskFilter("failed", "Failed or stopped", (DeskStatus.FAILED, DeskStatus.STOPPED)),
)


def desk_counts(groups: Iterable[tuple[DeskStatus, int, int]]) -> dict[str, int]:
    """How many tickets each of DESK_FILTERS holds, from Store.desk_groups's rows (status, open
    escalations, how many)."""
    rows = list(groups)
    return {f.key: sum(n for status, esc, n in rows if f.shows(status, esc))
            for f in DESK_FILTERS}


def page_range(offset: int, shown: int, total: int) -> str:
    """``51–100 of 120`` (or ``No tickets``)."""
    if not total:
        return "No tickets"
    return f"{offset + 1}–{offset + shown} of {total}"


class DrainMeter:
    """How fast the tickets waiting for the agent drain, from what the inbox counts as it is
    drawn: each look notes (time, tickets the agent is done with); the pace is how many more
    it was done with over the last ``window`` seconds. Every worker's runs count, on any host
    sharing the store, not only this server's. One per server process (the Worker's), shared
    by its sessions, hence the lock.
    """

    def __init__(self, window: float = 600.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.window = window
        self.clock = clock
        self._looks: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def note(self, counts: Mapping[RunStatus, int]) -> tuple[int, float | None]:
        """(tickets waiting for the agent, tickets it finishes a minute or None while too
        little is known) from Store.inbox_counts's numbers."""
        waiting = counts.get(RunStatus.WORKING, 0)
        finished = sum(counts.values()) - waiting
        now = self.clock()
        with self._lock:
            while self._looks and now - self._looks[0][0] > self.window:
                self._looks.popleft()
            self._looks.append((now, finished))
            then, before = self._looks[0]
        if now - then < 10:   # under ten seconds of looks: no pace to speak of yet
            return waiting, None
        return waiting, max(0, finished - before) * 60 / (now - then)


def drain_text(waiting: int, per_minute: float | None) -> str:
    """``12 tickets wait for the agent · 8.5 done a minute, about 2 min to go``."""
    if not waiting:
        return "No ticket waits for the agent."
    head = f"{waiting} ticket{'s wait' if waiting != 1 else ' waits'} for the agent"
    if per_minute is None:
        return head + "."
    if per_minute <= 0:
        return head + " · none finished in the last minutes."
    left = waiting / per_minute
    eta = f"about {left:.0f} min to go" if left >= 1 else "under a minute to go"
    return f"{head} · {per_minute:.1f} done a minute, {eta}."
