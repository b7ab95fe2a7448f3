"""Runs: boundary 1 (a run exists before any request), and the lists the desk and the
terminal draw from. Who may advance a run is leases.py's."""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ..errors import NotFound
from ..models import InboxRow, Run, RunStatus
from .core import StoreCore, no_limit
from .search import search_words


class Runs(StoreCore):
    """Creating, listing and leasing runs."""

    def create_run(self, *, sender: str, sender_name: str, subject: str, email: str,
                   kind: str = "custom", raised_by: str | None = None,
                   agent: str = "refunds", trace_context: str | None = None) -> Run:
        """Boundary 1: the run and the customer's email exist before any model request.

        ``raised_by`` is the desk account that typed the ticket in, if any; ``agent`` the
        agent that makes the run (Loop.agent_name), the only one that advances or decides it;
        ``trace_context`` the W3C trace context its later spans join (telemetry on).
        """
        with self._tx() as db:
            run_id = self._insert_run(db, sender=sender, sender_name=sender_name,
                                      subject=subject, email=email, kind=kind,
                                      raised_by=raised_by, agent=agent,
                                      trace_context=trace_context)
        return self.run(run_id)

    def _insert_run(self, db: Any, *, sender: str, sender_name: str, subject: str, email: str,
                    kind: str, raised_by: str | None, agent: str,
                    extra: dict[str, Any] | None = None, trace_context: str | None = None
                    ) -> str:
        """create_run's rows, in ``db``'s transaction (mail intake makes a run in its own);
        ``extra``: more facts for the email's timeline step (a mailed ticket's attachments)."""
        run_id = "run_" + uuid.uuid4().hex[:12]
        now = time.time()
        db.execute(
            "INSERT INTO runs(id, created_at, kind, sender, sender_name, subject, email,"
            " status, updated_at, last_pid, transcript_complete, agent, trace_context)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,1,?,?)",
            (run_id, now, kind, sender, sender_name, subject, email, RunStatus.WORKING, now,
             self.pid, agent, trace_context))
        if raised_by:
            self._raised_by(db, run_id, raised_by)
        self._step(db, run_id, "email", {"from": sender, "name": sender_name,
                                         "subject": subject, "body": email, **(extra or {})})
        return run_id

    def run(self, run_id: str) -> Run:
        rows = self._read("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise NotFound(f"No run with id {run_id!r}.")
        return Run.model_validate(dict(rows[0]))

    def runs(self, limit: int = 100) -> list[Run]:
        rows = self._read("SELECT * FROM runs ORDER BY created_at DESC LIMIT ?",
                          (no_limit(limit),))
        return [Run.model_validate(dict(r)) for r in rows]

    def inbox(self, search: str = "", statuses: Collection[RunStatus] = (), limit: int = 50,
              offset: int = 0) -> list[InboxRow]:
        """Runs newest first, matching ``search`` (name, address, subject, email text, order,
        run id) and, if given, one of ``statuses``; with their latest proposal's order and
        amount."""
        where, args = self._inbox_filter(search, statuses)
        rows = self._read(
            "SELECT runs.*,"
            " (SELECT order_id FROM approvals a WHERE a.run_id = runs.id"
            "  ORDER BY a.requested_at DESC LIMIT 1) AS inbox_order,"
            " (SELECT amount_cents FROM approvals a WHERE a.run_id = runs.id"
            "  ORDER BY a.requested_at DESC LIMIT 1) AS inbox_amount,"
            " (SELECT c.order_id FROM calls c WHERE c.run_id = runs.id"
            "  AND c.name = 'lookup_order' AND c.order_id IS NOT NULL LIMIT 1) AS looked_up"
            f" FROM runs {where} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (*args, limit, offset))
        found = []
        for row in rows:
            data = dict(row)
            order, amount, looked = (data.pop("inbox_order"), data.pop("inbox_amount"),
                                     data.pop("looked_up"))
            found.append(InboxRow(run=Run.model_validate(data),
                                  order_id=order or (str(looked) if looked else None),
                                  amount_cents=amount))
        return found

    def inbox_counts(self, search: str = "") -> dict[RunStatus, int]:
        """How many runs match ``search``, by status (every status present, zeros included)."""
        where, args = self._inbox_filter(search, ())
        counts = dict.fromkeys(RunStatus, 0)
        for status, n in self._read(f"SELECT status, COUNT(*) FROM runs {where} GROUP BY status",
                                    args):
            counts[RunStatus(status)] = n
        return counts

    def _inbox_conditions(self, search: str, statuses: Collection[RunStatus] = ()
                          ) -> tuple[list[str], list[Any]]:
        """The conditions on runs (and their ``?`` values) that select the runs matching
        ``search`` (every word somewhere; store/search.py) and one of ``statuses`` if given.
        A new filter is one more condition here (an agent's store adds its own, as the desk's
        owner filter does)."""
        conditions: list[str] = []
        args: list[Any] = []
        words = search_words(search)
        if words:
            condition, patterns = self._search_condition(words)
            conditions.append(condition)
            args += patterns
        if statuses:
            conditions.append(f"status IN ({','.join('?' * len(statuses))})")
            args += [str(s) for s in statuses]
        return conditions, args

    def _inbox_filter(self, search: str, statuses: Collection[RunStatus]) -> tuple[str, tuple]:
        conditions, args = self._inbox_conditions(search, statuses)
        return ("WHERE " + " AND ".join(conditions) if conditions else ""), tuple(args)

    def latest_run(self, statuses: set[RunStatus], agent: str | None = None) -> Run | None:
        """The run of one of ``statuses`` changed last (``agent``'s runs only, if named)."""
        marks = ",".join("?" * len(statuses))
        mine, args = _agent_filter(agent)
        rows = self._read(f"SELECT * FROM runs WHERE status IN ({marks}){mine}"
                          " ORDER BY updated_at DESC LIMIT 1", (*statuses, *args))
        return Run.model_validate(dict(rows[0])) if rows else None

    def orphaned_runs(self, agent: str | None = None) -> list[Run]:
        """Runs marked working whose process is gone: a crash cut them off mid-turn
        (``agent``'s runs only, if named: a front end resumes only its own agent's)."""
        mine, args = _agent_filter(agent)
        rows = self._read(f"SELECT * FROM runs WHERE status = ?{mine} ORDER BY updated_at",
                          (RunStatus.WORKING, *args))
        db = self._db()
        return [Run.model_validate(dict(r)) for r in rows if not self._lease_live(db, dict(r))]

    def decided_but_waiting(self, agent: str | None = None) -> list[Run]:
        """Runs still marked waiting although their refund was decided (a crash in between);
        ``agent``'s runs only, if named."""
        mine, args = _agent_filter(agent, "runs.")
        rows = self._read("SELECT DISTINCT runs.* FROM runs JOIN approvals a ON a.run_id = runs.id"
                          " WHERE runs.status = ? AND a.status != 'pending'"
                          " AND NOT EXISTS (SELECT 1 FROM approvals p WHERE p.run_id = runs.id"
                          f" AND p.status = 'pending'){mine}", (RunStatus.WAITING, *args))
        return [Run.model_validate(dict(r)) for r in rows]

    def leased_runs(self, live: bool = True) -> list[Run]:
        """Runs that a live process holds right now (see _lease_live); with ``live`` False,
        every run with a lease, abandoned ones included."""
        rows = self._read("SELECT * FROM runs WHERE lease_token IS NOT NULL ORDER BY updated_at")
        db = self._db()
        return [Run.model_validate(dict(r)) for r in rows
                if not live or self._lease_live(db, dict(r))]

    def keep_trace_context(self, run_id: str, context: str) -> None:
        """Keep ``context`` as the run's trace context, unless it has one: for a run made
        without one (by mail intake, or with telemetry off), its first traced advance's."""
        with self._tx(durable=False) as db:   # lost with the power: the next advance's then
            db.execute("UPDATE runs SET trace_context = ? WHERE id = ?"
                       " AND trace_context IS NULL", (context, run_id))

    def telemetry_counts(self) -> TelemetryCounts:
        """What the telemetry gauges read (refund_agent/telemetry): runs by agent and status,
        and per agent the proposals waiting and how long the oldest has waited (by the
        database's clock). Two grouped reads, made only when a metric reader collects."""
        runs = {(r[0], r[1]): int(r[2]) for r in self._read(
            "SELECT agent, status, COUNT(*) FROM runs GROUP BY agent, status")}
        waiting, oldest = {}, {}
        for agent, n, age in self._read(
                f"SELECT r.agent, COUNT(*), {self.now} - MIN(a.requested_at) FROM approvals a"
                " JOIN runs r ON r.id = a.run_id WHERE a.status = 'pending' GROUP BY r.agent"):
            waiting[agent], oldest[agent] = int(n), max(0.0, float(age))
        return TelemetryCounts(runs, waiting, oldest)


def _agent_filter(agent: str | None, table: str = "") -> tuple[str, tuple[str, ...]]:
    """The clause that keeps one agent's runs (none for None: every agent's)."""
    return ("", ()) if agent is None else (f" AND {table}agent = ?", (agent,))


@dataclass(frozen=True)
class TelemetryCounts:
    runs: dict[tuple[str, str], int]   # (agent, status) -> runs
    waiting: dict[str, int]            # agent -> pending proposals
    oldest_wait: dict[str, float]      # agent -> seconds the oldest pending one has waited
