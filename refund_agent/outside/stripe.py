"""Refunds on Stripe, exactly once per approval, whether or not Stripe honours the key.

An order names its payment in the shop's data (``payment_ref``: a ``ch_...`` charge or a
``pi_...`` PaymentIntent). An approved refund becomes one Stripe refund for the approved amount,
its metadata carrying the call id (the approval id) and the lines, sent with the call id as its
``Idempotency-Key``.

Stripe keeps idempotency keys for about 24 hours, and an approval can be carried out days
later (a crash, a resume after a weekend), so the key alone does not make a refund once: before
creating one, the adapter lists the refunds of that payment and reuses one whose metadata
carries this call id. Two guards, then: the key for a retry within the day, the look-up for any
retry at all (localstripe ignores keys, which is where the tests prove the look-up).

An answer that never came back (a timeout after the request left), or one that leaves the result
open (a 5xx, or a 409 for another request with this key: see :func:`may_have_acted`), is
*uncertain*, not failed:
the adapter reads the payment's refunds back at once, and if the refund is not there it raises
:class:`PaymentUncertain`, which the run records as its failure; ``resume`` reads back again
before it creates anything. Nothing is retried blindly (the library's own retries are off), and
nothing is written to the ledger unless Stripe said the refund exists.

The ledger (``refunds.log``, or the shared store's "refunds" rows) keeps the agent's record of
each refund, as with the stand-in, so ``audit --verify`` checks it against the approvals and
the audit, and then against Stripe's own list (see :func:`stripe_problems`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

try:   # the stripe extra; open_payments and `refund-agent webhooks` turn this into one line
    import stripe
except ImportError as exc:
    raise ImportError(f"refund_agent.outside.stripe needs the stripe library ({exc}): "
                      "pip install 'refund-agent[stripe]'") from None

from ..crash import crash_point
from ..errors import ConfigError, PaymentRefused, PaymentUncertain
from .config import OutsideSettings
from .payments import RefundRequest, ledger_for

# The metadata key that names the approval a refund carries out. Stripe allows 50 keys of up
# to 40 characters with values of up to 500.
CALL_ID = "refund_agent_call_id"
MAX_METADATA_VALUE = 500
# Refunds in these states hold money (Stripe's refund object documents pending, requires_action,
# succeeded, failed and canceled: https://docs.stripe.com/api/refunds/object).
LIVE_STATES = ("pending", "requires_action", "succeeded")
FAILED_STATES = ("failed", "canceled")


def lines_metadata(request: RefundRequest) -> str:
    """The refunded lines as one metadata value: ``SKU:reason:cents`` joined by commas, cut to
    Stripe's 500 characters (the ledger keeps them whole)."""
    text = ",".join(f"{q['line']}:{q['reason']}:{q['amount_cents']}" for q in request.lines)
    return text if len(text) <= MAX_METADATA_VALUE else text[:MAX_METADATA_VALUE - 3] + "..."


def payment_field(ref: str) -> str:
    """The parameter that names ``ref`` in Stripe's refund calls: charge or payment_intent."""
    return "payment_intent" if ref.startswith("pi_") else "charge"


def matching(refunds: Iterable[Any], key: str) -> Any | None:
    """The refund among ``refunds`` that carries call id ``key`` (a failed one too: it tells
    that this approval was carried out once already, and a person decides what comes next)."""
    return next((r for r in refunds if (r.get("metadata") or {}).get(CALL_ID) == key), None)


def amount_left(paid_cents: int, refunds: Iterable[Any]) -> int:
    """What is left to refund on a payment of ``paid_cents`` after its live refunds."""
    return paid_cents - sum(int(r.get("amount") or 0) for r in refunds
                            if r.get("status") in LIVE_STATES)


def may_have_acted(exc: stripe.StripeError) -> bool:
    """Whether Stripe may have made the refund although the request ended in ``exc``.

    Stripe's advanced error handling (https://docs.stripe.com/error-low-level) sorts failures
    three ways. A content error (4xx) means the request was refused, so nothing happened. A
    network error means the answer was lost, whatever happened. A server error (5xx) leaves the
    result indeterminate. Two answers say another request with this key exists: a 409 (one
    with the same key is still in flight) and an ``idempotency_error`` (the key was used with
    other parameters). For every case but the first, the refund may exist: it is read back,
    never reported as "nothing was refunded".
    """
    if isinstance(exc, (stripe.APIConnectionError, stripe.IdempotencyError)):
        return True
    status = getattr(exc, "http_status", None)
    return isinstance(exc, stripe.APIError) and (status is None or status == 409 or status >= 500)


