"""The outside systems: the payment provider and the email service, chosen by configuration.

Each sits behind one small interface, idempotent by the call id, and keeps its records in the
same ledger (JSONL logs beside an SQLite store, the ledger table on a shared one):

- payments: the stand-in (``refunds.log``, the default) or Stripe (``REFUND_AGENT_PAYMENTS=
  stripe``): payments.py, stripe.py, and webhooks.py for what Stripe reports later;
- email: the stand-in (``outbox.log``, the default) or SMTP (``REFUND_AGENT_EMAIL=smtp``):
  email.py, smtp.py.

docs/OUTSIDE-SYSTEMS.md says how to switch each on and what "exactly once" means with each.
The adapters for real systems import their libraries only when chosen (``stripe`` is an
optional dependency: ``pip install 'refund-agent[stripe]'``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .config import SMTP, STAND_IN, STRIPE, OutsideSettings
from .email import RESENT_EMAIL, Outbox, StandInOutbox, check_headers, with_signature
from .payments import Payments, RefundRequest, StandInPayments, ledger_for

if TYPE_CHECKING:
    from ..config import Settings

# Points inside the real systems' adapters: they fire only with Stripe or SMTP configured
# (tests/reliability/test_crash_matrix_outside.py kills at each, against localstripe and aiosmtpd).
OUTSIDE_CRASH_POINTS: dict[str, str] = {
    "after_provider_refund": "Stripe made the refund; neither the refunds log nor the run "
                             "recorded it",
    "email_recorded": "the outbox recorded the email; it was not handed to the mail server",
    "after_smtp_send": "the mail server took the email; the outbox has not marked it sent",
}

__all__ = [
    "OUTSIDE_CRASH_POINTS",
    "RESENT_EMAIL", "SMTP", "STAND_IN", "STRIPE", "Outbox", "OutsideSettings", "Payments",
    "RefundRequest", "StandInOutbox", "StandInPayments", "check_headers", "ledger_for",
    "open_email", "open_payments", "with_signature",
]


def open_payments(settings: Settings, store: Any | None,
                  payment_ref: Callable[[str], str | None]) -> Payments:
    """The payment provider the settings choose.

    Args:
        store: a shared store (PostgreSQL) to keep the ledger in, or None for the JSONL file.
        payment_ref: the provider's payment for an order id (from the shop's data), or None.
    """
    outside = settings.outside
    if outside.payments == STRIPE:
        try:
            from .stripe import StripePayments
        except ImportError:   # the optional dependency is missing
            raise stripe_missing("REFUND_AGENT_PAYMENTS=stripe") from None
        return StripePayments(Path(settings.output_dir), store, outside, payment_ref,
                              settings.crash_at)
    return StandInPayments(Path(settings.output_dir), store)


def stripe_missing(what: str) -> ConfigError:
    """The one-line error when ``what`` needs the optional stripe library and it is absent."""
    return ConfigError(f"{what} needs the stripe library: pip install 'refund-agent[stripe]'.")


def open_email(settings: Settings, store: Any | None, default_from: Callable[[], str]
               ) -> Outbox:
    """The email service the settings choose (``default_from``: reads the shop's support
    address, the From of SMTP mail unless REFUND_AGENT_SMTP_FROM says otherwise)."""
    outside = settings.outside
    if outside.email == SMTP:
        from .smtp import SmtpOutbox
        return SmtpOutbox(Path(settings.output_dir), store, outside,
                          outside.smtp_from or default_from(),
                          settings.crash_at)
    return StandInOutbox(Path(settings.output_dir), store)
