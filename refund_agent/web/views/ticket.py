"""A ticket: its cost line, its timeline of committed steps, and what is streaming now."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...desk.owners import owner_text
from ...models import KIND_LABELS, ApprovalStatus, Run, Step, StepKind
from ...outside import RESENT_EMAIL
from ...text import parse_bounded, sender_line, size_text, transcript_text
from .format import (
    ESTIMATE,
    REPORTED,
    STAND_IN,
    CostBasis,
    cost_text,
    line_text,
    md,
    money,
    shorten,
)
from .status import DECISIONS, DecisionView


def cost_line(run: Run, basis: CostBasis = REPORTED) -> str:
    """Requests, cost (labelled by its ``basis``), cache use and the transcript kept for a
    run, in one line."""
    requests = f"{run.requests} model request{'s' if run.requests != 1 else ''}"
    cached = (f" · {run.cached_tokens:,} of {run.input_tokens:,} input tokens cached"
              if run.input_tokens else "")
    kept = (f" · {transcript_text(run.transcript_items, run.transcript_bytes)}"
            if run.transcript_items else "")
    return f"{requests} · {cost_text(run.cost_usd, basis)}{cached}{kept}"


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
            decision paid and declined, a mailed email's attachments and flag.
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
    """JSON text parsed, within bounds (see text.parse_bounded): a model's arguments
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


def _response_title(data: dict[str, Any], turn: int, basis: CostBasis) -> str:
    parts = [f"Model request {turn}"]
    if data.get("seconds") is not None:
        parts.append(f"{data['seconds']:.1f} s")
    if data.get("input_tokens") is not None:
        parts.append(f"{data.get('input_tokens', 0):,} in ({data.get('cached_tokens', 0):,} "
                     f"cached) / {data.get('output_tokens', 0):,} out tokens")
    if data.get("cost_ticks") is not None:
        # OpenAI reports no cost: the figure is estimated from providers/table.py's price table
        # (the step says so); the stand-in's figure is simulated whatever the step says.
        if basis != STAND_IN and data.get("cost_estimated"):
            basis = ESTIMATE
        parts.append(cost_text(data["cost_ticks"] / 1e10, basis))
    return " · ".join(parts)


@dataclass
class _Timeline:
    """The blocks so far, and which calls can still take their result into their block."""

    blocks: list[Block] = field(default_factory=list)
    open_calls: dict[str, int] = field(default_factory=dict)  # call id -> its block, pairable
    all_calls: dict[str, int] = field(default_factory=dict)   # call id -> its block
    turn: int = 0
    basis: CostBasis = REPORTED   # what the responses' cost figures are

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
    t.add(Block("response", _response_title(d, t.turn, t.basis), **base))


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


# Who took a run over, in the ticket's words (the store's Store.front values).
FRONT_WORDS = {"page": "the page's server", "terminal": "a terminal command",
               "worker": "a worker (`refund-agent work`)"}


def restart_title(d: Mapping[str, Any]) -> str:
    """The line where another process took a run over.

    "Server restarted" only when a page's server took it from a page's server (a restart of
    the page, the case the words name); a terminal command carrying the run on (``approve``,
    ``resume``) or a worker taking it says so. Steps from before schema 15 name no kinds and
    keep the old words.
    """
    pids = f"process {d['pid']} picked up the run (it was last advanced by process " \
           f"{d['previous_pid']}"
    if "front" not in d:
        return f"Server restarted: {pids})"
    if d["front"] == "page" and d.get("previous_front") == "page":
        return f"Server restarted: {pids})"
    was = FRONT_WORDS.get(d.get("previous_front") or "", "another process")
    return (f"Continued by {FRONT_WORDS.get(d['front'], 'another process')}: {pids}, "
            f"{was})")


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


def mail_lines(d: dict[str, Any]) -> tuple[str, ...]:
    """What a mailed email or reply's step adds (desk/records/mail.py): why it was flagged, and the
    attachments it came with, named only (the agent never reads them)."""
    rows = []
    if d.get("flagged"):
        rows.append(f"Flagged: {d['flagged']}")
    if d.get("attachments"):
        rows.append("Attachments (not read by the agent): " + ", ".join(d["attachments"]))
    return tuple(rows)


_Builder = Callable[[_Timeline, dict[str, Any], dict[str, Any]], None]

