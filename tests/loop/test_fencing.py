"""One owner per run, provably: fencing tokens, the heartbeat, the database's clock, replies.

A run is advanced by whoever holds its lease. These tests make a second owner appear the ways
it happens for real (a process paused past its lease, a process whose clock runs ahead, two
replies at once) and check that exactly one of them gets to write: on the loop's store, and on
a small agent that is not the refund desk (tests/helpers/credit.py). The desk's own (its
terminal's processes, Maya's requests) are tests/desk/test_desk_fencing.py; two processes
advancing one credit run are tests/loop/test_credit_crash.py.
"""

from __future__ import annotations

import threading
import time

import pytest
from helpers.credit import ANA, EMAIL, STRANGER, CreditDesk

from refund_agent import LeaseLost, NotFound, RunBusy, RunNotReady, RunStatus, Store


def _wait_for(predicate, timeout: float = 30.0, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(every)


# -- the store's rule --------------------------------------------------------------------------

def test_every_write_of_a_replaced_owner_is_refused(tmp_path):
    store = Store(tmp_path / "s.sqlite3", lease_seconds=0.2)
    run = store.create_run(sender="a@example.com", sender_name="A", subject="s", email="e")
    old = store.acquire(run.id, "old")
    with pytest.raises(RunBusy):
        store.acquire(run.id, "new")          # fresh and alive: nobody may take it
    time.sleep(0.3)                            # the owner stopped renewing (paused, say)
    new = store.acquire(run.id, "new")
    assert new.epoch == old.epoch + 1
    writes = {
        "response": lambda lease: store.record_response(
            lease, response_id="resp_x", calls=[], steps=[], usage={}, replies_sent=[]),
        "output": lambda lease: store.record_output(lease, "call_x", "{}", []),
        "renew": store.renew,
        "check": store.check_lease,
        "cost": lambda lease: store.add_cost(lease, {}, None),
        "approval": lambda lease: store.queue_approval(
            lease, response_id="r", call_id="c", subject="A1", title="s", customer="a",
            price=lambda held: "never priced"),
        "reply": lambda lease: store.add_reply(run.id, "hi", True, lease=lease),
        "release": lambda lease: store.release(lease, RunStatus.DONE),
    }
    for name, write in writes.items():
        with pytest.raises(LeaseLost):
            write(old)
        assert store.run(run.id).requests == 0, name
    store.renew(new)
    store.release(new, RunStatus.DONE)
    assert store.run(run.id).status == RunStatus.DONE


def test_lease_epoch_reads_the_stored_fencing_token(tmp_path):
    """Store.lease_epoch is the public reader beyond.ipynb's fencing cell checks a claim
    with: it follows every taking of the lease (acquire, claim) and outlives a release."""
    store = Store(tmp_path / "s.sqlite3", lease_seconds=0.05)
    run = store.create_run(sender="a@example.com", sender_name="A", subject="s", email="e")
    assert store.lease_epoch(run.id) == 0
    first = store.acquire(run.id, "first")
    assert store.lease_epoch(run.id) == first.epoch == 1
    time.sleep(0.1)
    claimed = store.claim("second")
    assert claimed is not None and store.lease_epoch(run.id) == claimed.epoch == 2
    store.release(claimed, RunStatus.DONE)
    assert store.lease_epoch(run.id) == 2
    with pytest.raises(NotFound):
        store.lease_epoch("run_missing")


def test_lease_expiry_reads_the_databases_clock_not_the_processes(tmp_path, monkeypatch):
    store = Store(tmp_path / "s.sqlite3", lease_seconds=60)
    run = store.create_run(sender="a@example.com", sender_name="A", subject="s", email="e")
    store.acquire(run.id, "first")
    # This process's clock jumps 16 minutes ahead; the lease is still fresh by the database's.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 16 * 60)
    with pytest.raises(RunBusy):
        Store(tmp_path / "s.sqlite3", lease_seconds=60).acquire(run.id, "second")


# -- the heartbeat ----------------------------------------------------------------------------

def test_a_heartbeat_for_the_whole_advance_still_closes_the_stream_of_a_lost_lease(tmp_path):
    """Renewal keeps its guarantee across requests: once a renewal finds the lease taken, the
    stream open then, or the next one attached, is closed, and check() raises LeaseLost."""
    from refund_agent.streaming import Heartbeat

    store = Store(tmp_path / "s.sqlite3", lease_seconds=0.3)
    run_id = store.create_run(sender="a@example.com", sender_name="A", subject="s",
                              email="e").id
    lease = store.acquire(run_id, "one")

    class Stream:
        closed = False

        def close(self) -> None:
            self.closed = True

    with Heartbeat(store, lease) as heartbeat:
        store.execute("UPDATE runs SET lease_token = 'other', lease_epoch = lease_epoch + 1"
                      " WHERE id = ?", (run_id,))
        _wait_for(lambda: heartbeat.lost is not None, timeout=10)
        later = Stream()
        heartbeat.attach(later)
        assert later.closed
        with pytest.raises(LeaseLost):
            heartbeat.check()
    store.close()


def test_one_advance_of_several_requests_starts_one_heartbeat(credit: CreditDesk, monkeypatch):
    """The lease heartbeat is a thread per advance, not one started and joined per model
    request."""
    started: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == "lease-heartbeat":
            started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    run = credit.advance(credit.start(ANA, EMAIL).id)
    assert run.status == RunStatus.WAITING and run.requests >= 2
    assert started == ["lease-heartbeat"]
    approval = credit.store.run_approvals(run.id)[-1]
    credit.approve(approval.id, approval.fingerprint, by="Dana Kim")
    started.clear()
    run = credit.advance(run.id)
    assert run.status == RunStatus.DONE and run.requests >= 3
    assert started == ["lease-heartbeat"]


# -- replies: accepted and stored once, or refused and not stored -------------------------------

def test_two_replies_at_once_one_is_stored(credit: CreditDesk):
    run = credit.advance(credit.start(STRANGER, EMAIL).id)
    assert run.status == RunStatus.DONE
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def reply(text: str) -> None:
        barrier.wait()
        try:
            credit.add_reply(run.id, text)
            outcomes.append("accepted")
        except RunNotReady as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=reply, args=(t,)) for t in ("First", "Second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("accepted") == 1
    (refused,) = [o for o in outcomes if o != "accepted"]
    assert "was not saved" in refused
    assert len(credit.store.replies(run.id)) == 1


def test_a_reply_while_the_run_works_is_refused_and_not_stored(credit: CreditDesk):
    run = credit.start(ANA, EMAIL)
    lease = credit.store.acquire(run.id, "someone")      # a live process is on it
    with pytest.raises(RunNotReady, match="was not saved"):
        credit.add_reply(run.id, "Any news?")
    assert credit.store.replies(run.id) == []
    credit.store.release(lease, RunStatus.DONE)
    credit.add_reply(run.id, "Any news?")
    assert len(credit.store.replies(run.id)) == 1
