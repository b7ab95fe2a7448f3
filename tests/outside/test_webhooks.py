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
from refund_agent.desk.status import needs_person  # noqa: E402
from refund_agent.models import PROVIDER_FAILED  # noqa: E402
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
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
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


# -- the server: malformed requests, slow clients, big bodies (issue 33, item 7) ---------------

# Short for the tests (the command's is 10 s): slow clients are dropped after it.
TEST_READ_TIMEOUT = 1.0


def signed(body: bytes) -> str:
    at = int(time.time())
    return f"t={at},v1=" + hmac.new(SECRET.encode(), f"{at}.".encode() + body,
                                    hashlib.sha256).hexdigest()


def event_body(refund: dict | None, kind: str = "refund.failed") -> bytes:
    data = {} if refund is None else {"object": refund}
    return json.dumps({"id": "evt_odd", "object": "event", "type": kind,
                       "created": int(time.time()), "data": data}).encode()


def request(body: bytes, length: str | None = None, signature: str | None = None,
            method: str = "POST") -> bytes:
    """The bytes of a request as a client sends them (any Content-Length, or none)."""
    lines = [f"{method} / HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             f"Stripe-Signature: {signature if signature is not None else signed(body)}"]
    if length != "none":
        lines.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def exchange(port: int, data: bytes) -> tuple[int, str]:
    """Send ``data`` on a new connection; the status and message of the answer."""
    import http.client
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, json.loads(answer.read())["message"]


@pytest.fixture
def hooks(agent):
    """The webhook server on a free port, serving from a thread."""
    from refund_agent.outside.webhooks import serve

    server = serve(agent.store, SECRET, "127.0.0.1", 0, read_timeout=TEST_READ_TIMEOUT)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


REFUND = {"id": "re_odd", "object": "refund", "amount": 4800, "status": "failed",
          "metadata": {CALL_ID: "run_x-call_y", "order_id": "A1043"}}
# Built when the test runs (a lambda each): a signature made at collection time would be
# past Stripe's 5-minute tolerance by the time a long serial run reaches this file.
MALFORMED = {
    "content-length-abc": (lambda: request(b'{"id": "evt"}', length="abc"), 400,
                           "Content-Length"),
    "no-content-length": (lambda: request(b"", length="none"), 400, "Content-Length"),
    "no-data-object": (lambda: request(event_body(None)), 400, "no data.object"),
    "amount-lots": (lambda: request(event_body({**REFUND, "amount": "lots"})), 400,
                    'amount must be a whole number of cents, got "lots"'),
    "a-million-brackets": (lambda: request(b"[" * 1_000_000), 400, "nested too deeply"),
    "json-not-an-object": (lambda: request(b"[1]"), 400, "not a JSON object"),
    "metadata-not-text": (lambda: request(event_body({**REFUND, "metadata": {CALL_ID: [1]}})),
                          400, f"metadata.{CALL_ID} must be text"),
    "not-signed": (lambda: request(event_body(REFUND), signature="t=1,v1=00"), 400,
                   "does not verify"),
    "get": (lambda: request(b"", length="none", method="GET"), 405, "Only POST"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_delivery_is_answered_in_one_line_never_a_traceback(hooks, agent, capfd,
                                                                         case):
    """Before: `Content-Length: abc`, a signed event without data.object, with amount "lots",
    a million "[" or a JSON array ended in a traceback and no answer (Stripe retries that for
    three days). 400: no retry can make them recordable."""
    data, status, says = MALFORMED[case]
    answered, message = exchange(hooks.server_port, data())
    assert (answered, says in message) == (status, True), message
    assert agent.store.provider_events() == [] and agent.store.escalations() == []
    err = capfd.readouterr().err
    assert "Traceback" not in err and f" {status} " in err, err


def test_a_body_over_the_limit_gets_413_before_it_is_read(hooks, capfd):
    from refund_agent.outside.webhooks import MAX_BODY

    head = request(b"", length=str(MAX_BODY + 1))   # the headers alone: nothing more is read
    assert exchange(hooks.server_port, head)[0] == 413
    assert "Traceback" not in capfd.readouterr().err


def test_slow_clients_are_dropped_after_the_read_timeout_while_events_get_through(
        hooks, agent, capfd):
    """Clients that send their headers and then nothing (or half their headers) hold no
    thread and are closed after the read timeout; meanwhile a real event is recorded. Before:
    each held a thread for ever (no read timeout)."""
    import socket

    run_id, approval_id = paid_run(agent)
    slow = []
    for data in (request(b"x" * 100)[:-100],                     # headers, then no body
                 b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"):     # half the headers
        sock = socket.create_connection(("127.0.0.1", hooks.server_port),
                                        timeout=30 * TEST_READ_TIMEOUT)
        sock.sendall(data)
        slow.append(sock)
    payload, signature = delivery(approval_id, "evt_meanwhile")
    assert exchange(hooks.server_port, request(payload, signature=signature)) == \
        (200, "Recorded refund.failed for refund re_1Failed (failed).")
    for sock in slow:
        with sock:
            try:
                assert sock.recv(1024) == b""   # closed by the server, unanswered
            except ConnectionResetError:
                pass
    assert len(agent.store.escalations(run_id=run_id)) == 1
    assert "Traceback" not in capfd.readouterr().err
