"""Pure formatting for the web page: turn runs, steps, approvals and audit lines into display data.

Nothing here imports Streamlit or touches the store, so every helper is a plain function that
the unit tests can call with hand-made rows. ``app.py`` decides *where* things go; this module
decides *what* they say.
"""

from __future__ import annotations

import json
import re
import string
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pandas as pd

from ...desk.policy import Quote
from ...desk.status import DeskStatus, customer_name
from ...models import (
    KIND_LABELS,
    Approval,
    ApprovalStatus,
    AuditEntry,
    InboxRow,
    Run,
    RunStatus,
    Step,
    StepKind,
)
from ...outside import RESENT_EMAIL
from ...text import parse_bounded, sender_line, size_text, transcript_text

# Every ASCII punctuation character may be backslash-escaped in CommonMark, and Streamlit's
# Markdown also gives meaning to "$" (math) and ":" (emoji and colour directives), so customer
# text is escaped wholesale rather than character by character.
_MD_SPECIAL = set(string.punctuation)
# Where a GitHub-style autolink literal starts, in escaped text: "http(s)\:" and "www\.".
_AUTOLINK = re.compile(r"(?i)(https?|www)(?=\\[:.])")


@dataclass(frozen=True)
class StatusView:
    """How a run status is named and coloured."""

    label: str
    color: str   # a Streamlit Markdown colour: blue, orange, gray, green, red
    icon: str    # a Material icon name

    @property
    def badge(self) -> str:
        """Markdown for a coloured badge, e.g. ``:orange-badge[:material/pan_tool: Waiting]``."""
        return f":{self.color}-badge[:material/{self.icon}: {self.label}]"


STATUS: dict[RunStatus, StatusView] = {
    RunStatus.WORKING: StatusView("Working", "blue", "autorenew"),
    RunStatus.WAITING: StatusView("Waiting for approval", "orange", "pan_tool"),
    RunStatus.STOPPED: StatusView("Stopped", "gray", "pause_circle"),
    RunStatus.DONE: StatusView("Done", "green", "check_circle"),
    RunStatus.ASKED: StatusView("Waiting on customer", "violet", "contact_support"),
    RunStatus.FAILED: StatusView("Failed", "red", "error"),
}


@dataclass(frozen=True)
class DecisionView:
    """How a decision reads in the timeline (before "by NAME") and the box it is shown in."""

    verb: str
    tone: str   # the Streamlit message box: success, info, warning or error


# The page's one table of approval statuses. tests/loop/test_step_tables.py checks it is complete.
DECISIONS: dict[ApprovalStatus, DecisionView] = {
    ApprovalStatus.PENDING: DecisionView("Waiting for a decision", "warning"),
    ApprovalStatus.APPROVED: DecisionView("Approved", "success"),
    ApprovalStatus.REJECTED: DecisionView("Rejected", "error"),
    ApprovalStatus.ASKED: DecisionView("Sent back to the customer with a question", "info"),
    ApprovalStatus.EXPIRED: DecisionView("Expired: not decided in time, closed", "error"),
}


# What happened to a ticket (desk/status.py), each with its own badge.
DESK: dict[DeskStatus, StatusView] = {
    DeskStatus.WORKING: StatusView("Working", "blue", "autorenew"),
    DeskStatus.WAITING: StatusView("Waiting for approval", "orange", "pan_tool"),
    DeskStatus.PAID: StatusView("Paid", "green", "check_circle"),
    DeskStatus.PARTLY_PAID: StatusView("Partly paid", "green", "rule"),
    DeskStatus.REJECTED: StatusView("Rejected", "red", "cancel"),
    DeskStatus.ASKED: StatusView("Waiting on customer", "violet", "contact_support"),
    DeskStatus.EXPIRED: StatusView("Expired", "orange", "timer_off"),
    DeskStatus.DECLINED: StatusView("Declined by policy", "gray", "block"),
    DeskStatus.FAILED: StatusView("Failed", "red", "error"),
    DeskStatus.STOPPED: StatusView("Stopped", "gray", "pause_circle"),
}
ESCALATED = StatusView("Escalated", "red", "priority_high")


def desk_view(status: DeskStatus | str) -> StatusView:
    return DESK[DeskStatus(status)]



def md(text: str) -> str:
    """Escape text for Streamlit Markdown and keep its line breaks.

    Customer emails are data, not formatting: "$48.00 and $94.95" must not turn into maths,
    and "**urgent**" must show its asterisks.
    """
    escaped = "".join("\\" + c if c in _MD_SPECIAL else c for c in text)
    # Escapes do not stop GitHub-style autolinks (they are found in the text after parsing):
    # an invisible WORD JOINER after "https" or "www" does, so a URL someone wrote into an
    # email or a link to the desk shows as text, not as a link to click.
    escaped = _AUTOLINK.sub("\\1\u2060", escaped)
    # Two trailing spaces make a hard line break, so an email keeps its shape.
    return "\n".join(line.rstrip() + "  " if line.strip() else "" for line in
                     escaped.splitlines()).rstrip()


