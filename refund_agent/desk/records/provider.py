"""What outside systems report later (Stripe's webhooks, see outside/webhooks.py) and refunds
whose answer never came back (outside/stripe.py), recorded with their audit lines."""

from __future__ import annotations

import json
import time
from typing import Any

from ...models import PROVIDER_FAILED, Approval, RunStatus
from ...store.core import StoreCore
from ...store.leases import Lease
from ...telemetry import points
from ..identity import Actor
from .escalations import raise_escalation


class ProviderEvents(StoreCore):
    """Provider events, once per event id, and uncertain refunds."""

    def record_provider_event(self, event_id: str, provider: str, kind: str, refund_id: str,
                              status: str | None, approval_id: str | None, note: str,
                              data: dict[str, Any], needs_person: bool) -> bool:
        """Record a provider's event once; False when this event id was recorded before.

        In one transaction: the event's row, an audit line (``provider_failed`` when the
        refund failed or was cancelled, else ``provider_update``), and, when ``needs_person``,
        the ticket put in front of a person: an open escalation (kind ``refund_failed``,
        which the desk lists under *Needs a person* until a lead takes it), an error step on
        its timeline, and the run failed with ``note``. A process may be working on the run
        right now (a refund can fail within seconds, while the run still emails the customer);
        its run is left to finish, since it would overwrite the status, and the escalation
        keeps the ticket in front of a person all the same.
        """
        approval = None
        with self._tx() as db:
            if not db.execute("INSERT INTO provider_events(id, at, provider, type, refund_id,"
                              " status, approval_id, data) VALUES (?,?,?,?,?,?,?,?)"
                              " ON CONFLICT DO NOTHING",
                              (event_id, time.time(), provider, kind, refund_id, status,
                               approval_id, json.dumps(data))).rowcount:
                return False
            if approval_id:
                rows = self._approvals("WHERE id = ?", (approval_id,), db)
                approval = rows[0] if rows else None
            run_id = approval.run_id if approval else None
            self._audit(db, "provider_failed" if needs_person else "provider_update", provider,
                        run_id=run_id, approval_id=approval.id if approval else None,
                        order_id=approval.order_id if approval else None,
                        amount=approval.amount if approval else None, note=note)
            # Stripe reports one failed refund twice (refund.failed, then refund.updated with
            # status failed): one escalation for it, and one error on the ticket's timeline.
            if needs_person and run_id:
                if raise_escalation(db, f"provider:{event_id}", run_id, PROVIDER_FAILED, note,
                                    provider, approval_id)[1]:
                    self._step(db, run_id, "error", {"message": note})
                db.execute("UPDATE runs SET status = ?, error = ?, updated_at = ?"
                           " WHERE id = ? AND lease_token IS NULL",
                           (RunStatus.FAILED, note, time.time(), run_id))
            return True

    def record_uncertain(self, lease: Lease, approval: Approval, note: str) -> None:
        """A refund whose request left but whose answer never came (outside/stripe.py): an
        audit line ``uncertain`` (actor ``payments``) in the run's name, durable, so the team
        sees that money may have moved before the run is resumed and settles it."""
        with self._tx() as db:
            self._fence(db, lease)
            self._audit(db, "uncertain", Actor.PAYMENTS, run_id=lease.run_id,
                        approval_id=approval.id, order_id=approval.order_id,
                        amount=approval.amount, note=note)
        points.outcome_unknown(approval.id, note)

    def provider_events(self) -> list[dict[str, Any]]:
        """Every provider event recorded, oldest first (for reconciling)."""
        return [dict(r) for r in self._read(
            "SELECT id, at, provider, type, refund_id, status, approval_id FROM provider_events"
            " ORDER BY at, id")]
