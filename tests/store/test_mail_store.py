"""The mail table on both engines: one row and one ticket per Message-ID however many
deliveries race, a reply held while its run works and added once it can take one, and the
thread ids an answer carries."""

from __future__ import annotations

import threading
import uuid

from helpers.mail import mail

from refund_agent.desk.records import DeskStore
from refund_agent.models import RunStatus
from refund_agent.outside.mailin.intake import take


def open_store(tmp_path, backend) -> DeskStore:
    out = tmp_path / "out"
    out.mkdir()
    backend.prepare(out)
    return DeskStore(backend.url(out) if backend.postgres else out / "refund-agent.sqlite3")


def test_racing_deliveries_of_one_message_make_one_ticket(tmp_path, backend):
    store = open_store(tmp_path, backend)
    raw = mail().as_bytes()
    start, rows = threading.Barrier(6), []

    def deliver() -> None:
        start.wait()
        rows.append(take(store, raw, "refunds"))

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.new for r in rows) == [False] * 5 + [True]
    assert len(store.runs()) == 1 and len(store.mail()) == 1
    store.close()


def test_a_reply_waits_while_its_run_works_and_then_continues_it(tmp_path, backend):
    store = open_store(tmp_path, backend)
    ticket = take(store, mail().as_bytes(), "refunds")
    run_id = ticket.run_id
    lease = store.acquire(run_id, uuid.uuid4().hex)
    store.record_mail_out(lease, "<ours@desk>", "maya.chen@example.com", "Re: Cracked carafe",
                          "<first@maya.example>", ["<first@maya.example>"])
    assert store.mail_thread(run_id) == ("<first@maya.example>",
                                         ("<first@maya.example>", "<ours@desk>"))
    answer = mail(message_id="<two@m>", body="Also the lid is missing.",
                  In_Reply_To="<ours@desk>", References="<first@maya.example> <ours@desk>")
    held = take(store, answer.as_bytes(), "refunds")
    assert (held.kind, held.run_id) == ("held", run_id)   # the run is being advanced
    assert store.replies(run_id) == [] and store.release_held() == []
    store.release(lease, RunStatus.DONE)
    [released] = store.release_held()
    assert (released.kind, released.run_id) == ("reply", run_id)
    assert [r.text for r in store.replies(run_id)] == ["Also the lid is missing."]
    assert store.run(run_id).status == RunStatus.WORKING   # a worker picks it up
    assert store.mail_thread(run_id)[0] == "<two@m>"
    assert take(store, answer.as_bytes(), "refunds").new is False
    assert store.raw_mail("<two@m>") == answer.as_bytes()   # kept as it arrived
    store.close()


def test_a_long_threads_references_keep_its_first_message_and_its_newest(tmp_path, backend):
    store = open_store(tmp_path, backend)
    run_id = take(store, mail().as_bytes(), "refunds").run_id
    lease = store.acquire(run_id, uuid.uuid4().hex)
    for n in range(30):
        store.record_mail_out(lease, f"<out{n}@desk>", "maya.chen@example.com", "Re: x",
                              "<first@maya.example>", [])
    store.record_mail_out(lease, "<out29@desk>", "x@y.z", "again", None, [])   # once per id
    in_reply_to, refs = store.mail_thread(run_id)
    assert in_reply_to == "<first@maya.example>"
    assert refs == ("<first@maya.example>", *(f"<out{n}@desk>" for n in range(11, 30)))
    store.close()