def money(amount: float | None) -> str:
    """Dollars with two decimals (``$48.00``); empty for None."""
    return "" if amount is None else f"${amount:,.2f}"


def ago(ts: float, now: float | None = None) -> str:
    """A short relative time: "just now", "4 min ago", "2 h ago", or a date."""
    seconds = max(0.0, (time.time() if now is None else now) - ts)
    if seconds < 45:
        return "just now"
    if seconds < 3600:
        return f"{round(seconds / 60)} min ago"
    if seconds < 86400:
        return f"{round(seconds / 3600)} h ago"
    return datetime.fromtimestamp(ts).strftime("%b %d")


def clock(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S") if ts else ""


def status_view(status: RunStatus | str) -> StatusView:
    return STATUS[RunStatus(status)]


def run_label(row: InboxRow, now: float | None = None,
              names: Mapping[str, str] | None = None) -> str:
    """The inbox entry for a run: who, which order and how much, status, age (Markdown).

    The order and amount come first after the name: a customer with a dozen tickets about the
    same mixer is told apart by them, not by the subject.
    """
    run = row.run
    # One display form per customer: the name they gave on any ticket (``names``), else here.
    known = (names or {}).get(run.sender.casefold())
    who = md(customer_name(known or run.sender_name, run.sender))
    order = f" · {md(row.order_id)}" if row.order_id else ""
    amount = f" · {md(money(row.amount_cents / 100))}" if row.amount_cents is not None else ""
    badge = desk_view(row.desk).badge if row.desk else status_view(run.status).badge
    escalated = f" {ESCALATED.badge}" if row.escalations else ""
    return (f"**{who}**{order}{amount}  \n"
            f"{badge}{escalated} · {ago(run.created_at, now)} · "
            f"{md(shorten(run.subject, 40))}")



@dataclass(frozen=True)
class InboxFilter:
    """One status filter of the inbox: its label and the run statuses it shows."""

    key: str
    label: str
    statuses: tuple[RunStatus, ...]


INBOX_FILTERS = (
    InboxFilter("all", "All", ()),
    InboxFilter("waiting", "Waiting for approval", (RunStatus.WAITING,)),
    InboxFilter("asked", "Waiting on customer", (RunStatus.ASKED,)),
    InboxFilter("working", "Working", (RunStatus.WORKING,)),
    InboxFilter("done", "Done", (RunStatus.DONE,)),
    InboxFilter("failed", "Failed or stopped", (RunStatus.FAILED, RunStatus.STOPPED)),
)


def filter_label(f: InboxFilter, counts: Mapping[RunStatus, int]) -> str:
    """``Waiting for approval 12``: a filter with how many tickets it holds."""
    n = sum(counts.values()) if not f.statuses else sum(counts[s] for s in f.statuses)
    return f"{f.label} {n}"


@dataclass(frozen=True)
class DeskFilter:
    """One filter of the inbox by what happened: its label and the desk statuses it shows
    (``needs`` for the lead's *needs a person* view, ``escalated`` for open escalations)."""

    key: str
    label: str
    statuses: tuple[DeskStatus, ...] = ()
    needs: bool = False
    escalated: bool = False

    def shows(self, status: DeskStatus, escalations: int) -> bool:
        from ...desk.status import needs_person
        if self.needs:
            return needs_person(status, escalations)
        if self.escalated:
            return escalations > 0
        return not self.statuses or status in self.statuses

    def selection(self) -> tuple[tuple[DeskStatus, ...] | None, bool]:
        """What :meth:`shows` selects, as Store.desk_page takes it: (statuses, or any with an
        open escalation); None: every status. tests/desk/test_desk.py checks the two agree."""
        from ...desk.status import NEEDS_PERSON
        if self.needs:
            return tuple(sorted(NEEDS_PERSON)), True
        if self.escalated:
            return (), True
        return (self.statuses or None), False


DESK_FILTERS = (
    DeskFilter("needs", "Needs a person", needs=True),
    DeskFilter("all", "All"),
    DeskFilter("escalated", "Escalated", escalated=True),
    DeskFilter("waiting", "Waiting for approval", (DeskStatus.WAITING,)),
    DeskFilter("asked", "Waiting on customer", (DeskStatus.ASKED,)),
    DeskFilter("working", "Working", (DeskStatus.WORKING,)),
    DeskFilter("paid", "Paid", (DeskStatus.PAID,)),
    DeskFilter("partly_paid", "Partly paid", (DeskStatus.PARTLY_PAID,)),
    DeskFilter("rejected", "Rejected", (DeskStatus.REJECTED,)),
    DeskFilter("expired", "Expired", (DeskStatus.EXPIRED,)),
    DeskFilter("declined", "Declined by policy", (DeskStatus.DECLINED,)),
    DeskFilter("failed", "Failed or stopped", (DeskStatus.FAILED, DeskStatus.STOPPED)),
)


def desk_counts(groups: Iterable[tuple[DeskStatus, int, int]]) -> dict[str, int]:
    """How many tickets each of DESK_FILTERS holds, from Store.desk_groups's rows (status, open
    escalations, how many)."""
    rows = list(groups)
    return {f.key: sum(n for status, esc, n in rows if f.shows(status, esc))
            for f in DESK_FILTERS}


def page_range(offset: int, shown: int, total: int) -> str:
    """``51–100 of 120`` (or ``No tickets``)."""
    if not total:
        return "No tickets"
    return f"{offset + 1}–{offset + shown} of {total}"


def cost_line(run: Run) -> str:
    """Requests, cost, cache use and the transcript kept for a run, in one line."""
    requests = f"{run.requests} model request{'s' if run.requests != 1 else ''}"
    cached = (f" · {run.cached_tokens:,} of {run.input_tokens:,} input tokens cached"
              if run.input_tokens else "")
    kept = (f" · {transcript_text(run.transcript_items, run.transcript_bytes)}"
            if run.transcript_items else "")
    return f"{requests} · ${run.cost_usd:.4f}{cached}{kept}"


# -- the ticket timeline -----------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One thing to show in a ticket's timeline.

    Attributes:
        kind: email, reasoning, tool, result, response, proposal, decision, refund, message,
            note, text, reply, restart, resent, error, stopped, customer_done.
        title: one line of plain text (the page escapes it).
        body: longer plain text, such as an email or the reasoning.
        subtitle: a second line (an email's subject, a tool's name).
        arguments: a tool call's arguments (parsed JSON when possible).
        result: a tool call's output once it ran, else None.
        result_below: the call's result is its own block further down (a refund that waited).
        lines: plain-text rows shown as a list: a proposal's or a refund's order lines, what a
            decision paid and declined.
        simulated: for replies: written by the model playing the customer.
        tone: for decisions: the message box it is shown in (see DECISIONS).
        at: when the step was committed.
        pid: the process that committed it.
    """

    kind: str
    title: str
    body: str = ""
    subtitle: str = ""
    arguments: Any = None
    result: Any = None
    result_below: bool = False
    lines: tuple[str, ...] = ()
    simulated: bool = False
    tone: str = ""
    at: float = 0.0
    pid: int = 0


def _parse(value: Any) -> Any:
    """JSON text parsed, within bounds (see callrecords.parse_bounded): a model's arguments
    may be invalid, huge or nested deeper than the parser's stack; those stay text."""
    return parse_bounded(value)


def call_summary(name: str, arguments: Any) -> str:
    """``lookup_order(order_id=A1043)``: a call on one line, long values cut short."""
    if isinstance(arguments, dict):
        parts = []
        for key, value in arguments.items():
            text = value if isinstance(value, str) else json.dumps(value)
            parts.append(f"{key}={shorten(text, 40)}")
        return f"{name}({', '.join(parts)})"
    return f"{name}({shorten(str(arguments or ''), 60)})"


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def result_summary(name: str, output: Any) -> str:
    """What a tool returned, in a few words, for the collapsed call line."""
    if not isinstance(output, dict):
        return shorten(str(output), 60)
    if "error" in output:
        return "error: " + shorten(str(output["error"]), 70)
    if name == "lookup_order":
        items = len(output.get("items", []))
        return f"order {output.get('order_id')}, {items} item{'s' if items != 1 else ''}, " \
               f"total {money(output.get('total'))}"
    if name == "check_refund_policy":
        facts = output.get("facts", {})
        if "max_refund" in facts:  # a run recorded before refunds were itemized
            return f"policy allows at most {money(facts.get('max_refund'))}"
        lines = facts.get("lines") or []
        open_ = sum(1 for line in lines if line.get("status") == "refundable")
        return (f"{open_} of {len(lines)} line{'s' if len(lines) != 1 else ''} refundable, "
                f"{money(facts.get('left_to_refund'))} left to refund")
    if name == "send_customer_message":
        return f"sent to {output.get('to')}"
    if name == "issue_refund":
        status = output.get("status", "")
        if status == "refunded":
            return f"refunded {money(output.get('amount'))} ({output.get('refund_id')})"
        if status == "rejected":
            return f"rejected by {output.get('rejected_by')}"
        if status == "needs_information":
            return f"{output.get('asked_by')} asked the customer first"
        return status
    return shorten(json.dumps(output), 60)


def cents_to_money(cents: Any) -> str:
    return money(cents / 100) if isinstance(cents, int | float) else ""


def line_text(line: Mapping[str, Any]) -> str:
    """One refund line in a few words: ``POUR-GLS-01 damaged $48.00`` (``x1 of 4`` after it
    for some units of a line of several).

    Takes the shapes the steps and the audit log record: ``amount_cents`` (approvals, audit),
    ``amount`` in dollars (refunds), or no amount at all (a refused request).
    """
    if "amount_cents" in line:
        amount = cents_to_money(line["amount_cents"])
    else:
        amount = money(line.get("amount")) if isinstance(line.get("amount"), int | float) else ""
    units, of = line.get("units"), line.get("of_units")
    count = (f"x{units}" + (f" of {of}" if isinstance(of, int) else "")
             if isinstance(units, int) and of != 1 else "")
    return " ".join(str(part) for part in (line.get("line", "?"), line.get("reason", ""), amount,
                                           count) if part)


def lines_text(lines: Iterable[Mapping[str, Any]] | None) -> str:
    """Lines joined for one table cell: ``POUR-GLS-01 damaged $48.00; MUG-STN-2 ...``."""
    return "; ".join(line_text(line) for line in lines or [] if isinstance(line, Mapping))


def _declined_text(declined: Iterable[Any]) -> str:
    """Declined lines as the decision (skus) or the refund (``{line, item}``) records them."""
    names = []
    for item in declined:
        if isinstance(item, Mapping):
            name = item.get("item")
            names.append(f"{item.get('line')} ({name})" if name else str(item.get("line")))
        else:
            names.append(str(item))
    return ", ".join(names)


def _response_title(data: dict[str, Any], turn: int) -> str:
    parts = [f"Model request {turn}"]
    if data.get("seconds") is not None:
        parts.append(f"{data['seconds']:.1f} s")
    if data.get("input_tokens") is not None:
        parts.append(f"{data.get('input_tokens', 0):,} in ({data.get('cached_tokens', 0):,} "
                     f"cached) / {data.get('output_tokens', 0):,} out tokens")
    if data.get("cost_ticks") is not None:
        # OpenAI reports no cost: the figure is estimated from providers/table.py's price table.
        estimate = " (estimate)" if data.get("cost_estimated") else ""
        parts.append(f"${data['cost_ticks'] / 1e10:.4f}{estimate}")
    return " · ".join(parts)


@dataclass
class _Timeline:
    """The blocks so far, and which calls can still take their result into their block."""

    blocks: list[Block] = field(default_factory=list)
    open_calls: dict[str, int] = field(default_factory=dict)  # call id -> its block, pairable
    all_calls: dict[str, int] = field(default_factory=dict)   # call id -> its block
    turn: int = 0

    def add(self, block: Block) -> None:
        self.blocks.append(block)


def _call_block(t: _Timeline, d: dict[str, Any], base: dict[str, Any]) -> None:
    args = _parse(d["arguments"])
    t.add(Block("tool", call_summary(d["name"], args), arguments=args, subtitle=d["name"],
                **base))
    t.open_calls = {d["call_id"]: len(t.blocks) - 1}
    t.all_calls[d["call_id"]] = len(t.blocks) - 1


def _result_block(t: _Timeline, d: dict[str, Any], base: dict[str, Any]) -> None:
    output = _parse(d["output"])
    index = t.open_calls.pop(d["call_id"], None)
    if index is not None:
        call = t.blocks[index]
        t.blocks[index] = replace(call, result=output, title=call.title + " → "
                                  + result_summary(d["name"], output))
        return
    if d["call_id"] in t.all_calls:
        index = t.all_calls[d["call_id"]]
        t.blocks[index] = replace(t.blocks[index], result_below=True)
    t.add(Block("result", f"{d['name']} → {result_summary(d['name'], output)}",
                subtitle=d["name"], result=output, **base))


def _response_block(t: _Timeline, d: dict[str, Any], base: dict[str, Any]) -> None:
    t.turn += 1
    t.add(Block("response", _response_title(d, t.turn), **base))


def _approval_block(t: _Timeline, d: dict[str, Any], base: dict[str, Any]) -> None:
    # Stores from before itemized refunds have "reason" and no lines.
    t.add(Block("proposal", f"Proposed refund {money(d['amount'])} on order {d['order_id']}, "
                "waiting for a person to approve it", d.get("summary") or d.get("reason") or "",
                lines=tuple(line_text(line) for line in d.get("lines") or []), **base))


def _decision_block(t: _Timeline, d: dict[str, Any], base: dict[str, Any]) -> None:
    view = DECISIONS.get(d["decision"]) or DecisionView(str(d["decision"]).capitalize(),
                                                        "error")
    rows = []
    if d["decision"] == ApprovalStatus.APPROVED and d.get("amount") is not None:
        rows.append(f"Pays {money(d['amount'])}")
    if d.get("declined"):
        rows.append(f"Declined: {_declined_text(d['declined'])}")
    t.add(Block("decision", f"{view.verb} by {d['by']}", d.get("note") or "",
                lines=tuple(rows), tone=view.tone, **base))


def _refund_block(t: _Timeline, d: dict[str, Any], base: dict[str, Any]) -> None:
    title = f"Refund {d['refund_id']} issued: {money(d['amount'])}"
    if d.get("reused"):
        title += " (already made before the crash; reused, not repeated)"
    rows = [" ".join(filter(None, (line_text(line), f"({line['item']})"
                                  if line.get("item") else "")))
            for line in d.get("lines") or []]
    if d.get("declined"):
        rows.append(f"Declined: {_declined_text(d['declined'])}")
    t.add(Block("refund", title, d.get("note") or "", lines=tuple(rows), **base))


_Builder = Callable[[_Timeline, dict[str, Any], dict[str, Any]], None]

# The page's one table of step kinds: how each becomes a timeline block.
# tests/loop/test_step_tables.py checks that every StepKind has an entry.
STEP_BLOCKS: dict[StepKind, _Builder] = {
    StepKind.EMAIL: lambda t, d, base: t.add(Block(
        "email", sender_line(d.get("name"), d["from"]), d["body"],
        subtitle=d.get("subject", ""), **base)),
    StepKind.REASONING: lambda t, d, base: t.add(Block("reasoning", "Reasoning", d["text"],
                                                       **base)),
    StepKind.CALL: _call_block,
    StepKind.RESULT: _result_block,
    StepKind.RESPONSE: _response_block,
    StepKind.APPROVAL: _approval_block,
    StepKind.DECISION: _decision_block,
    StepKind.REFUND: _refund_block,
    StepKind.MESSAGE: lambda t, d, base: t.add(Block(
        "message", f"Email to {d['to']}" + (f" {RESENT_EMAIL}" if d.get("resent") else ""),
        d["body"], **base)),
    StepKind.NOTE: lambda t, d, base: t.add(Block("note", "Note for the team", d["text"],
                                                  **base)),
    StepKind.TEXT: lambda t, d, base: t.add(Block("text", "Agent", d["text"], **base)),
    # Who wrote a simulated reply is shown once, as a badge (see the page).
    StepKind.REPLY: lambda t, d, base: t.add(Block("reply", "Customer replied", d["text"],
                                                   simulated=bool(d.get("simulated")),
                                                   **base)),
    StepKind.RESTART: lambda t, d, base: t.add(Block(
        "restart", f"Server restarted: process {d['pid']} picked up the run (it was last "
        f"advanced by process {d['previous_pid']})", **base)),
    StepKind.RESENT: lambda t, d, base: t.add(Block("resent", resent_text(d), **base)),
    StepKind.ERROR: lambda t, d, base: t.add(Block("error", d.get("message", "Error"),
                                                   **base)),
    StepKind.STOPPED: lambda t, d, base: t.add(Block(
        "stopped", "Stopped. Resume continues from the last stored response.", **base)),
    StepKind.CUSTOMER_DONE: lambda t, d, base: t.add(Block(
        "customer_done", "The customer has nothing more to say.", **base)),
    StepKind.ESCALATION: lambda t, d, base: t.add(Block(
        "escalation", "Escalated to a team lead: "
        + KIND_LABELS.get(d.get("kind", ""), str(d.get("kind"))), d.get("reason", ""),
        **base)),
    StepKind.HANDOFF: lambda t, d, base: t.add(Block(
        "escalation", f"Sent to a lead by {d.get('by')}", d.get("reason", ""), **base)),
    StepKind.SIGNOFF: lambda t, d, base: t.add(Block(
        "decision", f"First sign-off by {d.get('by')}: {money(d.get('amount'))} for "
        f"{', '.join(d.get('keep') or []) or 'the shipping'}; a second person must approve",
        d.get("note") or "", tone="info", **base)),
}


def timeline(steps: Iterable[Step]) -> list[Block]:
    """Turn a run's committed steps into display blocks, oldest first.

    A tool call and its result become one block when nothing but the response summary came
    between them (a lookup). A refund call's result arrives after the approval, the decision
    and perhaps a restart, so it gets its own block where it happened.
    """
    t = _Timeline()
    for step in steps:
        if step.kind not in (StepKind.RESPONSE, StepKind.RESULT, StepKind.TEXT):
            t.open_calls.clear()   # a turn's commentary sits beside its call
        STEP_BLOCKS[step.kind](t, step.data, {"at": step.at, "pid": step.pid})
    return t.blocks


def resent_text(data: Mapping[str, Any]) -> str:
    """The timeline's line for a turn sent from the run's own transcript."""
    return (f"The stored response {data.get('missing')} was gone (expired or deleted): sent the "
            f"run's own transcript instead ({data.get('items', 0):,} items, "
            f"{size_text(int(data.get('bytes') or 0))}) and continued from the new response")


# -- what is streaming right now ---------------------------------------------------------


@dataclass(frozen=True)
class LiveSegment:
    """A piece of the turn that is streaming: reasoning or text so far, or a call's arguments."""

    kind: str        # reasoning, text or call
    text: str = ""
    name: str = ""   # for calls: the function's name


def live_title(segment: LiveSegment) -> str:
    if segment.kind == "reasoning":
        return "Thinking…"
    if segment.kind == "text":
        return "Writing…"
    return f"Calling {md(segment.name)}…"   # the name is the model's


# -- the approval card ------------------------------------------------------------------

REASON_LABELS = {"damaged": "damaged", "changed_mind": "changed mind", "shipping": "shipping"}


@dataclass(frozen=True)
class CardLine:
    """One order line of a proposed refund, as the approver sees it."""

    line: str      # the sku, or SHIPPING
    name: str
    reason: str    # damaged, changed_mind, shipping
    amount: float  # what the refund pays for it
    allowed: float  # the line's full value: the most any reason could refund
    fee: float     # the return fee taken from it
    units: int | None = None     # how many of the line's units it refunds (None: all)
    quantity: int | None = None  # how many the line has

    @property
    def counted(self) -> bool:
        """A line of several units, which the approver may lower."""
        return self.tickable and self.units is not None and (self.quantity or 1) > 1

    @property
    def units_label(self) -> str:
        """``1 of 4 units`` for a line of several units, '' otherwise."""
        return f"{self.units} of {self.quantity} units" if self.counted else ""

    @property
    def tickable(self) -> bool:
        """Item lines can be unticked; shipping follows the policy."""
        return self.reason != "shipping"

    @property
    def reason_label(self) -> str:
        return REASON_LABELS.get(self.reason, self.reason)

    @property
    def summary(self) -> str:
        """``Glass pour-over coffee maker · damaged · $48.00`` (shipping: no reason)."""
        if not self.tickable:
            return f"{self.name} · {money(self.amount)}"
        count = f" · {self.units_label}" if self.counted else ""
        return f"{self.name}{count} · {self.reason_label} · {money(self.amount)}"

    @property
    def basis(self) -> str:
        """Why this amount: ``MUG-STN-2 · $26.00 less a $7.50 return fee``."""
        if self.reason == "shipping":
            return "refunded because every item arrived damaged; dropped if an item is unticked"
        if self.fee:
            why = f"{money(self.allowed)} less a {money(self.fee)} return fee"
        elif abs(self.amount - self.allowed) < 0.005:
            why = f"full value {money(self.allowed)}"
        else:
            why = f"of {money(self.allowed)}"
        return f"{self.line} · {why}"


def plain_line(line: CardLine) -> str:
    """A refund line in plain words, for a checkbox a screen reader names:
    ``Glass pour-over coffee maker, damaged, $48.00``."""
    units = f", {line.units_label}" if line.counted else ""
    return f"{line.name}{units}, {line.reason_label}, {money(line.amount)}"


@dataclass(frozen=True)
class Card:
    """What an approver sees for one pending refund."""

    approval_id: str
    run_id: str
    customer: str
    order_id: str
    amount: float
    summary: str
    lines: list[CardLine] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)
    problem: str | None = None
    requested: str = ""

    @property
    def title(self) -> str:
        return f"{money(self.amount)} for order {self.order_id}"

    @property
    def within_policy(self) -> bool:
        return self.problem is None

    @property
    def item_lines(self) -> list[CardLine]:
        """The lines with a checkbox."""
        return [line for line in self.lines if line.tickable]

    @property
    def shipping_lines(self) -> list[CardLine]:
        return [line for line in self.lines if not line.tickable]


