"""A refund the provider reports failed reaches a person, whatever the run is doing.

Stripe can fail a refund seconds after accepting it, while the process that made it is still
emailing the customer (the run is leased). That process then finishes the run as done, so the
report cannot rest on the run's status: it opens an escalation, which keeps the ticket under
*Needs a person* until a lead takes it. Driven through ``webhooks.handle`` with deliveries
signed as Stripe documents (https://docs.stripe.com/webhooks#verify-manually), on a real run
of the agent against the offline model.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time

import pytest

pytest.importorskip("stripe")

from refund_agent import RunStatus  # noqa: E402
from refund_agent.desk_status import needs_person  # noqa: E402
from refund_agent.escalations import PROVIDER_FAILED  # noqa: E402
from refund_agent.outside.stripe import CALL_ID  # noqa: E402
from refund_agent.outside.webhooks import handle  # noqa: E402

SECRET = "whsec_test_leased"


def delivery(approval_id: str, event_id: str = "evt_leased", kind: str = "refund.failed",
             status: str = "failed") -> tuple[bytes, str]:
    """An event of ``kind`` for the approval's refund, now ``status``, and its signature."""
    refund = {"id": "re_1Failed", "object": "refund", "amount": 4800, "currency": "usd",
              "status": status, "failure_reason": "expired_or_canceled_card",
              "metadata": {CALL_ID: approval_id, "order_id": "A1043"}}
    payload = json.dumps({"id": event_id, "object": "event", "type": kind,
                          "created": int(time.time()), "livemode": False,
                          "data": {"object": refund}}).encode()
    at = int(time.time())
    mac = hmac.new(SECRET.encode(), f"{at}.".encode() + payload, hashlib.sha256).hexdigest()
    return payload, f"t={at},v1={mac}"


def paid_run(agent):
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING
    approval = agent.store.approvals("pending")[0]
    agent.decide(approval.id, True, "Dana Kim")
    return run.id, approval.id


def test_a_failure_reported_while_the_run_is_leased_still_reaches_a_person(agent):
    run_id, approval_id = paid_run(agent)
    lease = agent.store.acquire(run_id, "a-process-still-emailing")
    assert handle(agent.store, SECRET, *delivery(approval_id)) == \
        (200, "Recorded refund.failed for refund re_1Failed (failed).")
    # The working process keeps its run: the status is not changed under its lease ...
    agent.store.check_lease(lease)
    assert agent.store.run(run_id).status == RunStatus.WORKING
    agent.store.release(lease, RunStatus.DONE)
    # ... and once it finished as done, the ticket is in front of a person all the same.
    (raised,) = agent.store.escalations(open_only=True, run_id=run_id)
    assert raised.kind == PROVIDER_FAILED and raised.approval_id == approval_id
    assert raised.raised_by == "stripe" and "re_1Failed" in raised.reason
    (_id, status, open_count, _at), = [r for r in agent.store.desk_index() if r[0] == run_id]
    assert needs_person(status, open_count)
    taken = agent.store.take_escalation(raised.id, "Lee Park")
    assert taken.taken_by == "Lee Park"
    assert [e.event for e in agent.store.audit()][-2:] == ["provider_failed", "taken"]
    assert agent.store.verify_audit() is None


def test_a_redelivered_failure_raises_one_escalation(agent):
    run_id, approval_id = paid_run(agent)
    assert agent.advance(run_id).status == RunStatus.DONE
    payload, signature = delivery(approval_id, "evt_twice")
    what = "refund.failed for refund re_1Failed (failed)."
    assert handle(agent.store, SECRET, payload, signature) == (200, f"Recorded {what}")
    assert handle(agent.store, SECRET, payload, signature) == (200, f"Already recorded {what}")
    assert len(agent.store.escalations(run_id=run_id)) == 1
    run = agent.store.run(run_id)   # not leased: the run itself says so too
    assert run.status == RunStatus.FAILED and "re_1Failed" in run.error


@pytest.mark.parametrize(("kind", "status"), [("charge.refund.updated", "failed"),
                                              ("refund.updated", "canceled")])
