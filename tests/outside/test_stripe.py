"""Refunds on Stripe, against localstripe: a fake Stripe server others wrote, run on loopback.

localstripe (https://github.com/adrienverge/localstripe) speaks Stripe's REST API closely
enough for charges, PaymentIntents and refunds (create, retrieve, list by charge or
PaymentIntent). It ignores ``Idempotency-Key`` (two refunds with one key come back as two
refunds, proven below), which makes it the place to prove the look-up-before-create rule. What
it lacks (refund webhooks, failed refunds, Stripe's error codes) comes from recorded responses
in Stripe's documented shapes, cited where used.

The module starts one localstripe process; every test makes its own charges on it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.cli import run_cli
from helpers.outside_servers import STRIPE_KEY as KEY
from helpers.outside_servers import (
    StripeProxy,
    charge,
    free_port,
    localstripe,
    proxy,
    refunds_of,
    stripe_client,
    wait_for,
)
from helpers.outside_servers import shop_paid_with as paid_shop

pytest.importorskip("stripe")
pytest.importorskip("localstripe")

import stripe  # noqa: E402

from refund_agent import Settings  # noqa: E402
from refund_agent.desk import Agent  # noqa: E402
from refund_agent.desk.reconcile import provider_problems, reconcile  # noqa: E402
from refund_agent.errors import (  # noqa: E402
    IdempotencyConflict,
    PaymentRefused,
    PaymentUncertain,
)
from refund_agent.models import RunStatus  # noqa: E402
from refund_agent.outside.config import OutsideSettings  # noqa: E402
from refund_agent.outside.ledger import IdempotentLog  # noqa: E402
from refund_agent.outside.payments import RefundRequest  # noqa: E402
from refund_agent.outside.stripe import (  # noqa: E402
    CALL_ID,
    StripePayments,
    plain_stripe_error,
)
from refund_agent.outside.webhooks import handle  # noqa: E402

SECRET = "whsec_test_refund_agent"
ORDER = "A1043"          # the damaged-item sample's order: $80.95 paid


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    """localstripe on a free loopback port, for the module: its base URL."""
    with localstripe(tmp_path_factory.mktemp("localstripe")) as url:
        yield url


@pytest.fixture
def client(server: str) -> stripe.StripeClient:
    return stripe_client(server)


def shop_paid_with(tmp_path: Path, ref: str | None, order: str = ORDER) -> Path:
    """A copy of the sample shop whose ``order`` was paid with Stripe payment ``ref``."""
    return paid_shop(tmp_path, {order: ref} if ref else {})


def outside(server: str, key: str = KEY) -> OutsideSettings:
    return OutsideSettings(payments="stripe", stripe_api_key=key, stripe_api_base=server,
                           stripe_webhook_secret=SECRET, stripe_timeout=5)


def stripe_env(server: str, data: Path, **extra: str) -> dict[str, str]:
    return {"REFUND_AGENT_DATA": str(data), "REFUND_AGENT_PAYMENTS": "stripe",
            "STRIPE_API_KEY": KEY, "STRIPE_API_BASE": server, **extra}


def request(key: str, summary: str = "x", cents: int = 4800, order: str = ORDER
            ) -> RefundRequest:
    """One damaged line's refund, as the desk asks a provider for it (outside/payments.py)."""
    return RefundRequest(key=key, order_id=order, amount_cents=cents, summary=summary, lines=(
        {"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": cents},))


def adapter(tmp_path: Path, server: str, refs: dict[str, str], key: str = KEY
            ) -> StripePayments:
    return StripePayments(tmp_path, None, outside(server, key), refs.get)


def approved_run(tmp_path: Path, server: str, ref: str) -> tuple[Agent, str, str]:
    """A damaged-item run approved and finished in this process: (agent, run id, approval)."""
    data = shop_paid_with(tmp_path, ref)
    settings = Settings(api_key="", data_dir=data, output_dir=tmp_path / "out", max_retries=2,
                        timeout=30.0, outside=outside(server))
    agent = Agent(settings)
    run = agent.start_sample("damaged")
    assert agent.advance(run.id).status == RunStatus.WAITING
    approval = agent.store.approvals("pending")[0]
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(run.id).status == RunStatus.DONE
    return agent, run.id, approval.id


# -- the look-up before create -------------------------------------------------------------------