# The page's one table of step kinds: how each becomes a timeline block.
# tests/desk/test_step_tables.py checks that every StepKind has an entry.
STEP_BLOCKS: dict[StepKind, _Builder] = {
    StepKind.EMAIL: lambda t, d, base: t.add(Block(
        "email", sender_line(d.get("name"), d["from"]), d["body"],
        subtitle=d.get("subject", ""), lines=mail_lines(d), **base)),
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
                                                   lines=mail_lines(d), **base)),
    StepKind.RESTART: lambda t, d, base: t.add(Block("restart", restart_title(d), **base)),
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
    StepKind.OWNER: lambda t, d, base: t.add(Block("owner", owner_text(d), **base)),
    StepKind.TIMEOUT: lambda t, d, base: t.add(Block(
        "escalation" if d.get("step") == "escalate" else "owner",
        ("Escalated: " if d.get("step") == "escalate" else "Reminder: ")
        + str(d.get("note", "")), **base)),
    StepKind.SIGNOFF: lambda t, d, base: t.add(Block(
        "decision", f"First sign-off by {d.get('by')}: {money(d.get('amount'))} for "
        f"{', '.join(d.get('keep') or []) or 'the shipping'}; a second person must approve",
        d.get("note") or "", tone="info", **base)),
}


def timeline(steps: Iterable[Step], basis: CostBasis = REPORTED) -> list[Block]:
    """Turn a run's committed steps into display blocks, oldest first (``basis``: what the
    model requests' cost figures are, see format.cost_basis).

    A tool call and its result become one block when nothing but the response summary came
    between them (a lookup). A refund call's result arrives after the approval, the decision
    and perhaps a restart, so it gets its own block where it happened.
    """
    t = _Timeline(basis=basis)
    for step in steps:
        if step.kind not in (StepKind.RESPONSE, StepKind.RESULT, StepKind.TEXT):
            t.open_calls.clear()   # a turn's commentary sits beside its call
        STEP_BLOCKS[step.kind](t, step.data, {"at": step.at, "pid": step.pid})
    return t.blocks


# -- the thread: the emails in and out, the agent's steps folded under each turn ------------

# What stays in view in the thread: the emails, what a person decided or must know, and the
# one-line marks (a restart, an owner, a timeout). The agent's working (reasoning, tool calls
# and results, model responses, commentary) folds under its turn: a resolved angry-customer
# ticket drawn step by step was over 4,000 px tall (issue 36).
THREAD_SHOWN = frozenset({"email", "reply", "message", "proposal", "decision", "refund",
                          "escalation", "error", "stopped", "note", "restart", "resent",
                          "owner", "customer_done"})


@dataclass(frozen=True)
class Turn:
    """One turn of a ticket's thread: the customer's email (or reply) that opened it, the
    agent's steps it led to (folded), and what stays in view after them, in order."""

    opening: Block | None          # None: steps before any email (none, in practice)
    steps: tuple[Block, ...] = ()
    shown: tuple[Block, ...] = ()

    def summary(self) -> str:
        """``Agent's steps: 3 tool calls, 2 model responses, reasoning``."""
        counts: dict[str, int] = {}
        for block in self.steps:
            counts[block.kind] = counts.get(block.kind, 0) + 1
        words = {"tool": ("tool call", "tool calls"), "result": ("result", "results"),
                 "response": ("model response", "model responses"),
                 "reasoning": ("reasoning", "reasoning"), "note": ("note", "notes"),
                 "text": ("comment", "comments")}
        parts = [f"{n} {words[k][n != 1]}" if k in words else f"{n} {k}"
                 for k, n in counts.items()]
        return "Agent's steps: " + ", ".join(parts)


def thread(blocks: Iterable[Block]) -> list[Turn]:
    """The timeline as a thread: a new turn at each email in (the first email, each reply)."""
    turns: list[Turn] = []
    opening: Block | None = None
    steps: list[Block] = []
    shown: list[Block] = []

    def close() -> None:
        if opening is not None or steps or shown:
            turns.append(Turn(opening, tuple(steps), tuple(shown)))

    for block in blocks:
        if block.kind in ("email", "reply"):
            close()
            opening, steps, shown = block, [], []
        elif block.kind in THREAD_SHOWN:
            shown.append(block)
        else:
            steps.append(block)
    close()
    # The team's note of an earlier turn is history: it folds with that turn's steps; the
    # latest turn's stays in view (what the agent left the team last).
    return [replace(t, steps=t.steps + tuple(b for b in t.shown if b.kind == "note"),
                    shown=tuple(b for b in t.shown if b.kind != "note"))
            for t in turns[:-1]] + turns[-1:]


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
