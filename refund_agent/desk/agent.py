"""The refund desk's agent: the durable loop (loop.py) with the refund tools, a shop, a
payment provider and an email service.

:class:`Agent` keeps no state between calls: all it needs to continue a run is in the store,
so a run can stop in one process and continue in another. What its tools do is in
actions.py, what they accept in tools.py, what the policy allows in policy.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from .. import intake
from ..config import Settings
from ..crash import LOOP_POINTS
from ..errors import DecisionRefused
from ..intake import MAX_EMAIL_CHARS, MAX_NOTE_CHARS
from ..loop import Loop
from ..models import Approval, Call, Escalation, Run, StepKind
from ..outside import OUTSIDE_CRASH_POINTS, open_email, open_payments
from ..outside.mailin import MAILIN_CRASH_POINTS
from ..providers.client import ModelAccess
from ..store import Lease
from ..streaming import Cancel, LiveEvent, OnEvent
from ..turns import MAX_MODEL_TEXT_CHARS
from .actions import HELD_BACK, REFUND_TOOLS, DeskCall, hand_over, requote
from .policy import Held, Quote, policy_facts
from .prompts import system_prompt
from .records import DeskStore
from .shop import Shop

__all__ = ["CRASH_POINTS", "MAX_EMAIL_CHARS", "MAX_MODEL_TEXT_CHARS", "MAX_NOTE_CHARS", "Agent",
           "Cancel", "LiveEvent", "OnEvent"]

# Every point the refund desk's processes can be killed at: the loop's, and the desk's own
# around its two effects (tests/reliability/test_crash_matrix.py kills at each).
CRASH_POINTS: dict[str, str] = {
    **LOOP_POINTS,
    "before_refund": "the approved refund is about to go to the payment provider",
    "after_refund": "the payment provider made the refund; the run has not recorded it",
    "after_email": "the email was sent; the run has not recorded it",
    "after_simulated_reply": "a simulated customer reply is saved; the next turn has not run",
}


class Agent(Loop):
    """Runs refund conversations against one shop, store and model (arguments: Loop's)."""

    agent_name = "refunds"
    proposal_noun = "refund"
    store_class = DeskStore   # the loop's store with the desk's records (desk/records/)
    tools = REFUND_TOOLS
    crash_points = {**CRASH_POINTS, **OUTSIDE_CRASH_POINTS, **MAILIN_CRASH_POINTS}
    held_back = HELD_BACK
    default_subject = "Refund request"

    def __init__(self, settings: Settings | None = None, *, model: ModelAccess | None = None):
        super().__init__(settings, model=model)
        self.shop = Shop(self.settings.data_dir)
        # The stand-ins, or Stripe and SMTP when the settings say so (outside/); a shared store
        # (PostgreSQL) keeps the stand-ins' records where every host sees them.
        shared = self.store if self.store.shared else None
        self.payments = open_payments(self.settings, shared, lambda order_id: (
            order := self.shop.order(order_id)) and order.payment_ref)
        self.outbox = open_email(self.settings, shared, lambda: self.shop.info.support_email)

    def system_prompt(self, run: Run) -> str:
        return system_prompt(self.shop.info.name, self.shop.today)

    def context(self, run: Run, lease: Lease, call: Call) -> DeskCall:
        return DeskCall.extend(super().context(run, lease, call), desk=self.store,
                               shop=self.shop, payments=self.payments, outbox=self.outbox)

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None = None,
               keep: list[str] | None = None, limit_cents: int | None = None,
               units: Mapping[str, int] | None = None, *,
               fingerprint: str | None) -> Approval:
        """Record a person's decision on a refund (Loop.decide, with the desk's own rules).

        Args:
            keep: for an approval, the lines (skus) to pay; the others are declined. None
                keeps every proposed line.
            units: fewer units than proposed for kept lines (sku -> 1 up to the proposal's),
                priced again, the limit checked on that price; others keep their units.
            limit_cents: the most ``by`` may approve on the order in all (accounts.py): this
                decision plus what ``by`` approved there before, on any ticket. None: no limit.
            fingerprint: Approval.fingerprint as the person saw it (required); a pending
                approval that no longer matches is refused (audited), never decided. Tests
                of the store's rules call Store.decide, which may go without.

        Raises:
            DecisionRefused: no fingerprint, no name, a rejection without a note, lines not
                the proposal's, an amount above ``limit_cents``, a kept line that would now
                pay more than its card showed, or a policy that no longer allows it (all
                checked inside the decision's transaction). An approval decided after the
                run's stored response expired is decided like any other: the run continues
                from its transcript.
            AlreadyDecided: someone else decided first (audited as 'ignored').
        """
        requote = partial(self.requote, units=dict(units or {}))
        return self._decide(approval_id, approve, by, note, fingerprint, keep=keep,
                            requote=requote if approve else None,
                            limit_cents=limit_cents if approve else None,
                            two_person_above_cents=self.two_person_above_cents())

    def hand_over(self, run_id: str, lease: Lease, why: str) -> str:
        return hand_over(self.store, self.shop, self.outbox, run_id, lease, why)

    def money_moved(self, run_id: str) -> bool:
        return any(step.kind == StepKind.REFUND for step in self.store.steps(run_id))

    def two_person_above_cents(self) -> int | None:
        return self.shop.info.desk.two_person_above_cents   # shop.json "desk"

    def hand_off(self, approval_id: str, by: str, note: str | None = None) -> Escalation:
        """Send a pending refund to a lead (an approver over their limit); audited.
        Raises DecisionRefused (no name; already with a lead) or AlreadyDecided."""
        self._own(self.store.approval(approval_id).run_id, "hand off", DecisionRefused)
        return self.store.hand_off(approval_id, *intake.checked_handoff(by, note))

    def apply_timeouts(self) -> list[tuple[str, str]]:
        """Take the steps of the shop's timeout policy (shop.json "timeouts", read fresh) that
        are due on this agent's waiting refunds, each once however many processes call this;
        returns (approval id, step) for those this call took. Expiry is :meth:`expire`."""
        return self.store.apply_timeouts(self.shop.info.timeouts.policy(), agent=self.agent_name)

    def take(self, escalation_id: int, by: str) -> Escalation:
        """A lead picks up an escalation (compare-and-set, audited); AlreadyDecided if
        someone took it first."""
        return self.store.take_escalation(escalation_id, intake.checked_name(by, "taking it"))

    def start_sample(self, key: str) -> Run:
        sample = self.shop.sample(key)
        return self.start(sample.sender, sample.body, subject=sample.subject,
                          sender_name=sample.from_name, kind=sample.key)

    def requote(self, approval: Approval, kept: list[str], held: Mapping[str, Held],
                units: Mapping[str, int] | None = None) -> Quote | str:
        """What approving these lines of ``approval`` pays today, or why it may not: the
        decision's pricing, called inside its transaction (Store.decide's ``requote``)."""
        return requote(self.shop, self.store.run(approval.run_id).sender, self.store.held_lines,
                       approval, kept, held, units)

    def quote_kept(self, approval: Approval, keep: list[str] | None = None,
                   units: Mapping[str, int] | None = None) -> Quote | str:
        """What approving these lines (all when None; ``units`` as in :meth:`decide`) pays
        now, or why not: the decision's own pricing, for the approver's card."""
        keep = [line.line for line in approval.item_lines] if keep is None else keep
        unknown = set(keep) - {line.line for line in approval.item_lines}
        if unknown or (not keep and approval.item_lines):
            return "keep at least one of the proposed lines, and only those."
        held = self.store.held_lines(approval.order_id, except_id=approval.id)
        return self.requote(approval, keep, held, units)

    def approval_problem(self, approval: Approval) -> str | None:
        """Why approving this refund in full now would be refused, or None."""
        quote = self.quote_kept(approval)
        return quote if isinstance(quote, str) else None

    def policy_facts(self, approval: Approval) -> dict[str, Any]:
        """The policy facts for an approval's order (its own lines left out), for the card."""
        order = self.shop.order(approval.order_id)
        if order is None:
            return {}
        held = self.store.held_lines(approval.order_id, except_id=approval.id)
        return policy_facts(order, self.shop.terms, held, self.shop.today).model_dump(mode="json")
