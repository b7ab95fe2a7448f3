"""Typed rows the store hands to front ends. Front ends read these; they never see SQL."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .text import parse_bounded

TICKS_PER_USD = 10_000_000_000


class RunStatus(StrEnum):
    WORKING = "working"   # a process is advancing it (or died doing so)
    WAITING = "waiting"   # paused on a refund that needs a person
    STOPPED = "stopped"   # stopped by a person; resume continues it
    DONE = "done"         # the agent finished; a customer reply can continue it
    ASKED = "asked"       # finished for now: a person asked the customer something; their
                          # reply continues it
    FAILED = "failed"     # an error the run cannot get past by itself; resume retries


class StepKind(StrEnum):
    """What a timeline step records. Stored as its value; every front end maps each member
    through one table (tests/desk/test_step_tables.py checks they are complete)."""

    EMAIL = "email"             # the customer's first email (the run's start)
    RESTART = "restart"         # a new process picked the run up
    REASONING = "reasoning"     # the model's reasoning summary
    CALL = "call"               # a function call the model made
    RESULT = "result"           # a call's output
    TEXT = "text"               # the model's commentary beside its calls
    NOTE = "note"               # the model's closing note for the team (a turn with no calls)
    RESPONSE = "response"       # one model response: its id, time, tokens and cost
    APPROVAL = "approval"       # a proposal queued for a person
    DECISION = "decision"       # a person's decision on it
    REFUND = "refund"           # the approved effect, carried out
    MESSAGE = "message"         # an email sent to the customer
    REPLY = "reply"             # the customer wrote back
    RESENT = "resent"           # the stored response was gone: the transcript was sent instead
    ERROR = "error"             # the run failed
    STOPPED = "stopped"         # someone pressed Stop
    CUSTOMER_DONE = "customer_done"  # the simulated customer has nothing more to say
    ESCALATION = "escalation"   # the agent raised the ticket to a team lead (escalate)
    HANDOFF = "handoff"         # an approver over their limit sent the refund to a lead
    SIGNOFF = "signoff"         # the first of two approvals above the two-person amount
    OWNER = "owner"             # the ticket was assigned, claimed or released (schema 15)
    TIMEOUT = "timeout"         # a step of the shop's timeout policy: reminded, escalated


class ApprovalStatus(StrEnum):
    """Where a proposal stands. Stored as its value."""

    PENDING = "pending"     # waiting for a person; the run is paused
    APPROVED = "approved"   # a person approved it (some lines, or all)
    REJECTED = "rejected"   # a person rejected it, with a note
    ASKED = "asked"         # sent back: the customer was asked a question first
    EXPIRED = "expired"     # nobody decided in time


class Run(BaseModel):
    id: str
    created_at: float
    kind: str                  # the sample key, "custom", or "email" (came by mail)
    sender: str
    sender_name: str
    subject: str
    email: str
    status: RunStatus
    last_response_id: str | None
    requests: int
    cost_ticks: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    simulated_replies: int
    error: str | None
    lease_pid: int | None
    last_pid: int | None
    updated_at: float
    transcript_items: int = 0       # items kept in the run's transcript (see Store.transcript)
    transcript_bytes: int = 0       # their size as stored JSON, in bytes
    transcript_complete: bool = False  # it goes back to the first request (runs since schema 4)
    agent: str = "refunds"          # the agent that made it, and alone advances it (schema 13)
    trace_context: str | None = None  # the W3C context its spans join (schema 17, telemetry)
    # What happened, for the desk (desk/status.DeskStatus; kept on the row since schema 12):
    # a finished run reads "rejected" or "paid" here where its status says only "done".
    desk_status: str | None = None

    @property
    def cost_usd(self) -> float:
        return self.cost_ticks / TICKS_PER_USD

    def owner_problem(self, agent_name: str, doing: str) -> str | None:
        """Why the agent ``agent_name`` may not ``doing`` (advance, decide) this run, or None.

        A run is its maker's: another agent's tools are not the ones its calls were written for
        (the refund desk answering a closure "There is no tool called 'close_account'" ends the
        run with nothing closed), nor are its proposals the ones this agent's people review.
        A run's maker never changes, so a check before a write's transaction cannot go stale.
        """
        if self.agent == agent_name:
            return None
        return (f"Run {self.id} was made by the {self.agent!r} agent: only that agent may "
                f"{doing} it, not the {agent_name!r} agent here. Nothing was changed.")


class InboxRow(BaseModel):
    """A run as the inbox lists it: with the order and amount of its latest proposal."""

    run: Run
    order_id: str | None       # the latest proposal's order, else the order first looked up
    amount_cents: int | None   # the latest proposal's amount (None: nothing proposed)
    desk: str = ""             # what happened, for the desk (desk_status.DeskStatus)
    escalations: int = 0       # open escalations on the ticket


class Step(BaseModel):
    """One entry of a run's timeline (the email, a reasoning summary, a tool call, ...)."""

    id: int
    run_id: str
    at: float
    pid: int
    kind: StepKind
    data: dict[str, Any]


