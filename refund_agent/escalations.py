"""Escalations, hand-offs and first sign-offs: what the desk keeps for a lead (schema 9).

An escalation is raised by the agent (the ``escalate`` tool: a threat, a manager asked for, a
policy exception it cannot grant), by an approver sending a refund above their limit to a
lead, or by the payment provider reporting that a refund failed after all. It stays open until
a lead takes it; who took it, and when, is kept and audited. A first sign-off is the first of
the two approvals a refund above the shop's two-person amount needs (see approving.py).

The store keeps them (schema 9): its methods for these tables are in ``store/desk.py``.
"""

from __future__ import annotations

from pydantic import BaseModel

# The kinds an escalation has: the agent's (the escalate tool's enum) and the desk's own.
AGENT_KINDS = ("threat", "manager", "policy_exception")
HANDOFF = "over_limit"
# Raised by the payment provider's report that a refund it accepted failed or was cancelled
# (outside/webhooks.py): the customer was told the money went back, and it did not.
PROVIDER_FAILED = "refund_failed"
# Raised when a run cannot go on and a person must finish it (calls.hand_over): the model
# refused the run's transcript, the transcript is gone, or, after the refund was paid, the
# provider refused a request no retry gets past. The customer was told a person follows up.
CANNOT_CONTINUE = "cannot_continue"
KIND_LABELS = {"threat": "Threat (chargeback, review, legal)", "manager": "Asks for a manager",
               "policy_exception": "Exception the policy cannot grant",
               HANDOFF: "Over an approver's limit",
               PROVIDER_FAILED: "Refund failed at the payment provider",
               CANNOT_CONTINUE: "The run cannot continue; a person must finish it"}


class Escalation(BaseModel):
    id: int
    key: str
    run_id: str
    approval_id: str | None
    kind: str
    reason: str
    raised_by: str
    raised_at: float
    taken_by: str | None
    taken_at: float | None

    @property
    def open(self) -> bool:
        return self.taken_by is None

    @property
    def label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind)