def fact_rows(facts: dict[str, Any], own: Collection[str] = (),
              changed_mind: bool = False) -> list[tuple[str, str]]:
    """The policy facts an approver needs, as (label, value) rows.

    Args:
        facts: ``desk.policy.PolicyFacts`` as a dict (this refund's lines left out).
        own: the lines of this refund; the order's other lines are listed with their status.
        changed_mind: whether this refund returns something, so the return-fee rule matters.
    """
    rows: list[tuple[str, str]] = []
    days = facts.get("days_since_delivery")
    window = facts.get("window_days", 30)
    if days is None:
        rows.append(("Delivered", "not yet"))
    else:
        inside = "inside" if facts.get("within_window") else "outside"
        rows.append(("Delivered", f"{days} day{'s' if days != 1 else ''} ago, {inside} the "
                                  f"{window}-day window"))
    others = [line for line in facts.get("lines") or [] if line.get("line") not in own]
    if others:
        rows.append(("Other lines", "; ".join(
            f"{line.get('name', line.get('line'))} {money(line.get('line_total'))} "
            f"({line.get('status', '')})" for line in others)))
    if changed_mind and facts.get("return_fee") is not None:
        per = ("per refund, shared by its changed-mind lines"
               if facts.get("return_fee_per") == "refund" else "per item returned")
        rows.append(("Return fee", f"{money(facts['return_fee'])} {per}"))
    if "paid" in facts:
        rows.append(("Paid", f"{money(facts['paid'])}, refunded so far "
                             f"{money(facts.get('refunded_so_far', 0))}, left "
                             f"{money(facts.get('left_to_refund', 0))}"))
    return rows


