"""How many SQL statements one ticket costs, counted on the connection, on both engines.

One sample ticket end to end, as the terminal runs it (no page listening): Maya's email, three
model requests, the pause for approval, the approval, two more requests, done. The statements
are counted on the connection, not timed: each statement the store sends through it
(``BEGIN; SET LOCAL ...`` and ``NOTIFY ...; COMMIT`` are two each on PostgreSQL); the
statements a trigger runs are the database's own and not counted, on either engine.

Issue #37 measured 255 on PostgreSQL (every transaction refreshed the desk rows and every step
and transcript item was its own INSERT; the loop read the new steps back with nobody
listening; each write's lease check was a locking read before the row's update). A second
round took the run and calls each commit returns instead of reading them back, and folded
checks into the writes they guard. A third has the lease's release return the run it leaves
(desk status included), which the loop handed back after reading it again. A fourth merged
commits nothing could come between (16 transactions became 12). The ceilings below are just
above what this reaches; the issue's target, 60, leaves 17 statements for what the twelve
transactions write once their BEGIN, COMMIT, NOTIFY and SET LOCAL (43) are counted (see
docs/PERFORMANCE.md, "Statements per ticket").
"""

from __future__ import annotations

import pytest

# Measured, and before each round: PostgreSQL 134 (132, 156, 158, 200, 267); SQLite 133 (131).
# The earlier SQLite figures (175, 202, 204, 245, 299) came from its trace callback, which
# repeats a statement for every trigger it fires. Issue #44 added two reads to the ticket, not
# to the loop: a decision now names the fingerprint of what was shown, so the script approving
# it reads the approval (and its lines) first, as a person's page or terminal always did.
PG_CEILING = 135
PG_ROUND_TRIPS = 116   # measured 115
SQLITE_CEILING = 134


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
    trips: list[str] = []
    sent = count_postgres(agent, order, trips)
    agent.store.close()
    notifies = sum(s.strip().startswith("NOTIFY") for s in sent)
    assert len(sent) <= PG_CEILING, (len(sent), notifies)
    # NOTIFY rides in its COMMIT's round trip, SET LOCAL in its BEGIN's.
    assert len(trips) <= PG_ROUND_TRIPS and len(trips) == len(sent) - notifies - sum(
        s.strip().startswith("SET LOCAL") for s in sent), (len(trips), len(sent))
    # The desk rows are refreshed only after a write that can leave them stale.
    refreshes = sum("desk_dirty = 1" in s for s in sent)
    assert refreshes <= 8, refreshes


def test_a_ticket_on_sqlite_stays_under_its_statement_ceiling(tmp_path):
    from statements import count_sqlite

    agent, order = _agent_after_one_ticket(tmp_path)
    started = count_sqlite(agent, order)
    assert len(started) <= SQLITE_CEILING, len(started)


@pytest.mark.parametrize("engine", ["sqlite",
                                    pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_advance_returns_the_run_as_stored(tmp_path, engine, request):
    """The run advance returns is built from its release's own UPDATE, not read again: it
    must equal the stored row, desk status included, when it waits and when it is paid."""
    from benchlib import APPROVER, pending_approval_id, start_ticket

    from refund_agent.models import RunStatus

    settings = ({} if engine == "sqlite" else
                {"database_url": request.getfixturevalue("pg_cluster").create("returned")})
    agent, order = _agent_after_one_ticket(tmp_path, **settings)
    run = agent.advance(start_ticket(agent, order).id)
    assert (run.status, run.desk_status) == (RunStatus.WAITING, "waiting")
    assert run == agent.store.run(run.id)
    agent.decide(pending_approval_id(agent, run.id), True, APPROVER,
                 fingerprint=agent.store.approval(pending_approval_id(agent, run.id)).fingerprint)
    run = agent.advance(run.id)
    assert (run.status, run.desk_status) == (RunStatus.DONE, "paid")
    assert run == agent.store.run(run.id)
    agent.store.close()
