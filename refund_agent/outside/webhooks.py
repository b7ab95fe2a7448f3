"""What Stripe reports after the fact: ``refund-agent webhooks --port N``.

A refund Stripe accepted can still fail later (the card was closed, say) or be cancelled; Stripe
then sends ``refund.failed`` or ``refund.updated`` (``charge.refund.updated`` on older API
versions) to the webhook endpoint the team configured.
This small server checks each delivery's ``Stripe-Signature`` (an HMAC-SHA256 of
``"{t}.{payload}"`` under the endpoint's signing secret, with a timestamp tolerance: see
https://docs.stripe.com/webhooks#verify-events) with the stripe library's
``Webhook.construct_event``, and records the event once in the store: an audit line, and for a
failed or cancelled refund the ticket marked for a person on the desk. A delivery that does not
verify is refused (400) and changes nothing; a redelivered event is recorded once.
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import RefundAgentError
from .stripe import CALL_ID, FAILED_STATES, stripe  # stripe.py guards the optional import

# Each carries a refund object. Endpoints on API versions before 2024-10-28.acacia get refund.*
# events only for refunds without a charge, and charge.refund.updated for card refunds
# (https://docs.stripe.com/changelog/acacia/2024-10-28/refund-webhook-update), so all three count.
REFUND_EVENTS = ("refund.updated", "refund.failed", "charge.refund.updated")
MAX_BODY = 1024 * 1024   # Stripe's events are a few kilobytes


def failure_note(refund: dict[str, Any], kind: str) -> str:
    """What the desk says about a refund Stripe reports failed or cancelled."""
    status = refund.get("status") or "failed"
    reason = refund.get("failure_reason")
    why = f" ({reason.replace('_', ' ')})" if reason else ""
    amount = int(refund.get("amount") or 0) / 100
    order = (refund.get("metadata") or {}).get("order_id")
    on = f" on order {order}" if order else ""
    return (f"Stripe reports refund {refund.get('id')}{on} of ${amount:,.2f} {status}{why} "
            f"({kind}): the customer was told it was issued, but the money did not go back. "
            "A person needs to take this ticket over (refund another way, or ask the "
            "customer for other details).")


def handle(store: Any, secret: str, payload: bytes, signature: str | None
           ) -> tuple[int, str]:
    """(HTTP status, one-line answer) for one delivery; records a refund event once."""
    try:
        event = stripe.Webhook.construct_event(payload, signature, secret)
    except ValueError:
        return 400, "The body is not a Stripe event (not JSON)."
    except stripe.SignatureVerificationError:
        return 400, ("The Stripe-Signature does not verify with STRIPE_WEBHOOK_SECRET (or is "
                     "too old): nothing was recorded.")
    event = event.to_dict()   # a StripeObject is not a dict; its data is
    kind = event.get("type")
    if kind not in REFUND_EVENTS:
        return 200, f"Ignored {kind}: only {', '.join(REFUND_EVENTS)} matter here."
    refund = event["data"]["object"]
    status = refund.get("status")
    failed = kind == "refund.failed" or status in FAILED_STATES
    approval_id = (refund.get("metadata") or {}).get(CALL_ID)
    note = failure_note(refund, kind) if failed else \
        f"Stripe reports refund {refund.get('id')} {status} ({kind})."
    new = store.record_provider_event(
        event["id"], "stripe", kind, refund.get("id") or "", status, approval_id, note,
        refund, needs_person=failed)
    what = f"{kind} for refund {refund.get('id')} ({status})"
    return 200, (f"Recorded {what}." if new else f"Already recorded {what}.")


def serve(store: Any, secret: str, host: str, port: int) -> ThreadingHTTPServer:
    """The webhook server, bound and ready (``serve_forever`` runs it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                self._answer(400, "Send one Stripe event as the body.")
                return
            payload = self.rfile.read(length)
            try:
                status, text = handle(store, secret, payload,
                                      self.headers.get("Stripe-Signature"))
            except RefundAgentError as exc:
                # The store could not take it (unreachable, locked): a 5xx makes Stripe
                # deliver the event again later, for up to three days.
                status, text = 503, f"Not recorded, Stripe will send it again: {exc}"
            if status != 200 or text.startswith("Recorded"):
                print(f"{time.strftime('%H:%M:%S')} {status} {text}", file=sys.stderr,
                      flush=True)
            self._answer(status, text)

        def _answer(self, status: int, text: str) -> None:
            body = json.dumps({"message": text}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass   # the answers are in the audit; request lines would only add noise

    return ThreadingHTTPServer((host, port), Handler)
