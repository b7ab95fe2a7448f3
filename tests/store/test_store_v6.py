"""Store schema 6: calls keyed by run, no query that parses a model's arguments, the database's
clock for expiry, and stores that are read-only or damaged.

Each test here failed before schema 6: two runs whose provider call ids coincided collided on
the calls table's primary key (and would have shared an approval and an email key); one call
with invalid JSON arguments broke the inbox on both engines; arguments nested very deep made a
ticket's timeline raise RecursionError; a host whose clock ran 7.5 days ahead expired a refund
proposed seconds before; a read-only store could not even be listed; and ``audit --verify``
called a store with a damaged page "intact".
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import openai
import pytest
from helpers.cli import DATA, PROJECT_ROOT, cli_env, run_forked

from offline_model import OfflineServer, events
from offline_model.brain import Reply
from offline_model.testing import ScriptedBrain
from refund_agent import RunStatus
from refund_agent.desk import Agent
from refund_agent.desk.reconcile import reconcile
from refund_agent.desk.records import DeskStore
from refund_agent.desk.shop import Shop
from refund_agent.desk.tools import IssueRefund, ShopTools
from refund_agent.models import Step, call_key, order_id_in
from refund_agent.providers.client import ModelAccess
from refund_agent.store import SCHEMA_VERSION, Store
from refund_agent.text import nesting_depth, parse_bounded
from refund_agent.web import views

MAYA, PRIYA = "maya.chen@example.com", "priya.nair@example.com"
COFFEE_MAKER = {"order_id": "A1043", "lines": [{"line": "POUR-GLS-01", "reason": "damaged"}],
                "amount": None, "summary": "Cracked coffee maker, in full."}
SKILLET = {"order_id": "A1066", "lines": [{"line": "SKL-CI-10", "reason": "damaged"}],
           "amount": None, "summary": "Cracked skillet, in full."}
# Arguments nested far deeper than Python's json parser (or PostgreSQL's jsonb) can follow.
DEEP = '{"order_id": "A1058", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"


def store_for(backend, settings) -> DeskStore:
    """The desk's store (a refund's lines are its records) on the backend's engine."""
    backend.prepare(settings.output_dir)
    return DeskStore(backend.target(settings.output_dir))


def respond(store: Store, run_id: str, calls: list[tuple[str, str, str]]) -> str:
    """One model response with ``calls``, saved the way the agent saves it; its id."""
    response_id = f"resp_{uuid.uuid4().hex}"
    lease = store.acquire(run_id, uuid.uuid4().hex)
    store.record_response(lease, response_id=response_id, calls=calls, steps=[], usage={},
                          replies_sent=[])
    store.release(lease, RunStatus.DONE)
    return response_id


def new_run(store: Store, sender: str = MAYA) -> str:
    return store.create_run(sender=sender, sender_name="Maya Chen", subject="Cracked",
                            email="My order arrived cracked.").id


# -- A: no query parses model-written JSON ---------------------------------------------------------

def test_invalid_or_deeply_nested_arguments_never_break_the_inbox(backend, settings):
    store = store_for(backend, settings)
    broken, deep, good = new_run(store), new_run(store), new_run(store)
    respond(store, broken, [("call_1", "lookup_order", '{"order_id": "A10')])   # cut short
    respond(store, deep, [("call_2", "lookup_order", DEEP)])
    respond(store, good, [("call_3", "lookup_order", '{"order_id": "A1043"}')])
    rows = {row.run.id: row.order_id for row in store.inbox()}
    assert rows == {broken: None, deep: None, good: "A1043"}
    assert store.inbox_counts()[RunStatus.DONE] == 3
    (call,) = store.calls(store.run(good).last_response_id)
    assert (call.key, call.order_id) == (call_key(good, "call_3"), "A1043")


def test_arguments_are_read_within_bounds():
    assert order_id_in('{"order_id": " A1043 "}') == "A1043"
    assert order_id_in('{"order_id": 1043}') == "1043"
    for bad in ('{"order_id": "A10', "[]", '{"order_id": true}', '{"order_id": "' + "x" * 65
                + '"}', DEEP, '"text"', ""):
        assert order_id_in(bad) is None, bad
    assert nesting_depth('{"a": "[[[[", "b": [{"c": []}]}') == 4
    assert parse_bounded(DEEP) == DEEP and parse_bounded('{"a": 1}') == {"a": 1}
    assert parse_bounded("x" * 300_000) == "x" * 300_000


