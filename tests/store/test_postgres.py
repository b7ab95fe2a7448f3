"""What only the PostgreSQL backend has: a clear word for a bad URL or an unreachable server, the
stand-ins' records in one table every host sees, reconciling that table, claims across hosts,
LISTEN/NOTIFY, and three worker processes on three "hosts" sharing one database under kills.

The shared reliability tests (crash matrix, races, soak, money) run on both backends; see the
``backend`` fixture in conftest.py and tests/helpers/pg.py for the throwaway server.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from benchlib import clone_id, make_bench_shop, start_ticket
from helpers.cli import DATA, cli_env, run_cli
from helpers.crash import assert_held, measure, read_outcome, record

from offline_model import OfflineServer
from refund_agent import Settings
from refund_agent.config import PROJECT_ROOT, load_settings
from refund_agent.desk import Agent
from refund_agent.desk.reconcile import reconcile
from refund_agent.errors import (
    AlreadyDecided,
    ConfigError,
    DecisionRefused,
    IdempotencyConflict,
    RunNotReady,
    StoreError,
)
from refund_agent.models import RunStatus
from refund_agent.store import Store


@pytest.fixture
def pg_url(pg_cluster, tmp_path):
    return pg_cluster.create(f"t_{uuid.uuid4().hex[:16]}")


def test_a_url_that_is_not_postgresql_is_refused(monkeypatch):
    monkeypatch.setenv("REFUND_AGENT_DATABASE_URL", "mysql://db/refunds")
    with pytest.raises(ConfigError, match="must be a postgresql:// URL"):
        load_settings()


def test_an_unreachable_server_is_a_message_not_a_traceback(tmp_path):
    # Port 9 on loopback: nothing listens there.
    proc = run_cli(tmp_path / "out", "queue",
                   REFUND_AGENT_DATABASE_URL="postgresql://refunds:s3cret@127.0.0.1:9/refunds")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "Cannot reach the PostgreSQL database at" in proc.stderr
    assert "s3cret" not in proc.stderr  # the password is never echoed


def test_a_malformed_url_is_a_message(pg_cluster):
    with pytest.raises(StoreError, match="not a usable PostgreSQL URL"):
        Store(pg_cluster.url("x") + "?nosuchoption=1")


def test_the_ledger_pays_a_key_once_for_every_host(pg_url):
    """Two stores (standing for two hosts) share the payments' records through the table."""
    a, b = Store(pg_url), Store(pg_url)
    b.host = "another-host"
    made = []
    record_a, reused_a = a.ledger_once("refunds", "call_1", {"cents": 4800},
                                       lambda: made.append(1) or {"refund_id": "re_1"})
    record_b, reused_b = b.ledger_once("refunds", "call_1", {"cents": 4800},
                                       lambda: made.append(2) or {"refund_id": "re_2"})
    assert (reused_a, reused_b) == (False, True) and made == [1]
    assert record_a == record_b and record_b["refund_id"] == "re_1"
    with pytest.raises(IdempotencyConflict):
        b.ledger_once("refunds", "call_1", {"cents": 9900}, lambda: {"refund_id": "re_3"})
    assert [json.loads(r)["refund_id"] for _, r in a.ledger_rows("refunds")] == ["re_1"]