def approval_card(approval: Approval, facts: dict[str, Any], problem: str | None,
                  now: float | None = None) -> Card:
    lines = [CardLine(line=line.line, name=line.name, reason=line.reason, amount=line.amount,
                      allowed=round(line.allowed_cents / 100, 2),
                      fee=round(line.fee_cents / 100, 2), units=line.units,
                      quantity=line.quantity) for line in approval.lines]
    return Card(approval_id=approval.id, run_id=approval.run_id, customer=approval.customer,
                order_id=approval.order_id, amount=approval.amount, summary=approval.summary,
                lines=lines,
                facts=fact_rows(facts, {line.line for line in approval.lines},
                                any(line.reason == "changed_mind" for line in approval.lines)),
                problem=problem,
                requested=f"requested {ago(approval.requested_at, now)} by process "
                          f"{approval.requested_pid}")


def kept_notice(card: Card, keep: Collection[str], quote: Quote | str | None,
                lowered: Mapping[str, int] | None = None) -> tuple[str, str] | None:
    """What approving with some lines unticked would do, as (kind, plain text), or None.

    ``kind`` is "info" or "warning"; ``quote`` is :meth:`Agent.quote_kept`'s answer, or None when it
    could not be computed (the sum of the ticked lines is then shown as an estimate).
    """
    items = card.item_lines
    fewer = {sku: n for sku, n in (lowered or {}).items() if sku in keep}
    if all(line.line in keep for line in items) and not fewer:
        return None
    kept = [line for line in items if line.line in keep]
    if not kept:
        return "warning", ("No line is ticked. To refund nothing, reject with a note instead.")
    declined = ", ".join(line.name for line in items if line.line not in keep)
    if fewer:
        lowered_text = ", ".join(f"{line.name} {fewer[line.line]} of the {line.units} units "
                                 "proposed" for line in kept if line.line in fewer)
        declined = "; ".join(filter(None, [declined, f"fewer units: {lowered_text}"]))
    if isinstance(quote, str):
        return "warning", f"The ticked lines cannot be approved: {quote}"
    if quote is None:
        total = sum(line.amount for line in kept)
        return "info", (f"Approving pays about {money(total)} for the ticked lines (an estimate: "
                        f"the return fee and shipping are re-computed on approval) instead of "
                        f"{money(card.amount)}. Declined: {declined}.")
    return "info", (f"Approving pays {money(quote.amount)} for the ticked lines instead of "
                    f"{money(card.amount)}. Declined: {declined}.")