def test_a_ticket_with_deeply_nested_arguments_opens():
    steps = [Step(id=1, run_id="run_1", at=0.0, pid=1, kind="call",
                  data={"call_id": "c1", "name": "lookup_order", "arguments": DEEP}),
             Step(id=2, run_id="run_1", at=1.0, pid=1, kind="result",
                  data={"call_id": "c1", "name": "lookup_order",
                        "output": {"error": "Invalid arguments for lookup_order."}})]
    (block,) = views.timeline(steps)
    assert block.arguments == DEEP          # shown as text, never parsed
    assert block.title.startswith("lookup_order({")


def test_the_page_shows_unparsed_arguments_as_text(monkeypatch):
    from refund_agent.web import ticket
    shown: list[tuple[str, object]] = []
    monkeypatch.setattr(ticket.st, "code", lambda body, **_: shown.append(("code", body)))
    monkeypatch.setattr(ticket.st, "json", lambda body, **_: shown.append(("json", body)))
    ticket.show_json(DEEP, expanded=True)
    ticket.show_json({"order_id": "A1043"}, expanded=True)
    assert shown[0][0] == "code" and len(shown[0][1]) < ticket.SHOWN_TEXT + 100
    assert shown[1] == ("json", {"order_id": "A1043"})


# -- B: call records keyed by run and call id ------------------------------------------------------

@pytest.fixture
def fixed_call_ids(monkeypatch):
    """The stand-in hands out call ids the way xAI's look: a prefix and the call's index in
    its response, here the same prefix in every response and every run."""
    index = iter(range(10**6))

    def call_ids(dialect: str):
        while True:   # per run: the proposal's call is -0, the email's -1, in every run
            yield f"call-5faadddf-{next(index) % 2}"

    monkeypatch.setattr(events, "call_ids", call_ids)


def scripted_on(backend, settings, *replies: Reply):
    """An agent on ``backend`` whose offline model follows the script."""
    url = backend.url(settings.output_dir) if backend.postgres else None
    if url:
        backend.prepare(settings.output_dir)
    brain = ScriptedBrain(*replies)
    server = OfflineServer(settings.output_dir / "scripted.sqlite3", brain=brain).start()
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    agent = Agent(settings.with_(database_url=url) if url else settings,
                  model=ModelAccess(client, "scripted", server))
    return agent, brain, server


def test_two_runs_with_the_same_call_ids_keep_separate_approvals_refunds_and_emails(
        backend, settings, fixed_call_ids):
    script = []
    for args in (COFFEE_MAKER, SKILLET):   # per run: propose (-0), then email (-1), then end
        script += [Reply("propose it", calls=[("issue_refund", args)]),
                   Reply("tell them", calls=[("send_customer_message",
                                              {"message": f"Refunded {args['order_id']}."})]),
                   Reply("done", "Refunded and told the customer.")]
    agent, _brain, server = scripted_on(backend, settings, *script)
    try:
        runs = []
        for sender, body in ((MAYA, "Order A1043 arrived cracked."),
                             (PRIYA, "Order A1066: the skillet arrived cracked.")):
            run = agent.advance(agent.start(sender, body).id)
            assert run.status == RunStatus.WAITING, run.error
            (approval,) = [a for a in agent.store.approvals("pending") if a.run_id == run.id]
            agent.decide(approval.id, True, "Dana Kim",
                         fingerprint=agent.store.approval(approval.id).fingerprint)
            assert agent.advance(run.id).status == RunStatus.DONE
            runs.append(run)
    finally:
        server.close()
    approvals = agent.store.approvals(status=None)
    assert {a.call_id for a in approvals} == {"call-5faadddf-0"}
    assert sorted(a.id for a in approvals) == sorted(call_key(r.id, "call-5faadddf-0")
                                                     for r in runs)
    refunds = agent.payments.refunds()
    assert sorted(r["idempotency_key"] for r in refunds) == sorted(a.id for a in approvals)
    assert sorted(r["request"]["order_id"] for r in refunds) == ["A1043", "A1066"]
    emails = agent.outbox.messages()
    assert sorted((m["idempotency_key"], m["request"]["to"]) for m in emails) == sorted(
        (call_key(r.id, "call-5faadddf-1"), r.sender) for r in runs)
    assert agent.store.verify_audit() is None
    assert reconcile(agent.store, settings.output_dir) is None


