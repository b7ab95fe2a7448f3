"""What the terminal shows: a run's steps as they happen, the lines every command shares, the
stream everything is printed through, and the exit codes."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Callable
from datetime import datetime
from typing import Any, TextIO

from ..desk.owners import owner_text
from ..errors import AlreadyDecided, NothingToDecide
from ..models import ApprovalStatus, Run, RunStatus, Step, StepKind
from ..outside import RESENT_EMAIL
from ..providers.stored import handed_over
from ..streaming import LiveEvent
from ..text import printable, sender_line, size_text, transcript_text
from ..web.views.format import REPORTED, CostBasis, cost_text

#: Exit codes, documented in the epilog and the README (any other error exits 1).
EXIT_CODES = {AlreadyDecided: 3, NothingToDecide: 4}


class Printer:
    """Shows a run as it happens: streamed deltas inline, committed steps as blocks."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._streaming: str | None = None
        self._streamed_text = ""

    def _end_stream(self) -> None:
        if self._streaming:
            self.out.write("\n")
            self._streaming = None

    def __call__(self, event: LiveEvent) -> None:
        if event.kind == "step" and event.step:
            self._end_stream()
            self.step(event.step)
        elif event.kind in ("reasoning", "text"):
            if self._streaming != event.kind:
                self._end_stream()
                self.out.write("  thinking: " if event.kind == "reasoning" else "  writing: ")
                self._streaming = event.kind
                self._streamed_text = ""
            self._streamed_text += event.text
            self.out.write(event.text)
        self.out.flush()

    def step(self, step: Step) -> None:
        render = STEP_LINES[step.kind](self, step.data)
        if render is not None:
            self.out.write(render + "\n")


# How the terminal says each decision, before "by NAME".
DECISION_WORDS: dict[ApprovalStatus, str] = {
    ApprovalStatus.PENDING: "Pending",
    ApprovalStatus.APPROVED: "Approved",
    ApprovalStatus.REJECTED: "Rejected",
    ApprovalStatus.ASKED: "Asked",
    ApprovalStatus.EXPIRED: "Expired",
}


def _decision_line(d: dict[str, Any]) -> str:
    word = DECISION_WORDS.get(d["decision"]) or str(d["decision"]).capitalize()
    return (f"  ** {word} by {d['by']}"
            + (f" (declined {', '.join(d['declined'])})" if d.get("declined") else "")
            + (f": {d['note']}" if d.get("note") else ""))


def _note_line(printer: Printer, d: dict[str, Any]) -> str:
    # The note was just streamed as it was written: say so instead of printing it twice.
    return ("  ^ that is the note for the team" if d["text"] == printer._streamed_text.strip()
            else f"  Note for the team: {d['text']}")


# The terminal's one table of step kinds: each kind's line (None: not shown, as the turn's
# reasoning and usage stream past or belong to `show`). tests/desk/test_step_tables.py checks
# that every StepKind has an entry.
STEP_LINES: dict[StepKind, Callable[[Printer, dict[str, Any]], str | None]] = {
    StepKind.EMAIL: lambda _p, d: (f"Email from {sender_line(d.get('name'), d['from'])}: "
                                   f"{d['subject']}\n" + _quote(d["body"], "  | ")),
    StepKind.RESTART: lambda _p, d: (f"-- picked up by a new process (pid {d['pid']}, "
                                     f"was {d['previous_pid']}) --"),
    StepKind.REASONING: lambda _p, _d: None,
    StepKind.CALL: lambda _p, d: f"  -> {d['name']}({d['arguments']})",
    StepKind.RESULT: lambda _p, d: f"  <- {d['name']}: {_short(d['output'])}",
    StepKind.TEXT: lambda _p, d: f"  {d['text']}",
    StepKind.NOTE: _note_line,
    StepKind.RESPONSE: lambda _p, _d: None,
    StepKind.APPROVAL: lambda _p, d: (
        # A refund names its amount; another agent's gated action (examples/) has none.
        (f"  ** Proposed refund ${d['amount']:.2f} on {d['order_id']}: "
         if d.get("lines") or d.get("amount") else f"  ** Proposed for {d['order_id']}: ")
        + f"{d.get('summary') or d.get('reason', '')}\n"
        + "".join(f"  **   {line_text(line)}\n" for line in d.get("lines", []))
        + f"  ** Waiting for approval ({d['approval_id']})"),
    StepKind.DECISION: lambda _p, d: _decision_line(d),
    StepKind.REFUND: lambda _p, d: (f"  $$ Refund {d['refund_id']} for ${d['amount']:.2f}"
                                    + (" (already made; reused, not repeated)"
                                       if d["reused"] else "")),
    StepKind.MESSAGE: lambda _p, d: (f"  Email to {d['to']}"
                                     + (f" {RESENT_EMAIL}" if d.get("resent") else "")
                                     + ":\n" + _quote(d["body"], "  > ")),
    StepKind.REPLY: lambda _p, d: (("Customer replied (written by the model):"
                                    if d["simulated"] else "Customer replied:")
                                   + "\n" + _quote(d["text"], "  | ")),
    StepKind.RESENT: lambda _p, d: (f"  -- stored response {d['missing']} was gone: sent the "
                                    f"run's transcript instead ({d['items']} items, "
                                    f"{size_text(d['bytes'])}) --"),
    StepKind.ERROR: lambda _p, d: f"  !! {d['message']}",
    StepKind.STOPPED: lambda _p, _d: "  -- stopped --",
    StepKind.ESCALATION: lambda _p, d: (f"  !! Escalated to a team lead ({d.get('kind')}): "
                                        f"{d.get('reason', '')}"),
    StepKind.HANDOFF: lambda _p, d: f"  ** Sent to a lead by {d.get('by')}",
    StepKind.SIGNOFF: lambda _p, d: (f"  ** First sign-off by {d.get('by')} for "
                                     f"${float(d.get('amount') or 0):.2f}; a second person "
                                     "must approve"),
    StepKind.CUSTOMER_DONE: lambda _p, _d: None,
    StepKind.OWNER: lambda _p, d: f"  -- {owner_text(d)} --",
    StepKind.TIMEOUT: lambda _p, d: ("  !! " + ("Escalated" if d.get("step") == "escalate"
                                                else "Reminder") + f": {d.get('note', '')}"),
}