# -- the audit log ----------------------------------------------------------------------

AUDIT_COLUMNS = ["Time", "Event", "By", "Customer", "PID", "Order", "Amount", "Lines", "Note",
                 "Run", "Approval"]


def reminder(requested_at: float, after_hours: float, now: float) -> str | None:
    """``Waiting 26 h``: what a card says once a refund waited past the reminder time."""
    hours = (now - requested_at) / 3600
    if hours < after_hours:
        return None
    return (f"Waiting {hours:.0f} h for approval" if hours < 48 else
            f"Waiting {hours / 24:.0f} days for approval")


def limit_notice(amount: float, limit: float | None, before: float = 0.0) -> str | None:
    """What the card says when approving ``amount`` is above the signed-in approver's limit,
    with ``before`` already approved by them on the order (the limit is per order, in all:
    rules.limit_problem, which the decision runs)."""
    if limit is None or round(amount * 100) + round(before * 100) <= round(limit * 100):
        return None
    if round(before * 100) == 0:
        over = f"{money(amount)} is above your approval limit of {money(limit)}"
    else:
        over = (f"{money(amount)} would bring what you approved on this order to "
                f"{money(amount + before)} ({money(before)} before), above your approval "
                f"limit of {money(limit)} per order")
    return (f"Needs a lead: {over}. Send it to a lead (you can still reject it, or untick "
            "lines to bring it within your limit).")


