"""A third agent on the public loop: paying a supplier's invoice by bank transfer, once a
person approves it.

It imports only what ``refund_agent`` exports (``refund_agent.__all__``), as an agent of your
own would. A supplier writes "please pay INV-2041"; the agent looks the invoice up, proposes
the transfer (the reviewer sees the payee, the invoice and the amount), and stops. After a
person approves, the next ``advance`` sends the transfer under the call's key, so a crash
after sending and before recording, or a second approval racing the first, pays once.

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from refund_agent import (
    LOOP_POINTS,
    Approval,
    ApprovalStatus,
    Call,
    CallContext,
    IdempotentLog,
    Lease,
    Loop,
    ModelAccess,
    Outcome,
    Run,
    Settings,
    Tool,
    ToolKind,
    Waiting,
    same_address,
    toolset,
)

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


class PayInvoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice_id: InvoiceId
    amount_cents: int = Field(ge=1, description="The amount to transfer, in cents.")


@dataclass(frozen=True, kw_only=True)
class PayablesCall(CallContext):
    """What the payables tools get for one call: the invoices and the transfers log."""

    invoices: Mapping[str, dict[str, Any]]
    transfers: IdempotentLog

    def owned(self, invoice_id: str) -> dict[str, Any] | str:
        """The sender's own invoice, or one answer for unknown and someone else's alike."""
        invoice = self.invoices.get(invoice_id)
        if invoice is None or not same_address(invoice["payee"], self.run.sender):
            return f"No invoice {invoice_id} was found for {self.run.sender}."
        return invoice


def lookup_invoice(ctx: PayablesCall, args: LookupInvoice) -> Outcome:
    invoice = ctx.owned(args.invoice_id)
    return Outcome({"error": invoice} if isinstance(invoice, str) else dict(invoice), [])


def _payable(ctx: PayablesCall, args: PayInvoice) -> dict[str, Any] | str:
    """The invoice this call may pay, or why not (the same checks before and after approval)."""
    invoice = ctx.owned(args.invoice_id)
    if isinstance(invoice, str):
        return invoice
    if invoice["status"] != "open":
        return f"Invoice {args.invoice_id} is {invoice['status']}; there is nothing to pay."
    if args.amount_cents != invoice["amount_cents"]:
        return (f"Invoice {args.invoice_id} is for {invoice['amount_cents']} cents, not "
                f"{args.amount_cents}; only its balance can be paid.")
    return invoice


def propose_payment(ctx: PayablesCall, args: PayInvoice) -> Waiting | Outcome:
    """Queue the transfer for a person, with the amount it moves."""
    invoice = _payable(ctx, args)
    if isinstance(invoice, str):
        return Outcome({"error": invoice}, [])
    return ctx.propose(f"Pay {invoice['invoice_id']} to {invoice['payee_name']} "
                       f"({invoice['iban']})", subject=invoice["invoice_id"],
                       amount_cents=invoice["amount_cents"])


def pay_invoice(ctx: PayablesCall, args: PayInvoice, approval: Approval) -> Outcome:
    """The person decided: transfer once (keyed by the approval, which is the call's key)."""
    if approval.status != ApprovalStatus.APPROVED:
        return Outcome({"status": str(approval.status), "decided_by": approval.decided_by,
                        "note": approval.note or ""}, [])
    invoice = _payable(ctx, args)
    if isinstance(invoice, str):
        return Outcome({"error": invoice}, [])
    ctx.fence()   # a process that lost the run sends nothing
    record, reused = ctx.transfers.once(
        approval.id, {"invoice_id": args.invoice_id, "iban": invoice["iban"],
                      "amount_cents": approval.amount_cents},
        lambda: {"transfer_id": "tr_" + uuid.uuid4().hex[:12], "sent_at": time.time()})
    ctx.crash("after_transfer")
    return Outcome({"status": "paid", "invoice_id": args.invoice_id,
                    "amount_cents": approval.amount_cents, "transfer_id": record["transfer_id"],
                    "approved_by": approval.decided_by, "already_paid": reused}, [])


TOOLS = toolset(
    Tool("lookup_invoice", "Look up a supplier's invoice: its payee, bank account, amount and "
         "status. Only invoices of the supplier who wrote in are visible.", LookupInvoice,
         run=lookup_invoice),
    Tool("pay_invoice", "Pay the invoice's balance by bank transfer. A person must approve it "
         "first; the output says whether it was paid, or rejected with the reviewer's note.",
         PayInvoice, ToolKind.NEEDS_APPROVAL, run=pay_invoice, propose=propose_payment,
         done_status="paid"),
)

PROMPT = ("You pay suppliers' invoices. Look the invoice up first, then call pay_invoice with "
          "what the look-up returned. A person approves every payment.")


class PayablesAgent(Loop):
    """An accounts-payable desk on the public loop, with a store of its own.

    Args:
        settings: configuration; read from the environment when omitted.
        model: an already opened model client.
        invoices: invoice id -> record (``payee`` is the address that may ask for payment).
    """

    agent_name = "payables"
    tools = TOOLS
    crash_points = {**LOOP_POINTS,
                    "after_transfer": "the transfer was sent; the run has not recorded it"}
    store_file = "payables.sqlite3"
    default_subject = "Invoice payment"

    def __init__(self, settings: Settings | None = None, *, model: ModelAccess | None = None,
                 invoices: Mapping[str, dict[str, Any]] | None = None) -> None:
        super().__init__(settings, model=model)
        self.invoices = INVOICES if invoices is None else invoices
        self.transfers = IdempotentLog(Path(self.settings.output_dir) / "transfers.log")

    def system_prompt(self, run: Run) -> str:
        return PROMPT

    def context(self, run: Run, lease: Lease, call: Call) -> PayablesCall:
        return PayablesCall(run, lease, call, self.store, self._crash_at,
                            invoices=self.invoices, transfers=self.transfers)

    def transfers_sent(self) -> list[dict[str, Any]]:
        """Every transfer made, one record per idempotency key."""
        return self.transfers.records()
