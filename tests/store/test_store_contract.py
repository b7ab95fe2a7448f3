"""The store's contract, on both engines: what every caller may rely on, whichever database.

Each test drives the public ``Store`` API directly (no model, no agent), once on SQLite and once
on PostgreSQL (the ``backend`` fixture), on one store per engine for the module (each test makes
its own runs and orders' lines, so they do not see each other's rows), plus a fresh store where
a test changes something for good (tampering with the audit log). It gathers what the
backend-parametrized suites check about the store, so a new engine, or a change to either one,
is held to the same answers in well under a minute.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from helpers.cli import DATA

from refund_agent.desk.records import DeskStore
from refund_agent.desk.shop import Shop
from refund_agent.desk.tools import IssueRefund, ShopTools
from refund_agent.errors import (
    AlreadyDecided,
    DecisionRefused,
    IdempotencyConflict,
    LeaseLost,
    NotFound,
    RunBusy,
    RunNotReady,
    StoreError,
)
from refund_agent.models import RunStatus, call_key
from refund_agent.store import (
    SCHEMA_VERSION,
    Lease,
    PostgresStore,
    SQLiteStore,
    Store,
)

MAYA = "maya.chen@example.com"
SHOP = Shop(DATA)


def _open(backend, folder, name: str, **kwargs) -> Store:
    if backend.postgres:
        return DeskStore(backend.cluster.create(f"contract_{name}_{uuid.uuid4().hex[:8]}"),
                         **kwargs)
    return DeskStore(folder / f"{name}.sqlite3", **kwargs)


@pytest.fixture(scope="module")
def made(backend, tmp_path_factory):
    """A factory of stores on this module's engine (one folder, one database each)."""
    folder = tmp_path_factory.mktemp(f"contract-{backend.name}")
    opened: list[Store] = []

    def make(name: str, **kwargs) -> Store:
        store = _open(backend, folder, name, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture(scope="module")
def store(made) -> Store:
    return made("shared")


def new_run(store: Store, sender: str = MAYA, subject: str = "Cracked") -> str:
    return store.create_run(sender=sender, sender_name="Maya Chen", subject=subject,
                            email="My order A1043 arrived cracked.").id


def respond(store: Store, lease: Lease, calls: list[tuple[str, str, str]], **kwargs) -> str:
    response_id = f"resp_{uuid.uuid4().hex}"
    store.record_response(lease, response_id=response_id, calls=calls, steps=[],
                          usage=kwargs.pop("usage", {}), replies_sent=[], **kwargs)
    return response_id


def token() -> str:
    return uuid.uuid4().hex


def queue(store: Store, lines: tuple[str, ...] = ("POUR-GLS-01", "MUG-STN-2")):
    """A run that proposes refunding ``lines`` of A1043 (damaged): (run id, lease, outcome)."""
    run_id = new_run(store)
    lease = store.acquire(run_id, token())
    call_id = f"call_{uuid.uuid4().hex[:8]}"
    args = IssueRefund.model_validate(
        {"order_id": "A1043", "lines": [{"line": line, "reason": "damaged"} for line in lines],
         "amount": None, "summary": "Cracked."})
    response_id = respond(store, lease, [(call_id, "issue_refund", args.model_dump_json())])
    tools = ShopTools(SHOP, MAYA, store.held_lines)
    outcome = store.queue_approval(lease, response_id=response_id, call_id=call_id,
                                   subject="A1043", title="Cracked.", customer=MAYA,
                                   price=lambda held: tools.quote(args, held))
    return run_id, lease, outcome


def requote(approval, kept, held):
    args = IssueRefund.model_validate(
        {"order_id": approval.order_id, "amount": None, "summary": "Cracked.",
         "lines": [{"line": line, "reason": "damaged"} for line in kept]})
    return ShopTools(SHOP, MAYA, lambda *_: held).quote(args, held)


def free_a1043(store: Store) -> None:
    """Let the next test propose A1043's lines again: whatever holds them is rejected."""
    for approval in store.approvals("pending", limit=-1):
        if approval.order_id == "A1043":
            store.decide(approval.id, False, "Contract", "Making room.")
    # An approved refund keeps its lines for good: the contract's approvals are undone by hand.
    store.execute("UPDATE approval_lines SET held = 0 WHERE order_id = 'A1043'")


# -- the engine and the schema ---------------------------------------------------------------

def test_store_opens_the_engine_for_its_target_at_the_current_schema(backend, store):
    assert isinstance(store, PostgresStore if backend.postgres else SQLiteStore)
    assert store.shared is backend.postgres and store.engine == backend.name
    assert store.schema_version() == SCHEMA_VERSION
    # Only the engine that can do it has these: no method that raises on the other one.
    assert hasattr(store, "bulk_load") is backend.postgres
    assert hasattr(store, "writers_held_off") is not backend.postgres
    assert store.integrity_ok() and store.moved_to() is None and store.moved_message() is None


def test_a_commit_moves_the_change_counter(store):
    before = store.change_counter()
    new_run(store)
    assert store.wait_for_change(before, timeout=5) != before


def test_errors_are_store_errors_naming_the_store(store):
    with pytest.raises(StoreError) as caught:
        store.query("SELECT * FROM no_such_table")
    assert str(store.path) in str(caught.value)
    new_run(store)   # the connection is still usable afterwards
    with pytest.raises(StoreError):
        store.execute("INSERT INTO no_such_table VALUES (1)")
    assert store.query("SELECT 1")[0][0] == 1


# -- runs and the inbox ------------------------------------------------------------------------

def test_a_run_exists_with_its_email_before_any_request(store):
    run = store.run(new_run(store))
    assert run.status == RunStatus.WORKING and run.requests == 0 and run.transcript_complete
    (email,) = store.steps(run.id)
    assert email.kind == "email" and email.data["from"] == MAYA
    assert store.last_step_id(run.id) == email.id
    assert run.id in [r.id for r in store.runs(limit=-1)]
    with pytest.raises(NotFound):
        store.run("run_nope")


def test_inbox_search_ignores_case_and_takes_wildcards_literally(store):
    marker = uuid.uuid4().hex[:8]
    plain = new_run(store, subject=f"Kettle {marker} leaks")
    odd = new_run(store, subject=f"100% {marker}_x broken")
    found = lambda text: [r.run.id for r in store.inbox(text, limit=1000)]  # noqa: E731
    assert found(f"kettle {marker.upper()}") == [plain]        # ASCII case ignored on both
    assert found(f"{marker}_x") == [odd] and found(f"100% {marker}") == [odd]
    assert found(f"{marker}%") == []                             # % is a character, not "any"
    counts = store.inbox_counts(marker)
    assert counts[RunStatus.WORKING] == 2 and set(counts) == set(RunStatus)
    assert [r.run.id for r in store.inbox(marker, {RunStatus.DONE})] == []
    assert store.latest_run({RunStatus.WORKING}).id == odd


# -- leases and fencing ------------------------------------------------------------------------

def test_a_lease_is_held_by_one_process_and_grows_its_epoch(store):
    run_id = new_run(store)
    first = store.acquire(run_id, "first")
    assert first.epoch == 1 and store.acquire(run_id, "first").epoch == 2  # same holder again
    with pytest.raises(RunBusy):
        store.acquire(run_id, "second")
    assert run_id in [r.id for r in store.leased_runs()]
    assert run_id not in [r.id for r in store.orphaned_runs()]
    with pytest.raises(NotFound):
        store.acquire("run_nope", "x")


def test_a_lease_taken_over_fences_every_write_of_the_old_holder(store):
    run_id = new_run(store)
    old = store.acquire(run_id, "old")
    # The holder stopped renewing (paused, cut off) for longer than a lease lasts.
    store.execute("UPDATE runs SET lease_at = lease_at - ? WHERE id = ?",
                  (store.lease_seconds + 1, run_id))
    assert run_id in [r.id for r in store.orphaned_runs()]
    new = store.acquire(run_id, "new")
    assert new.epoch == old.epoch + 1
    for write in (lambda: store.check_lease(old), lambda: store.renew(old),
                  lambda: respond(store, old, []),
                  lambda: store.record_output(old, "call_x", "{}", []),
                  lambda: store.add_cost(old, {"cost_ticks": 1}, None),
                  lambda: store.add_reply(run_id, "hi", simulated=True, lease=old),
                  lambda: store.release(old, RunStatus.DONE)):
        with pytest.raises(LeaseLost):
            write()
    assert store.run(run_id).requests == 0           # nothing of the old holder's landed
    store.renew(new)
    store.release(new, RunStatus.DONE, step=("stopped", {"by": "contract"}))
    run = store.run(run_id)
    assert run.status == RunStatus.DONE and run.lease_pid is None
    assert store.steps(run_id)[-1].kind == "stopped"


def test_claim_takes_a_run_nobody_holds_and_skips_held_ones(store):
    held = new_run(store)
    store.acquire(held, "holder")
    claimed = []
    while (lease := store.claim(token())) is not None:
        claimed.append(lease.run_id)
        store.release(lease, RunStatus.DONE)
    assert held not in claimed
    assert store.claim(token()) is None


# -- responses, calls and the transcript -----------------------------------------------------

def test_a_response_saves_its_calls_keys_order_ids_and_transcript(store):
    run_id = new_run(store)
    lease = store.acquire(run_id, token())
    calls = [("call_a", "lookup_order", '{"order_id": " A1043 "}'),
             ("call_b", "lookup_order", '{"order_id": "A10'),       # cut short by the model
             ("call_a", "lookup_order", '{"order_id": "A1043"}')]   # the same id again
    items = [("input", {"role": "user", "content": "hi"}),
             ("output", {"type": "message", "content": "ok"})]
    response_id = respond(store, lease, calls, transcript=items,
                          usage={"cost_ticks": 5, "input_tokens": 7})
    saved = store.calls(response_id)
    assert [c.call_id for c in saved] == ["call_a", "call_b", "call_a"]
    assert [c.key for c in saved] == [call_key(run_id, "call_a"), call_key(run_id, "call_b"),
                                      None]
    assert saved[0].order_id == "A1043" and saved[1].order_id is None
    assert saved[2].output and "repeats call id" in saved[2].output   # answered, never run
    store.record_output(lease, "call_a", '{"found": true}', [("result", {"call_id": "call_a"})])
    store.record_output(lease, "call_a", '{"found": false}', [])   # a re-run changes nothing
    assert store.calls(response_id)[0].output == '{"found": true}'
    run = store.run(run_id)
    assert (run.last_response_id, run.requests, run.cost_ticks, run.input_tokens) == (
        response_id, 1, 5, 7)
    assert run.transcript_items == 2
    assert [(e.origin, e.item) for e in store.transcript(run_id)] == items
    assert run_id not in [r.id for r in store.runs_without_transcript()]
    store.add_cost(lease, {"cost_ticks": 2}, ("simulated", {}))
    assert store.run(run_id).cost_ticks == 7 and store.run(run_id).requests == 2
    assert any(c.run_id == run_id for c in store.calls_named("lookup_order"))


def test_what_a_commit_returns_is_what_a_read_after_it_finds(store):
    """The loop carries on from what acquire_run and record_response return instead of
    reading the run and the calls back (issue #37): they must be what a read would find."""
    run_id = new_run(store)
    lease, acquired = store.acquire_run(run_id, token())
    assert acquired.model_dump(exclude={"desk_status"}) == store.run(run_id).model_dump(
        exclude={"desk_status"})
    seqs = []
    for n, calls in enumerate(([("call_a", "lookup_order", '{"order_id": "A1043"}')],
                               [("call_b", "lookup_order", "{}"),
                                ("call_a", "lookup_order", "{}")])):   # a repeat, answered
        response_id = f"resp_{uuid.uuid4().hex}"
        recorded = store.record_response(
            lease, response_id=response_id, calls=calls, steps=[], usage={"cost_ticks": 3},
            replies_sent=[], transcript=[("output", {"n": n, "i": i}) for i in range(3)])
        assert recorded.calls == store.calls(response_id)
        assert recorded.run.model_dump(exclude={"desk_status"}) == store.run(
            run_id).model_dump(exclude={"desk_status"})
        seqs = [e.seq for e in store.transcript(run_id)]
    assert recorded.run.requests == 2 and recorded.run.cost_ticks == 6
    assert seqs == list(range(6))   # numbered on from the run's last item, by the INSERT
    assert [e.item for e in store.transcript(run_id)] == [
        {"n": n, "i": i} for n in range(2) for i in range(3)]


def test_a_queued_approval_is_returned_as_a_read_finds_it(store):
    free_a1043(store)
    _run_id, _lease, approval = queue(store)
    assert approval == store.approval(approval.id) and len(approval.lines) == 3  # + shipping


def test_another_agents_run_is_refused_by_acquire_before_anything_is_written(store):
    run_id = new_run(store)
    before = (store.run(run_id), store.steps(run_id))
    with pytest.raises(RunNotReady, match="only that agent may advance"):
        store.acquire_run(run_id, token(), "some.other.Agent")
    assert (store.run(run_id), store.steps(run_id)) == before   # no lease, no epoch, no step
    lease, run = store.acquire_run(run_id, token(), before[0].agent)
    assert lease.epoch == 1 and run.status == RunStatus.WORKING


# -- approvals: queue, decide, ask, expire ---------------------------------------------------

def test_a_proposal_holds_its_lines_and_waits(store):
    free_a1043(store)
    run_id, _lease, approval = queue(store)
    assert approval.status == "pending" and approval.amount_cents > 0
    assert store.run(run_id).status == RunStatus.WAITING
    # Both items as damaged: the shipping is owed too, a line of its own.
    assert set(store.held_lines("A1043")) == {"POUR-GLS-01", "MUG-STN-2", "SHIPPING"}
    assert store.held_lines("A1043", except_id=approval.id) == {}
    assert store.find_approval(approval.id) == store.approval(approval.id)
    assert approval.id in [a.id for a in store.approvals("pending")]
    assert store.pending_count() >= 1 and store.run_approvals(run_id)[0].id == approval.id
    # Another ticket about the same lines is refused by the price, inside its transaction.
    _run, _lease2, refused = queue(store)
    assert isinstance(refused, str)
    with pytest.raises(NotFound):
        store.approval("nope")


def test_a_decision_is_a_compare_and_set_and_the_loser_is_audited(store):
    free_a1043(store)
    run_id, lease, approval = queue(store)
    store.release(lease, RunStatus.WAITING)
    decided = store.decide(approval.id, True, "Dana Kim", "ok", keep=["POUR-GLS-01"],
                           requote=requote)
    assert decided.status == "approved" and decided.decided_by == "Dana Kim"
    assert {line.line: line.decision for line in decided.lines} == {
        "POUR-GLS-01": "approved", "MUG-STN-2": "declined", "SHIPPING": "declined"}
    assert set(store.held_lines("A1043")) == {"POUR-GLS-01"}      # the declined line is free
    assert run_id in [r.id for r in store.decided_but_waiting()]
    with pytest.raises(AlreadyDecided) as late:
        store.decide(approval.id, False, "Lee Park", "no")
    assert (late.value.status, late.value.decided_by) == ("approved", "Dana Kim")
    events = [(e.event, e.actor) for e in store.audit() if e.approval_id == approval.id]
    assert events == [("requested", "agent"), ("approved", "Dana Kim"), ("ignored", "Lee Park")]


def test_a_refused_approval_stays_pending_with_its_lines(store):
    free_a1043(store)
    _run, _lease, approval = queue(store)
    with pytest.raises(DecisionRefused):
        store.decide(approval.id, True, "Sam", None, limit_cents=1)      # over Sam's limit
    with pytest.raises(DecisionRefused):
        store.decide(approval.id, True, "Sam", None, keep=["NOT-A-LINE"])
    after = store.approval(approval.id)
    assert after.status == "pending" and all(line.decision is None for line in after.lines)
    assert set(store.held_lines("A1043")) == {line.line for line in after.lines}
    assert [e.event for e in store.audit() if e.approval_id == approval.id][-1] == "refused"


def test_reject_ask_and_expire_pay_nothing_and_free_the_lines(store):
    for close in ("rejected", "asked", "expired"):
        free_a1043(store)
        run_id, lease, approval = queue(store)
        store.release(lease, RunStatus.WAITING)
        if close == "rejected":
            closed = store.decide(approval.id, False, "Dana Kim", "Not damaged.")
        elif close == "asked":
            closed = store.ask(approval.id, "Dana Kim", "A photo, please?")
        else:
            assert approval.id not in [a.id for a in store.expire(7 * 86400)]   # too young
            store.execute("UPDATE approvals SET requested_at = requested_at - 8 * 86400"
                          " WHERE id = ?", (approval.id,))
            (closed,) = [a for a in store.expire(7 * 86400) if a.id == approval.id]
        assert closed.status == close and store.held_lines("A1043") == {}
        assert {line.decision for line in closed.lines} == {close}
        assert store.steps(run_id)[-1].data["decision"] == close


# -- replies ---------------------------------------------------------------------------------

def test_a_reply_is_taken_only_when_the_run_can_read_it(store):
    run_id = new_run(store)
    with pytest.raises(RunNotReady):
        store.add_reply(run_id, "Any news?", simulated=False)       # still working
    assert store.replies(run_id) == []
    lease = store.acquire(run_id, token())
    store.release(lease, RunStatus.DONE)
    reply = store.add_reply(run_id, "Thanks!", simulated=False)
    assert (reply.text, reply.simulated, reply.response_id) == ("Thanks!", False, None)
    assert store.run(run_id).status == RunStatus.WORKING
    lease = store.acquire(run_id, token())
    store.add_reply(run_id, "A simulated one.", simulated=True, lease=lease)
    assert [r.text for r in store.replies(run_id, unsent_only=True)] == [
        "Thanks!", "A simulated one."]
    assert store.run(run_id).simulated_replies == 1
    with pytest.raises(NotFound):
        store.add_reply("run_nope", "hi", simulated=False)


# -- accounts and the sign-in throttle -------------------------------------------------------

def test_accounts_are_unique_by_canonical_name_and_audited(store):
    name = f"Ines {uuid.uuid4().hex[:6]}"
    store.add_account(name, "approver", 5000, "scrypt$hash", by="admin")
    with pytest.raises(DecisionRefused):
        store.add_account(name.upper(), "lead", None, "scrypt$other", by="admin")
    (row,) = store.account_rows(name)
    assert (row["role"], row["limit_cents"]) == ("approver", 5000) and store.has_accounts()
    store.remove_account(name, by="admin")
    assert store.account_rows(name) == []
    with pytest.raises(NotFound):
        store.remove_account(name, by="admin")
    notes = [(e.event, e.actor) for e in store.audit() if name in (e.note or "")]
    assert notes == [("account_added", "admin"), ("account_removed", "admin")]


def test_failed_sign_ins_are_counted_by_the_database_clock_and_forgotten(store):
    key = f"lee {uuid.uuid4().hex[:6]}"
    assert store.sign_in_failures(key, 300.0) == (0, 0.0)
    store.sign_in_failed(key, "page 10.0.0.66", 300.0, key, "wrong password")
    store.sign_in_failed(key, "terminal", 300.0, key, "wrong password", slowed="waits 2 s")
    count, since = store.sign_in_failures(key, 300.0)    # by name, from every client
    assert count == 2 and 0 <= since < 60
    assert store.sign_in_failures("someone else", 300.0) == (0, 0.0)
    # A caller's own clock (tests): an hour on, the window has passed.
    assert store.sign_in_failures(key, 300.0, now=time.time() + 3600) == (0, 0.0)
    assert [(e.event, e.note) for e in store.audit() if e.actor == key][-2:] == [
        ("sign_in_failed", "wrong password"), ("sign_in_slowed", "waits 2 s")]
    store.sign_in_succeeded(key)
    assert store.sign_in_failures(key, 300.0) == (0, 0.0)


# -- the ledger --------------------------------------------------------------------------------

def test_ledger_once_makes_a_record_once_per_key(store):
    key, made_count = f"call_{uuid.uuid4().hex}", []

    def make() -> dict:
        made_count.append(1)
        return {"refund_id": f"re_{len(made_count)}"}

    record, reused = store.ledger_once("refunds", key, {"amount_cents": 100}, make)
    assert not reused and record["refund_id"] == "re_1" and record["host"] == store.host
    again, reused = store.ledger_once("refunds", key, {"amount_cents": 100}, make)
    assert reused and again == record and len(made_count) == 1
    with pytest.raises(IdempotencyConflict):
        store.ledger_once("refunds", key, {"amount_cents": 999}, make)
    assert store.ledger_find("refunds", key) == record
    assert store.ledger_find("outbox", key) is None
    assert key in [text for _, text in store.ledger_rows("refunds") if key in text][0]


# -- the audit chain ---------------------------------------------------------------------------

def test_the_audit_chain_verifies_and_catches_edits_and_removals(made):
    store = made("audit-" + uuid.uuid4().hex[:6])
    free_a1043(store)
    _run, lease, approval = queue(store)
    store.decide(approval.id, False, "Dana Kim", "Not damaged.")
    assert store.verify_audit() is None
    count, last = store.audit_head()
    assert count == len(store.audit()) == 2 and last == store.audit()[-1].id
    assert [e.event for e in store.audit(limit=1)] == ["rejected"]
    first = store.audit()[0]
    store.execute("UPDATE audit SET note = 'edited' WHERE id = ?", (first.id,))
    assert "was edited" in store.verify_audit()
    store.execute("UPDATE audit SET note = ? WHERE id = ?", (first.note, first.id))
    assert store.verify_audit() is None
    store.execute("DELETE FROM audit WHERE id = ?", (last,))
    assert "newest entries were removed" in store.verify_audit()
    # Nothing is written on top of a chain whose end was removed.
    with pytest.raises(StoreError, match="does not end where its anchor says"):
        store.add_account("Someone", "approver", None, "x", by="admin")


def test_another_thread_and_another_handle_see_the_same_store(store, backend):
    run_id = new_run(store)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(store.run(run_id).id))
    worker.start()
    worker.join()
    assert seen == [run_id]
    target = store.url if backend.postgres else store.path
    again = DeskStore(target)
    assert again.run(run_id).id == run_id and again.schema_version() == SCHEMA_VERSION
    again.close()


