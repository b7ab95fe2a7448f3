"""Every schema the project shipped, upgraded in place with its data kept, on each engine.

``tests/schemas/`` holds each version's schema as that version created it, taken from
``refund_agent/store.py`` in git history (and, for PostgreSQL, as its ``dialects.pg_schema``
rewrote it): SQLite 1 to 7, 10 and 12, PostgreSQL 5 (its first) to 7, 10 (the last before the
database's units guard on PostgreSQL, schema 11) and 12 (the last before runs named their agent
and open escalations were unique, 13), 16 on both (from store/schema_*.py, the last schema of
one history for the loop's and the desk's tables), and "7a", the schema 7 that main shipped for
half an hour before schema 6 was merged (sign-in throttle, but calls without keys).
Each test fills one with the rows that version wrote (runs, timeline, calls, a paid and approved
refund with its audit chain, replies, accounts, transcript, ledger, as far as the version had
them), opens it with today's ``Store``, and checks that every row reads back through the typed
API, the audit chain still verifies, and the store takes new work (a refund proposed, approved
and audited; an account; a ledger record), and that the database itself refuses a raw write
holding more units of a line than it has (schema 11's guard, on both engines). Schema 13: a
closure run from before is the closure agent's, every other run the desk's, and open duplicate
escalations (9 on) are merged into the oldest, leaving one open per ticket, kind and refund.
Schema 14: every upgraded store takes mail once per Message-ID (the new mail table).
Schema 15: no ticket has an owner until one is claimed.
Schema 16: every run's search text is indexed and the desk's counts are kept from the start.
A schema-16 store (the one history's last, every table in one) opens as the desk's store with
its rows as they were. The desk's tables are the desk's own part now (desk/records/
schema_part.py): an old store opened by the loop's store alone gets the loop's upgrade and none
of the desk's tables it lacked; opened by the desk's store afterwards, it reads as above.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pytest
from helpers.cli import DATA

from refund_agent.desk.owners import OwnerChange
from refund_agent.desk.records import DeskStore
from refund_agent.desk.shop import Shop
from refund_agent.desk.tools import IssueRefund, ShopTools
from refund_agent.errors import StoreError
from refund_agent.models import RunStatus
from refund_agent.outside.mailin.intake import take
from refund_agent.store import GENESIS_HASH, SCHEMA_VERSION, Store, audit_hash

SCHEMAS = Path(__file__).parents[1] / "schemas"
SQLITE_VERSIONS = ["1", "2", "3", "4", "5", "6", "7a", "7", "10", "12", "16"]
POSTGRES_VERSIONS = ["5", "6", "7a", "7", "10", "12", "16"]
T0 = 1_764_000_000.0
DONE, NEW = "run_0123456789ab", "run_ba9876543210"
CLOSURE = "run_c105ed0acc01"   # made by the closure example (its tools' calls say so)
LEO = "leo.martins@example.com"


def number(version: str) -> int:
    return int(version.rstrip("a"))


def has(version: str, since: int) -> bool:
    """Whether a store at ``version`` has what schema ``since`` added (7a lacks 6's)."""
    if version == "7a":
        return since != 6 and since <= 7
    return number(version) >= since


def old_rows(version: str) -> dict[str, list[dict]]:
    """The rows a store at ``version`` held: a finished run with a paid refund, a new run."""
    refund_args = json.dumps({"order_id": "A1043", "amount": None, "summary": "Cracked.",
                              "lines": [{"line": "POUR-GLS-01", "reason": "damaged"}]})
    run = {"created_at": T0, "kind": "damaged", "sender": "maya.chen@example.com",
           "sender_name": "Maya Chen", "subject": "Cracked", "email": "It arrived cracked.",
           "requests": 1, "cost_ticks": 10, "input_tokens": 5, "cached_tokens": 0,
           "output_tokens": 3, "simulated_replies": 0, "last_pid": 4242, "lease_epoch": 3,
           "updated_at": T0 + 5}
    rows: dict[str, list[dict]] = {
        "runs": [{**run, "id": DONE, "status": "done", "last_response_id": "resp_1",
                  "transcript_items": 2, "transcript_bytes": 40, "transcript_complete": 1},
                 {**run, "id": NEW, "status": "working", "last_response_id": None,
                  "requests": 0, "transcript_complete": 1},
                 {**run, "id": CLOSURE, "status": "done", "last_response_id": "resp_c",
                  "sender": "ana.ruiz@example.com", "kind": "custom"}],
        "steps": [{"id": 1, "run_id": DONE, "at": T0, "pid": 4242, "kind": "email",
                   "data": json.dumps({"from": "maya.chen@example.com"})},
                  {"id": 2, "run_id": NEW, "at": T0, "pid": 4242, "kind": "email",
                   "data": json.dumps({"from": "maya.chen@example.com"})}],
        "calls": [{"call_id": "call_look", "run_id": DONE, "response_id": "resp_1", "seq": 0,
                   "name": "lookup_order", "arguments": '{"order_id": "A1043"}',
                   "output": '{"found": true}'},
                  {"call_id": "call_bad", "run_id": DONE, "response_id": "resp_1", "seq": 1,
                   "name": "lookup_order", "arguments": '{"order_id": "A10', "output": "{}"},
                  {"call_id": "call_acct", "run_id": CLOSURE, "response_id": "resp_c", "seq": 0,
                   "name": "lookup_account", "arguments": '{"account_id": "AC-1001"}',
                   "output": '{"status": "open"}'}],
        "replies": [{"id": 1, "run_id": DONE, "at": T0 + 9, "text": "Thank you!",
                     "simulated": 0, "response_id": None}],
        "audit": [],
    }
    if has(version, 6):   # schema 6's calls carry their key and order id
        for call in rows["calls"]:
            call.update(key=call["call_id"], order_id=None)
        rows["calls"][0]["order_id"] = "A1043"
    if has(version, 3):   # itemized refunds, the anchor, accounts
        rows["calls"].append({"call_id": "call_refund", "run_id": DONE, "response_id": "resp_1",
                              "seq": 2, "name": "issue_refund", "arguments": refund_args,
                              "output": '{"refund_id": "re_1"}'})
        if has(version, 6):
            rows["calls"][-1].update(key="call_refund", order_id="A1043")
        rows["approvals"] = [{
            "id": "call_refund", "run_id": DONE, "response_id": "resp_1",
            "call_id": "call_refund", "order_id": "A1043", "amount_cents": 8900,
            "proposed_cents": 8900, "summary": "Cracked.", "customer": "maya.chen@example.com",
            "status": "approved", "requested_at": T0 + 1, "requested_pid": 4242,
            "decided_by": "Dana Kim", "decided_at": T0 + 2, "decided_pid": 4343, "note": None}]
        rows["approval_lines"] = [{
            "approval_id": "call_refund", "order_id": "A1043", "seq": 0, "line": "POUR-GLS-01",
            "name": "Pour-over glass", "reason": "damaged", "amount_cents": 8900,
            "allowed_cents": 8900, "fee_cents": 0, "held": 1, "decision": "approved"}]
        rows["steps"].append({"id": 3, "run_id": DONE, "at": T0 + 3, "pid": 4242,
                              "kind": "refund", "data": json.dumps({"refund_id": "re_1"})})
        rows["accounts"] = [{"name": "Dana Kim", "role": "lead", "limit_cents": None,
                             "password": "scrypt$old", "created_at": T0}]
        lines = [{"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 8900}]
        events = [("requested", "agent", lines), ("approved", "Dana Kim", lines),
                  ("issued", "agent", None)]
    else:
        events = [("note", "agent", None), ("note", "agent", None)]
    prev = GENESIS_HASH
    for n, (event, actor, lines) in enumerate(events, 1):
        entry = {"at": T0 + n, "event": event, "actor": actor, "pid": 4242, "run_id": DONE,
                 "approval_id": "call_refund" if event != "note" and event != "issued" else None,
                 "order_id": "A1043" if has(version, 3) else None,
                 "amount": 89.0 if lines else None,
                 "note": "re_1" if event == "issued" else None, "lines": lines}
        digest = audit_hash(prev, entry)
        row = {**entry, "id": n, "prev_hash": prev, "hash": digest}
        if has(version, 3):
            row["lines"] = json.dumps(lines) if lines else None
        else:
            del row["lines"]
        rows["audit"].append(row)
        prev = digest
    if has(version, 3):
        rows["audit_anchor"] = [{"id": 1, "entries": len(events), "head": prev}]
    if has(version, 4):
        rows["transcript"] = [
            {"run_id": DONE, "seq": 0, "response_id": "resp_1", "origin": "input",
             "item": '{"role":"user","content":"hi"}'},
            {"run_id": DONE, "seq": 1, "response_id": "resp_1", "origin": "output",
             "item": '{"type":"message","content":"ok"}'}]
    if has(version, 5):
        rows["runs"][0]["lease_host"] = "old-host"
        rows["ledger"] = [{"id": 1, "log": "refunds", "key": "call_refund",
                           "record": json.dumps({"idempotency_key": "call_refund",
                                                 "refund_id": "re_1"})}]
    if has(version, 7):
        rows["sign_in_failures"] = [{"id": 1, "name_key": "lee park", "client": "page",
                                     "at": T0}]
    if has(version, 9):   # the desk: the agent escalated one ticket three times over
        escalation = {"run_id": DONE, "approval_id": None, "kind": "manager", "reason": "Boss!",
                      "raised_by": "agent", "taken_by": None, "taken_at": None}
        rows["escalations"] = [
            {**escalation, "id": 1, "key": "e1", "raised_at": T0 + 1},
            {**escalation, "id": 2, "key": "e2", "raised_at": T0 + 2},
            {**escalation, "id": 3, "key": "e3", "raised_at": T0 + 3, "kind": "threat"},
            {**escalation, "id": 4, "key": "e4", "raised_at": T0 + 4},
            {**escalation, "id": 5, "key": "e5", "raised_at": T0 + 5, "taken_by": "Lee Park",
             "taken_at": T0 + 6}]
        if has(version, 13):   # a store from 13 on merged them as they were raised
            for merged in (rows["escalations"][1], rows["escalations"][3]):
                merged.update(taken_by="merged into escalation 1", taken_at=merged["raised_at"])
    if has(version, 13):   # runs name their agent
        for made in rows["runs"]:
            made["agent"] = "closure" if made["id"] == CLOSURE else "refunds"
    return rows


# -- building an old store ---------------------------------------------------------------------

def fill(execute, columns, rows: dict[str, list[dict]], mark: str) -> None:
    """Insert ``rows``, each with the columns its table has (the anchor the schema made is
    replaced by the one that matches the filled audit)."""
    if "audit_anchor" in rows:
        execute("DELETE FROM audit_anchor")
    for table, table_rows in rows.items():
        have = columns(table)
        for row in table_rows:
            names = [c for c in row if c in have]
            execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES"
                    f" ({', '.join([mark] * len(names))})", tuple(row[c] for c in names))


def sqlite_store(path: Path, version: str, rows: dict[str, list[dict]]) -> Path:
    db = sqlite3.connect(path)
    db.executescript((SCHEMAS / f"sqlite-{version}.sql").read_text())
    fill(db.execute, lambda t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")}, rows, "?")
    db.execute(f"PRAGMA user_version = {number(version)}")
    db.commit()
    db.close()
    return path


def pg_statements(script: str) -> list[str]:
    """A schema file's statements: each ends with a semicolon at the end of a line, outside
    the $$ quotes of a plpgsql body (whose own statements end so too, from schema 11)."""
    script = "\n".join(line for line in script.splitlines() if not line.startswith("--"))
    statements, part = [], ""
    for piece in f"{script}\n".split(";\n"):
        part = f"{part};\n{piece}" if part else piece
        if part.count("$$") % 2 == 0:
            if part.strip():
                statements.append(part.strip())
            part = ""
    return statements


def postgres_store(cluster, version: str, rows: dict[str, list[dict]]) -> str:
    import psycopg

    url = cluster.create(f"upgrade_{version}_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in pg_statements((SCHEMAS / f"postgresql-{version}.sql").read_text()):
            conn.execute(statement)
        conn.execute("CREATE TABLE refund_agent_schema (id INTEGER PRIMARY KEY CHECK (id = 1),"
                     " version INTEGER NOT NULL)")
        conn.execute("INSERT INTO refund_agent_schema VALUES (1, %s)", (number(version),))

        def columns(table: str) -> set[str]:
            return {r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s",
                (table,))}

        fill(lambda sql, args=(): conn.execute(sql, args), columns, rows, "%s")
        # The ids were given: the sequences move past them, as the engine's own inserts did.
        for table in ("steps", "replies", "audit", "ledger", "sign_in_failures", "escalations"):
            if table in rows:
                conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                             f" (SELECT MAX(id) FROM {table}))")
    return url


# -- what an upgraded store must answer ---------------------------------------------------------

def check_upgraded(store: Store, version: str, rows: dict[str, list[dict]]) -> None:
    assert store.schema_version() == SCHEMA_VERSION
    assert "key" in store.columns("calls") and "lease_host" in store.columns("runs")
    counts = store.row_counts()
    for table, table_rows in rows.items():
        assert counts[table] == len(table_rows), table
    done, new = store.run(DONE), store.run(NEW)
    assert (done.status, done.requests, done.cost_ticks, done.last_pid) == (
        RunStatus.DONE, 1, 10, 4242)
    assert [s.kind for s in store.steps(DONE)][:1] == ["email"]
    assert [r.text for r in store.replies(DONE)] == ["Thank you!"]
    # Calls saved before schema 6 keep their call id as key; the order id is read in Python.
    looked = {c.call_id: c for c in store.calls_named("lookup_order")}
    assert looked["call_look"].key == "call_look" and looked["call_look"].order_id == "A1043"
    assert looked["call_bad"].order_id is None
    assert {row.run.id: row.order_id for row in store.inbox()}[DONE] == "A1043"
    # Schema 16: the search text and the desk's counts, filled from the rows already there.
    [(searchable,)] = store.query("SELECT COUNT(*) FROM run_search")
    assert searchable == counts["runs"]
    assert DONE in store.desk_page("MAYA", None, False, 50)
    assert DONE in [r.run.id for r in store.inbox("ChEn cRaCk")]
    assert store.inbox("maya nowhere-to-be-found") == []
    if has(version, 3):
        assert DONE in store.desk_page("a1043", None, False, 50)   # its approval's order
    kept = {(s, e): n for s, e, n in store.desk_groups()}
    recount: dict[tuple, int] = {}
    for _run, status, esc, _at in store.desk_index():
        recount[(status, int(esc > 0))] = recount.get((status, int(esc > 0)), 0) + 1
    assert kept == recount and sum(kept.values()) == counts["runs"]
    assert store.verify_audit() is None
    assert [e.hash for e in store.audit()] == [r["hash"] for r in rows["audit"]]
    if has(version, 3):
        approval = store.approval("call_refund")
        assert (approval.status, approval.decided_by, approval.amount_cents) == (
            "approved", "Dana Kim", 8900)
        assert set(store.held_lines("A1043")) == {"POUR-GLS-01"}
        assert store.account_rows("Dana Kim")[0]["password"] == "scrypt$old"
        assert store.find_approval(
            next(c for c in store.calls_named("issue_refund")).key).id == "call_refund"
    if has(version, 4):
        assert [e.origin for e in store.transcript(DONE)] == ["input", "output"]
        assert DONE not in [r.id for r in store.runs_without_transcript()]
    else:   # a run that made requests before transcripts were kept has none of them
        assert DONE in [r.id for r in store.runs_without_transcript()]
        assert store.run(NEW).transcript_complete and not done.transcript_complete
    if has(version, 5):
        assert store.ledger_find("refunds", "call_refund")["refund_id"] == "re_1"
    if has(version, 7):
        assert store.sign_in_failures("lee park", 10**10)[0] == 1
    assert new.status == RunStatus.WORKING
    # Schema 13: each run names its agent; the desk resumes only its own.
    assert (done.agent, new.agent, store.run(CLOSURE).agent) == ("refunds", "refunds", "closure")
    assert store.orphaned_runs("refunds") == [new] and store.orphaned_runs("closure") == []
    if has(version, 9):
        kept = {e.id: (e.kind, e.taken_by) for e in store.escalations()}
        assert kept == {1: ("manager", None), 2: ("manager", "merged into escalation 1"),
                        3: ("threat", None), 4: ("manager", "merged into escalation 1"),
                        5: ("manager", "Lee Park")}
        (row,) = store.inbox_rows([DONE])
        assert row.escalations == 2   # the desk's kept count follows the merge


def check_takes_new_work(store: Store) -> None:
    """A new refund proposed, approved and audited on top of the old chain; an account; a
    ledger record; a failed sign-in."""
    run_id = store.create_run(sender=LEO, sender_name="Leo Martins", subject="Split",
                              email="The board arrived split.").id
    lease = store.acquire(run_id, uuid.uuid4().hex)
    args = IssueRefund.model_validate(
        {"order_id": "A1058", "amount": None, "summary": "Split board.",
         "lines": [{"line": "BRD-OAK-M", "reason": "damaged"}]})
    store.record_response(lease, response_id="resp_new", steps=[], usage={}, replies_sent=[],
                          calls=[("call_1", "issue_refund", args.model_dump_json())])
    tools = ShopTools(Shop(DATA), LEO, store.held_lines)
    approval = store.queue_approval(lease, response_id="resp_new", call_id="call_1",
                                    subject="A1058", title="Split board.", customer=LEO,
                                    price=lambda held: tools.quote(args, held))
    assert not isinstance(approval, str), approval
    store.release(lease, RunStatus.WAITING)
    assert store.decide(approval.id, True, "Dana Kim", None).status == "approved"
    # Schema 15: tickets have owners (none from before), and a lease records its front.
    assert "last_front" in store.columns("runs") and store.owners() == {}
    assert store.change_owner(OwnerChange(run_id, "claim", "Dana Kim", by_lead=False))
    assert store.owners() == {run_id: "Dana Kim"}
    store.add_account("Lee Park", "approver", 5000, "scrypt$new", by="Dana Kim")
    store.sign_in_failed("lee park", "terminal", 300.0, "lee park", "wrong password")
    record, reused = store.ledger_once("outbox", "key_new", {"to": LEO}, lambda: {"id": "m1"})
    assert not reused and store.ledger_find("outbox", "key_new") == record
    # Schema 14: a mailed ticket, taken once by its Message-ID, and its auto-reply audited.
    message = (f"From: {LEO}\r\nSubject: Split\r\nMessage-ID: <up@leo>\r\n\r\n"
               "The board arrived split.\r\n").encode()
    first, again = take(store, message, "refunds"), take(store, message, "refunds")
    assert (first.kind, first.new, again.new, again.run_id) == ("ticket", True, False,
                                                                first.run_id)
    auto = message.replace(b"<up@leo>", b"<ooo@leo>").replace(
        b"Subject:", b"Auto-Submitted: auto-replied\r\nSubject:")
    assert take(store, auto, "refunds").kind == "auto"
    assert store.verify_audit() is None


def check_refuses_over_hold(store: Store) -> None:
    """Past the code, a raw row holding more units than the line has is refused (schema 11);
    one within the quantity is not."""
    line = ("INSERT INTO approval_lines(approval_id, order_id, seq, line, name, reason,"
            " amount_cents, allowed_cents, fee_cents, held, units, quantity)"
            " VALUES (?, 'RT20602', 0, 'GT-DW-350', 'Tumbler', 'damaged', 1450, 1450, 0, 1, ?, 4)")
    store.execute(line, ("raw_three", 3))
    with pytest.raises(StoreError, match="beyond the line quantity"):
        store.execute(line, ("raw_two", 2))
    with pytest.raises(StoreError, match="beyond the line quantity"):
        store.execute("UPDATE approval_lines SET units = 5 WHERE approval_id = 'raw_three'")
    store.execute("DELETE FROM approval_lines WHERE approval_id = 'raw_three'")


# -- SQLite: 1 to 7, 7a and 10 -------------------------------------------------------------------

@pytest.mark.parametrize("version", SQLITE_VERSIONS)
def test_an_sqlite_store_of_every_shipped_schema_upgrades_in_place(tmp_path, version):
    rows = old_rows(version)
    path = sqlite_store(tmp_path / "refund-agent.sqlite3", version, rows)
    store = DeskStore(path)
    check_upgraded(store, version, rows)
    check_takes_new_work(store)
    check_refuses_over_hold(store)
    store.close()
    reopened = DeskStore(path)   # opening it again changes nothing
    assert reopened.schema_version() == SCHEMA_VERSION and reopened.verify_audit() is None
    reopened.close()


@pytest.mark.parametrize("version", ["1", "2"])
def test_an_sqlite_store_from_before_itemized_refunds_that_holds_money_is_refused(
        tmp_path, version):
    path = sqlite_store(tmp_path / "refund-agent.sqlite3", version, old_rows(version))
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO approvals(id, run_id, response_id, call_id, order_id, amount,"
                   " reason, customer, status, requested_at, requested_pid) VALUES"
                   " ('call_r', ?, 'resp_1', 'call_r', 'A1043', 89.0, 'Cracked.', 'maya',"
                   " 'pending', ?, 1)", (DONE, T0))
    db.close()
    before = dump(path)
    with pytest.raises(StoreError, match=f"schema {version}.*1 approval"):
        DeskStore(path)
    assert dump(path) == before   # nothing in it was changed (it was only switched to WAL)


def dump(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        lines = list(db.iterdump())
    db.close()
    return lines


# -- PostgreSQL: 5 (its first) to 7, 7a and 10 ---------------------------------------------------

@pytest.mark.parametrize("version", POSTGRES_VERSIONS)
def test_a_postgresql_store_of_every_shipped_schema_upgrades_in_place(pg_cluster, version):
    rows = old_rows(version)
    url = postgres_store(pg_cluster, version, rows)
    store = DeskStore(url)
    check_upgraded(store, version, rows)
    check_takes_new_work(store)
    check_refuses_over_hold(store)
    store.close()
    reopened = DeskStore(url)
    assert reopened.schema_version() == SCHEMA_VERSION and reopened.verify_audit() is None
    reopened.close()


# -- The loop's store first, then the desk's: each upgrades its own part -------------------------

DESK_ONLY = ("mail", "owners", "delegates", "timeout_steps", "desk_counts")


@pytest.mark.parametrize("version", ["5", "12"])
def test_an_sqlite_store_upgraded_by_the_loops_store_then_opened_by_the_desk(tmp_path, version):
    """The loop's store upgrades the loop's tables and makes none of the desk's that the old
    store lacked; the desk's store then adds them, computes its rows and keeps every row."""
    rows = old_rows(version)
    path = sqlite_store(tmp_path / "refund-agent.sqlite3", version, rows)
    loop = Store(path)
    assert loop.schema_version() == SCHEMA_VERSION
    assert loop.query("SELECT COUNT(*) FROM schema_parts")[0][0] == 0
    have = {r[0] for r in loop.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not have & set(DESK_ONLY)
    loop.close()
    store = DeskStore(path)
    check_upgraded(store, version, rows)
    check_takes_new_work(store)
    check_refuses_over_hold(store)
    store.close()


@pytest.mark.parametrize("version", ["5", "12"])
def test_a_postgresql_store_upgraded_by_the_loops_store_then_opened_by_the_desk(
        pg_cluster, version):
    rows = old_rows(version)
    url = postgres_store(pg_cluster, version, rows)
    loop = Store(url)
    assert loop.schema_version() == SCHEMA_VERSION
    assert not [t for t in DESK_ONLY if loop.query("SELECT to_regclass(?)", (t,))[0][0]]
    loop.close()
    store = DeskStore(url)
    check_upgraded(store, version, rows)
    check_takes_new_work(store)
    check_refuses_over_hold(store)
    store.close()