class Call(BaseModel):
    """A function call the model made, and its output once the call has run."""

    call_id: str
    run_id: str
    response_id: str
    name: str
    arguments: str
    output: str | None
    # The approval id and idempotency key of what the call does (see models.py (call_key)); None
    # for a call that repeated an id its run had used, answered without running.
    key: str | None = None
    order_id: str | None = None   # the one its arguments name, as the model wrote it

    @classmethod
    def new(cls, run_id: str, response_id: str, call_id: str, name: str,
            arguments: str) -> Call:
        """A call not yet run, keyed as the store saves it (unless it repeats an id)."""
        return cls(call_id=call_id, run_id=run_id, response_id=response_id, name=name,
                   arguments=arguments, output=None, key=call_key(run_id, call_id),
                   order_id=order_id_in(arguments))


class ApprovalLine(BaseModel):
    """One order line of a proposed refund, and what the person decided for it."""

    line: str            # the order line's sku, or SHIPPING
    name: str
    reason: str          # damaged, changed_mind, or shipping
    amount_cents: int
    allowed_cents: int   # the line's full value: the most any reason could refund
    fee_cents: int
    decision: str | None  # approved, declined (unticked), rejected, asked, expired; None
                          # while pending
    units: int | None = None     # how many of the line's units it refunds; None: all of them
                                 # (rows from before schema 8) or shipping
    quantity: int | None = None  # how many units the line has, when the refund was proposed

    @property
    def amount(self) -> float:
        return round(self.amount_cents / 100, 2)