def test_a_call_id_the_model_repeats_is_answered_not_run(settings, fixed_call_ids):
    """Ids -0 and -1 come round again: the second response repeats the first one's ids."""
    lookup = ("lookup_order", {"order_id": "A1043"})
    agent, brain, server = scripted_on(
        _SQLITE, settings, Reply("look it up", calls=[lookup, lookup]),
        Reply("look again", calls=[lookup]), Reply("done", "Looked it up."))
    try:
        run = agent.advance(agent.start(MAYA, "Where is order A1043?").id)
    finally:
        server.close()
    assert run.status == RunStatus.DONE, run.error
    calls = [c for s in agent.store.steps(run.id) if s.kind == "response"
             for c in agent.store.calls(s.data["response_id"])]
    assert [c.call_id for c in calls] == ["call-5faadddf-0", "call-5faadddf-1",
                                          "call-5faadddf-0"]
    first, _second, repeated = calls
    assert json.loads(first.output)["order_id"] == "A1043"
    assert "repeats call id 'call-5faadddf-0'" in json.loads(repeated.output)["error"]
    assert repeated.key is None and first.key == call_key(run.id, "call-5faadddf-0")
    # The model was told, as the call's output, in the next request.
    outputs = [json.loads(i["output"]) for i in brain.seen[-1]
               if i.get("type") == "function_call_output"]
    assert any("repeats call id" in o.get("error", "") for o in outputs)


class _Sqlite:
    postgres = False


_SQLITE = _Sqlite()


# -- upgrading a schema-5 store --------------------------------------------------------------

def _as_schema_5(store: Store) -> None:
    """Put a store made by this version back into schema 5's shape (calls keyed by call id
    alone, no key or order id), as a store written by the previous version is."""
    if store.shared:
        with store.transaction() as db:
            for sql in ("ALTER TABLE calls DROP COLUMN key",
                        "ALTER TABLE calls DROP COLUMN order_id",
                        "ALTER TABLE calls DROP CONSTRAINT calls_pkey",
                        "ALTER TABLE calls ADD PRIMARY KEY (call_id)",
                        "DROP INDEX calls_by_call_id", "DROP TABLE store_moved",
                        "UPDATE refund_agent_schema SET version = 5"):
                db.execute(sql)
        return
    path = store.path
    store.close()
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE calls5 (call_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, response_id"
            " TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, arguments TEXT NOT NULL,"
            " output TEXT);"
            "INSERT INTO calls5 SELECT call_id, run_id, response_id, seq, name, arguments, output"
            " FROM calls; DROP TABLE calls; ALTER TABLE calls5 RENAME TO calls;"
            "CREATE INDEX calls_by_response ON calls(response_id, seq);"
            "CREATE INDEX calls_by_run ON calls(run_id, name); DROP TABLE store_moved;"
            "PRAGMA user_version = 5;")
    db.close()


def test_a_schema_5_store_upgrades_keeping_its_ids_and_keys(backend, settings, model,
                                                            monkeypatch):
    url = backend.url(settings.output_dir) if backend.postgres else None
    if url:
        backend.prepare(settings.output_dir)
    on = settings.with_(database_url=url) if url else settings
    # Written the way schema 5 wrote it: a call's key (the approval id, the email's
    # idempotency key) was its bare call id.
    with monkeypatch.context() as m:
        for module in ("responses", "approvals"):   # the two that make keys
            m.setattr(f"refund_agent.store.{module}.call_key", lambda _run, call_id: call_id)
        old = Agent(on, model=model)
        told = old.advance(old.start_sample("past-window").id)       # emails, no refund
        waiting = old.advance(old.start_sample("damaged").id)
        broken = new_run(old.store)
        respond(old.store, broken, [(f"call_{uuid.uuid4().hex}", "lookup_order", '{"order_')])
        (pending,) = old.store.approvals("pending")
        assert told.status == RunStatus.DONE and pending.id == pending.call_id
        _as_schema_5(old.store)
        old.store.close()

    agent = Agent(on, model=model)   # opening it upgrades it
    store = agent.store
    assert store.schema_version() == SCHEMA_VERSION
    calls = store.calls_named("lookup_order") + store.calls_named("send_customer_message")
    assert calls and all(c.key == c.call_id for c in calls)
    assert {row.run.id: row.order_id for row in store.inbox()}[broken] is None
    assert store.approval(pending.id).call_id == pending.call_id   # same id as before
    assert reconcile(store, settings.output_dir) is None

    agent.decide(pending.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(pending.id).fingerprint)
    assert agent.advance(waiting.id).status == RunStatus.DONE
    (refund,) = agent.payments.refunds()
    assert refund["idempotency_key"] == pending.id         # the old approval's key
    new_email = agent.outbox.messages()[-1]
    (send,) = [c for c in store.calls_named("send_customer_message") if c.run_id == waiting.id]
    assert new_email["idempotency_key"] == send.key == call_key(waiting.id, send.call_id)
    assert store.verify_audit() is None and reconcile(store, settings.output_dir) is None