def line_text(line: dict) -> str:
    """One refund line: sku, reason and amount (audit lines carry cents)."""
    cents = line.get("amount_cents")
    amount = cents / 100 if cents is not None else line.get("amount", 0)
    units, of = line.get("units"), line.get("quantity") or line.get("of_units")
    count = (f" x{units}" + (f" of {of}" if of else "")
             if units is not None and of != 1 else "")
    return f"{line['line']:<12} {line['reason']:<13} ${amount:,.2f}{count}"


def _quote(text: str, prefix: str) -> str:
    return textwrap.indent(text, prefix, lambda _line: True)


def _short(value: object, limit: int = 160) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def time_text(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else ""


def quoted(name: str) -> str:
    """A name as it is typed after --as in a shell."""
    return f'"{name}"' if " " in name else name


def fingerprint_line(fingerprint: str, indent: str) -> str:
    """The fingerprint of a waiting approval, as `queue` and `show` print it: the value
    ``approve``, ``reject`` and ``ask --fingerprint`` take, so that a script decides exactly
    what it read (Store.decide refuses a decision whose fingerprint no longer matches)."""
    return f"{indent}fingerprint: {fingerprint}"


def run_summary(run: Run, out: TextIO, basis: CostBasis = REPORTED) -> None:
    """The run's status, requests and cost (labelled by ``basis``, see cost_basis), cache use
    and the transcript it keeps."""
    status = {
        RunStatus.WAITING: "waiting for approval: `refund-agent approve --as NAME` or `reject`",
        RunStatus.STOPPED: "stopped: `refund-agent resume` continues it",
        # A ticket handed to a person is not one a resume gets past (failures.handed_over).
        RunStatus.FAILED: f"failed: {run.error}" + (
            "" if handed_over(run.error) else " (`refund-agent resume` retries)"),
        RunStatus.DONE: "done",
        RunStatus.ASKED: "waiting on the customer's answer: `refund-agent reply` continues it",
        RunStatus.WORKING: "working",
    }[run.status]
    kept = (f"; {transcript_text(run.transcript_items, run.transcript_bytes)}"
            if run.transcript_items else "")
    # The cost's label can be long ("simulated; the stand-in costs nothing"), so the cache
    # and the transcript get a line of their own: a line stays within a page's width.
    out.write(f"\nRun {run.id}: {status}\n{run.requests} model requests, "
              f"{cost_text(run.cost_usd, basis)}\n{run.cached_tokens:,} of "
              f"{run.input_tokens:,} input tokens cached{kept}\n")


class EscapedStream:
    """A terminal stream that shows control characters as escapes instead of obeying them,
    and that a failed write cannot stop.

    Everything printed passes through it, so text from customers, approvers or the model can
    never move the cursor, recolour the screen or fake a line the program did not write.

    The program's own redraw of a line (``eval``'s progress bar) goes through :meth:`redraw`:
    the one carriage return is the program's, and the line after it is escaped like any other
    text. ``isatty`` stays the stream's own answer, so a bar redraws in place on a terminal
    and prints a line now and then into a pipe or a file.

    Output is a report, never part of the work: when writing fails (the reader of a pipe went
    away, as in ``refund-agent reply "ok" | head -3``; a full disk behind ``> log``), the
    stream goes quiet and the command carries on to its durable end, so a run finishes exactly
    as it would have with someone reading. Before, the BrokenPipeError escaped from inside the
    agent's event callback and marked the run failed, or left it stuck in *working*.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.failed: OSError | None = None   # the first output error, once there was one

    def write(self, text: str) -> int:
        if self.failed is None:
            try:
                return self._stream.write(printable(text))
            except OSError as exc:
                self._go_quiet(exc)
        return len(text)

    def redraw(self, line: str) -> None:
        """Draw ``line`` over the current one: a real carriage return, then ``line`` escaped
        (only this method writes a control character of the program's own)."""
        if self.failed is None:
            try:
                self._stream.write("\r" + printable(line))
            except OSError as exc:
                self._go_quiet(exc)

    def flush(self) -> None:
        if self.failed is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._go_quiet(exc)

    def _go_quiet(self, exc: OSError) -> None:
        """Drop all further output, including what the stream still holds in its buffer."""
        self.failed = exc
        try:
            # The stream's descriptor now leads nowhere, so the flush at exit cannot fail
            # and print "Exception ignored ... BrokenPipeError" on the way out.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
