"""The loop's metrics (OpenTelemetry's metrics API) into an in-memory reader: what each counts
matches what the store recorded, and the gauges read the store when collected (the support
lead's alert, "a proposal has waited more than 4 hours", is one query on oldest_wait)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from helpers.credit import ANA, EMAIL  # noqa: E402

from refund_agent import RunStatus, telemetry  # noqa: E402

FOUR_HOURS = 4 * 3600


def _gauge(recorded, name: str, **attributes) -> list[float]:
    return [p.value for p in recorded.metrics().get(name, [])
            if all(p.attributes.get(k) == v for k, v in attributes.items())]


def test_model_requests_tokens_and_cost_match_the_run(credit, recorded):
    run = credit.advance(credit.start(ANA, EMAIL).id)
    assert recorded.total("refund_agent.model.requests") == run.requests
    assert recorded.total("gen_ai.client.token.usage", **{"gen_ai.token.type": "input"}) == (
        run.input_tokens)
    assert recorded.total("gen_ai.client.token.usage", **{"gen_ai.token.type": "output"}) == (
        run.output_tokens)
    assert recorded.total("refund_agent.model.cost") == pytest.approx(run.cost_usd)
    durations = recorded.metrics()["gen_ai.client.operation.duration"]
    assert sum(p.count for p in durations) == run.requests


def test_proposals_waiting_and_the_oldest_wait_are_read_from_the_store(credit, recorded):
    run = credit.advance(credit.start(ANA, EMAIL).id)
    assert recorded.total("refund_agent.proposals") == 1
    assert recorded.total("refund_agent.proposal.amount") == 2500
    assert _gauge(recorded, "refund_agent.proposals.waiting",
                  **{"gen_ai.agent.name": "store-credit"}) == [1]
    (pending,) = credit.store.approvals("pending")
    # Four hours and a minute ago, by the store's own clock: the alert's query fires.
    with credit.store._tx() as db:
        db.execute("UPDATE approvals SET requested_at = requested_at - ? WHERE id = ?",
                   (FOUR_HOURS + 60, pending.id))
    (oldest,) = _gauge(recorded, "refund_agent.proposals.oldest_wait")
    assert FOUR_HOURS + 60 <= oldest < FOUR_HOURS + 600
    assert _gauge(recorded, "refund_agent.runs", **{"refund_agent.run.status": "waiting"}) == [1]
    (pending,) = credit.store.approvals("pending")
    decided = credit.approve(pending.id, pending.fingerprint, by="Dana Kim")
    credit.advance(run.id)
    assert _gauge(recorded, "refund_agent.proposals.waiting") == []   # none left
    assert _gauge(recorded, "refund_agent.runs", **{"refund_agent.run.status": "done"}) == [1]
    (wait,) = recorded.metrics()["refund_agent.decision.wait"]
    assert wait.count == 1
    assert wait.sum == pytest.approx(decided.decided_at - pending.requested_at)
    assert recorded.total("refund_agent.decisions", **{"refund_agent.decision": "approved"}) == 1
    assert recorded.total("refund_agent.decisions.amount") == 2500


def test_the_docs_alert_query_on_the_store_finds_the_same_proposal(credit):
    """docs/TELEMETRY.md's SQL for "a refund has waited more than 4 hours", run as written."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "TELEMETRY.md").read_text()
    (query,) = re.findall(r"```sql\n(.*?)```", text, re.S)
    credit.advance(credit.start(ANA, EMAIL).id)
    (pending,) = credit.store.approvals("pending")
    assert credit.store.query(query)[0][0] == 0   # waiting for seconds: not yet
    with credit.store._tx() as db:
        db.execute("UPDATE approvals SET requested_at = requested_at - ? WHERE id = ?",
                   (FOUR_HOURS + 60, pending.id))
    assert credit.store.query(query)[0][0] == 1


def test_a_gauge_the_store_cannot_answer_is_one_log_line(credit, recorded, monkeypatch,
                                                         caplog):
    credit.advance(credit.start(ANA, EMAIL).id)

    def busy(self):
        raise RuntimeError("database is locked")
    monkeypatch.setattr(type(credit.store), "telemetry_counts", busy)
    metrics = recorded.metrics()
    assert "refund_agent.proposals.waiting" not in metrics
    assert recorded.total("refund_agent.proposals") == 1   # the rest is still collected
    lines = [r.getMessage() for r in caplog.records if "could not read" in r.getMessage()]
    assert lines and all("database is locked" in line and "\n" not in line for line in lines)


def test_effects_and_their_reuse_are_counted(credit, recorded):
    run = credit.advance(credit.start(ANA, EMAIL).id)
    (pending,) = credit.store.approvals("pending")
    credit.approve(pending.id, pending.fingerprint, by="Dana Kim")
    credit.advance(run.id)
    credit.effects.once(pending.id, {"account_id": "CR-1001", "amount_cents": 2500},
                        lambda: {"credit_id": "never"})
    assert recorded.total("refund_agent.effects", **{"refund_agent.effect.reused": False}) == 1
    assert recorded.total("refund_agent.effects", **{"refund_agent.effect.reused": True}) == 1


def test_rate_limits_and_retries_are_counted(credit, model, recorded):
    model.server.inject("429", "500")   # a rate limit (the limiter retries), a 5xx (the SDK)
    run = credit.advance(credit.start(ANA, EMAIL).id)
    assert run.status == RunStatus.WAITING
    assert recorded.total("refund_agent.model.rate_limited") == 1
    assert recorded.total("refund_agent.model.retries", **{
        "http.response.status_code": 429}) == 1
    assert recorded.total("refund_agent.model.retries", **{
        "http.response.status_code": 500}) == 1


def test_a_takeover_is_counted_and_runs_ending_by_status(credit, recorded):
    run = credit.start(ANA, EMAIL)
    lease = credit.store.acquire(run.id, "a-process-that-died")
    with credit.store._tx() as db:   # as if that process was another, and died holding it
        db.execute("UPDATE runs SET lease_pid = 999999, last_pid = 999999, lease_at = 0"
                   " WHERE id = ?", (run.id,))
    assert lease.epoch == 1
    left = credit.advance(run.id)
    assert recorded.total("refund_agent.lease.takeovers") == 1
    (advance,) = recorded.named("invoke_agent ")
    assert advance.attributes["refund_agent.takeover"] is True
    assert recorded.total("refund_agent.runs.ended", **{
        "refund_agent.run.status": str(left.status)}) == 1


def test_off_nothing_is_counted_and_no_store_is_read(credit, monkeypatch):
    for name in [n for n in __import__("os").environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    telemetry.reset()
    reads = []
    monkeypatch.setattr(type(credit.store), "telemetry_counts",
                        lambda self: reads.append(self))
    credit.advance(credit.start(ANA, EMAIL).id)
    assert telemetry.active() is telemetry.OFF and reads == []