# -- the desk status each run keeps (schema 12) -------------------------------------------------

def test_each_run_keeps_its_desk_status_through_its_life(store):
    """Waiting, paid in part, escalated, taken: after every write the kept status is
    what desk_status.py computes, and the inbox counts and pages by it."""
    from helpers.desk import desk_drift

    from refund_agent.desk.status import DeskStatus

    def kept() -> tuple[DeskStatus, int]:
        (row,) = [(s, e) for rid, s, e, _at in store.desk_index() if rid == run_id]
        return row

    free_a1043(store)
    run_id, lease, approval = queue(store)
    store.release(lease, RunStatus.WAITING)
    assert kept() == (DeskStatus.WAITING, 0)
    store.decide(approval.id, True, "Dana Kim", None, keep=["POUR-GLS-01"])
    store.execute("UPDATE runs SET status = ? WHERE id = ?", (RunStatus.DONE, run_id))
    assert kept() == (DeskStatus.PARTLY_PAID, 0)
    store.execute("INSERT INTO escalations(key, run_id, kind, reason, raised_by, raised_at)"
                  " VALUES (?,?,?,?,?,?)", (f"k-{run_id}", run_id, "manager", "r", "agent", 1.0))
    assert kept() == (DeskStatus.PARTLY_PAID, 1)
    (escalation,) = store.escalations(open_only=True, run_id=run_id)
    store.take_escalation(escalation.id, "Lee Park")
    assert kept() == (DeskStatus.PARTLY_PAID, 0)
    assert run_id in store.desk_page("", (DeskStatus.PARTLY_PAID,), False, 500)
    assert desk_drift(store) == []


