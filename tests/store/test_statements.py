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

PG_CEILING = 160     # 158 measured; 200 before issue #37's second round, 267 before its first
SQLITE_CEILING = 206  # 204 measured; 245 before it, 299 before its first


def _agent_after_one_ticket(tmp_path, **settings):
    """A bench agent on a 4-order shop that has finished one ticket already (the counted one
    is then not the first, which alone creates tables, caches and connections)."""
    from benchlib import OrderPool, TimedAgent, bench_settings, full_ticket, make_bench_shop

    data = make_bench_shop(tmp_path / "data", 4)
    agent = TimedAgent(bench_settings(tmp_path / "out", data, **settings))
    pool = OrderPool(1, 4)
    full_ticket(agent, pool.take())
    return agent, pool.take()


@pytest.mark.postgres
def test_a_ticket_on_postgresql_stays_under_its_statement_ceiling(tmp_path, pg_cluster):
    from statements import count_postgres  # bench/statements.py prints the same histogram

    agent, order = _agent_after_one_ticket(tmp_path,
                                           database_url=pg_cluster.create("statements"))
    sent = count_postgres(agent, order)
    agent.store.close()
    notifies = sum(s.strip().startswith("NOTIFY") for s in sent)
    assert len(sent) <= PG_CEILING, (len(sent), notifies)
    # The desk rows are refreshed only after a write that can leave them stale.
    refreshes = sum("desk_dirty = 1" in s for s in sent)
    assert refreshes <= 8, refreshes


def test_a_ticket_on_sqlite_stays_under_its_statement_ceiling(tmp_path):
    from statements import count_sqlite

    agent, order = _agent_after_one_ticket(tmp_path)
    started = count_sqlite(agent, order)
    assert len(started) <= SQLITE_CEILING, len(started)
