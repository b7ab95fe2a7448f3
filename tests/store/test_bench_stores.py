"""The benchmark's JSON-file store must keep step with the real Store's interface.

CI runs ``bench/run.py --quick`` after the suite; a signature that drifted (a new keyword on
``Store.decide``) failed there, after fourteen minutes of green tests. This catches it first.
"""
import inspect
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonstate import JsonStateStore

from refund_agent.store import Store


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")}


def test_json_store_accepts_every_argument_the_agent_passes() -> None:
    real, bench = _public_methods(Store), _public_methods(JsonStateStore)
    drifted = []
    for name, signature in bench.items():
        if name not in real:
            continue
        # ``db`` is the real store's own connection, passed only from inside it.
        wanted = set(real[name].parameters) - {"self", "db"}
        missing = wanted - set(signature.parameters)
        if missing:
            drifted.append(f"{name}: missing {sorted(missing)}")
    assert not drifted, drifted


def test_a_postgresql_store_seeded_by_copy_verifies_reconciles_and_takes_new_runs(
        tmp_path, pg_cluster):
    """bench/postgres.py seeds its stores with seeding.seed_postgres; CI never runs that
    benchmark, so the seeding is checked here: the chain verifies, the ledger reconciles with
    the approvals, and the agent approves and finishes a new refund on top of it."""
    from benchlib import (
        APPROVER,
        OrderPool,
        TimedAgent,
        bench_settings,
        full_ticket,
        make_bench_shop,
        pending_approval_id,
        start_ticket,
    )
    from seeding import read_template, seed_postgres

    from refund_agent import RunStatus
    from refund_agent.desk.reconcile import reconcile

    data = make_bench_shop(tmp_path / "data", 4)
    pool = OrderPool(1, 4)
    template_agent = TimedAgent(bench_settings(tmp_path / "template", data))
    full_ticket(template_agent, pool.take())
    run_id = template_agent.store.runs(1)[0].id
    template = read_template(template_agent.store, run_id, tmp_path / "template")

    url = pg_cluster.create("bench_seeded")
    agent = TimedAgent(bench_settings(tmp_path / "output", data, database_url=url))
    seed_postgres(agent.store, template, 20, batch=7)
    assert len(agent.store.runs(1000)) == 20
    assert agent.store.verify_audit() is None
    assert len(agent.payments.refunds()) == 18 and len(agent.outbox.messages()) == 20
    assert reconcile(agent.store, tmp_path / "output") is None
    run = agent.advance(start_ticket(agent, pool.take()).id)
    agent.decide(pending_approval_id(agent, run.id), True, APPROVER,
                 fingerprint=agent.store.approval(pending_approval_id(agent, run.id)).fingerprint)
    assert agent.advance(run.id).status == RunStatus.DONE
    assert agent.store.verify_audit() is None
    assert reconcile(agent.store, tmp_path / "output") is None


def test_json_store_takes_a_ticket_end_to_end(tmp_path) -> None:
    """The path ``bench/run.py --quick`` drives in CI: a ticket proposed, approved and finished
    on the JSON design (it failed there once the agent called ``run_approvals``)."""
    from benchlib import OrderPool, TimedAgent, bench_settings, full_ticket, make_bench_shop

    from refund_agent import RunStatus

    data = make_bench_shop(tmp_path / "data", 2)
    agent = TimedAgent(bench_settings(tmp_path / "out", data))
    agent.store = JsonStateStore(tmp_path / "out" / "state.json")
    full_ticket(agent, OrderPool(1, 2).take())
    [run] = agent.store.runs(10)
    assert run.status == RunStatus.DONE


def test_a_throughput_worker_that_uses_up_its_orders_reports_the_window_it_measured(tmp_path):
    """On a fast machine the workers used to run out of cloned orders mid-window and crash
    ``bench/run.py --quick`` (RuntimeError). A worker given too few orders for its window now
    stops when they are used up and reports the shorter window, so a rate can still be had."""
    import json
    import subprocess
    import time

    from benchlib import make_bench_shop, offline_env, tickets_per_second

    data = make_bench_shop(tmp_path / "data", clones=6)
    bench = Path(__file__).resolve().parents[2] / "bench"
    out = subprocess.run(
        [sys.executable, str(bench / "tput_worker.py"), "--output", str(tmp_path / "out"),
         "--data", str(data), "--first", "1", "--last", "6", "--warmup", "1",
         "--start-at", str(time.time() + 1), "--duration", "600"],
        capture_output=True, text=True, timeout=300, env=offline_env())
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["ran_dry"] is True and report["done"] == 4, report
    assert 0 < report["window_s"] < 600
    assert tickets_per_second([report]) == report["done"] / report["window_s"]


