"""``refund-agent migrate``: an SQLite store and its JSONL logs moved into PostgreSQL.

Real SQLite files in temporary folders, the real agent against the offline model, and a real
PostgreSQL server (the session's throwaway cluster; these tests skip without its binaries). A
migrated store reconciles there, a run waiting for approval finishes there exactly once
(continuing from its transcript on a host that never saw its stored responses), and a store
that does not reconcile, a target that is not empty or a run in progress is refused with
nothing written.
"""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import tempfile
import uuid
from pathlib import Path

import hypothesis.strategies as st
import pytest
from helpers.cli import DATA, run_cli
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings

from offline_model import OfflineServer
from refund_agent import RunStatus, Settings
from refund_agent.desk import Agent
from refund_agent.desk.migrate import migrate
from refund_agent.desk.reconcile import reconcile
from refund_agent.desk.records import DeskStore
from refund_agent.errors import MigrationRefused, StoreError
from refund_agent.providers.client import ModelAccess
from refund_agent.store import Store
from refund_agent.store.migrate import COPIED

# Orders in data/shop.json with a line the policy refunds, and their owners.
TICKETS = [("maya.chen@example.com", "Order A1043: the glass pour-over coffee maker arrived "
                                     "cracked."),
           ("priya.nair@example.com", "Order A1066: the cast iron skillet arrived cracked."),
           ("leo.martins@example.com", "Order A1058: the oak cutting board arrived split.")]
LEASE = ("lease_pid", "lease_token", "lease_at", "lease_host")


@pytest.fixture
def new_db(pg_cluster):
    """A function making fresh empty databases on the session's server; returns their URLs."""
    return lambda: pg_cluster.create(f"m_{uuid.uuid4().hex[:16]}")


def waiting(agent: Agent, which: int):
    sender, body = TICKETS[which]
    run = agent.advance(agent.start(sender, body).id)
    assert run.status == RunStatus.WAITING, run
    (approval,) = [a for a in agent.store.approvals("pending") if a.run_id == run.id]
    return run, approval


