"""How many SQL statements one ticket costs, counted on the connection, on both engines.

One sample ticket end to end, as the terminal runs it (no page listening): Maya's email, three
model requests, the pause for approval, the approval, two more requests, done. The statements
are counted where they reach the database, not timed: on PostgreSQL each statement the store
sends through its connection (``BEGIN; SET LOCAL ...`` and ``NOTIFY ...; COMMIT`` are two
each), on SQLite each statement the library starts (set_trace_callback; a trigger's own
statements are not counted on either engine).

Issue #37 measured 255 on PostgreSQL (every transaction refreshed the desk rows and every step
and transcript item was its own INSERT; the loop read the new steps back with nobody
listening; each write's lease check was a locking read before the row's update). A second
round took the run and calls each commit returns instead of reading them back, and folded
checks into the writes they guard. The ceilings below are just above what this reaches; the
issue's target, 60, is under what the ticket's sixteen transactions cost in BEGIN, COMMIT,
NOTIFY and SET LOCAL alone (59) (see docs/PERFORMANCE.md, "Statements per ticket").
"""

from __future__ import annotations

import pytest

from refund_agent.models import RunStatus

PG_CEILING = 160     # 158 measured; 200 before issue #37's second round, 267 before its first
SQLITE_CEILING = 206  # 204 measured; 245 before it, 299 before its first


def _ticket(agent) -> None:
    from benchlib import APPROVER, OrderPool, pending_approval_id, start_ticket

    pool = OrderPool(1, 4)
    pool.take()                       # the warm-up ticket's order
    run = agent.advance(start_ticket(agent, pool.take()).id)
    assert run.status == RunStatus.WAITING
    agent.decide(pending_approval_id(agent, run.id), True, APPROVER)
    assert agent.advance(run.id).status == RunStatus.DONE


def _warm(agent) -> None:
    from benchlib import OrderPool, full_ticket

    full_ticket(agent, OrderPool(1, 4).take())


@pytest.mark.postgres
def test_a_ticket_on_postgresql_stays_under_its_statement_ceiling(tmp_path, pg_cluster,
                                                                   monkeypatch):
    from benchlib import TimedAgent, bench_settings, make_bench_shop

    from refund_agent.store import postgres

    data = make_bench_shop(tmp_path / "data", 4)
    agent = TimedAgent(bench_settings(tmp_path / "out", data,
                                      database_url=pg_cluster.create("statements")))
    _warm(agent)
    sent: list[str] = []
    execute, begin = postgres._PgConnection.execute, postgres._PgConnection.begin  # noqa: SLF001

    def counted_execute(self, sql, args=()):
        sent.extend(part for part in sql.split(";") if part.strip())
        return execute(self, sql, args)

    def counted_begin(self, sql):
        sent.extend(part for part in sql.split(";") if part.strip())
        return begin(self, sql)

    monkeypatch.setattr(postgres._PgConnection, "execute", counted_execute)  # noqa: SLF001
    monkeypatch.setattr(postgres._PgConnection, "begin", counted_begin)  # noqa: SLF001
    _ticket(agent)
    agent.store.close()
    notifies = sum(s.strip().startswith("NOTIFY") for s in sent)
    assert len(sent) <= PG_CEILING, (len(sent), notifies)
    # The desk rows are refreshed only after a write that can leave them stale.
    refreshes = sum("desk_dirty = 1" in s for s in sent)
    assert refreshes <= 8, refreshes


def test_a_ticket_on_sqlite_stays_under_its_statement_ceiling(tmp_path, monkeypatch):
    from benchlib import TimedAgent, bench_settings, make_bench_shop

    from refund_agent.store import sqlite

    data = make_bench_shop(tmp_path / "data", 4)
    agent = TimedAgent(bench_settings(tmp_path / "out", data))
    _warm(agent)
    started: list[str] = []

    def trace(sql: str) -> None:
        if not sql.lstrip().startswith("--"):   # a trigger's statements come as comments
            started.append(sql)

    connect = sqlite.SQLiteStore._connect_writable  # noqa: SLF001

    def traced(self):
        db = connect(self)
        db.set_trace_callback(trace)
        return db

    monkeypatch.setattr(sqlite.SQLiteStore, "_connect_writable", traced)
    agent.store.close()               # the next statement opens a traced connection
    _ticket(agent)
    agent.store.close()
    assert len(started) <= SQLITE_CEILING, len(started)
