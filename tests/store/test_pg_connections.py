"""PostgreSQL connections handed from a thread that ended to the next (postgres.py, _Handback).

Streamlit draws every page on a new thread. Each thread used to open its own connection and
leave it behind; now a connection goes back to the store when its thread ends, unless the
thread left it inside a transaction, in which case it is closed and its transaction with it.
"""

from __future__ import annotations

import threading
import uuid

import pytest

psycopg = pytest.importorskip("psycopg")

from refund_agent.store import Store  # noqa: E402


@pytest.fixture
def pg_url(pg_cluster):
    return pg_cluster.create(f"t_{uuid.uuid4().hex[:16]}")


def backends(url: str) -> int:
    """Server processes serving the store's connections (the LISTEN one included)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND application_name = 'refund-agent'"
                            ).fetchone()[0]


def in_thread(work) -> None:  # noqa: ANN001
    t = threading.Thread(target=work)
    t.start()
    t.join()


def test_threads_one_after_another_share_one_connection(pg_url):
    store = Store(pg_url)
    pids = []
    for _ in range(20):
        in_thread(lambda: pids.append(store.query("SELECT pg_backend_pid()")[0][0]))
    assert len(set(pids)) == 1, pids
    assert backends(pg_url) <= 2   # the one reused, plus the main thread's from the schema
    store.close()


def test_a_connection_left_inside_a_transaction_is_closed_not_reused(pg_url):
    store = Store(pg_url)
    first: list[int] = []

    def leave_a_transaction_open() -> None:
        db = store.connection()
        first.append(db.execute("SELECT pg_backend_pid()").fetchone()[0])
        db.execute("BEGIN")
        db.execute("INSERT INTO ledger(log, key, record) VALUES ('ghost', 'k', '{}')")

    in_thread(leave_a_transaction_open)
    second: list[int] = []
    in_thread(lambda: second.append(store.query("SELECT pg_backend_pid()")[0][0]))
    assert second != first
    # Closed, so its transaction rolled back: the half-written row never appeared.
    assert store.query("SELECT count(*) FROM ledger")[0][0] == 0
    store.close()


def test_concurrent_threads_each_have_their_own_connection(pg_url):
    store = Store(pg_url)
    barrier = threading.Barrier(4)
    pids: list[int] = []

    def hold() -> None:
        db = store.connection()
        barrier.wait()   # all four hold a connection at the same moment
        pids.append(db.execute("SELECT pg_backend_pid()").fetchone()[0])
        barrier.wait()

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(pids)) == 4
    store.close()