def three_runs(agent: Agent):
    """A refunded run, a rejected one, and one waiting for approval."""
    paid, approval = waiting(agent, 0)
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(paid.id).status == RunStatus.DONE
    rejected, approval = waiting(agent, 1)
    agent.decide(approval.id, False, "Dana Kim", "Cracks from dropping it are not covered.",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(rejected.id).status == RunStatus.DONE
    pending, approval = waiting(agent, 2)
    return paid, rejected, pending, approval


def dump(store: Store, columns: dict[str, list[str]] | None = None) -> dict[str, list[tuple]]:
    """Every copied table's rows in primary key order (runs without their lease fields)."""
    out = {}
    for table in COPIED:
        names = (columns or {}).get(table) or store.columns(table)
        names = [n for n in names if not (table == "runs" and n in LEASE)]
        out[table] = [row for batch in store.table_rows(table, names) for row in batch]
    return out


def pg_settings(folder: Path, url: str) -> Settings:
    """Settings for a process on another host: its own (empty) output folder."""
    return Settings(api_key="", data_dir=DATA, output_dir=folder / "output", max_retries=2,
                    timeout=30.0, database_url=url)


def test_a_migrated_store_reconciles_and_its_waiting_run_finishes_once_on_postgresql(
        agent, model, settings, new_db, tmp_path):
    paid, _rejected, pending, approval = three_runs(agent)
    source = DeskStore(settings.db_path)
    before = dump(source)
    refunds_before = agent.payments.refunds()
    emails_before = agent.outbox.messages()
    epoch = source.query("SELECT lease_epoch FROM runs WHERE id = ?", (pending.id,))[0][0]
    url = new_db()

    proc = run_cli(settings.output_dir, "migrate", "--to", url)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    for line in ("runs", "steps", "transcript", "audit", "ledger"):
        assert f"  {line}" in proc.stdout
    assert "Reconciled on PostgreSQL" in proc.stdout
    assert "3 runs," in proc.stdout and "1 refund waits for a decision" in proc.stdout
    assert "export REFUND_AGENT_DATABASE_URL=" in proc.stdout
    assert "refund-agent audit --verify" in proc.stdout

    target = DeskStore(url)
    assert dump(target, {t: source.columns(t) for t in COPIED}) == before
    assert reconcile(target, tmp_path) is None
    ledger = {log: [r for _, r in target.ledger_rows(log)] for log in ("refunds", "outbox")}
    assert len(ledger["refunds"]) == len(refunds_before) == 1
    assert len(ledger["outbox"]) == len(emails_before) == 2
    row = target.query("SELECT * FROM runs WHERE id = ?", (pending.id,))[0]
    assert row["lease_epoch"] == epoch and all(row[c] is None for c in LEASE)
    verify = run_cli(tmp_path / "host-b" / "output", "audit", "--verify",
                     REFUND_AGENT_DATABASE_URL=url)
    assert verify.returncode == 0 and "Audit log intact" in verify.stdout, verify.stdout

    # Another host approves the waiting refund. It reaches the offline model as one service on
    # the old output folder's state file (which holds the key its reasoning was sealed with),
    # as the README says; the run's stored response is gone (expired, say), so the run
    # continues from its own transcript, copied with the store.
    model.client.responses.delete(pending.last_response_id)
    decided = run_cli(tmp_path / "host-b" / "output", "approve", "--as", "Lee Park",
                      REFUND_AGENT_DATABASE_URL=url,
                      REFUND_AGENT_OFFLINE_URL=model.server.base_url)
    assert decided.returncode == 0, decided.stdout + decided.stderr
    host_b = Agent(pg_settings(tmp_path / "host-b", url))
    run = host_b.store.run(pending.id)
    assert run.status == RunStatus.DONE
    assert host_b.store.run_approvals(pending.id)[0].status == "approved"
    assert any(s.kind == "resent" for s in host_b.store.steps(pending.id))
    refunds = host_b.payments.refunds()
    assert [r["idempotency_key"] for r in refunds] == [refunds_before[0]["idempotency_key"],
                                                       approval.id]
    assert refunds[0] == refunds_before[0]  # the earlier refund was not paid again
    emails = host_b.outbox.messages()
    assert emails[:2] == emails_before
    assert [m["request"]["to"] for m in emails[2:]] == ["leo.martins@example.com"]
    assert host_b.store.query("SELECT lease_epoch FROM runs WHERE id = ?",
                              (pending.id,))[0][0] > epoch
    # New rows got ids past the copied ones (the sequences moved), and it all reconciles.
    assert reconcile(host_b.store, tmp_path) is None
    assert paid.id != pending.id and len(host_b.store.audit()) > len(before["audit"])


def test_the_old_sqlite_store_is_marked_moved_and_refuses_every_write(agent, settings, new_db):
    """One live store: after migrate, a terminal, a page or a cron job still pointed at the old
    SQLite store cannot decide, expire or pay there (the refund would be made on both); it is
    told where the store went, without the password, and can still read."""
    _paid, _rejected, pending, approval = three_runs(agent)
    refunds_before = agent.payments.refunds()
    url = new_db().replace("postgresql://postgres@", "postgresql://postgres:s3cret@")
    assert run_cli(settings.output_dir, "migrate", "--to", url).returncode == 0
    shown = url.replace(":s3cret@", ":***@")
    for args in (("approve", "--as", "Lee Park"), ("expire",), ("sample", "damaged"),
                 ("reject", "--as", "Lee Park", "--note", "No.")):
        refused = run_cli(settings.output_dir, *args)
        assert refused.returncode == 1, (args, refused.stdout, refused.stderr)
        assert f"was moved to PostgreSQL at {shown}" in refused.stderr, refused.stderr
        assert "REFUND_AGENT_DATABASE_URL" in refused.stderr
        assert "s3cret" not in refused.stdout + refused.stderr
        assert "Traceback" not in refused.stderr
    # Reads still work, and the old store is exactly as it was copied.
    queue = run_cli(settings.output_dir, "queue")
    assert queue.returncode == 0 and approval.id in queue.stdout, queue.stderr
    verify = run_cli(settings.output_dir, "audit", "--verify")
    assert verify.returncode == 0 and "Audit log intact" in verify.stdout, verify.stderr
    old = DeskStore(settings.db_path)
    assert old.approval(approval.id).status == "pending"
    assert old.run(pending.id).status == RunStatus.WAITING
    assert old.moved_to() == shown
    assert agent.payments.refunds() == refunds_before
    with pytest.raises(MigrationRefused, match="was already moved to"):
        migrate(old, settings.output_dir, new_db())
    # The page's and the worker's writes are refused the same way, idle or not.
    with pytest.raises(StoreError, match="was moved to PostgreSQL"):
        old.claim("worker")
    with pytest.raises(StoreError, match="was moved to PostgreSQL"):
        agent.decide(approval.id, True, "Dana Kim",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    assert DeskStore(url).approval(approval.id).status == "pending"   # decided there, once


def test_refused_when_the_target_is_not_empty(agent, settings, new_db):
    three_runs(agent)
    url = new_db()
    DeskStore(url).create_run(sender="x@example.com", sender_name="X", subject="s", email="hi")
    with pytest.raises(MigrationRefused, match="already has 1 run; migrate only into an empty"):
        migrate(DeskStore(settings.db_path), settings.output_dir, url)
    assert DeskStore(url).row_counts()["runs"] == 1


def test_a_tampered_store_is_refused_and_the_target_left_empty(agent, settings, new_db):
    paid, _rejected, _pending, _approval = three_runs(agent)
    with sqlite3.connect(settings.db_path) as db:
        db.execute("UPDATE audit SET amount = amount + 100 WHERE event = 'issued'")
    db.close()
    url = new_db()
    with pytest.raises(MigrationRefused) as refused:
        migrate(DeskStore(settings.db_path), settings.output_dir, url)
    assert "does not reconcile" in str(refused.value)
    assert "was edited after it was written" in str(refused.value)
    counts = DeskStore(url).row_counts()
    assert counts.pop("audit_anchor") == 1 and not any(counts.values())


def test_a_run_in_progress_is_refused_and_an_abandoned_lease_is_cleared(
        agent, model, settings, new_db):
    three_runs(agent)
    run = agent.start(*TICKETS[0][:1], "Order A1043: the glass pour-over coffee maker arrived "
                                       "cracked. Could I get a refund?")
    lease = agent.store.acquire(run.id, "token")  # this (live) process works on it
    url = new_db()
    with pytest.raises(MigrationRefused, match=f"1 run is being advanced right now "
                                               f"\\({run.id} \\(process"):
        migrate(DeskStore(settings.db_path), settings.output_dir, url)
    assert DeskStore(url).row_counts()["runs"] == 0
    # The process dies holding the lease (a pid that no longer exists): nobody works on it.
    dead = _dead_pid()
    with sqlite3.connect(settings.db_path) as db:
        db.execute("UPDATE runs SET lease_pid = ? WHERE id = ?", (dead, run.id))
    db.close()
    report = migrate(DeskStore(settings.db_path), settings.output_dir, url)
    assert report.runs == 4 and report.leases_cleared == 1
    # On PostgreSQL any worker takes it, with a fencing token above the dead holder's.
    on_pg = Agent(settings.with_(database_url=url), model=model)
    claimed = on_pg.store.claim("worker")
    assert claimed is not None and claimed.run_id == run.id and claimed.epoch == lease.epoch + 1
    on_pg.store.release(claimed, RunStatus.WORKING)
    # Its order was refunded already (three_runs), so the agent says so and finishes.
    assert on_pg.advance(run.id).status == RunStatus.DONE
    assert reconcile(on_pg.store, settings.output_dir) is None


def _dead_pid() -> int:
    """The pid of a process that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_copy_that_does_not_reconcile_on_postgresql_is_rolled_back(
        agent, settings, new_db, monkeypatch):
    three_runs(agent)
    import refund_agent.desk.migrate as module  # the desk's check of the copy
    real = module.reconcile
    monkeypatch.setattr(module, "reconcile", lambda store, out: "Broken on purpose."
                        if store.shared else real(store, out))
    url = new_db()
    with pytest.raises(MigrationRefused, match="rolled back.*Broken on purpose"):
        migrate(DeskStore(settings.db_path), settings.output_dir, url)
    counts = DeskStore(url).row_counts()
    assert counts.pop("audit_anchor") == 1 and not any(counts.values())
    monkeypatch.undo()
    assert migrate(DeskStore(settings.db_path), settings.output_dir, url).runs == 3  # still empty


def test_ctrl_c_during_the_copy_rolls_it_back_and_says_so(
        agent, settings, new_db, monkeypatch, capsys):
    """Ctrl+C in the middle of the copy: exit 130, nothing on PostgreSQL, and a message about
    the copy (not the generic hint about resuming runs)."""
    from refund_agent import cli

    three_runs(agent)
    import refund_agent.store.migrate as module

    def interrupted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "_check_counts", interrupted)   # after every table is copied
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(settings.output_dir))
    url = new_db()
    assert cli.main(["migrate", "--to", url]) == 130
    said = capsys.readouterr().out
    assert "A copy stopped before it committed is rolled back" in said
    assert "refund-agent resume" not in said
    counts = DeskStore(url).row_counts()
    assert counts.pop("audit_anchor") == 1 and not any(counts.values())


def test_the_loop_store_moves_with_what_its_agent_hands_in(agent, settings, new_db):
    """The copy is the loop's store's and knows no agent: the check runs on the source and on
    the copy, and the logs it is handed become ledger rows (an agent's own effect log here)."""
    import json

    from refund_agent.store.migrate import Log
    from refund_agent.store.migrate import migrate as copy_store

    three_runs(agent)
    checked: list[bool] = []

    def check(store: Store, _out: Path) -> None:
        checked.append(store.shared)

    record = {"idempotency_key": "run_1-call_1", "request": {"credit": 500}, "id": "cr_1"}
    effects = settings.output_dir / "effects.log"
    effects.write_text(json.dumps(record) + "\n" + '{"idempotency_key": "cut')
    url = new_db()
    # The source holds the desk's tables (its agent made it): the copy is opened as the desk's
    # store, which makes them; a loop store alone would lack them, and is refused.
    with pytest.raises(MigrationRefused, match="open the target as the store of the agent"):
        copy_store(Store(settings.db_path), settings.output_dir, new_db())
    report = copy_store(Store(settings.db_path), settings.output_dir, url, check=check,
                        logs=lambda _store, out: [Log("effects", out / "effects.log", [record])],
                        open_target=DeskStore)
    assert checked == [False, True]
    assert report.runs == 3 and report.ledger == {"effects": 1} and report.torn == 1
    assert [json.loads(text) for _id, text in Store(url).ledger_rows("effects")] == [record]
    assert Store(url).ledger_rows("refunds") == []   # the desk's logs are the desk's to move


def test_a_torn_last_log_line_is_skipped_and_reported(agent, settings, new_db):
    three_runs(agent)
    with open(settings.output_dir / "outbox.log", "a") as log:
        log.write('{"idempotency_key": "call_cut_sh')  # a write cut short by a crash
    report = migrate(DeskStore(settings.db_path), settings.output_dir, new_db())
    assert report.torn == 1 and report.ledger == {"refunds": 1, "outbox": 2}


def test_bad_targets_are_one_sentence_without_a_traceback(agent, settings):
    three_runs(agent)
    for url, said in (("mysql://db/refunds", "must be a postgresql:// URL"),
                      ("postgresql://refunds:s3cret@127.0.0.1:9/refunds",
                       "Cannot reach the PostgreSQL database at"),
                      # Named by its value: it came from --to, not from the setting.
                      ("postgresql://refunds:s3cret@127.0.0.1:9/refunds?nosuchoption=1",
                       "is not a usable PostgreSQL URL")):
        proc = run_cli(settings.output_dir, "migrate", "--to", url)
        assert proc.returncode == 1
        assert "Traceback" not in proc.stderr and "s3cret" not in proc.stderr
        assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = run_cli(settings.output_dir, "migrate", REFUND_AGENT_DATABASE_URL="")
    assert proc.returncode == 1 and "Say where to copy the store" in proc.stderr


def test_an_upgraded_schema_3_store_migrates_and_its_runs_without_transcript_are_listed(
        agent, settings, new_db):
    """A store from before transcripts: its runs' columns were added at the end of the table
    (ALTER TABLE), in another order than a new store's; the waiting run, which made its
    requests before transcripts were kept, can continue only from its stored response."""
    _paid, _rejected, pending, _approval = three_runs(agent)
    agent.store.close()
    with sqlite3.connect(settings.db_path) as db:   # back to schema 3 (see test_transcript.py)
        db.execute("DROP TABLE transcript")
        db.execute("DROP TABLE ledger")
        for column in ("transcript_items", "transcript_bytes", "transcript_complete",
                       "lease_host"):
            db.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        db.execute("PRAGMA user_version = 3")
    db.close()
    source = DeskStore(settings.db_path)  # upgraded to the current schema on opening
    assert source.columns("runs")[-1] == "lease_host"
    url = new_db()
    report = migrate(source, settings.output_dir, url)
    assert report.without_transcript == (pending.id,)
    assert dump(DeskStore(url), {t: source.columns(t) for t in COPIED}) == dump(source)


# -- generated histories --------------------------------------------------------------------------

@st.composite
def histories(draw) -> list[tuple[int, str]]:
    """A few tickets: (which customer, what happens to the proposal)."""
    n = draw(st.integers(1, 3))
    return [(draw(st.integers(0, 2)),
             draw(st.sampled_from(["approve", "reject", "ask", "pending", "reply"])))
            for _ in range(n)]


@hsettings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(history=histories(), accounts=st.booleans())
def test_generated_histories_migrate_row_for_row(history, accounts, new_db):
    import openai
    with tempfile.TemporaryDirectory(prefix="migrate-") as folder:
        settings = Settings(api_key="", data_dir=DATA, output_dir=Path(folder) / "output",
                            max_retries=2, timeout=30.0)
        server = OfflineServer(Path(folder) / "model.sqlite3").start()
        try:
            client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
            agent = Agent(settings, model=ModelAccess(client, "offline", server))
            if accounts:
                agent.store.add_account("Dana Kim", "lead", None, "scrypt$x", by="setup")
            for which, fate in history:
                run = agent.advance(agent.start(*TICKETS[which]).id)
                pending = [a for a in agent.store.approvals("pending") if a.run_id == run.id]
                if not pending:
                    continue  # the line was already held by an earlier ticket
                if fate == "approve":
                    agent.decide(pending[0].id, True, "Dana Kim",
                                 fingerprint=agent.store.approval(pending[0].id).fingerprint)
                elif fate == "reject":
                    agent.decide(pending[0].id, False, "Dana Kim", "Not covered.",
                                 fingerprint=agent.store.approval(pending[0].id).fingerprint)
                elif fate in ("ask", "reply"):
                    agent.ask(pending[0].id, "Dana Kim", "Could you send a photo?",
                              fingerprint=agent.store.approval(pending[0].id).fingerprint)
                if fate != "pending":
                    run = agent.advance(run.id)
                if fate == "reply" and run.status == RunStatus.ASKED:
                    agent.add_reply(run.id, "Here is the photo.")
            source = DeskStore(settings.db_path)
            before = dump(source)
            url = new_db()
            report = migrate(source, settings.output_dir, url)
            target = DeskStore(url)
            assert dump(target, {t: source.columns(t) for t in COPIED}) == before
            assert report.rows == {t: len(rows) for t, rows in before.items()}
            assert reconcile(target, settings.output_dir) is None
            target.close()
        finally:
            server.close()


def test_mail_sent_over_smtp_stays_marked_sent_after_the_move(tmp_path, new_db):
    """SMTP's sent marks (outbox-sent.log) move with the outbox: on PostgreSQL every email the
    server took before the move still reads as sent, and none is sent again."""
    aiosmtpd = pytest.importorskip("aiosmtpd.controller")
    taken: list[bytes] = []

    class Mailbox:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's)
            taken.append(envelope.original_content)
            return "250 OK"

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = aiosmtpd.Controller(Mailbox(), hostname="127.0.0.1", port=port)
    server.start()
    try:
        env = {"REFUND_AGENT_EMAIL": "smtp", "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port),
               "SMTP_SECURITY": "none"}
        out = tmp_path / "output"
        assert run_cli(out, "sample", "damaged", **env).returncode == 0
        assert run_cli(out, "approve", "--as", "Dana Kim", **env).returncode == 0
        sent = len(taken)
        assert sent >= 1 and (out / "outbox-sent.log").exists()
        url = new_db()
        moved = run_cli(out, "migrate", "--to", url, **env)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert f"{sent} from outbox-sent.log" in moved.stdout
        target = DeskStore(url)
        marks = [r for _, r in target.ledger_rows("outbox-sent")]
        assert len(marks) == sent == len(target.ledger_rows("outbox"))
        verify = run_cli(tmp_path / "host-b" / "output", "audit", "--verify",
                         REFUND_AGENT_DATABASE_URL=url, **env)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert "never marked sent" not in verify.stdout
        resumed = run_cli(tmp_path / "host-b" / "output", "resume",
                          REFUND_AGENT_DATABASE_URL=url, **env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert len(taken) == sent   # nothing sent twice on the new database
    finally:
        server.stop()


def test_mail_taken_before_the_move_is_still_taken_once_after_it(agent, settings, new_db):
    """The mail table (schema 14) moves byte for byte: a redelivery after the move is found by
    its Message-ID, and new mail gets ids past the copied ones."""
    from helpers.mail import mail

    from refund_agent.outside.mailin.intake import take

    raw = mail(body="Ça s'est cassé.").as_bytes() + b"\n\xff trailing byte, not UTF-8\n"
    first = take(agent.store, raw, "refunds")
    url = new_db()
    proc = run_cli(settings.output_dir, "migrate", "--to", url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    target = DeskStore(url)
    assert target.raw_mail(first.message_id) == raw
    again = take(target, raw, "refunds")
    assert (again.new, again.run_id) == (False, first.run_id)
    later = take(target, mail(message_id="<later@m>").as_bytes(), "refunds")
    assert later.new and later.id > first.id and len(target.runs()) == 2
    target.close()
