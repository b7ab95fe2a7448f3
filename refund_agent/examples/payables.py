"""A third agent on the public loop: paying a supplier's invoice by bank transfer, once a
person approves it.

It imports only what ``refund_agent`` exports (``refund_agent.__all__``), as an agent of your
own would, and the table of records the examples share (records.py). A supplier writes
"please pay INV-2041"; the agent looks the invoice up, proposes the transfer (the reviewer
sees the payee, the invoice and the amount), and stops. After a person approves, the next
``advance`` sends the transfer under the call's key, so a crash after sending and before
recording, or a second approval racing the first, pays once.

Three rules live in code, not in the prompt: only the invoice's own payee can ask for it to be
paid; the amount is the invoice's balance, whatever the model writes; and an invoice already
paid is not paid again.

    agent = PayablesAgent()
    run = agent.start("billing@acme-tools.example", "Please pay invoice INV-2041.")
    agent.advance(run.id)                               # -> RunStatus.WAITING
    (pending,) = agent.store.approvals("pending")
    agent.approve(pending.id, pending.fingerprint, by="Dana Kim")   # any process, any day
    agent.advance(run.id)                               # pays it once, reports: DONE
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from refund_agent import LOOP_POINTS, Approval, Outcome, Tool, ToolKind, Waiting, toolset

from .records import RecordsCall, TableAgent, look_up

InvoiceId = Annotated[str, StringConstraints(strip_whitespace=True, to_upper=True,
                                             max_length=32),
                      Field(description="The invoice number, for example INV-2041.")]

# The sample ledger of supplier invoices (a real desk reads its accounting system).
INVOICES: dict[str, dict[str, Any]] = {
    "INV-2041": {"invoice_id": "INV-2041", "payee": "billing@acme-tools.example",
                 "payee_name": "Acme Tools", "iban": "DE89 3704 0044 0532 0130 00",
                 "amount_cents": 125_000, "status": "open"},
    "INV-2042": {"invoice_id": "INV-2042", "payee": "accounts@north-freight.example",
                 "payee_name": "North Freight", "iban": "NL91 ABNA 0417 1643 00",
                 "amount_cents": 48_250, "status": "paid"},
}


class LookupInvoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice_id: InvoiceId


class PayInvoice(LookupInvoice):
    amount_cents: int = Field(ge=1, description="The amount to transfer, in cents.")


def _payable(ctx: RecordsCall, args: PayInvoice) -> dict[str, Any] | str:
    """The invoice this call may pay, or why not (the same checks before and after approval:
    an approval is not authorization)."""
    invoice = ctx.owned(args.invoice_id)
    if isinstance(invoice, str):
        return invoice
    if invoice["status"] != "open":
        return f"Invoice {args.invoice_id} is {invoice['status']}; there is nothing to pay."
    if args.amount_cents != invoice["amount_cents"]:
        return (f"Invoice {args.invoice_id} is for {invoice['amount_cents']} cents, not "
                f"{args.amount_cents}; only its balance can be paid.")
    return invoice


def propose_payment(ctx: RecordsCall, args: PayInvoice) -> Waiting | Outcome:
    """Queue the transfer for a person, with the amount it moves."""
    invoice = _payable(ctx, args)
    if isinstance(invoice, str):
        return Outcome({"error": invoice}, [])
    return ctx.propose(f"Pay {invoice['invoice_id']} to {invoice['payee_name']} "
                       f"({invoice['iban']})", subject=invoice["invoice_id"],
                       amount_cents=invoice["amount_cents"])


def pay_invoice(ctx: RecordsCall, args: PayInvoice, approval: Approval) -> Outcome:
    """A person approved it: transfer once (keyed by the call, which is the approval's id)."""
    invoice = _payable(ctx, args)
    if isinstance(invoice, str):
        return Outcome({"error": invoice}, [])
    record, reused = ctx.once(
        {"invoice_id": args.invoice_id, "iban": invoice["iban"],
         "amount_cents": approval.amount_cents},
        lambda: {"transfer_id": "tr_" + uuid.uuid4().hex[:12], "sent_at": time.time()})
    ctx.crash("after_transfer")
    return Outcome({"status": "paid", "invoice_id": args.invoice_id,
                    "amount_cents": approval.amount_cents, "transfer_id": record["transfer_id"],
                    "approved_by": approval.decided_by, "already_paid": reused}, [])


TOOLS = toolset(
    Tool("lookup_invoice", "Look up a supplier's invoice: its payee, bank account, amount and "
         "status. Only invoices of the supplier who wrote in are visible.", LookupInvoice,
         run=look_up("invoice_id")),
    Tool("pay_invoice", "Pay the invoice's balance by bank transfer. A person must approve it "
         "first; the output says whether it was paid, or rejected with the reviewer's note.",
         PayInvoice, ToolKind.NEEDS_APPROVAL, run=pay_invoice, propose=propose_payment,
         done_status="paid"),
)


class PayablesAgent(TableAgent):
    """An accounts-payable desk on the public loop, with a store of its own
    (``payables.sqlite3``) and its transfers in ``transfers.log``."""

    agent_name = "payables"
    proposal_noun = "invoice payment"
    tools = TOOLS
    crash_points = {**LOOP_POINTS,
                    "after_transfer": "the transfer was sent; the run has not recorded it"}
    store_file = "payables.sqlite3"
    effect_log = "transfers"
    default_subject = "Invoice payment"
    records, owner_field, record_noun = INVOICES, "payee", "invoice"
    prompt = ("You pay suppliers' invoices. Look the invoice up first, then call pay_invoice "
              "with what the look-up returned. A person approves every payment.")

    def transfers_sent(self) -> list[dict[str, Any]]:
        """Every transfer made, one record per idempotency key."""
        return self.done()