@given(st.lists(st.from_regex(r"call-[0-9a-f]{8}-[0-9]|ORD-[0-9]{4}|resp_[0-9a-f]{20}",
                              fullmatch=True), min_size=1, max_size=12, unique=True),
       st.integers(0, 9_999_999))
def test_seeded_copies_of_a_paused_run_keep_distinct_ids_apart(ids, copy) -> None:
    """bench/peers.py seeds copies of a paused run by renaming its ids; two call ids that
    shared their last characters (``call-3212cd54-0``, ``call-9f0e1a54-0``) got one new id,
    and the seeding died on the calls' unique key in about half the runs."""
    from peers import copy_ids
    renamed = copy_ids(ids, copy)
    assert len(set(renamed.values())) == len(ids)
    assert not set(renamed.values()) & set(ids)
    assert set(copy_ids(ids, copy + 1).values()).isdisjoint(renamed.values())


def _desk_rows(store) -> dict[str, tuple]:
    return {r["id"]: (r["desk_status"], r["desk_escalations"]) for r in store.query(
        "SELECT id, desk_status, desk_escalations FROM runs ORDER BY id")}


class _Undo(Exception):
    pass


def _recomputed_desk(store) -> dict[str, tuple]:
    """What ``refresh_stale_desk`` makes of every run marked stale (in a transaction undone)."""
    from refund_agent.desk.records.inbox import refresh_stale_desk
    try:
        with store.transaction() as db:
            db.execute("UPDATE runs SET desk_dirty = 1")
            refresh_stale_desk(db)
            raise _Undo({r["id"]: (r["desk_status"], r["desk_escalations"]) for r in db.execute(
                "SELECT id, desk_status, desk_escalations FROM runs ORDER BY id").fetchall()})
    except _Undo as undo:
        return undo.args[0]


@pytest.mark.postgres
def test_postgresql_seeding_fits_a_stock_lock_table_and_leaves_no_desk_row_stale(tmp_path):
    """The units guard takes an advisory lock per order until its transaction ends; seeding
    every ticket in one transaction ran a stock server out of lock slots at 100k ("out of shared
    memory ... max_locks_per_transaction"), then refreshed the desk row by row. A server with a
    small lock table (10 per connection, 10 connections) stands in for a stock one at 100k."""
    from benchlib import OrderPool, TimedAgent, bench_settings, full_ticket, make_bench_shop
    from helpers.pg import Cluster, find_bin
    from seeding import read_template, seed_postgres

    bin_dir = find_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl were not found")
    data = make_bench_shop(tmp_path / "data", 2)
    template_agent = TimedAgent(bench_settings(tmp_path / "template", data))
    full_ticket(template_agent, OrderPool(1, 2).take())
    run_id = template_agent.store.runs(1)[0].id
    template = read_template(template_agent.store, run_id, tmp_path / "template")
    cluster = Cluster(bin_dir, options="-c max_connections=10 -c max_locks_per_transaction=10"
                      ).start()
    try:
        agent = TimedAgent(bench_settings(tmp_path / "output", data,
                                          database_url=cluster.create("small_locks")))
        seed_postgres(agent.store, template, 3000, batch=250)
        assert agent.store.verify_audit() is None
        [(stale,)] = agent.store.query("SELECT COUNT(*) FROM runs WHERE desk_dirty = 1")
        assert stale == 0
        seeded = _desk_rows(agent.store)
        assert len(seeded) == 3000
        assert _recomputed_desk(agent.store) == seeded
        agent.store.close()
    finally:
        cluster.stop()


def test_sqlite_seeding_writes_each_desk_row_as_the_refresh_would(tmp_path) -> None:
    """Seeded runs carry their desk columns (no refresh one statement per row afterwards)."""
    from benchlib import OrderPool, TimedAgent, bench_settings, full_ticket, make_bench_shop
    from seeding import read_template, seed_sqlite

    data = make_bench_shop(tmp_path / "data", 2)
    template_agent = TimedAgent(bench_settings(tmp_path / "template", data))
    full_ticket(template_agent, OrderPool(1, 2).take())
    run_id = template_agent.store.runs(1)[0].id
    template = read_template(template_agent.store, run_id, tmp_path / "template")
    agent = TimedAgent(bench_settings(tmp_path / "output", data))
    seed_sqlite(agent.store, tmp_path / "output", template, 30)
    [(stale,)] = agent.store.query("SELECT COUNT(*) FROM runs WHERE desk_dirty = 1")
    assert stale == 0
    seeded = _desk_rows(agent.store)
    assert len(seeded) == 30 and _recomputed_desk(agent.store) == seeded
    assert agent.store.verify_audit() is None