@dataclass(frozen=True)
class ReviewAction:
    """The review's one confirm button: what it says, and what it does."""

    label: str
    hand_off: bool    # sends the refund to a lead instead of deciding it
    disabled: bool


def review_action(mode: str, pays: float, limit: float | None, before: float = 0.0,
                  two: bool = False, signed_off: bool = False,
                  problem: str | None = None) -> ReviewAction:
    """The confirm button of the review in ``mode`` (approve, ask, reject).

    Where approving would be refused for the approver's limit (``pays`` plus the ``before``
    they approved on the order), the button is *Send to a lead*, which works, never an
    Approve that errors: a refusal must offer the decision that works. ``two``: the order's
    total takes two people; ``signed_off``: the first of them is on record.
    """
    if mode == "approve" and limit_notice(pays, limit, before) is not None:
        return ReviewAction("Send to a lead", hand_off=True, disabled=False)
    if mode == "approve" and two and not signed_off:
        label = f"Sign off {money(pays)} (first of two)"
    else:
        label = {"approve": f"Approve {money(pays)}", "ask": "Send the question",
                 "reject": "Reject the refund"}[mode]
    return ReviewAction(label, hand_off=False, disabled=mode == "approve" and problem is not None)


def card_approve_label(amount: float, limit: float | None, before: float = 0.0) -> str:
    """The card's first button, which opens the review: *Send to a lead…* where approving is
    above what the signed-in approver may still approve on the order, else *Approve…*."""
    return "Send to a lead…" if limit_notice(amount, limit, before) else "Approve…"