# -- D: expiry by the database's clock -------------------------------------------------------

def test_a_host_whose_clock_runs_ahead_does_not_expire_a_fresh_proposal(backend, settings,
                                                                       monkeypatch):
    store = store_for(backend, settings)
    run_id = new_run(store)
    call_id = f"call_{uuid.uuid4().hex}"
    response_id = f"resp_{uuid.uuid4().hex}"
    lease = store.acquire(run_id, uuid.uuid4().hex)
    store.record_response(lease, response_id=response_id,
                          calls=[(call_id, "issue_refund", json.dumps(COFFEE_MAKER))],
                          steps=[], usage={}, replies_sent=[])
    tools = ShopTools(Shop(DATA), MAYA, store.held_lines)
    approval = store.queue_approval(
        lease, response_id=response_id, call_id=call_id, subject="A1043",
        title="Cracked", customer=MAYA,
        price=lambda held: tools.quote(IssueRefund.model_validate(COFFEE_MAKER), held))
    store.release(lease, RunStatus.WAITING)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 7.5 * 86400)   # this host is ahead
    assert store.expire(7 * 86400) == []
    monkeypatch.setattr(time, "time", real)
    assert store.approval(approval.id).status == "pending"
    # Proposed eight days ago by the database's clock.
    store.execute("UPDATE approvals SET requested_at = requested_at - 8 * 86400")
    assert [a.id for a in store.expire(7 * 86400)] == [approval.id]


# -- E: read-only and damaged stores ---------------------------------------------------------

def _read_only_runner(output: Path):
    """Run the terminal with ``output`` read-only: by permissions for an ordinary user; for
    root (whom permissions do not stop), in a private mount namespace with the folder bound
    read-only. Skips where neither is possible."""
    if os.geteuid() != 0:
        def run(*args: str) -> subprocess.CompletedProcess:
            for path in (output, *output.iterdir()):
                path.chmod(path.stat().st_mode & ~0o222)
            try:
                return run_forked(output, *args)
            finally:
                for path in (output, *output.iterdir()):
                    path.chmod(path.stat().st_mode | 0o200)
        return run
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "-m", "sh", "-c",
                            f"mount --bind -o ro '{output}' '{output}'"],
                           capture_output=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("cannot make a read-only folder here (root without mount namespaces)")

    def run_ro(*args: str) -> subprocess.CompletedProcess:
        command = " ".join(["exec", sys.executable, "-m", "refund_agent",
                            *(f"'{a}'" for a in args)])
        return subprocess.run(
            [unshare, "-m", "sh", "-c",
             f"mount --bind -o ro '{output}' '{output}' && {command}"],
            capture_output=True, text=True, timeout=60, env=cli_env(output), cwd=PROJECT_ROOT)
    return run_ro


def test_a_read_only_store_can_be_listed_and_verified(tmp_path):
    output = tmp_path / "output"
    assert run_forked(output, "sample", "damaged").returncode == 0
    run = _read_only_runner(output)
    before = {p.name: p.read_bytes() for p in output.iterdir()}
    queue = run("queue")
    assert queue.returncode == 0, queue.stderr
    assert "1 waiting for approval." in queue.stdout
    verify = run("audit", "--verify")
    assert verify.returncode == 0 and "Audit log intact" in verify.stdout, verify.stderr
    decided = run("approve", "--as", "Dana")
    assert decided.returncode == 1 and "is read-only here" in decided.stderr, decided.stderr
    assert "Traceback" not in queue.stderr + verify.stderr + decided.stderr
    assert {p.name: p.read_bytes() for p in output.iterdir()} == before


def test_audit_verify_runs_the_integrity_check_and_names_a_damaged_page(tmp_path):
    output = tmp_path / "output"
    assert run_forked(output, "sample", "damaged").returncode == 0
    path = output / "refund-agent.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # An index page: the verify's full-table reads never touch it, a decision does.
        (root,) = db.execute("SELECT rootpage FROM sqlite_master"
                             " WHERE name = 'approvals_by_status'").fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * size + 8: root * size] = b"\xff" * (size - 8)
    path.write_bytes(bytes(data))
    verify = run_forked(output, "audit", "--verify")
    assert verify.returncode == 1, verify.stdout
    assert "intact" not in verify.stdout
    assert "is damaged" in verify.stdout + verify.stderr
    assert "Move it aside" not in verify.stdout + verify.stderr
    assert "Traceback" not in verify.stderr