def plain_stripe_error(exc: stripe.StripeError, ref: str, order_id: str) -> str:
    """A Stripe error in plain words, for the team (Stripe's error codes:
    https://docs.stripe.com/error-codes)."""
    code = getattr(exc, "code", None) or ""
    message = (getattr(exc, "user_message", None) or str(exc) or type(exc).__name__).rstrip(".")
    if isinstance(exc, stripe.AuthenticationError):
        return ("Stripe refused the API key (STRIPE_API_KEY): it is wrong, revoked, or for "
                "another account. Nothing was refunded; set a working key and resume.")
    if isinstance(exc, stripe.PermissionError):
        return ("The Stripe key may not create refunds (a restricted key without write access "
                "to refunds). Nothing was refunded; give the key that permission and resume.")
    if code == "resource_missing" or getattr(exc, "http_status", None) == 404:
        return (f"Stripe has no payment {ref} (order {order_id}'s payment_ref in the shop's "
                "data): check the order's payment reference and the account the key belongs "
                "to. Nothing was refunded.")
    if code in ("charge_already_refunded", "amount_too_large") or \
            getattr(exc, "param", None) == "amount":
        return (f"Stripe refused the refund on {ref} (order {order_id}): the amount is larger "
                f"than what is left to refund there ({message}). Nothing was refunded.")
    if isinstance(exc, stripe.RateLimitError):
        return "Stripe is rate limiting this key. Nothing was refunded; resume in a minute."
    return (f"Stripe refused the refund on {ref} (order {order_id}): {message}. Nothing was "
            "refunded.")