def test_the_same_key_with_another_request_is_refused(tmp_path, server, client):
    """One key, one request: asked again under the approval's key for another amount, the
    adapter refuses before it reaches Stripe (the ledger compares the request whole)."""
    ref = charge(client)
    payments = adapter(tmp_path, server, {ORDER: ref})
    first, _ = payments.refund(request("run_k-call_1"))
    with pytest.raises(IdempotencyConflict):
        payments.refund(request("run_k-call_1", cents=4000))
    with pytest.raises(IdempotencyConflict):
        payments.refund(request("run_k-call_1", summary="another reason"))
    again, reused = payments.refund(request("run_k-call_1"))
    assert reused and again["refund_id"] == first["refund_id"]
    assert [r["id"] for r in refunds_of(client, ref)] == [first["refund_id"]]
    assert refunds_of(client, ref)[0]["metadata"]["lines"] == "POUR-GLS-01:damaged:4800"


def test_localstripe_ignores_idempotency_keys(client):
    """The premise: two refunds with one key are two refunds there, so only the adapter's
    look-up can make a retried refund once."""
    ref = charge(client)
    for _ in range(2):
        client.v1.refunds.create(params={"charge": ref, "amount": 100},
                                 options={"idempotency_key": "one-key"})
    assert len(refunds_of(client, ref)) == 2