def test_first_requests_at_the_same_moment_make_one_record(pg_url):
    stores = [Store(pg_url) for _ in range(8)]
    start, results = threading.Barrier(8), []

    def pay(store: Store) -> None:
        start.wait()
        results.append(store.ledger_once("outbox", "call_x", {"to": "a@b.c"},
                                         lambda: {"message_id": uuid.uuid4().hex}))

    threads = [threading.Thread(target=pay, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(reused for _, reused in results) == [False] + [True] * 7
    assert len({r["message_id"] for r, _ in results}) == 1


def _settings(tmp_path: Path, url: str, **kw) -> Settings:
    return Settings(api_key="", data_dir=DATA, output_dir=tmp_path / "output", max_retries=2,
                    timeout=30.0, database_url=url, **kw)


def test_an_approved_refund_end_to_end_and_reconciled(tmp_path, pg_url):
    agent = Agent(_settings(tmp_path, pg_url))
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING
    (approval,) = agent.store.approvals("pending")
    with pytest.raises(DecisionRefused):
        agent.decide(approval.id, False, "Dana", None,   # a rejection needs a note
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.decide(approval.id, True, "Dana",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    with pytest.raises(AlreadyDecided):
        agent.decide(approval.id, True, "Sam",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(run.id).status == RunStatus.DONE
    assert len(agent.payments.refunds()) == 1 and len(agent.outbox.messages()) >= 1
    assert not (tmp_path / "output" / "refunds.log").exists()  # nothing on this host's disk
    assert reconcile(agent.store, agent.settings.output_dir) is None
    # A forged payment in the shared table is caught, as a forged line in refunds.log is.
    forged = {"idempotency_key": "call_forged", "refund_id": "re_forged",
              "request": {"order_id": "A1043", "amount_cents": 100,
                          "lines": [{"line": "MUG-01", "reason": "damaged", "amount_cents": 100}],
                          "reason": "x"}}
    agent.store.execute("INSERT INTO ledger(log, key, record) VALUES (?, ?, ?)",
                        ("refunds", "call_forged", json.dumps(forged)))
    problem = reconcile(agent.store, agent.settings.output_dir)
    assert problem and "the ledger table's refunds row" in problem and "forged" in problem


def test_a_dead_hosts_run_is_claimed_by_another_host_after_its_lease_expires(tmp_path, pg_url):
    a = Store(pg_url, lease_seconds=1.0)
    a.host = "host-a"
    run = a.create_run(sender="x@example.com", sender_name="X", subject="s", email="hi")
    taken = a.claim("token-a")
    assert taken is not None and taken.run_id == run.id
    b = Store(pg_url, lease_seconds=1.0)
    b.host = "host-b"
    # host-a's pid cannot be checked from host-b: its lease holds until it expires.
    assert b.claim("token-b") is None
    time.sleep(1.2)
    lease = b.claim("token-b")
    assert lease is not None and lease.epoch == taken.epoch + 1
    from refund_agent.errors import LeaseLost
    with pytest.raises(LeaseLost):  # the fencing token stops the old owner if it wakes up
        a.renew(taken)


def test_the_change_counter_moves_on_notify_from_another_connection(pg_url):
    watcher, writer = Store(pg_url), Store(pg_url)
    before = watcher.change_counter()
    writer.create_run(sender="x@example.com", sender_name="X", subject="s", email="hi")
    # Without a notification the counter never moves and the wait ends at its timeout with the
    # same value; no wall-clock budget on top (a busy machine is not a lost notification).
    after = watcher.wait_for_change(before, timeout=5)
    assert after != before
    assert watcher.pushes_changes


def test_a_reply_to_a_run_another_host_advances_is_refused(tmp_path, pg_url):
    a = Store(pg_url)
    a.host = "host-a"
    run = a.create_run(sender="x@example.com", sender_name="X", subject="s", email="hi")
    a.claim("token-a")
    with pytest.raises(RunNotReady):
        Store(pg_url).add_reply(run.id, "hello?", simulated=False)


# -- three hosts, one database, random kills -------------------------------------------------

HOSTS = ("host-a", "host-b", "host-c")
TICKETS = int(os.environ.get("REFUND_AGENT_HOSTS_TICKETS", "200"))
LEASE = 3.0   # seconds: how long a killed host's runs wait before another host takes them


def _worker(root: Path, host: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """``refund-agent work`` as one host: its own working directory and output folder."""
    home = root / host
    home.mkdir(exist_ok=True)
    log = open(home / "worker.log", "a")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "refund_agent", "work"],
                            cwd=home, stdout=log, stderr=subprocess.STDOUT, text=True,
                            env=cli_env(home / "output", REFUND_AGENT_HOST_ID=host, **env))


@pytest.mark.timeout(900)
def test_three_hosts_share_one_database_under_random_kills(tmp_path, pg_url):
    """200 tickets, three worker processes standing for three hosts (each its own working
    directory and output folder, its own host id, so a pid on one means nothing to another),
    one PostgreSQL database and one offline model service. Most tickets are a damaged item on
    an order of their own (a shop with 200 copies of Maya's order), every tenth is past the
    window. A person decides every proposal as it appears (two in three approved, the rest
    rejected) while a worker is killed (SIGKILL) every second or so and restarted. Every refund
    is paid once, every email sent once, every decision once."""
    model = OfflineServer(tmp_path / "model.sqlite3").start()
    data = make_bench_shop(tmp_path / "data", TICKETS)
    env = {"REFUND_AGENT_DATABASE_URL": pg_url, "REFUND_AGENT_OFFLINE_URL": model.base_url,
           "REFUND_AGENT_LEASE_SECONDS": str(LEASE), "PYTHONPATH": str(PROJECT_ROOT),
           "REFUND_AGENT_DATA": str(data)}
    desk = Agent(_settings(tmp_path / "desk", pg_url).with_(data_dir=data))
    past = desk.shop.sample("past-window")
    for i in range(TICKETS):
        if i % 10 == 9:
            desk.start(past.sender, past.body, subject=f"{past.subject} #{i}",
                       sender_name=past.from_name, kind=past.key)
        else:
            start_ticket(desk, clone_id(i + 1))
    rng = random.Random(int(os.environ.get("REFUND_AGENT_HOSTS_SEED", "15")))
    workers = {host: _worker(tmp_path, host, env) for host in HOSTS}
    kills, decided, started = Counter(), Counter(), time.monotonic()
    next_kill = time.monotonic() + rng.uniform(0.5, 1.5)
    try:
        while True:
            for approval in desk.store.approvals("pending", limit=50):
                approve = decided["total"] % 3 != 2
                try:
                    desk.decide(approval.id, approve, "Dana Kim",
                                None if approve else "Not covered, sorry.",
                                fingerprint=desk.store.approval(approval.id).fingerprint)
                    decided["approved" if approve else "rejected"] += 1
                    decided["total"] += 1
                except (AlreadyDecided, DecisionRefused):
                    decided["refused"] += 1
            if time.monotonic() >= next_kill:
                host = rng.choice(HOSTS)
                workers[host].send_signal(signal.SIGKILL)
                workers[host].wait(timeout=10)
                kills[host] += 1
                workers[host] = _worker(tmp_path, host, env)
                next_kill = time.monotonic() + rng.uniform(0.5, 1.5)
            counts = desk.store.inbox_counts()
            if counts[RunStatus.DONE] + counts[RunStatus.ASKED] == TICKETS:
                break
            assert time.monotonic() - started < 780, f"not finished: {dict(counts)}"
            time.sleep(0.1)
    finally:
        for proc in workers.values():
            proc.send_signal(signal.SIGTERM)
        for proc in workers.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        model.close()
    seconds = time.monotonic() - started
    from helpers.pg import Backend
    backend = Backend("postgresql", None)
    backend.url = lambda _output: pg_url  # type: ignore[method-assign]
    backend.cluster = object()  # type: ignore[assignment] - only .postgres and .url are read
    outcome = read_outcome(tmp_path, backend)
    metrics = measure(outcome)
    metrics.pop("runs_not_done")  # a run may end asking the customer a question (asked)
    metrics["runs_not_finished"] = sum(1 for r in outcome.runs
                                       if r["status"] not in ("done", "asked"))
    hosts_worked = {s for s in desk.store.query("SELECT DISTINCT lease_host FROM runs")}
    record("many_hosts", backend="postgresql", hosts=len(HOSTS), tickets=TICKETS,
           kills=sum(kills.values()), decisions=decided["total"],
           refunds=len(outcome.refunds), emails=len(outcome.emails),
           seconds=round(seconds, 1), **metrics)
    assert_held(metrics, f"three hosts, {sum(kills.values())} kills")
    assert len(outcome.runs) == TICKETS
    assert sum(kills.values()) >= 5, "nothing much was killed: the test tested little"
    damaged = TICKETS - TICKETS // 10
    assert decided["total"] == damaged, decided      # each damaged ticket decided once
    assert len(outcome.refunds) == decided["approved"] >= damaged // 2
    assert len(hosts_worked) >= 2, hosts_worked
    assert reconcile(desk.store, desk.settings.output_dir) is None
    print(f"\nthree hosts: {TICKETS} tickets, {sum(kills.values())} kills {dict(kills)}, "
          f"{decided['total']} decisions, {len(outcome.refunds)} refunds, "
          f"{len(outcome.emails)} emails, {seconds:.0f} s", file=sys.stderr)


@pytest.mark.postgres
def test_only_commits_a_page_shows_wake_the_pages(pg_cluster):
    """Every commit used to NOTIFY, so a transaction that wrote nothing (a worker's claim that
    found no run, a lease renewal) moved every page's change counter and redrew idle tabs
    (issue #37: an idle PostgreSQL tab cost 3.6 % server / 18 % browser CPU). The listener
    here counts the notifications that arrive before a marker sent after the writes."""
    import psycopg

    from refund_agent.store.postgres import CHANNEL

    url = pg_cluster.create(f"notify_{uuid.uuid4().hex[:8]}")
    store = Store(url)
    run_id = store.create_run(sender="a@example.com", sender_name="A", subject="s",
                              email="e").id
    lease = store.acquire(run_id, uuid.uuid4().hex)
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")

        def heard() -> list[str]:
            psycopg.connect(url, autocommit=True).execute(f"NOTIFY {CHANNEL}, 'marker'")
            got = []
            for note in listener.notifies(timeout=30):
                if note.payload == "marker":
                    return got
                got.append(note.payload)
            raise AssertionError("the marker never came")

        assert store.claim(uuid.uuid4().hex) is None   # nothing to claim: writes nothing
        store.renew(lease)                               # the lease's own column
        with store.transaction() as db:                  # reads only
            db.execute("SELECT COUNT(*) FROM runs")
        assert heard() == []
        store.release(lease, RunStatus.DONE)             # a status a page shows
        assert heard() == [""]
    store.close()
