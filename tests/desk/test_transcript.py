"""Runs that outlive the provider's stored responses, and zero retention (issue #17).

Each run keeps a transcript: every item its requests sent and its responses returned, encrypted
reasoning included, in order. When ``previous_response_id`` answers 404 (deleted, or 30 days
passed) the turn is sent again with the transcript and the run chains on from the new response;
with zero retention no response is ever stored and the transcript goes with every request.
Everything here goes through the real openai SDK to the offline stand-in over loopback.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

import httpx2
import openai
import pytest

from offline_model.sealing import SealError, open_sealed
from refund_agent import RunStatus, Settings
from refund_agent.config import load_settings
from refund_agent.desk import Agent, converse
from refund_agent.errors import ConfigError
from refund_agent.providers.client import ModelAccess, open_model
from refund_agent.store import SCHEMA_VERSION, Store

APPROVER = "Dana Kim"


def _approve_pending(agent: Agent, run_id: str) -> None:
    [approval] = [a for a in agent.store.approvals("pending") if a.run_id == run_id]
    agent.decide(approval.id, approve=True, by=APPROVER,
                 fingerprint=agent.store.approval(approval.id).fingerprint)


def _waiting_damaged(agent: Agent):
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING, run.error
    return run


def _agent_bodies(model: ModelAccess, since: int = 0) -> list[dict]:
    """The refund desk's request bodies (the simulated customer's have no tools)."""
    return [b for b in model.server.requests[since:] if b.get("tools")]


def _kinds(agent: Agent, run_id: str) -> list[str]:
    return [s.kind for s in agent.store.steps(run_id)]


# -- what is kept ------------------------------------------------------------------------------

def test_the_transcript_is_every_item_sent_and_returned_in_order(agent: Agent, model):
    run = _waiting_damaged(agent)
    entries = agent.store.transcript(run.id)
    bodies = _agent_bodies(model)
    responses = [s.data["response_id"] for s in agent.store.steps(run.id) if s.kind == "response"]
    assert len(bodies) == len(responses) == 3
    rebuilt: list[dict] = []
    for body, response_id in zip(bodies, responses, strict=True):
        # grok-4.7 returns the encrypted reasoning unasked; an explicit include would stop xAI
        # keeping the thinking trace for rehydration, so none is sent with store=true.
        assert "include" not in body and body["store"] is True
        sent = [e.item for e in entries if e.response_id == response_id and e.origin == "input"]
        kept = [e.item for e in entries if e.response_id == response_id and e.origin == "output"]
        assert all(i.get("encrypted_content") for i in kept if i["type"] == "reasoning")
        assert sent == body["input"]   # exactly what went out
        # ... and exactly what came back, field for field, encrypted reasoning included.
        assert kept == model.server.retrieve(response_id)["output"]
        rebuilt += sent + kept
    assert [e.item for e in entries] == rebuilt
    assert [e.seq for e in entries] == list(range(len(entries)))
    kinds = [e.item.get("type", "message") for e in entries]
    assert kinds[:2] == ["message", "message"] and entries[0].item["role"] == "system"
    assert {"reasoning", "function_call", "function_call_output"} <= set(kinds)
    stored = agent.store.run(run.id)
    assert stored.transcript_complete and stored.transcript_items == len(entries)
    assert stored.transcript_bytes == sum(
        len(json.dumps(e.item, ensure_ascii=False, separators=(",", ":")).encode())
        for e in entries)


def test_the_encrypted_reasoning_is_opaque_and_opens_only_for_its_own_item(agent: Agent, model):
    run = _waiting_damaged(agent)
    reasoning = [e.item for e in agent.store.transcript(run.id) if e.item["type"] == "reasoning"]
    assert reasoning
    secret = model.server._require_store().secret
    for item in reasoning:
        blob = item["encrypted_content"]
        summary = item["summary"][0]["text"]
        raw = base64.urlsafe_b64decode(blob)
        assert summary.encode() not in raw and b"reasoning" not in raw
        with pytest.raises(ValueError):
            json.loads(raw)
        assert open_sealed(secret, item["id"], blob) == {"reasoning": summary}
        with pytest.raises(SealError, match="does not verify"):
            open_sealed(secret, "rs_someone_else", blob)


# -- the stored response is gone ------------------------------------------------------------------

def _finishes_from_the_transcript(agent: Agent, model, run_id: str, missing: str) -> None:
    """Approve, advance: one refund, one email, and the timeline and audit say what happened."""
    before = len(model.server.requests)
    _approve_pending(agent, run_id)
    done = agent.advance(run_id)
    assert done.status == RunStatus.DONE, done.error
    assert len(agent.payments.refunds()) == 1
    assert len(agent.outbox.messages()) == 1
    bodies = model.server.requests[before:]
    # The 404 on the chained request, then the same turn sent with the whole transcript.
    assert bodies[0]["previous_response_id"] == missing
    assert "previous_response_id" not in bodies[1] and bodies[1]["store"] is True
    sent = bodies[1]["input"]
    assert sent[0]["role"] == "system" and sent[-1]["type"] == "function_call_output"
    assert sum(item.get("type") == "reasoning" for item in sent) >= 3
    # Then it chains again from the response the transcript produced.
    resent = [s for s in agent.store.steps(run_id) if s.kind == "resent"]
    assert len(resent) == 1 and resent[0].data["missing"] == missing
    assert bodies[2]["previous_response_id"] == resent[0].data["response_id"]
    assert all(b.get("previous_response_id") for b in bodies[2:])
    notes = [e.note for e in agent.store.audit() if e.event == "resent" and e.run_id == run_id]
    assert len(notes) == 1 and missing in notes[0] and "transcript" in notes[0]
    assert agent.store.verify_audit() is None
    assert _kinds(agent, run_id)[-1] == "response"


def test_a_deleted_stored_response_is_replaced_by_the_transcript(agent: Agent, model):
    run = _waiting_damaged(agent)
    deleted = model.client.responses.delete(run.last_response_id)   # through the SDK
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(Exception, match="404"):
        model.client.responses.retrieve(run.last_response_id)
    _finishes_from_the_transcript(agent, model, run.id, run.last_response_id)


def test_thirty_one_days_later_the_run_finishes_from_its_transcript(agent: Agent, model):
    run = _waiting_damaged(agent)
    # Over HTTP, as another process (the terminal's) would move it.
    moved = httpx2.post(model.server.base_url.replace("/v1", "/_offline/clock"),
                       json={"advance_seconds": 31 * 86400})
    assert moved.status_code == 200
    with pytest.raises(openai.NotFoundError):
        model.client.responses.retrieve(run.last_response_id)
    _finishes_from_the_transcript(agent, model, run.id, run.last_response_id)


def test_a_tampered_reasoning_blob_stops_the_run_with_a_clear_error(agent: Agent, model):
    run = _waiting_damaged(agent)
    with sqlite3.connect(agent.settings.db_path) as db:
        seq, text = db.execute("SELECT seq, item FROM transcript WHERE run_id = ? AND item LIKE"
                               " '%\"type\":\"reasoning\"%' ORDER BY seq LIMIT 1",
                               (run.id,)).fetchone()
        item = json.loads(text)
        blob = item["encrypted_content"]
        middle = len(blob) // 2
        item["encrypted_content"] = (blob[:middle] + ("A" if blob[middle] != "A" else "B")
                                     + blob[middle + 1:])
        db.execute("UPDATE transcript SET item = ? WHERE run_id = ? AND seq = ?",
                   (json.dumps(item), run.id, seq))
    model.client.responses.delete(run.last_response_id)
    before = len(model.server.requests)
    _approve_pending(agent, run.id)
    failed = agent.advance(run.id)
    assert failed.status == RunStatus.FAILED
    # Found by the transcript's own integrity check, before anything was sent.
    assert "changed after it was written" in failed.error and "transcript" in failed.error
    # The refund was paid before the request (exactly once, as always); no response was
    # recorded from a conversation the model could not read, and the customer was told that a
    # person will follow up (the refund named), once.
    assert len(agent.payments.refunds()) == 1
    assert len(model.server.requests) == before + 1   # only the 404; the transcript stayed
    assert agent.store.run(run.id).last_response_id == run.last_response_id
    assert "resent" not in _kinds(agent, run.id)
    _told_a_person_will_follow_up(agent, failed)
    assert "refund of $" in agent.outbox.messages()[0]["request"]["body"]


def test_a_run_without_a_transcript_going_back_to_the_start_does_not_send_half_of_one(
        agent: Agent, model):
    run = _waiting_damaged(agent)
    with sqlite3.connect(agent.settings.db_path) as db:
        db.execute("DELETE FROM transcript WHERE run_id = ? AND seq < 2", (run.id,))
        db.execute("UPDATE runs SET transcript_complete = 0 WHERE id = ?", (run.id,))
    model.client.responses.delete(run.last_response_id)
    _approve_pending(agent, run.id)
    before = len(model.server.requests)
    failed = agent.advance(run.id)
    assert failed.status == RunStatus.FAILED and "before refund-agent kept transcripts" in \
        failed.error
    assert len(model.server.requests) == before + 1   # only the chained request that got 404


def test_a_transcript_cut_short_is_refused_not_sent(agent: Agent, model):
    """A store restored from an older copy: the transcript stops before the last response."""
    run = _waiting_damaged(agent)
    with sqlite3.connect(agent.settings.db_path) as db:
        db.execute("DELETE FROM transcript WHERE run_id = ? AND response_id = ?",
                   (run.id, run.last_response_id))
    model.client.responses.delete(run.last_response_id)
    _approve_pending(agent, run.id)
    failed = agent.advance(run.id)
    assert failed.status == RunStatus.FAILED
    assert "does not end at that response" in failed.error
    _told_a_person_will_follow_up(agent, failed)


def _told_a_person_will_follow_up(agent: Agent, failed) -> None:
    """The customer got one email, to the sender only, saying a person will follow up; the
    team's note (the run's failure) says so; resuming does not send it again (#21 item 17)."""
    [sent] = agent.outbox.messages()
    assert sent["request"]["to"] == failed.sender
    assert "follow up" in sent["request"]["body"] and "person needs to take" in failed.error
    again = agent.advance(failed.id)
    assert again.status == RunStatus.FAILED and "was already told" in again.error
    assert len(agent.outbox.messages()) == 1


# -- zero retention -------------------------------------------------------------------------------

def _angry_flow(agent: Agent) -> str:
    run = converse(agent, agent.start_sample("angry").id)
    assert run.status == RunStatus.WAITING, run.error
    _approve_pending(agent, run.id)
    run = converse(agent, run.id)
    assert run.status == RunStatus.DONE, run.error
    return run.id


def test_the_angry_customer_with_zero_retention_goes_exactly_as_with_stored_responses(
        settings: Settings, tmp_path: Path):
    chained = Agent(settings, model=open_model(settings))
    private_settings = settings.with_(output_dir=tmp_path / "zero", zero_retention=True)
    private = Agent(private_settings, model=open_model(private_settings))
    runs = {"chained": _angry_flow(chained), "zero": _angry_flow(private)}
    agents = {"chained": chained, "zero": private}

    # The same conversation: the same timeline, refunds, emails and notes.
    assert _kinds(chained, runs["chained"]) == _kinds(private, runs["zero"])
    for name, agent in agents.items():
        refunds = agent.payments.refunds()
        assert [r["request"]["amount_cents"] for r in refunds] == [3150], name
    assert [m["request"]["body"] for m in chained.outbox.messages()] == \
        [m["request"]["body"] for m in private.outbox.messages()]

    # Nothing stored by the provider, no chain: each request carries the transcript so far.
    bodies = _agent_bodies(private.model)
    # Ten: the angry reply is escalated to a lead (escalate) in a turn of its own.
    assert len(bodies) == len(_agent_bodies(chained.model)) == 10
    history: list[dict] = []
    for body in bodies:
        assert body["store"] is False and "previous_response_id" not in body
        assert body["input"][:len(history)] == history
        history = body["input"]
    for step in private.store.steps(runs["zero"]):
        if step.kind == "response":
            with pytest.raises(openai.NotFoundError):
                private.model.client.responses.retrieve(step.data["response_id"])
    assert all(b["store"] is False for b in private.model.server.requests)
    # The prompt cache still serves the part of each request it has seen.
    run = private.store.run(runs["zero"])
    assert run.cached_tokens > run.input_tokens / 2
    assert run.transcript_items == len(private.store.transcript(run.id))
    assert private.store.verify_audit() is None


def test_zero_retention_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("REFUND_AGENT_ZERO_RETENTION", "1")
    assert load_settings().zero_retention is True
    monkeypatch.setenv("REFUND_AGENT_ZERO_RETENTION", "off")
    assert load_settings().zero_retention is False
    monkeypatch.setenv("REFUND_AGENT_ZERO_RETENTION", "sometimes")
    with pytest.raises(ConfigError, match="REFUND_AGENT_ZERO_RETENTION must be 1 or 0"):
        load_settings()


def test_switching_zero_retention_off_midway_chains_again_after_one_resend(
        settings: Settings, model):
    private = Agent(settings.with_(zero_retention=True), model=model)
    run = _waiting_damaged(private)
    agent = Agent(settings, model=model)   # the setting turned off; the response was never kept
    _finishes_from_the_transcript(agent, model, run.id, run.last_response_id)


# -- the store upgrade ----------------------------------------------------------------------------

def test_a_schema_3_store_upgrades_without_losing_anything(agent: Agent, tmp_path: Path):
    started = _waiting_damaged(agent)
    fresh = agent.store.run(agent.start_sample("past-window").id)  # no request made yet
    audit_before = [e.hash for e in agent.store.audit()]
    path = agent.settings.db_path
    agent.store.close()
    with sqlite3.connect(path) as db:   # back to schema 3: no transcript, no counters
        db.execute("DROP TABLE transcript")
        db.execute("DROP TABLE ledger")  # schema 5's, as are leases naming their host
        for column in ("transcript_items", "transcript_bytes", "transcript_complete",
                       "lease_host"):
            db.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        db.execute("PRAGMA user_version = 3")
    upgraded = Store(path)
    assert upgraded.schema_version() == SCHEMA_VERSION
    assert [e.hash for e in upgraded.audit()] == audit_before
    assert upgraded.verify_audit() is None
    old = upgraded.run(started.id)
    assert old.last_response_id == started.last_response_id and old.requests == 3
    assert not old.transcript_complete and upgraded.transcript(started.id) == []
    assert upgraded.run(fresh.id).transcript_complete   # it will keep one from its first request
    assert [a.id for a in upgraded.approvals("pending")] == \
        [a.id for a in agent.store.approvals("pending")]
    Store(path)  # opening it again changes nothing


def test_an_edited_tool_output_in_the_transcript_is_noticed(agent: Agent, model):
    """Every transcript item is covered by the integrity check, not only reasoning blobs."""
    run = _waiting_damaged(agent)
    with sqlite3.connect(agent.settings.db_path) as db:
        seq, text = db.execute("SELECT seq, item FROM transcript WHERE run_id = ? AND item LIKE"
                               " '%function_call_output%' ORDER BY seq LIMIT 1",
                               (run.id,)).fetchone()
        item = json.loads(text)
        item["output"] = item["output"].replace("A1043", "A1044")
        db.execute("UPDATE transcript SET item = ? WHERE run_id = ? AND seq = ?",
                   (json.dumps(item), run.id, seq))
    model.server.advance_clock(days=31)
    before = len(model.server.requests)
    _approve_pending(agent, run.id)
    failed = agent.advance(run.id)
    assert failed.status == RunStatus.FAILED and "changed after it was written" in failed.error
    assert len(model.server.requests) == before + 1 and len(agent.payments.refunds()) == 1
    _told_a_person_will_follow_up(agent, failed)


def test_zero_retention_with_a_fresh_offline_model_state_tells_the_customer(
        settings: Settings, tmp_path: Path):
    """The stand-in's state is new (another secret): the run's reasoning blobs no longer
    verify there, so the run cannot continue; the refund is paid once and the customer told."""
    quiet = settings.with_(zero_retention=True)
    agent = Agent(quiet, model=open_model(quiet))
    run = _waiting_damaged(agent)
    agent.model.server.close()
    (quiet.output_dir / "offline-model.sqlite3").unlink()
    fresh = Agent(quiet, model=open_model(quiet))   # a new stand-in, a new secret
    _approve_pending(fresh, run.id)
    failed = fresh.advance(run.id)
    assert failed.status == RunStatus.FAILED and "does not verify" in failed.error
    assert len(fresh.payments.refunds()) == 1
    _told_a_person_will_follow_up(fresh, failed)
