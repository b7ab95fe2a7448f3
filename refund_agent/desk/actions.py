"""What the refund desk's tools do: the look-ups, and the effects (paying, emailing).

The loop in loop.py knows none of this: it hands each call a :class:`DeskCall` (the loop's
narrow context, plus the desk's store, shop and outside systems) and runs the tool the way its
declaration says (tools.ToolKind). Effects live here, each fenced by the run's lease (the loop
checks it right before calling them) and keyed by the call's key, so a process that lost the
run does nothing, and a repeat does nothing twice. A refund nobody approved never reaches
:func:`issue_refund`: :func:`refund_not_made` (pure) answers the model instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import PaymentUncertain
from ..models import CANNOT_CONTINUE, Approval, ApprovalStatus, Run, StepKind
from ..outside import Outbox, Payments, RefundRequest, with_signature
from ..outside.mailin.parse import reply_subject
from ..providers.stored import HANDED_OVER
from ..store import Lease, Store
from ..tools import CallContext, Outcome, not_done, toolset
from ..turns import Waiting
from .identity import Actor
from .policy import SHIPPING, Held, Quote, QuotedLine, quote_refund
from .rules import unit_problem
from .shop import Shop
from .tools import (
    TOOLS,
    CheckRefundPolicy,
    Escalate,
    IssueRefund,
    LookupOrder,
    SendCustomerMessage,
    ShopTools,
)


@dataclass(frozen=True, kw_only=True)
class DeskCall(CallContext):
    """The refund desk's context: its store (the desk's records), the shop and its outside
    systems besides the call."""

    desk: Store
    shop: Shop
    payments: Payments
    outbox: Outbox

    @property
    def lease(self) -> Lease:
        """The run's lease, for the desk store's fenced writes."""
        return self._lease

    @property
    def tools(self) -> ShopTools:
        return ShopTools(self.shop, self.run.sender, self.desk.held_lines)


def paid_quote(approval: Approval) -> Quote:
    """The refund a decided approval pays: the lines the person kept, at their amounts."""
    return Quote(order_id=approval.order_id, lines=[
        QuotedLine(line=line.line, name=line.name, reason=line.reason,
                   amount_cents=line.amount_cents, allowed_cents=line.allowed_cents,
                   fee_cents=line.fee_cents, units=line.units, quantity=line.quantity)
        for line in approval.kept])


def paid_summary(approval: Approval) -> str:
    """What the payment record says it refunds: the proposal's summary when every line was
    approved; otherwise only the kept lines (the summary names the declined ones too)."""
    if not approval.declined:
        return approval.summary
    kept = "; ".join(f"{line.name} ({line.reason.replace('_', ' ')}) ${line.amount:.2f}"
                     for line in approval.kept)
    return (f"Refund on order {approval.order_id}: {kept}. Approved {len(approval.kept)} of "
            f"{len(approval.lines)} lines.")


def payment_request(key: str, quote: Quote, summary: str) -> RefundRequest:
    """What the payment provider is asked for (outside/payments.py): ``quote`` as plain data,
    its lines' units only where the refund counted them (schema 8 on), so a refund approved
    before then asks for exactly what it asked for then (same key, same request)."""
    return RefundRequest(
        key=key, order_id=quote.order_id, amount_cents=quote.total_cents, summary=summary,
        lines=tuple({"line": q.line, "reason": q.reason, "amount_cents": q.amount_cents,
                     **({"units": q.units, "of_units": q.quantity}
                        if q.units is not None and (q.quantity or 1) > 1 else {})}
                    for q in quote.lines))


def requote(shop: Shop, sender: str, held_lines: Callable[[str], Mapping[str, Held]],
            approval: Approval, kept: list[str], held: Mapping[str, Held],
            units: Mapping[str, int] | None = None) -> Quote | str:
    """What approving these lines of ``approval`` pays today, or why it may not.

    Each kept line is priced for the units the proposal named, or fewer when ``units`` lowers
    them (never more: an approver can only take away). Its age does not matter: a run whose
    stored response expired meanwhile continues from its transcript (see Loop._turn).
    """
    order = ShopTools(shop, sender, held_lines).owned_order(approval.order_id)
    if isinstance(order, str):
        return order
    proposed = {line.line: line for line in approval.item_lines}
    lowered = unit_problem(proposed, order, kept, units or {})
    if isinstance(lowered, str):
        return lowered
    shipping = any(line.reason == "shipping" for line in approval.lines)
    requested = [(line, proposed[line].reason, lowered[line]) for line in kept]
    if not approval.item_lines and shipping:
        # The shipping alone, owed after every item was refunded as damaged: priced again
        # as it was proposed (SHIPPING named on its own, see quote_refund).
        requested = [(SHIPPING, "damaged", None)]
    return quote_refund(order, shop.terms, requested, held, shop.today, shipping=shipping)


def lookup_order(ctx: DeskCall, args: LookupOrder) -> Outcome:
    return Outcome(ctx.tools.lookup_order(args), [])


def check_refund_policy(ctx: DeskCall, args: CheckRefundPolicy) -> Outcome:
    return Outcome(ctx.tools.check_refund_policy(args), [])


def propose_refund(ctx: DeskCall, args: IssueRefund) -> Waiting | Outcome:
    """Queue the refund for a person (boundary 4), or say why it cannot be proposed."""
    tools = ctx.tools
    queued = ctx.desk.queue_approval(
        ctx.lease, response_id=ctx.call.response_id, call_id=ctx.call.call_id,
        subject=args.order_id, title=args.summary.strip(), customer=ctx.run.sender,
        price=lambda held: tools.quote(args, held), release=True)
    if isinstance(queued, str):
        audit = {"event": "refused", "actor": Actor.AGENT, "order_id": args.order_id,
                 "note": queued, "lines": [
                     {"line": line, "reason": reason,
                      **({"units": units} if units is not None else {})}
                     for line, reason, units in args.requested()]}
        return Outcome({"error": queued}, [], audit)
    return Waiting(queued.id, released=True)


def _lines(approval: Approval) -> list[dict[str, Any]]:
    """The proposal's lines as the model reads them in the call's output."""
    return [{"line": line.line, "item": line.name, "reason": line.reason,
             "amount": line.amount,
             **({"units": line.units, "of_units": line.quantity}
                if line.units is not None and (line.quantity or 1) > 1 else {})}
            for line in approval.lines]


def refund_not_made(args: IssueRefund, approval: Approval) -> dict[str, Any]:
    """The output of a refund a person rejected, asked the customer about, or let expire
    (Tool.declined): pure, it pays nothing and cannot."""
    lines = _lines(approval)
    if approval.status == ApprovalStatus.REJECTED:
        return {"status": "rejected", "rejected_by": approval.decided_by,
                "note": approval.note or "", "lines": lines}
    if approval.status == ApprovalStatus.ASKED:
        return {"status": "needs_information", "asked_by": approval.decided_by,
                "question": approval.note or "", "lines": lines,
                "next": "Nothing was refunded. Ask the customer the question; when "
                        "they reply, propose the refund again if the policy allows it."}
    if approval.status == ApprovalStatus.EXPIRED:
        return {"status": "expired", "note": approval.note or "", "lines": lines,
                "next": "Nothing was refunded: nobody decided in time. Tell the "
                        "customer and leave a note so the team follows up."}
    return not_done(args, approval)


def issue_refund(ctx: DeskCall, args: IssueRefund, approval: Approval) -> Outcome:
    """Carry out the person's approval (the loop calls it with nothing else): pay what was
    approved, once."""
    lines = _lines(approval)
    # Approved: pay exactly what the person approved. The policy was checked inside the
    # decision's transaction and the lines stay held, so nothing can have taken them since.
    quote = paid_quote(approval)
    # The loop checked the lease just before calling this (loop.py, _run_call): a process
    # that lost the run pays nothing, and nothing between that check and the payment waits.
    ctx.crash("before_refund")
    try:
        refund, reused = ctx.payments.refund(payment_request(approval.id, quote,
                                                             paid_summary(approval)))
    except PaymentUncertain as exc:   # a real provider's lost answer (outside/stripe.py)
        ctx.desk.record_uncertain(ctx.lease, approval, str(exc))
        raise
    ctx.crash("after_refund")
    audit = {"event": "reused" if reused else "issued", "actor": Actor.PAYMENTS,
             "approval_id": approval.id, "order_id": approval.order_id,
             "amount": approval.amount, "note": refund["refund_id"],
             "lines": [{"line": q.line, "reason": q.reason, "amount_cents": q.amount_cents,
                        **({"units": q.units}
                           if q.units is not None and (q.quantity or 1) > 1 else {})}
                       for q in quote.lines]}
    output = {"status": "refunded", "refund_id": refund["refund_id"],
              "amount": approval.amount, "approved_by": approval.decided_by,
              "lines": [line for line in lines if line["line"] in quote.line_ids()]}
    if approval.declined:
        output["declined"] = [{"line": line.line, "item": line.name}
                              for line in approval.declined]
        output["note"] = approval.note or ""
    return Outcome(output, [(StepKind.REFUND, {**output, "reused": reused})], audit)


def escalate(ctx: DeskCall, args: Escalate) -> Outcome:
    """Raise the ticket to a lead: its step is saved with the output, in one transaction,
    and the store files the escalation from it once per call key (escalations.py).

    While one of this kind is open on the ticket, nothing new is raised and the model is told
    so: an email that talks it into thirty calls still puts one escalation before a lead (the
    store refuses a second open one all the same; only this run's owner raises these kinds).
    """
    reason = " ".join(args.reason.split())
    already = ctx.desk.open_escalation(ctx.run.id, args.kind)
    if already is not None:
        return Outcome({"status": "already_escalated", "kind": args.kind,
                        "escalation": already.id,
                        "next": "This ticket is already with a team lead for this; nothing new "
                                "was raised. Do not escalate it again. You may tell the customer "
                                "a lead is looking at it."}, [])
    output = {"status": "escalated", "kind": args.kind,
              "next": "A team lead sees this ticket in the escalation queue. You may tell the "
                      "customer a lead will look at it."}
    return Outcome(output, [(StepKind.ESCALATION, {"key": ctx.key, "kind": args.kind,
                                                   "reason": reason})])


def send_customer_message(ctx: DeskCall, args: SendCustomerMessage) -> Outcome:
    """Always to the sender, signed once, sent once per call key."""
    run = ctx.run
    body = with_signature(args.message, ctx.shop.info.signature)   # fenced by the loop first
    record, reused = send_on_thread(ctx.desk, ctx.lease, ctx.outbox, ctx.key, run, body)
    ctx.crash("after_email")
    output = {"status": "sent", "to": run.sender, "message_id": record["message_id"]}
    step = {"to": run.sender, "body": body, "reused": reused}
    if record.get("resent"):   # SMTP after a crash between record and send (outside/smtp.py)
        step["resent"] = True
    return Outcome(output, [(StepKind.MESSAGE, step)])


def send_on_thread(store: Store, lease: Lease, outbox: Outbox, key: str, run: Run, body: str
                   ) -> tuple[dict[str, Any], bool]:
    """Email the run's customer once per ``key``; a run that came by mail is answered on its
    thread (In-Reply-To, References, "Re: " once) and the message's id is recorded there, so
    the customer's answer to it finds this run (desk/records/mail.py)."""
    thread = store.mail_thread(run.id)
    if thread is None:
        return outbox.send(key, run.sender, f"Re: {run.subject}", body)
    subject = reply_subject(run.subject)
    record, reused = outbox.send(key, run.sender, subject, body, thread=thread)
    store.record_mail_out(lease, record["message_id"], run.sender, subject,
                          record.get("in_reply_to"), record.get("references") or ())
    return record, reused


def hand_over(store: Store, shop: Shop, outbox: Outbox, run_id: str, lease: Lease,
              why: str) -> str:
    """A run that cannot continue: put it in front of a lead (an escalation), tell the
    customer a person will follow up, and leave the team a note (the run's failure) saying so.

    The escalation is keyed by the run and the email goes through the outbox under a key of
    the run's own, so however often the run is resumed and fails again, there is one of each;
    the email only ever to the sender. A refund paid before the failure is named in it, since
    the model never got to say so.
    """
    run = store.run(run_id)
    paid = [s.data for s in store.steps(run_id) if s.kind == StepKind.REFUND]
    refund = ""
    if paid:
        total = sum(float(d.get("amount") or 0) for d in paid)
        refund = (f" Your refund of ${total:,.2f} has been issued and should reach you "
                  "within a few business days.")
    greeting = f"Hello {run.sender_name}," if run.sender_name else "Hello,"
    body = with_signature(
        f"{greeting}\n\nThank you for your patience.{refund} We could not finish handling "
        "your request automatically, so a member of our team will look at it and follow "
        "up with you personally.", shop.info.signature)
    # Fenced: a process that lost the run raises nothing and sends nothing.
    store.escalate_run(lease, CANNOT_CONTINUE, why)
    _record, reused = send_on_thread(store, lease, outbox, f"{run_id}/follow-up", run, body)
    told = "was already told" if reused else "was told"
    return (f"{why} {HANDED_OVER}: the customer ({run.sender}) {told} by email that a person "
            "will follow up.")


# An email written in the same response as a refund proposal, before anyone decided it.
HELD_BACK = ("Not sent: this email was written before the refund in the same response was "
             "decided, and that refund was not made. Write it again with the outcome.")

REFUND_TOOLS = toolset(
    replace(TOOLS["lookup_order"], run=lookup_order),
    replace(TOOLS["check_refund_policy"], run=check_refund_policy),
    replace(TOOLS["issue_refund"], run=issue_refund, propose=propose_refund,
            declined=refund_not_made),
    replace(TOOLS["send_customer_message"], run=send_customer_message),
    replace(TOOLS["escalate"], run=escalate),
)