def test_a_crash_after_the_refund_request_resumed_gives_one_refund(tmp_path, server, client):
    """SIGKILL between Stripe's answer and the ledger's record of it (after_provider_refund):
    resume finds the refund by its call id in Stripe's list and reuses it."""
    ref = charge(client)
    data, out = shop_paid_with(tmp_path, ref), tmp_path / "out"
    env = stripe_env(server, data)
    assert run_cli(out, "sample", "damaged", **env).returncode == 0
    killed = run_cli(out, "approve", "--as", "Dana Kim", **env,
                     REFUND_AGENT_CRASH_AT="after_provider_refund")
    assert killed.returncode == -9, killed.stderr
    assert "crash point after_provider_refund" in killed.stderr
    made = refunds_of(client, ref)
    assert len(made) == 1 and IdempotentLog(out / "refunds.log").records() == []  # not recorded
    resumed = run_cli(out, "resume", **env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = refunds_of(client, ref)
    assert [r["id"] for r in after] == [made[0]["id"]]
    agent = Agent(Settings(api_key="", data_dir=data, output_dir=out, outside=outside(server)))
    approval = agent.store.approvals(status="approved")[0]
    assert after[0]["metadata"][CALL_ID] == approval.id
    assert after[0]["amount"] == approval.amount_cents
    assert after[0]["metadata"]["lines"] == "POUR-GLS-01:damaged:4800"
    assert [e.event for e in agent.store.audit() if e.event in ("issued", "reused")] == ["reused"]
    verified = run_cli(out, "audit", "--verify", **env)
    assert verified.returncode == 0, verified.stdout


def test_a_retry_after_the_key_expired_reuses_the_refund(tmp_path, server, client):
    """An approval carried out again days later, with the local record gone too (another
    host's ledger, a restored backup) and Stripe's 24-hour key long forgotten: the look-up by
    call id finds the refund, and no second one is made."""
    ref = charge(client, intent=True)
    first, reused = adapter(tmp_path / "a", server, {ORDER: ref}).refund(
        request("run_x-call_1", "damaged"))
    assert not reused
    again, reused = adapter(tmp_path / "b", server, {ORDER: ref}).refund(
        request("run_x-call_1", "damaged"))
    assert reused and again["refund_id"] == first["refund_id"]
    assert len(refunds_of(client, ref)) == 1


def test_two_approvers_at_once_make_one_refund(tmp_path, server, client):
    ref = charge(client)
    data, out = shop_paid_with(tmp_path, ref), tmp_path / "out"
    env = stripe_env(server, data)
    assert run_cli(out, "sample", "damaged", **env).returncode == 0
    from helpers.cli import cli_env

    from refund_agent.desk.records import DeskStore
    approval = DeskStore(out / "refund-agent.sqlite3").approvals("pending")[0].id
    procs = [subprocess.Popen([sys.executable, "-m", "refund_agent", "approve", "--as", who,
                               "--id", approval],
                              env=cli_env(out, **env), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for who in ("Dana Kim", "Sam Ortiz")]
    codes = sorted(p.wait(timeout=60) for p in procs)
    assert codes == [0, 3], [p.stdout.read() + p.stderr.read() for p in procs]
    assert len(refunds_of(client, ref)) == 1


# -- an answer that never came back --------------------------------------------------------------

class _Dropping(StripeProxy):
    """For POST /v1/refunds, hangs up without answering: after forwarding the request (Stripe
    acted, the answer was lost) or before (it never arrived); ``pass`` answers as usual."""

    mode = "after"   # "after", "before" or "pass"

    def on_refund(self, body: bytes) -> None:
        if self.mode == "pass":
            super().on_refund(body)
            return
        if self.mode == "after":
            self.forward("POST", body)
        self.hang_up()


@pytest.fixture
def dropping(server):
    _Dropping.mode = "after"
    with proxy(_Dropping, server) as url:
        yield url


def test_a_lost_answer_is_settled_by_reading_back(tmp_path, client, dropping):
    """Stripe made the refund but its answer was lost: the adapter reads the refunds back,
    finds it by call id and records it; it sends no second request."""
    ref = charge(client)
    _Dropping.mode = "after"
    record, _ = adapter(tmp_path, dropping, {ORDER: ref}).refund(request("run_y-call_1", "x"))
    made = refunds_of(client, ref)
    assert [r["id"] for r in made] == [record["refund_id"]]


def test_an_answer_that_never_came_is_uncertain_not_failed(tmp_path, server, client, dropping):
    """The request never arrived and no answer came: not found on reading back, so the refund
    is *uncertain*: nothing recorded as paid; the retry reads back first, then makes one."""
    ref = charge(client)
    _Dropping.mode = "before"
    payments = adapter(tmp_path, dropping, {ORDER: ref})
    with pytest.raises(PaymentUncertain, match="may or may not have been made"):
        payments.refund(request("run_z-call_1", "x"))
    assert payments.refunds() == [] and refunds_of(client, ref) == []
    record, reused = adapter(tmp_path, server, {ORDER: ref}).refund(
        request("run_z-call_1", "x"))
    assert not reused and [r["id"] for r in refunds_of(client, ref)] == [record["refund_id"]]


def test_an_uncertain_refund_is_audited_and_resume_settles_it_once(tmp_path, client, dropping):
    """Through the agent: the uncertain refund is an audit line and the run's failure, nothing
    is recorded as paid, and resuming (Stripe reachable again) makes exactly one refund."""
    ref = charge(client)
    _Dropping.mode = "before"
    agent, run_id = _waiting_run(tmp_path, dropping, ref)
    approval = agent.store.approvals("pending")[0]
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    with pytest.raises(PaymentUncertain):
        agent.advance(run_id)
    run = agent.store.run(run_id)
    assert run.status == RunStatus.FAILED and "may or may not have been made" in run.error
    events = [e.event for e in agent.store.audit()]
    assert "uncertain" in events and "issued" not in events
    assert agent.payments.refunds() == [] and refunds_of(client, ref) == []
    _Dropping.mode = "pass"
    assert agent.advance(run_id).status == RunStatus.DONE
    made = refunds_of(client, ref)
    assert len(made) == 1 and made[0]["metadata"][CALL_ID] == approval.id
    assert reconcile(agent.store, agent.settings.output_dir) is None


# -- answers that leave the outcome open (recorded, in Stripe's documented shapes) ---------------

# https://docs.stripe.com/api/errors (the error object) and https://docs.stripe.com/error-low-level
# (a 5xx leaves the result indeterminate; a 409 means another request with this key is in flight).
SERVER_ERROR = (500, {"error": {"type": "api_error", "message": "An unknown error occurred",
                                "request_log_url": "https://dashboard.stripe.com/logs/req_1"}})
KEY_IN_USE = (409, {"error": {
    "type": "invalid_request_error", "code": "idempotency_key_in_use",
    "doc_url": "https://stripe.com/docs/error-codes/idempotency-key-in-use",
    "message": "There is currently another in-progress request using this Idempotency Key "
               "(that probably means you submitted twice, and the other request is still going "
               "through): run_o-call_1. Please try again later."}})
# The key was used before with other parameters (https://docs.stripe.com/api/idempotent_requests).
KEY_REUSED = (400, {"error": {
    "type": "idempotency_error",
    "message": "Keys for idempotent requests can only be used with the same parameters they "
               "were first used with. Try using a key other than 'run_o-call_1' if you meant "
               "to execute a different request."}})
RATE_LIMITED = (429, {"error": {"type": "invalid_request_error", "code": "rate_limit",
                                "message": "Too many requests hit the API too quickly."}})


class _Answering(StripeProxy):
    """Answers POST /v1/refunds with a recorded Stripe error, after forwarding the request
    (``forward``: Stripe acted) or instead of it."""

    error: tuple[int, dict] = SERVER_ERROR
    forward_first = True

    def on_refund(self, body: bytes) -> None:
        if self.forward_first:
            self.forward("POST", body)
        status, error = self.error
        self.answer(status, json.dumps(error).encode())


@pytest.fixture
def answering(server):
    with proxy(_Answering, server) as url:
        yield url


@pytest.mark.parametrize("answer", [SERVER_ERROR, KEY_IN_USE, KEY_REUSED],
                         ids=["500", "409-key-in-use", "400-idempotency-error"])
def test_an_error_that_leaves_it_open_is_read_back_never_reported_as_nothing_refunded(
        tmp_path, server, client, answering, answer):
    """A 500 (indeterminate), a 409 (another request with this key in flight) or an idempotency
    error (the key was used with other parameters) is not "nothing was refunded": made behind
    the error, the refund is found and recorded once; not made, the
    refund is uncertain, and the retry makes exactly one."""
    _Answering.error = answer
    ref = charge(client)
    _Answering.forward_first = True     # Stripe made it, then answered with the error
    record, _ = adapter(tmp_path / "made", answering, {ORDER: ref}).refund(
        request("run_o-call_1", "x"))
    assert [r["id"] for r in refunds_of(client, ref)] == [record["refund_id"]]

    ref = charge(client)
    _Answering.forward_first = False    # it did not (yet)
    payments = adapter(tmp_path / "open", answering, {ORDER: ref})
    with pytest.raises(PaymentUncertain, match=f"HTTP {answer[0]}.*may or may not have been made"):
        payments.refund(request("run_o-call_2", "x"))
    assert payments.refunds() == [] and refunds_of(client, ref) == []
    record, _ = adapter(tmp_path / "open", server, {ORDER: ref}).refund(
        request("run_o-call_2", "x"))
    assert [r["id"] for r in refunds_of(client, ref)] == [record["refund_id"]]


def test_a_rate_limited_refund_request_is_refused_with_nothing_made(tmp_path, client, answering):
    """A 429 comes from the rate limiter, before Stripe's idempotency layer: the request did not
    run, so "nothing was refunded" is true, and said."""
    _Answering.error, _Answering.forward_first = RATE_LIMITED, False
    ref = charge(client)
    payments = adapter(tmp_path, answering, {ORDER: ref})
    with pytest.raises(PaymentRefused, match="rate limiting.*Nothing was refunded"):
        payments.refund(request("run_r-call_1", "x"))
    assert payments.refunds() == [] and refunds_of(client, ref) == []


# -- errors in plain words, nothing recorded as paid ---------------------------------------------

def test_a_refund_the_stand_in_recorded_is_not_taken_as_made_at_stripe(tmp_path, server,
                                                                       client):
    """Recorded by the stand-in (no money moved), then resumed with Stripe switched on: the
    record is not reused as if Stripe had refunded; one line says so and nothing is sent."""
    from refund_agent.errors import ConfigError
    from refund_agent.outside.payments import StandInPayments

    ref = charge(client)
    StandInPayments(tmp_path).refund(request("run_s-call_1", "x"))
    with pytest.raises(ConfigError, match="recorded by the stand-in payments") as caught:
        adapter(tmp_path, server, {ORDER: ref}).refund(request("run_s-call_1", "x"))
    assert "\n" not in str(caught.value)
    assert refunds_of(client, ref) == []


def test_errors_in_plain_words_and_nothing_recorded(tmp_path, server, client):
    ref = charge(client, cents=500)
    cases = [({}, KEY, "has no payment_ref in the shop's data"),
             ({ORDER: "ch_doesnotexist"}, KEY, "Stripe has no payment ch_doesnotexist"),
             ({ORDER: ref}, KEY, r"has \$5\.00 left to refund, less than the \$48\.00"),
             ({ORDER: ref}, "sk_", "Stripe refused the API key")]
    for i, (refs, key, words) in enumerate(cases):
        payments = adapter(tmp_path / str(i), server, refs, key=key)
        with pytest.raises(PaymentRefused, match=words) as caught:
            payments.refund(request(f"run_e-call_{i}", "x"))
        assert "\n" not in str(caught.value) and "Nothing was refunded" in str(caught.value)
        assert payments.refunds() == []
    assert refunds_of(client, ref) == []


def test_stripe_error_codes_in_plain_words():
    """Errors localstripe does not produce, in the shape Stripe documents them
    (https://docs.stripe.com/api/errors: type, code, message, param;
    https://docs.stripe.com/error-codes#charge-already-refunded)."""
    body = {"error": {"type": "invalid_request_error", "code": "charge_already_refunded",
                      "message": "Charge ch_1 has already been refunded.", "param": None}}
    exc = stripe.InvalidRequestError(body["error"]["message"], None, code="charge_already_refunded",
                                     http_body=json.dumps(body), http_status=400, json_body=body)
    assert "larger than what is left" in plain_stripe_error(exc, "ch_1", ORDER)
    body = {"error": {"type": "invalid_request_error", "code": "resource_missing",
                      "message": "No such charge: 'ch_2'", "param": "charge"}}
    exc = stripe.InvalidRequestError(body["error"]["message"], "charge", code="resource_missing",
                                     http_body=json.dumps(body), http_status=404, json_body=body)
    assert plain_stripe_error(exc, "ch_2", ORDER).startswith("Stripe has no payment ch_2")


def test_a_run_whose_refund_stripe_refuses_fails_with_nothing_paid(tmp_path, server):
    agent, run_id = _waiting_run(tmp_path, server, "ch_missing")
    approval = agent.store.approvals("pending")[0]
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    with pytest.raises(PaymentRefused):
        agent.advance(run_id)
    run = agent.store.run(run_id)
    assert run.status == RunStatus.FAILED and "Stripe has no payment ch_missing" in run.error
    assert agent.payments.refunds() == []
    assert not [e for e in agent.store.audit() if e.event in ("issued", "reused")]
    assert reconcile(agent.store, agent.settings.output_dir) is None


def _waiting_run(tmp_path: Path, server: str, ref: str) -> tuple[Agent, str]:
    data = shop_paid_with(tmp_path, ref)
    agent = Agent(Settings(api_key="", data_dir=data, output_dir=tmp_path / "out", max_retries=2,
                           timeout=30.0, outside=outside(server)))
    run = agent.start_sample("damaged")
    assert agent.advance(run.id).status == RunStatus.WAITING
    return agent, run.id


# -- what Stripe says later: webhooks, reconcile -------------------------------------------------

def signed(payload: bytes, secret: str = SECRET, at: int | None = None) -> str:
    """A Stripe-Signature header: t=TIMESTAMP,v1=HMAC-SHA256(secret, "t.payload") in hex
    (https://docs.stripe.com/webhooks#verify-manually)."""
    at = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{at}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


def refund_event(refund: dict, kind: str = "refund.failed", event_id: str = "evt_1") -> bytes:
    """An event in the shape Stripe documents (https://docs.stripe.com/api/events/object),
    carrying the refund as Stripe reports a failed one (https://docs.stripe.com/refunds#failed-
    refunds: status "failed", failure_reason, failure_balance_transaction)."""
    failed = {**refund, "status": "failed", "failure_reason": "expired_or_canceled_card",
              "failure_balance_transaction": "txn_1FailureRecorded"}
    return json.dumps({"id": event_id, "object": "event", "api_version": "2025-01-27.acacia",
                       "created": int(time.time()), "livemode": False, "pending_webhooks": 1,
                       "request": {"id": None, "idempotency_key": None}, "type": kind,
                       "data": {"object": failed}}).encode()


def test_a_refund_stripe_fails_later_reaches_the_desk_and_the_audit(tmp_path, server, client):
    ref = charge(client)
    agent, run_id, approval_id = approved_run(tmp_path, server, ref)
    made = refunds_of(client, ref)[0]
    # localstripe cannot fail a refund; its generic update sets the status, so its list says
    # what Stripe's would after a failure.
    client.v1.refunds.update(made["id"], params={"status": "failed"})  # type: ignore[arg-type]
    problems = provider_problems(agent.payments, agent.store)
    assert len(problems) == 1 and "the desk was never told" in problems[0]

    port = free_port()
    from helpers.cli import cli_env
    proc = subprocess.Popen([sys.executable, "-m", "refund_agent", "webhooks", "--port",
                             str(port)], env=cli_env(agent.settings.output_dir,
                                                     **stripe_env(server, agent.settings.data_dir),
                                                     STRIPE_WEBHOOK_SECRET=SECRET),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(port, proc, "refund-agent webhooks")
        payload = refund_event(made)

        def post(body: bytes, signature: str) -> tuple[int, str]:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=body, method="POST",
                                         headers={"Stripe-Signature": signature,
                                                  "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req) as answer:
                    return answer.status, json.loads(answer.read())["message"]
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())["message"]

        assert post(payload, signed(payload, "whsec_wrong"))[0] == 400
        assert post(payload, signed(payload, at=int(time.time()) - 3600))[0] == 400  # replayed
        assert agent.store.run(run_id).status == RunStatus.DONE   # nothing recorded
        what = f"refund.failed for refund {made['id']} (failed)."
        assert post(payload, signed(payload)) == (200, f"Recorded {what}")
        assert post(payload, signed(payload)) == (200, f"Already recorded {what}")  # again
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    logged = proc.stderr.read()   # one line per delivery it refused or recorded
    assert f"200 Recorded {what}" in logged and logged.count(" 400 ") == 2, logged
    assert "Traceback" not in logged
    run = agent.store.run(run_id)
    assert run.status == RunStatus.FAILED and made["id"] in run.error
    assert "A person needs to take this ticket over" in run.error
    assert run_id in {r.run.id for r in agent.store.inbox(statuses=(RunStatus.FAILED,))}
    failed = [e for e in agent.store.audit() if e.event == "provider_failed"]
    assert len(failed) == 1 and failed[0].approval_id == approval_id
    assert failed[0].actor == "stripe" and "expired or canceled card" in failed[0].note
    assert agent.store.verify_audit() is None
    assert provider_problems(agent.payments, agent.store) == []   # the desk was told


def test_a_bad_webhook_body_changes_nothing(tmp_path):
    from refund_agent.desk.records import DeskStore
    store = DeskStore(tmp_path / "s.sqlite3")
    assert handle(store, SECRET, b"not json", signed(b"not json"))[0] == 400
    assert handle(store, SECRET, b"{}", None)[0] == 400
    other = json.dumps({"id": "evt_2", "object": "event", "type": "charge.succeeded",
                        "data": {"object": {}}}).encode()
    assert handle(store, SECRET, other, signed(other))[0] == 200
    assert store.provider_events() == [] and store.audit() == []


def test_reconcile_finds_a_refund_made_outside_and_one_missing(tmp_path, server, client):
    ref = charge(client)
    agent, _run, _approval = approved_run(tmp_path, server, ref)
    assert provider_problems(agent.payments, agent.store) == []
    mine = refunds_of(client, ref)[0]["id"]
    outside_refund = client.v1.refunds.create(params={"charge": ref, "amount": 695})
    problems = provider_problems(agent.payments, agent.store)
    assert len(problems) == 1 and outside_refund.id in problems[0]
    assert "made outside the agent" in problems[0]
    # localstripe lets a test delete a refund, as a wrong account or mode would hide it.
    urllib.request.urlopen(urllib.request.Request(
        f"{server}/v1/refunds/{mine}", method="DELETE",
        headers={"Authorization": f"Bearer {KEY}"})).close()
    problems = provider_problems(agent.payments, agent.store)
    assert len(problems) == 2 and mine in problems[0] and "missing at Stripe" in problems[0]
    from helpers.cli import cli_env  # noqa: F401 (the CLI says the same)
    verified = run_cli(agent.settings.output_dir, "audit", "--verify",
                       **stripe_env(server, agent.settings.data_dir))
    assert verified.returncode == 1
    assert "missing at Stripe" in verified.stdout and "made outside the agent" in verified.stdout