def audit_frame(entries: Sequence[AuditEntry],
                customers: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The audit log as a table, newest first (``customers``: run id -> who wrote in)."""
    customers = customers or {}
    # Month and day without the year keep the column narrow; the CSV has exact timestamps.
    rows = [{"Time": datetime.fromtimestamp(e.at).strftime("%m-%d %H:%M:%S"),
             "Event": e.event, "By": e.actor,
             "Customer": customers.get(e.run_id or "", ""),
             "PID": e.pid, "Order": e.order_id or "",
             "Amount": money(e.amount), "Lines": lines_text(e.lines), "Note": e.note or "",
             "Run": e.run_id or "",
             "Approval": e.approval_id or ""}
            for e in sorted(entries, key=lambda e: e.id, reverse=True)]
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)


# What a spreadsheet reads as the start of a formula (OWASP's list): "=HYPERLINK(...)" in an
# account name, an approver's note, the model's summary or an order id must stay text.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet will show as text: a leading formula character gets a single
    quote before it (OWASP's advice). Numbers and empty cells pass unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def iso_time(ts: float) -> str:
    """``2026-12-01T23:42:31.674+00:00``: the local time with its zone, to the millisecond."""
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="milliseconds")


def ticket_url(base_url: str, run_id: str | None) -> str:
    """The link that opens a ticket on the desk (the page's own ``?run=`` parameter)."""
    if not run_id or not base_url:
        return ""
    return f"{base_url.split('?')[0].rstrip('/')}/?run={run_id}"


# The columns a spreadsheet reader wants first; every stored field follows, ``at`` (the exact
# Unix time the chain hashes) included.
CSV_FIRST = ["time", "event", "actor", "customer", "order_id", "amount", "ticket", "ticket_url"]


def audit_csv(entries: Sequence[AuditEntry], customers: Mapping[str, str] | None = None,
              base_url: str = "") -> bytes:
    """The audit log as CSV (newest first), with every field including the chain hashes.

    ``time`` is ISO 8601 with the zone; ``customer`` (from ``customers``: run id -> who wrote
    in), ``ticket`` (the run id) and ``ticket_url`` (the desk's link to it, from ``base_url``)
    name the ticket. ``lines`` is written as JSON (as the store keeps it), empty when an
    entry has none. Text cells go through :func:`csv_cell`, so no cell opens as a formula.
    """
    customers = customers or {}
    rows = []
    for e in sorted(entries, key=lambda e: e.id, reverse=True):
        row = e.model_dump()
        row["lines"] = "" if e.lines is None else json.dumps(e.lines)
        row.update(time=iso_time(e.at), customer=customers.get(e.run_id or "", ""),
                   ticket=e.run_id or "", ticket_url=ticket_url(base_url, e.run_id))
        rows.append({key: csv_cell(value) for key, value in row.items()})
    rest = [name for name in AuditEntry.model_fields if name not in CSV_FIRST]
    frame = pd.DataFrame(rows, columns=CSV_FIRST + rest)
    # RFC 4180's CRLF rows: the writer then quotes any cell holding a CR or an LF, so a carriage
    # return in a note cannot start a row of its own (with "\n" rows it would go unquoted).
    return frame.to_csv(index=False, lineterminator="\r\n").encode()