class StripePayments:
    """Refunds on Stripe, once per idempotency key (the approval id).

    Args:
        output_dir, store: where the ledger is (see payments.ledger_for).
        settings: the Stripe key, API base and timeout.
        payment_ref: the Stripe payment an order was paid with (from the shop's data), or None.
        crash_at: crash points to honour (``after_provider_refund`` sits between Stripe's
            answer and the ledger's record of it).
    """

    def __init__(self, output_dir: Path, store: Any | None, settings: OutsideSettings,
                 payment_ref: Callable[[str], str | None],
                 crash_at: frozenset[str] = frozenset()) -> None:
        self.log = ledger_for(output_dir, store, "refunds")
        self.payment_ref = payment_ref
        self._crash = crash_at
        base = {"api": settings.stripe_api_base} if settings.stripe_api_base else None
        # No retries by the library: a retry after a timeout is what this adapter settles by
        # reading back instead, and a retry without the look-up is a blind one.
        self.client = stripe.StripeClient(
            settings.stripe_api_key, base_addresses=base, max_network_retries=0,
            http_client=stripe.RequestsClient(timeout=settings.stripe_timeout))

    # -- the interface (payments.Payments) ---------------------------------------------------

    def refund(self, request: RefundRequest) -> tuple[dict[str, Any], bool]:
        """Refund ``request`` on Stripe once for its key; returns (record, reused).

        Raises:
            PaymentRefused: no payment for the order, no such payment at Stripe, more than is
                left, a bad key: nothing refunded, nothing recorded.
            PaymentUncertain: the answer never came back and the refund is not (yet) there.
            ConfigError: the stand-in recorded this refund before Stripe was switched on.
        """
        key = request.key
        earlier = self.log.find(key)
        if earlier is not None and earlier.get("provider") != "stripe":
            # The stand-in recorded this refund before Stripe was switched on: no money moved,
            # and reusing its record would tell the customer a refund was made that never was.
            raise ConfigError(
                f"The refund for approval {key} was recorded by the stand-in payments (no money "
                "moved) before REFUND_AGENT_PAYMENTS=stripe was set, so nothing was refunded at "
                "Stripe. Finish it with the setting it started under, or refund it at Stripe by "
                "hand; nothing was sent to Stripe.")
        found: list[bool] = []

        def make() -> dict[str, Any]:
            record, was_there = self._refund_once(request)
            found.append(was_there)
            return record

        record, reused = self.log.once(key, request.record(), make)
        return record, reused or bool(found and found[0])

    def refunds(self) -> list[dict[str, Any]]:
        return self.log.records()

    def find(self, key: str) -> dict[str, Any] | None:
        return self.log.find(key)

    # -- Stripe -----------------------------------------------------------------------------

    def _refund_once(self, request: RefundRequest) -> tuple[dict[str, Any], bool]:
        """(the ledger record, whether Stripe had the refund already) for one approval."""
        key, order_id, amount = request.key, request.order_id, request.amount_cents
        ref = self.payment_ref(order_id)
        if not ref:
            raise PaymentRefused(
                f"Order {order_id} has no payment_ref in the shop's data, so there is no "
                "Stripe payment to refund. Nothing was refunded; add the order's charge (ch_...) "
                "or PaymentIntent (pi_...) to data/orders.json and resume.")
        refunds = self._call(ref, order_id, lambda: self.list_refunds(ref))
        earlier = matching(refunds, key)
        if earlier is not None:
            return self._record(ref, earlier), True
        paid = self._call(ref, order_id, lambda: self.paid_cents(ref))
        left = amount_left(paid, refunds)
        if amount > left:
            raise PaymentRefused(
                f"Stripe payment {ref} (order {order_id}) has ${left / 100:,.2f} left to "
                f"refund, less than the ${amount / 100:,.2f} approved: refunds were "
                "made there outside this desk. Nothing was refunded; a person needs to look.")
        params = {payment_field(ref): ref, "amount": amount,
                  "metadata": {CALL_ID: key, "order_id": order_id,
                               "lines": lines_metadata(request)}}
        try:
            made = self.client.v1.refunds.create(params=params,   # type: ignore[arg-type]
                                                 options={"idempotency_key": key})
        except (stripe.APIConnectionError, stripe.APIError, stripe.IdempotencyError) as exc:
            if not may_have_acted(exc):
                raise PaymentRefused(plain_stripe_error(exc, ref, order_id)) from None
            return self._settle(ref, order_id, key, exc), False
        except stripe.StripeError as exc:
            raise PaymentRefused(plain_stripe_error(exc, ref, order_id)) from None
        crash_point("after_provider_refund", self._crash)
        return self._record(ref, made.to_dict()), False

    def _settle(self, ref: str, order_id: str, key: str, exc: Exception) -> dict[str, Any]:
        """The request left and its outcome is unknown (no answer, or one that leaves it open):
        read the refund back, never send it again."""
        try:
            earlier = matching(self.list_refunds(ref), key)
        except stripe.StripeError:
            earlier = None
        if earlier is not None:
            return self._record(ref, earlier)
        if isinstance(exc, stripe.APIConnectionError):
            said = f"Stripe did not answer the refund request for order {order_id} ({exc})"
        else:
            status = getattr(exc, "http_status", None) or "an error"
            said = (f"Stripe's answer to the refund request for order {order_id} (HTTP {status}: "
                    f"{getattr(exc, 'user_message', None) or exc}) leaves open whether it was "
                    "made")
        raise PaymentUncertain(
            f"{said}, and "
            f"reading back the refunds of {ref} did not find it (yet). It may or may not have "
            "been made: nothing is recorded as paid. `refund-agent resume` reads it back again "
            "and creates it only if it is still not there.")

    def _call(self, ref: str, order_id: str, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except stripe.APIConnectionError as exc:
            raise PaymentRefused(
                f"Could not reach Stripe to refund order {order_id} ({exc}). Nothing was sent; "
                "resume when Stripe is reachable.") from None
        except stripe.StripeError as exc:
            raise PaymentRefused(plain_stripe_error(exc, ref, order_id)) from None

    def list_refunds(self, ref: str) -> list[dict[str, Any]]:
        """Every refund of payment ``ref``, newest first (all pages)."""
        page = self.client.v1.refunds.list(
            params={payment_field(ref): ref, "limit": 100})   # type: ignore[arg-type]
        return [refund.to_dict() for refund in page.auto_paging_iter()]

    def paid_cents(self, ref: str) -> int:
        """What payment ``ref`` took, in cents."""
        if ref.startswith("pi_"):
            intent = self.client.v1.payment_intents.retrieve(ref).to_dict()
            return int(intent.get("amount_received") or intent.get("amount") or 0)
        return int(self.client.v1.charges.retrieve(ref).to_dict().get("amount") or 0)

    @staticmethod
    def _record(ref: str, refund: dict[str, Any]) -> dict[str, Any]:
        return {"refund_id": refund["id"], "provider": "stripe", "payment": ref,
                "status": refund.get("status")}


# -- reconciling the ledger with Stripe's own list (audit --verify) ------------------------------

def stripe_problems(records: list[dict[str, Any]], listed: dict[str, list[dict[str, Any]]],
                    told: set[str], orders: dict[str, str]) -> list[str]:
    """What disagrees between the agent's refund records and Stripe's refunds, one sentence each.

    Args:
        records: the ledger's refund records (those Stripe made carry ``payment``).
        listed: Stripe's refunds of each payment the agent touched, by payment id.
        told: the refund ids whose failure the desk recorded (provider_events).
        orders: the order id of each payment, for the messages.
    """
    problems: list[str] = []
    ours = {r.get("refund_id") for r in records}
    for record in records:
        payment = record.get("payment")
        if record.get("provider") != "stripe" or payment not in listed:
            continue
        refund_id, want = record.get("refund_id"), record["request"]["amount_cents"]
        found = next((r for r in listed[payment] if r.get("id") == refund_id), None)
        if found is None:
            problems.append(
                f"Refund {refund_id} (approval {record['idempotency_key']}, order "
                f"{record['request']['order_id']}, ${want / 100:,.2f}) is in the agent's records "
                f"but Stripe does not list it on {payment}: it is missing at Stripe (another "
                "account or mode, or the payment reference changed). Check in Stripe's dashboard.")
        elif int(found.get("amount") or 0) != want:
            problems.append(
                f"Refund {refund_id} is ${int(found.get('amount') or 0) / 100:,.2f} at Stripe "
                f"but ${want / 100:,.2f} in the agent's records.")
        elif found.get("status") in FAILED_STATES and refund_id not in told:
            problems.append(
                f"Stripe reports refund {refund_id} (order {record['request']['order_id']}) "
                f"{found.get('status')}, but the desk was never told (no webhook recorded): the "
                "customer believes it was refunded. Check that `refund-agent webhooks` runs and "
                "that Stripe's webhook endpoint points at it.")
    for payment, refunds in sorted(listed.items()):
        for refund in refunds:
            if refund.get("id") in ours:
                continue
            amount = int(refund.get("amount") or 0) / 100
            order = orders.get(payment, "?")
            if (refund.get("metadata") or {}).get(CALL_ID):
                why = ("it names approval "
                       f"{refund['metadata'][CALL_ID]}, which the agent has no record of paying")
            else:
                why = "it carries no call id, so it was made outside the agent"
            problems.append(
                f"Stripe has refund {refund.get('id')} of ${amount:,.2f} on {payment} (order "
                f"{order}) that is not in the agent's records: {why} (Stripe's dashboard, "
                "another tool). The policy counts only refunds in the shop's data; add it "
                "there, or reverse it.")
    return problems


def reconcile_stripe(payments: StripePayments, approvals: list[Any], told: set[str]
                     ) -> list[str]:
    """:func:`stripe_problems` for the orders the agent touched, read from Stripe now."""
    records = [r for r in payments.refunds() if isinstance(r, dict)]
    orders: dict[str, str] = {}
    for record in records:
        if record.get("payment"):
            orders[record["payment"]] = record["request"]["order_id"]
    for approval in approvals:
        ref = payments.payment_ref(approval.order_id)
        if ref:
            orders.setdefault(ref, approval.order_id)
    listed: dict[str, list[dict[str, Any]]] = {}
    problems = []
    for payment, order_id in sorted(orders.items()):
        try:
            listed[payment] = payments.list_refunds(payment)
        except stripe.StripeError as exc:
            problems.append(f"Could not read Stripe's refunds of {payment} (order {order_id}): "
                            f"{plain_stripe_error(exc, payment, order_id)}")
    return problems + stripe_problems(records, listed, told, orders)
