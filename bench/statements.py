"""Statements and CPU per ticket outside the model, on SQLite and PostgreSQL (issue #37).

    python bench/statements.py                # histogram on both engines + CPU on PostgreSQL
    python bench/statements.py --tickets 40   # more tickets for the CPU figure
    python bench/statements.py --json out.json

One sample ticket (Maya's email, three model requests, the pause, the approval, two more
requests, done), as tests/store/test_statements.py runs it, with every statement counted where
it reaches the database and grouped by its SQL with the values taken out. Then ``--tickets``
more tickets on PostgreSQL, for the CPU one ticket costs outside the model: the client's as
this thread's CPU time (``time.thread_time``: the offline model answers from other threads, so
its CPU is not in it; the openai SDK's work inside each request is), the server's as the CPU of
every process of the throwaway cluster (its /proc/<pid>/stat and its reaped children's), read
before and after. The cluster keeps PostgreSQL's own durability defaults (fsync on).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from benchlib import (  # noqa: E402
    APPROVER,
    OrderPool,
    TimedAgent,
    bench_settings,
    full_ticket,
    make_bench_shop,
    pending_approval_id,
    start_ticket,
)

from refund_agent.models import RunStatus  # noqa: E402

_VALUES = re.compile(r"'(?:[^']|'')*'|\b\d+(\.\d+)?\b")


def normalised(sql: str) -> str:
    """The statement with its literals and repeated value lists folded, for grouping."""
    text = " ".join(_VALUES.sub("?", sql).split())
    text = re.sub(r"(\(\?(,\s*\?)*\))(\s*,\s*\(\?(,\s*\?)*\))+", r"\1,...", text)
    return text[:110]


def one_ticket(agent: TimedAgent, order_id: str) -> None:
    """One sample ticket as the terminal runs it: proposed, approved, finished (checked, so a
    count is never of a ticket that stopped half way)."""
    run = agent.advance(start_ticket(agent, order_id).id)
    assert run.status == RunStatus.WAITING, run.status
    approval = agent.store.approval(pending_approval_id(agent, run.id))   # what it decides
    agent.decide(approval.id, True, APPROVER, fingerprint=approval.fingerprint)
    run = agent.advance(run.id)
    assert run.status == RunStatus.DONE, run.status


def count_postgres(agent: TimedAgent, order_id: str,
                   trips: list[str] | None = None) -> list[str]:
    """Each statement the store sends (``BEGIN; SET LOCAL ...`` is two); ``trips`` gets one
    entry per round trip (such a string goes to the server in one)."""
    from refund_agent.store import postgres
    cls = postgres._PgConnection  # noqa: SLF001
    execute, begin = cls.execute, cls.begin
    sent: list[str] = []
    trips = [] if trips is None else trips

    def counted_execute(self, sql, args=()):
        sent.extend(part for part in sql.split(";") if part.strip())
        trips.append(sql)
        return execute(self, sql, args)

    def counted_begin(self, sql):
        sent.extend(part for part in sql.split(";") if part.strip())
        trips.append(sql)
        return begin(self, sql)

    cls.execute, cls.begin = counted_execute, counted_begin
    try:
        one_ticket(agent, order_id)
    finally:
        cls.execute, cls.begin = execute, begin
    return sent


def count_sqlite(agent: TimedAgent, order_id: str) -> list[str]:
    """Each statement the store hands its SQLite connection (``execute``), as on PostgreSQL.

    Not SQLite's trace callback: it reports a statement again for every trigger it fires (the
    desk, search and count triggers), which would count one INSERT INTO runs as seven."""
    import sqlite3

    from refund_agent.store import sqlite
    cls = sqlite.SQLiteStore
    connect = cls._connect_writable  # noqa: SLF001
    started: list[str] = []

    class Counted(sqlite3.Connection):
        def execute(self, sql, *args):
            started.append(sql)
            return super().execute(sql, *args)

    def counted(self):
        real = sqlite3.connect
        sqlite3.connect = lambda *a, **kw: real(*a, factory=Counted, **kw)
        try:
            return connect(self)
        finally:
            sqlite3.connect = real

    cls._connect_writable = counted  # noqa: SLF001
    agent.store.close()
    try:
        agent.store.query("SELECT 1")   # connected, as on PostgreSQL: its set-up is not counted
        started.clear()
        one_ticket(agent, order_id)
    finally:
        cls._connect_writable = connect  # noqa: SLF001
        agent.store.close()
    return started


def histogram(sent: list[str]) -> list[tuple[int, str]]:
    counts = collections.Counter(normalised(s) for s in sent)
    return sorted(((n, sql) for sql, n in counts.items()), reverse=True)


def show(engine: str, sent: list[str]) -> None:
    print(f"\n{engine}: {len(sent)} statements per ticket")
    for n, sql in histogram(sent):
        print(f"{n:4d}  {sql}")


def cpu_per_ticket(agent: TimedAgent, cluster, pool: OrderPool, tickets: int) -> dict:
    from postgres import postmaster_pid, server_cpu
    pid = postmaster_pid(cluster)
    s0, c0 = server_cpu(pid), time.thread_time()
    for _ in range(tickets):
        full_ticket(agent, pool.take())
    c1, s1 = time.thread_time(), server_cpu(pid)
    return {"tickets": tickets, "client_ms": round((c1 - c0) / tickets * 1000, 1),
            "server_ms": round((s1 - s0) / tickets * 1000, 1),
            "total_ms": round((c1 - c0 + s1 - s0) / tickets * 1000, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=30)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quiet", action="store_true", help="totals only, no histogram")
    args = parser.parse_args(argv)
    from postgres import _load_pg, missing
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_bench_shop(root / "data", args.tickets + 10)
        pool = OrderPool(1, args.tickets + 10)
        agent = TimedAgent(bench_settings(root / "sqlite", data))
        full_ticket(agent, pool.take())
        sent = count_sqlite(agent, pool.take())
        result["sqlite"] = {"statements": len(sent), "histogram": histogram(sent)}
        if not args.quiet:
            show("SQLite", sent)
        if problem := missing():
            print(f"PostgreSQL skipped: {problem}")
        else:
            cluster = _load_pg().Cluster(_load_pg().find_bin(), durable=True).start()
            try:
                pool = OrderPool(1, args.tickets + 10)
                agent = TimedAgent(bench_settings(root / "pg", data,
                                                  database_url=cluster.create("stmts")))
                full_ticket(agent, pool.take())
                full_ticket(agent, pool.take())
                trips: list[str] = []
                sent = count_postgres(agent, pool.take(), trips)
                result["postgresql"] = {"statements": len(sent), "round_trips": len(trips),
                                        "histogram": histogram(sent),
                                        "cpu": cpu_per_ticket(agent, cluster, pool,
                                                              args.tickets)}
                agent.store.close()
                if not args.quiet:
                    show("PostgreSQL", sent)
            finally:
                cluster.stop()
    print("\nstatements per ticket: SQLite", result["sqlite"]["statements"],
          "PostgreSQL", result.get("postgresql", {}).get("statements"),
          f"({result.get('postgresql', {}).get('round_trips')} round trips)")
    if "postgresql" in result:
        print("PostgreSQL CPU per ticket outside the model:", result["postgresql"]["cpu"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