class Approval(BaseModel):
    """An action the agent proposed (a refund, or any other agent's gated call), waiting for
    or holding a person's decision.

    The refund desk's approvals have lines (what each order line pays); another agent's have
    none, and an amount only when its action moves money (``has_amount``).
    """

    id: str              # the issue_refund call's key (run and call id; the bare call id for
                         # proposals made before schema 6), also the payment idempotency key
    run_id: str
    response_id: str
    call_id: str
    order_id: str        # canonical
    amount_cents: int    # what is (to be) paid: the proposal, or the lines a person kept
    proposed_cents: int  # what the agent proposed
    summary: str
    customer: str
    status: ApprovalStatus
    requested_at: float
    requested_pid: int
    decided_by: str | None
    decided_at: float | None
    decided_pid: int | None
    note: str | None
    lines: list[ApprovalLine]

    @property
    def amount(self) -> float:
        return round(self.amount_cents / 100, 2)

    @property
    def subject(self) -> str:
        """What the action is on (an order, an account, an invoice): the generic name of the
        ``order_id`` column, which keeps the refund desk's name for it."""
        return self.order_id

    @property
    def title(self) -> str:
        """The sentence a reviewer reads: the generic name of the ``summary`` column."""
        return self.summary

    @property
    def has_amount(self) -> bool:
        """Whether the action moves money: a refund's lines, or an amount its agent declared
        (an account closure has neither, and shows no "$0.00")."""
        return bool(self.lines) or self.proposed_cents > 0

    @property
    def fingerprint(self) -> str:
        """A digest of what a person reviewing this approval is shown: its target, title,
        customer, amounts and lines. A decision names it, and is refused if the approval no
        longer matches: what you see is what you sign (Store.decide)."""
        shown = {"id": self.id, "run_id": self.run_id, "call_id": self.call_id,
                 "subject": self.order_id, "title": self.summary, "customer": self.customer,
                 "proposed_cents": self.proposed_cents,
                 "lines": [[ln.line, ln.name, ln.reason, ln.amount_cents, ln.units]
                           for ln in self.lines]}
        text = json.dumps(shown, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def item_lines(self) -> list[ApprovalLine]:
        """The lines a person can tick or untick (shipping follows the policy)."""
        return [line for line in self.lines if line.reason != "shipping"]

    @property
    def kept(self) -> list[ApprovalLine]:
        return [line for line in self.lines if line.decision == "approved"]

    @property
    def declined(self) -> list[ApprovalLine]:
        return [line for line in self.lines if line.decision == "declined"]


class Proposal(BaseModel):
    """What a gated call asks a person to approve, as the store queues it (boundary 4).

    ``subject`` is what the action is on (an order, an account, a payee: held lines and
    per-subject limits are counted by it), ``title`` the sentence the person reads, and
    ``amount_cents`` what it moves, when it moves money. The refund desk's quote (desk/
    policy.Quote) is the itemized kind of the same thing.
    """

    subject: str
    amount_cents: int = Field(default=0, ge=0)
    lines: list[Any] = Field(default_factory=list)

    @property
    def order_id(self) -> str:
        return self.subject

    @property
    def total_cents(self) -> int:
        return self.amount_cents

    @property
    def amount(self) -> float:
        return round(self.amount_cents / 100, 2)


class AuditEntry(BaseModel):
    id: int
    at: float
    event: str           # requested, approved, rejected, asked, expired, ignored, issued,
                         # reused, refused
    actor: str
    pid: int
    run_id: str | None
    approval_id: str | None
    order_id: str | None
    amount: float | None
    note: str | None
    lines: list[dict[str, Any]] | None = None  # the refund's lines, on money events
    prev_hash: str
    hash: str


class TranscriptEntry(BaseModel):
    """One item of a run's transcript: something a request sent, or a response returned.

    ``item`` is the Responses API item exactly as sent or as it arrived (a reasoning item keeps
    its ``encrypted_content``), so the items in order are a request's ``input`` that carries
    the whole conversation.
    """

    seq: int
    response_id: str     # the response whose request sent it, or whose output it is
    origin: str          # input or output
    item: dict[str, Any]


class Reply(BaseModel):
    id: int
    run_id: str
    at: float
    text: str
    simulated: bool
    response_id: str | None   # the response that received it; None until then


# An order id longer than this is not one; the inbox shows none rather than a wall of text.
_MAX_ORDER_ID = 64


# Call ids made of these characters go into the key as they are (readable); others are hashed,
# so a key stays short and safe wherever it is shown or used as a widget key.
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def call_key(run_id: str, call_id: str) -> str:
    """The key of call ``call_id`` of run ``run_id``: the approval id and idempotency key."""
    part = call_id if _PLAIN_ID.fullmatch(call_id) else \
        "h" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"{run_id}-{part}"


def order_id_in(arguments: str) -> str | None:
    """The ``order_id`` a call's arguments name, as the model wrote it, or None (bad JSON, no
    such field, not a short text or number)."""
    parsed = parse_bounded(arguments)
    if not isinstance(parsed, dict):
        return None
    value = parsed.get("order_id")
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    value = str(value).strip()
    return value if 0 < len(value) <= _MAX_ORDER_ID else None


# The kinds an escalation has: the agent's (the escalate tool's enum) and the desk's own.
AGENT_KINDS = ("threat", "manager", "policy_exception", "cannot_read")


HANDOFF = "over_limit"


# Raised by the payment provider's report that a refund it accepted failed or was cancelled
# (outside/webhooks.py): the customer was told the money went back, and it did not.
PROVIDER_FAILED = "refund_failed"


# Raised when a run cannot go on and a person must finish it (calls.hand_over): the model
# refused the run's transcript, the transcript is gone, or, after the refund was paid, the
# provider refused a request no retry gets past. The customer was told a person follows up.
CANNOT_CONTINUE = "cannot_continue"


# Raised by mail intake when answering a message would pass the cap on automatic answers
# (outside/mailin/loops.py): likely an auto-responder that does not say it is one.
MAIL_LOOP = "mail_loop"


KIND_LABELS = {"threat": "Threat (chargeback, review, legal)", "manager": "Asks for a manager",
               "policy_exception": "Exception the policy cannot grant",
               "cannot_read": "Written so the agent cannot read it; a person must answer",
               HANDOFF: "Over an approver's limit",
               PROVIDER_FAILED: "Refund failed at the payment provider",
               CANNOT_CONTINUE: "The run cannot continue; a person must finish it",
               MAIL_LOOP: "Mail loop: too many automatic answers; a person must answer",
               "timeout": "Waiting too long for a decision"}


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


def stable_name(module: str) -> str:
    """The name ``module`` has when imported: ``__main__`` (a script run as ``python
    agent.py``, or ``python -m``) becomes the module the file is, so a run a script started
    is the same agent's for a worker that imports the file (None of that under ``-c``)."""
    main = sys.modules.get("__main__")
    if module != "__main__" or main is None:
        return module
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return str(spec.name).removesuffix(".__main__")
    file = getattr(main, "__file__", None)
    if not file:
        return module
    stem = Path(file).resolve().with_suffix("")
    for entry in sys.path:
        try:
            parts = stem.relative_to(Path(entry or os.getcwd()).resolve()).parts
        except (ValueError, OSError):
            continue
        if parts and all(part.isidentifier() for part in parts):
            return ".".join(parts)
    return stem.name


class Actor:
    """The one list of names the system itself signs audit lines and escalations with.

    A person with one of these names (or one that looks like it) could not be told from the
    system in the record, so every one is reserved (desk/identity.py's ``RESERVED_ACTORS`` is
    made from this class, and nothing else). It sits here, at the bottom, because the loop's
    store signs with some of them too. Code that signs as the system names one of these, never
    a string of its own: tests/desk/test_system_actors.py scans the package for such strings,
    and collects what a working desk signs with.
    """

    AGENT = "agent"                # the model's proposals, escalations and refused calls
    PAYMENTS = "payments"          # refunds issued, reused or left uncertain
    EXPIRY = "expiry"              # approvals closed for waiting too long
    TIMEOUTS = "timeouts"          # the shop's reminders and escalations of waiting refunds
    MAIL = "mail"                  # mail intake (desk/records/mail.py)
    EVAL = "refund-agent eval"     # the eval's proposals, rejected once read
    STRIPE = "stripe"              # the payment provider's webhooks, by the provider's name
    SMTP = "smtp"                  # the email service, by its settings' name
    WEBHOOKS = "webhooks"          # the webhook receiver
    UNKNOWN_LOGIN = "unknown login"    # account changes when the OS login cannot be read
    PAGE = "page"                  # a Stop pressed on the demo page by nobody named
    # Not signed with today, but the ticket shows them as speakers: a person with one of these
    # names would read as the system there.
    SYSTEM = "system"
    CUSTOMER = "customer"
    MODEL = "model"