def test_owners_timeouts_and_delegates_behave_alike(made):
    """Issue 36 (schema 15) on both engines: a ticket's owner changed under its lock and
    audited, the owner filter with a delegate (the engine's clock), each timeout step once,
    and what each person approved on an order."""
    from refund_agent.desk.owners import OwnerChange
    from refund_agent.desk.timeouts import TimeoutPolicy

    store = made("people")
    for name, limit in (("Ana Ruiz", 3000), ("Sam Cho", 2000), ("Lee Park", None)):
        store.add_account(name, "lead" if limit is None else "approver", limit, "scrypt$x",
                          by="test")
    run_id, _lease, approval = queue(store, ("POUR-GLS-01",))
    assert store.change_owner(OwnerChange(run_id, "claim", "Ana Ruiz", False))
    assert not store.change_owner(OwnerChange(run_id, "claim", "Ana Ruiz", False))
    with pytest.raises(DecisionRefused):
        store.change_owner(OwnerChange(run_id, "claim", "Sam Cho", False))
    assert store.change_owner(OwnerChange(run_id, "assign", "Lee Park", True, "Sam Cho"))
    assert store.owners([run_id]) == {run_id: "Sam Cho"}
    store.set_away("Sam Cho", "Ana Ruiz", time.time() + 3600)
    assert store.away() == {"Sam Cho": "Ana Ruiz"}
    assert store.desk_page("", None, False, 10, owner="Ana Ruiz") == [run_id]
    assert store.desk_page("", None, False, 10, unassigned=True) == []
    assert store.set_back("Sam Cho") and store.away() == {}
    assert store.desk_page("", None, False, 10, owner="Ana Ruiz") == []

    store.execute("UPDATE approvals SET requested_at = requested_at - 90000 WHERE id = ?",
                  (approval.id,))
    policy = TimeoutPolicy(4 * 3600, 24 * 3600)
    assert store.apply_timeouts(policy) == [(approval.id, "remind"), (approval.id, "escalate")]
    assert store.apply_timeouts(policy) == []
    assert [e.kind for e in store.escalations(open_only=True)] == ["timeout"]
    store.decide(approval.id, True, "Lee Park", None)
    assert store.approved_by_on("A1043") == {"Lee Park": 4800}
    assert [e.event for e in store.audit() if e.run_id == run_id] == [
        "requested", "claimed", "assigned", "reminded", "timed_out", "approved"]