def test_older_api_versions_and_cancellations_reach_a_person_too(agent, kind, status):
    """An endpoint on an API version before 2024-10-28 gets ``charge.refund.updated`` for a card
    refund instead of ``refund.failed``; a cancelled refund comes as ``refund.updated``."""
    run_id, approval_id = paid_run(agent)
    assert agent.advance(run_id).status == RunStatus.DONE
    assert handle(agent.store, SECRET, *delivery(approval_id, kind=kind, status=status)) == \
        (200, f"Recorded {kind} for refund re_1Failed ({status}).")
    (raised,) = agent.store.escalations(open_only=True, run_id=run_id)
    assert raised.kind == PROVIDER_FAILED and status in raised.reason
    assert [e.event for e in agent.store.audit()][-1] == "provider_failed"


def test_a_refund_that_succeeded_is_an_audit_line_only(agent):
    run_id, approval_id = paid_run(agent)
    assert agent.advance(run_id).status == RunStatus.DONE
    assert handle(agent.store, SECRET, *delivery(approval_id, kind="refund.updated",
                                                 status="succeeded"))[0] == 200
    assert agent.store.escalations(run_id=run_id) == []
    assert agent.store.run(run_id).status == RunStatus.DONE
    assert [e.event for e in agent.store.audit()][-1] == "provider_update"


def test_a_store_that_cannot_take_the_event_answers_503_so_stripe_sends_it_again(
        agent, monkeypatch, capfd):
    """Through the real server: a store error is a 503 with one line (Stripe redelivers for up
    to three days), never a traceback; once the store is back the redelivery is recorded."""
    import urllib.error
    import urllib.request

    from refund_agent.errors import StoreError
    from refund_agent.outside.webhooks import serve

    run_id, approval_id = paid_run(agent)
    payload, signature = delivery(approval_id, "evt_store_down")
    server = serve(agent.store, SECRET, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def post() -> tuple[int, str]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.server_port}/", data=payload, method="POST",
            headers={"Stripe-Signature": signature, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request) as answer:
                return answer.status, json.loads(answer.read())["message"]
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())["message"]

    try:
        real = agent.store.record_provider_event

        def down(*args, **kwargs):
            raise StoreError("The store is locked by another process.")

        monkeypatch.setattr(agent.store, "record_provider_event", down)
        status, text = post()
        assert status == 503 and "Stripe will send it again" in text
        assert agent.store.escalations(run_id=run_id) == []
        monkeypatch.setattr(agent.store, "record_provider_event", real)
        assert post()[0] == 200
        assert len(agent.store.escalations(run_id=run_id)) == 1
    finally:
        server.shutdown()
        server.server_close()
    logged = capfd.readouterr().err
    assert " 503 Not recorded" in logged and "Traceback" not in logged


def test_refund_failed_then_refund_updated_for_one_refund_open_one_escalation(agent):
    """Stripe sends both for one failed refund (two event ids). Before: two escalations, two
    error steps on the ticket."""
    run_id, approval_id = paid_run(agent)
    assert agent.advance(run_id).status == RunStatus.DONE
    assert handle(agent.store, SECRET, *delivery(approval_id, "evt_failed"))[0] == 200
    assert handle(agent.store, SECRET, *delivery(approval_id, "evt_updated",
                                                 kind="refund.updated"))[0] == 200
    (raised,) = agent.store.escalations(run_id=run_id)
    assert raised.open and raised.kind == PROVIDER_FAILED and raised.approval_id == approval_id
    assert [s.kind for s in agent.store.steps(run_id)].count("error") == 1
    # Both events are on record, each with its audit line.
    assert [e["type"] for e in agent.store.provider_events()] == ["refund.failed",
                                                                  "refund.updated"]
    assert [e.event for e in agent.store.audit()].count("provider_failed") == 2
    # Once a lead took it, a later failure report is a new escalation.
    agent.store.take_escalation(raised.id, "Lee Park")
    handle(agent.store, SECRET, *delivery(approval_id, "evt_later", kind="refund.updated"))
    assert [e.open for e in agent.store.escalations(run_id=run_id)] == [False, True]
