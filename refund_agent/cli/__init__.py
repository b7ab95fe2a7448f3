"""The terminal front end: every command is a new process sharing the store in ``output/``.

    refund-agent                         send the damaged-item sample; stops at the approval
    refund-agent approve --as "Dana Kim" approve the waiting refund and finish the run
    refund-agent reject --note "Why"     reject it; the agent explains the note to the customer
    refund-agent resume                  continue the last stopped, failed or crashed run
    refund-agent handoff --as "Ana Ruiz" send the waiting refund to a lead (over your limit)
    refund-agent take --as "Lee Park"    a lead picks up the open escalation
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TextIO

from ..config import load_settings
from ..desk.accounts import DEFAULT_LIMIT, MIN_PASSWORD, ROLES, Account, Accounts
from ..desk.agent import Agent
from ..desk.customer import converse
from ..desk.reconcile import email_notes, log_names, provider_problems, reconcile
from ..desk.rules import handoff_needed, handoff_problem, needs_two, take_problem
from ..errors import (
    AlreadyDecided,
    DecisionRefused,
    LeaseLost,
    MigrationRefused,
    NotFound,
    NothingToDecide,
    RefundAgentError,
    RunBusy,
    RunNotReady,
    SignInFailed,
)
from ..models import HANDOFF, Approval, ApprovalStatus, Escalation, Run, RunStatus, Step, StepKind
from ..outside import RESENT_EMAIL, stripe_missing
from ..providers.stored import handed_over
from ..store import Store
from ..store.migrate import migrate
from ..streaming import LiveEvent
from ..text import plural, printable, sender_line, size_text, transcript_text

EPILOG = """\
examples:
  refund-agent                              the damaged-item sample, up to the approval
  refund-agent approve --as "Dana Kim"      approve it in a new process and finish the run
  refund-agent approve --only SKU --note "The mugs were used"   approve some lines only
  refund-agent approve --only GLS-4:1                  approve 1 unit of a line (SKU:N)
  refund-agent reject --note "Used item"    reject it instead
  refund-agent ask "Could you send a photo of the damage?"   ask the customer first
  refund-agent expire                       expire refunds older than 7 days (for cron)
  refund-agent sample past-window           a request the policy declines without a person
  refund-agent angry                        the angry customer, played by the model
  refund-agent send "My order A1058 ..." --from leo.martins@example.com
  refund-agent reply "That's not enough"    write back as the customer (--run RUN when several
                                            runs are done or waiting on the customer)
  refund-agent resume                       continue the last stopped, failed or crashed run
  refund-agent handoff --as "Ana Ruiz" --note "Over my limit"   send it to a lead instead
  refund-agent take --id 3 --as "Lee Park"   a lead picks up escalation 3 (first one wins)
  refund-agent queue | runs | show RUN | audit [--verify]
  refund-agent doctor                       does the model provider work? (one tiny request)
  refund-agent web --server.port 8600       the helpdesk page (Streamlit's options pass on)
  refund-agent webhooks --port 8790         Stripe's refund.failed/updated onto the desk
  refund-agent migrate --to postgresql://...   copy the SQLite store into an empty PostgreSQL
  refund-agent users add "Dana Kim" --role approver --limit 100    an account (asks a password)
  refund-agent users list | users remove NAME

With no accounts the desk is a single-user demo: decisions are signed with --as as typed. Once
an account exists, approve, reject and ask ask for the --as account's password (scripts set
REFUND_AGENT_PASSWORD), and an approver may approve only up to their limit; a lead has none.
Above it, `handoff` sends the refund to a lead (it keeps waiting); `queue` lists the refunds
and the open escalations, and a lead picks one up with `take` (handoff and take are signed
the same way).

Exit codes: 0 done (also when you repeat your own decision); 1 an error (the message says
what); 2 a usage mistake; 3 someone else decided that refund first, or took that escalation
first (the message says who, what and when); 4 nothing was waiting to be decided (or taken);
130 stopped with Ctrl+C. Output is only a report: when it cannot be written (a pipe closed
early, `| head`; a full disk), the command goes quiet and still finishes its work.

Replies are accepted only once a run has finished or asked the customer a question (not while
it works or waits for approval). Ctrl+C stops
a run at its last stored response; `resume` continues it. Without XAI_API_KEY every command
uses the offline stand-in model, which runs locally and is not Grok.

Each run keeps its own transcript (every item sent and returned, encrypted reasoning included):
when the provider's stored response is gone (30 days, or deleted) the run sends it instead and
carries on. REFUND_AGENT_ZERO_RETENTION=1 asks the provider to keep nothing (store=false) and
sends the transcript with every request; `show` and `runs` print each run's transcript size.
"""


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
# reasoning and usage stream past or belong to `show`). tests/loop/test_step_tables.py checks
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
        + "".join(f"  **   {_line(line)}\n" for line in d.get("lines", []))
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
}


def _line(line: dict) -> str:
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


def _summary(run: Run, out: TextIO) -> None:
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
    out.write(f"\nRun {run.id}: {status}\n{run.requests} model requests, "
              f"${run.cost_usd:.4f}, {run.cached_tokens:,} of {run.input_tokens:,} input tokens "
              f"cached{kept}\n")


def _drive(agent: Agent, run_id: str, printer: Printer, simulate: bool = True) -> Run:
    """Advance a run; the angry-customer sample lets the model write back as the customer."""
    if simulate and agent.store.run(run_id).kind == "angry":
        return converse(agent, run_id, printer)
    return agent.advance(run_id, printer)


def _start(agent: Agent, run: Run, printer: Printer) -> Run:
    for step in agent.store.steps(run.id):
        printer.step(step)
    return _drive(agent, run.id, printer)


def _work(agent: Agent, idle_exit: float | None) -> int:
    """Claim runs (new, decided, or left by a dead process on any host) and advance each.

    One line per run: a worker is meant to run unattended, several of them on several hosts.
    """
    quiet: Callable[[Any], None] = lambda _event: None  # noqa: E731
    idle_since, done = time.monotonic(), 0
    print(f"Worker {agent.pid} on {agent.store.host}: taking runs from {agent.store.path}.",
          flush=True)
    while True:
        run_id = agent.claim()
        if run_id is None:
            if idle_exit is not None and time.monotonic() - idle_since >= idle_exit:
                print(f"Nothing to do for {idle_exit:g} s; advanced {done} run(s).", flush=True)
                return 0
            time.sleep(0.2)
            continue
        try:
            run = _drive(agent, run_id, quiet)  # type: ignore[arg-type]
        except (RunBusy, LeaseLost) as exc:  # another worker got there first, or took it over
            print(f"{run_id}: {exc}", flush=True)
            continue
        done += 1
        idle_since = time.monotonic()
        print(f"{run_id}: {run.status.value}", flush=True)


def _target(agent: Agent, approval_id: str | None) -> Approval | None:
    """The approval a decision is about: the one named, or the only one waiting.

    With several refunds waiting, a decision without an id would be a guess about which one a
    person looked at, so it is refused with the list to choose from.
    """
    if approval_id:
        return agent.store.approval(approval_id)
    pending = agent.store.approvals("pending")
    if len(pending) > 1:
        listing = "\n".join(f"  {_describe(a)}" for a in pending)
        raise DecisionRefused(f"{len(pending)} refunds are waiting; name one with --id:\n"
                              f"{listing}")
    return pending[0] if pending else None


def _describe(a: Approval) -> str:
    return (f"{a.id}  {a.customer}  order {a.order_id}  ${a.amount:,.2f}  "
            f"({', '.join(line.line for line in a.item_lines)})")


def _signer(agent: Agent, name: str | None) -> tuple[str, int | None]:
    """Who signs a decision, and their approval limit in cents (None: no limit).

    With accounts, the named account's password is asked for (or read from
    REFUND_AGENT_PASSWORD, for scripts); without any, the demo signs with the name as given.
    """
    accounts = Accounts(agent.store)
    if not accounts.exist():
        name = getpass.getuser() if name is None else name  # --as "" is refused later
        print(f"Single-user demo mode (no accounts): signing as {name!r} without a password. "
              "`refund-agent users add` turns on sign-in.")
        return name, None
    if name is None:
        raise SignInFailed("Accounts are set up: say which one decides with --as NAME.")
    password = _password(f"Password for {name}: ", "REFUND_AGENT_PASSWORD")
    account = accounts.sign_in(name, password)
    return account.name, account.limit_cents


def _decide(agent: Agent, args: argparse.Namespace, approve: bool, printer: Printer) -> Run | None:
    by, limit_cents = _signer(agent, args.by)  # before anything is looked at or changed
    approval = _waiting(agent, args.id)
    keep, units = only_lines(getattr(args, "only", None))
    try:
        decided = agent.decide(approval.id, approve, by, getattr(args, "note", None),
                               keep=keep, limit_cents=limit_cents, units=units)
    except AlreadyDecided as exc:
        if not _repeated(exc, "approved" if approve else "rejected"):
            raise
        return _already_yours(agent, exc)
    except DecisionRefused as exc:
        # Above the approver's limit (with what they approved on the order before, as the
        # decision counts it) the way on is a lead, as the page's Send to a lead: `handoff`
        # accepts exactly these (handoff_problem, on the same sum).
        if approve and handoff_needed(approval.amount_cents, limit_cents,
                                      agent.store.approved_on(approval.order_id, by)):
            raise DecisionRefused(f"{exc} `refund-agent handoff --id {approval.id} --as "
                                  f"{_quoted(by)}` sends it to a lead.") from None
        raise
    if decided.status == "pending":   # the first of two approvals (shop.json "desk")
        print(f"Signed off ${decided.amount:.2f} for {decided.order_id} ({decided.customer}) as "
              f"{by}: {_two_people(agent, decided)}; another account approves it with "
              f"`refund-agent approve --id {decided.id}`.")
        return None
    print(f"{decided.status.capitalize()} ${decided.amount:.2f} for {decided.order_id} "
          f"({decided.customer}) as {decided.decided_by}: "
          + ", ".join(f"{line.line}{_units(line)} {line.decision}" for line in decided.lines)
          + f". Continuing run {decided.run_id}.")
    return _drive(agent, decided.run_id, printer)


def _two_people(agent: Agent, a: Approval) -> str:
    """Why a refund needs a second person: its size, or what its order was paid before."""
    before = agent.store.approved_on(a.order_id)
    if not before:
        return "refunds of this size need a second person"
    return (f"with the ${before / 100:,.2f} approved on {a.order_id} before, it brings the "
            "order above the two-person amount, so it needs a second person")


def only_lines(values: list[str] | None) -> tuple[list[str] | None, dict[str, int]]:
    """``--only`` as the lines to keep and the units lowered: each value ``SKU`` or ``SKU:N``.

    Raises:
        DecisionRefused: a value whose units are not a whole number of at least 1, or a line
            named twice (nothing is decided then).
    """
    if values is None:
        return None, {}
    keep: list[str] = []
    units: dict[str, int] = {}
    for value in values:
        sku, colon, count = value.strip().rpartition(":") if ":" in value else (value, "", "")
        sku = sku.strip()
        if colon and not (count.strip().isdigit() and int(count) >= 1):
            raise DecisionRefused(f"--only {value}: write SKU or SKU:N, N a whole number of "
                                  "units of at least 1.")
        if sku in keep:
            raise DecisionRefused(f"--only names {sku} twice; name each line once.")
        keep.append(sku)
        if colon:
            units[sku] = int(count)
    return keep, units


def _units(line: Any) -> str:
    """' x1 of 4' for a line refunding some of its units, '' otherwise."""
    if line.units is None or line.quantity is None or line.quantity == 1:
        return ""
    return f" x{line.units} of {line.quantity}"


def _repeated(exc: AlreadyDecided, status: str) -> bool:
    """Whether a refused decision repeats the person's own: the same one, by the same name.

    That is a second try (a retried script, a command run twice), not a race lost to someone
    else (exit 3), so it succeeds with the message saying so.
    """
    return exc.status == status and bool(exc.tried_by) and exc.tried_by == exc.decided_by


def _already_yours(agent: Agent, exc: AlreadyDecided) -> None:
    """Say that this person's decision stands; point at `resume` if its run is not finished."""
    run = agent.store.run(agent.store.approval(exc.approval_id).run_id)
    hint = ""
    if run.status in (RunStatus.WAITING, RunStatus.STOPPED, RunStatus.FAILED):
        hint = f" Run {run.id} is {run.status.value}: `refund-agent resume` continues it."
    print(f"{exc}{hint}")
    return None


def _ask(agent: Agent, args: argparse.Namespace, printer: Printer) -> Run | None:
    by, _limit = _signer(agent, args.by)
    try:
        asked = agent.ask(_waiting(agent, args.id).id, by, args.question)
    except AlreadyDecided as exc:
        if not _repeated(exc, "asked"):
            raise
        return _already_yours(agent, exc)
    print(f"Sent the refund for {asked.order_id} ({asked.customer}) back with a question, as "
          f"{asked.decided_by}. Nothing is paid; the customer's reply continues run "
          f"{asked.run_id}.")
    return _drive(agent, asked.run_id, printer)


def _quoted(name: str) -> str:
    """A name as it is typed after --as in a shell."""
    return f'"{name}"' if " " in name else name


def _handoff(agent: Agent, args: argparse.Namespace) -> int:
    """``refund-agent handoff``: send a waiting refund to a lead, as the page's *Send to a
    lead* does (Agent.hand_off: an escalation of kind over limit, audited; the refund keeps
    waiting, its lines held, until someone decides it)."""
    by, limit_cents = _signer(agent, args.by)   # before anything is looked at or changed
    approval = _waiting(agent, args.id)
    # On the same per-order sum as approve's limit check: what approve refuses, this takes.
    before = agent.store.approved_on(approval.order_id, by) if limit_cents is not None else 0
    if problem := handoff_problem(by, approval.amount_cents, limit_cents, before):
        raise DecisionRefused(problem)
    try:
        sent = agent.hand_off(approval.id, by, args.note)
    except DecisionRefused:
        mine = _open_handoff(agent, approval.id)
        if mine is None or mine.raised_by != by:
            raise
        # The same person sending it again (a retried script): their hand-off stands.
        print(f"You already sent this refund to a lead at {_time(mine.raised_at)} (escalation "
              f"{mine.id}); nothing more to do.")
        return 0
    print(f"Sent ${approval.amount:,.2f} for {approval.order_id} ({approval.customer}) to a "
          f"lead as {by} (escalation {sent.id}). It keeps waiting, its lines held, until a "
          f"lead decides it: `refund-agent take --id {sent.id}` picks it up, `refund-agent "
          f"approve --id {approval.id}` or `reject` decides it.")
    return 0


def _open_handoff(agent: Agent, approval_id: str) -> Escalation | None:
    run_id = agent.store.approval(approval_id).run_id
    return next((e for e in agent.store.escalations(open_only=True, run_id=run_id)
                 if e.kind == HANDOFF and e.approval_id == approval_id), None)


def _take(agent: Agent, args: argparse.Namespace) -> int:
    """``refund-agent take``: a lead picks up an escalation, as the page's *Take it* does
    (Agent.take: a compare-and-set, audited; the first one wins)."""
    by, limit_cents = _signer(agent, args.by)
    if problem := take_problem(limit_cents):
        raise DecisionRefused(problem)
    escalation_id = args.id if args.id is not None else _open_escalation(agent, args.run).id
    try:
        taken = agent.take(escalation_id, by)
    except AlreadyDecided as exc:
        when = f" at {_time(exc.decided_at)}" if exc.decided_at else ""
        if exc.decided_by == by:   # a second try of the same lead: theirs stands
            print(f"You already took escalation {escalation_id}{when}; nothing more to do.")
            return 0
        # Said of the escalation: the store's words are about a refund, which it may not be.
        print(f"error: Escalation {escalation_id} was already taken by {exc.decided_by}{when}.",
              file=sys.stderr)
        return EXIT_CODES[AlreadyDecided]
    then = f"`refund-agent show {taken.run_id}` shows the ticket."
    if taken.approval_id and agent.store.approval(taken.approval_id).status == "pending":
        then = (f"Its refund waits: `refund-agent approve --id {taken.approval_id} --as "
                f"{_quoted(by)}` or `reject` decides it.")
    reason = taken.reason if taken.reason.endswith((".", "!", "?")) else f"{taken.reason}."
    print(f"Took escalation {taken.id} ({taken.label}) on run {taken.run_id} as {by}: "
          f"{reason} {then}")
    return 0


def _open_escalation(agent: Agent, run_id: str | None) -> Escalation:
    """The escalation ``take`` is about when none is named: the only open one (of the run, if
    named); several open is refused with the list, as a decision without an id is."""
    open_ = agent.store.escalations(open_only=True, run_id=run_id)
    if not open_:
        where = f" on run {run_id}" if run_id else ""
        raise NothingToDecide(f"No escalation is open{where}.")
    if len(open_) > 1:
        listing = "\n".join(f"  {_escalation_line(e)}" for e in open_[:20])
        raise DecisionRefused(f"{len(open_)} escalations are open; name one with --id:\n"
                              f"{listing}")
    return open_[0]


def _escalation_line(e: Escalation) -> str:
    return (f"{e.id:<4} {e.label}  run {e.run_id}  raised by {e.raised_by} at "
            f"{_time(e.raised_at)}: {e.reason}")


def _expire(agent: Agent, printer: Printer) -> int:
    """Expire what waited too long and finish those runs (for cron; exit 0 with nothing due)."""
    expired = agent.expire()
    for approval in expired:
        print(f"Expired {approval.id} ({approval.customer}, order {approval.order_id}, "
              f"${approval.amount:,.2f}), requested {_time(approval.requested_at)}.")
        _drive(agent, approval.run_id, printer)
    days = agent.settings.approval_days
    print(f"{len(expired)} approval{'s' if len(expired) != 1 else ''} expired (older than "
          f"{days:g} day{'s' if days != 1 else ''}; REFUND_AGENT_APPROVAL_DAYS sets it).")
    return 0


def _waiting(agent: Agent, approval_id: str | None) -> Approval:
    """The approval a decision names, or the only one waiting; NothingToDecide says why not."""
    approval = _target(agent, approval_id)
    if approval is None:
        decided = agent.store.decided_but_waiting()
        hint = (f" Run {decided[0].id} was decided but not finished (a crash?): "
                "`refund-agent resume` continues it." if decided else "")
        latest = agent.store.approvals(status=None, limit=1)
        if latest and latest[0].decided_at:
            a = latest[0]
            hint += (f" The latest decision: {a.id} ({a.customer}, order {a.order_id}) was "
                     f"{a.status} by {a.decided_by} at {_time(a.decided_at)}.")
        raise NothingToDecide(f"Nothing is waiting for approval.{hint}")
    return approval


def _resume_target(agent: Agent, run_id: str | None) -> Run | None:
    if run_id:
        return agent.store.run(run_id)
    candidates = agent.resumable()
    if candidates:
        return candidates[0]
    return agent.store.latest_run({RunStatus.STOPPED, RunStatus.FAILED}, agent.agent_name)


# The runs a customer's reply may go to: finished, or waiting on the customer's answer.
REPLYABLE = (RunStatus.DONE, RunStatus.ASKED)


def _reply_target(agent: Agent, run_id: str | None) -> Run:
    """The run a reply is for: the one named, or the only one that can take a reply.

    A reply is the customer's email and is sent on to the model at once, so it is never sent
    to a guessed run: with several candidates it is refused with the list to choose from
    (it once went to another customer's ticket, and she was emailed).
    """
    if run_id:
        return agent.store.run(run_id)
    candidates = [row.run for row in agent.store.inbox(statuses=REPLYABLE, limit=11)]
    if not candidates:
        raise NotFound("No finished run to reply to (replies go to a run that is done or "
                       "waiting on the customer's answer).")
    if len(candidates) > 1:
        shown = "\n".join(f"  {c.id}  {c.status.value:6}  {c.sender}  {c.subject}"
                          for c in candidates[:10])
        more = "\n  ... and more: `refund-agent runs` lists them all" if len(candidates) > 10 \
            else ""
        raise RunNotReady(f"{len(candidates) if len(candidates) <= 10 else 'More than 10'} "
                          f"runs can take a reply; name one with --run:\n{shown}{more}")
    run = candidates[0]
    print(f"Replying to run {run.id} ({run.sender}, {run.subject!r}), the only run that can "
          "take a reply.")
    return run


def _time(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else ""


def _list(agent: Agent, what: str, args: argparse.Namespace) -> int:
    if what == "queue":
        pending = agent.store.approvals("pending")
        handed_off = agent.store.handed_off()
        reader = _reader(agent, args.by)
        for a in pending:
            print(f"{_describe(a)}  {a.summary}")
            for line in a.lines:
                print(f"    {_line(line.model_dump())}  {line.name}")
            for flag in _queue_flags(agent, a, handed_off, reader):
                print(f"    ** {flag}")
        print(f"{len(pending)} waiting for approval.")
        open_ = agent.store.escalations(open_only=True)
        if open_:
            print(f"\n{plural(len(open_), 'escalation is', 'escalations are')} open; a lead "
                  "picks one up with `refund-agent take --id N --as NAME`:")
            for e in open_:
                print(f"  {_escalation_line(e)}")
    elif what == "runs":
        for r in agent.store.runs(limit=args.limit):
            print(f"{r.id}  {r.status.value:8}  {_time(r.created_at)}  {r.sender:28}  "
                  f"{r.requests:2} req  ${r.cost_usd:.4f}  {size_text(r.transcript_bytes):>8}  "
                  f"{r.subject}")
    elif what == "show":
        printer = Printer()
        for step in agent.store.steps(args.run):
            printer.step(step)
        _summary(agent.store.run(args.run), sys.stdout)
    elif what == "audit":
        if args.verify:
            # The engine's own check first: a damaged page the checks below never read (an
            # index, say) would still let them say "intact" while a decision fails on it.
            damage = agent.store.integrity_problem()
            problem = (f"The store {agent.store.path} is damaged, so the audit cannot be "
                       f"trusted: the database's integrity check says: {damage}. Stop every "
                       "page and worker and restore it from a backup; nothing was changed."
                       if damage else
                       reconcile(agent.store, agent.settings.output_dir))
            unsent, resent = email_notes(agent.outbox)
            if not problem:   # the ledger agrees with the store; now with the provider's list
                problem = "\n".join(provider_problems(agent.payments, agent.store)
                                    + unsent) or None
            refunds, emails = log_names(agent.store)
            print(problem or f"Audit log intact: {len(agent.store.audit())} entries, chain and "
                  f"anchor ok; {refunds} and {emails} agree with the approvals and the audit.")
            for note in resent:
                print(note)
            return 1 if problem else 0
        for e in agent.store.audit(limit=args.limit):
            amount = f"${e.amount:.2f}" if e.amount is not None else ""
            lines = " ".join(f"{line['line']}:{line['reason']}" for line in e.lines or [])
            print(f"{_time(e.at)}  {e.event:9} {e.actor:14} pid {e.pid:<7} {e.order_id or '':6} "
                  f"{amount:>9}  {lines + '  ' if lines else ''}{e.note or ''}")
    return 0


def _reader(agent: Agent, name: str | None) -> Account | None:
    """The account ``queue --as NAME`` reads the queue for (no password: it only lists)."""
    accounts = Accounts(agent.store)
    if name is None or not accounts.exist():   # the demo has no limits: nothing needs a lead
        return None
    account = accounts.get(name)
    if account is None:
        raise NotFound(f"No account named {name!r}: `refund-agent users list` shows them.")
    return account


def _queue_flags(agent: Agent, a: Approval, handed_off: set[str],
                 reader: Account | None = None) -> list[str]:
    """What the page's card says beside a waiting refund: sent to a lead (or, read for an
    approver, needs a lead: above their limit), a first sign-off recorded, or two people
    needed (shop.json "desk")."""
    flags = []
    if a.id in handed_off:
        flags.append("Sent to a lead")
    elif reader is not None and reader.limit_cents is not None and handoff_needed(
            a.amount_cents, reader.limit_cents,
            before := agent.store.approved_on(a.order_id, reader.name)):
        with_before = (f" with the ${before / 100:,.2f} they approved on {a.order_id} before"
                       if before else "")
        flags.append(f"Needs a lead: above {reader.name}'s limit of ${reader.limit:,.2f}"
                     f"{with_before}; `refund-agent handoff --id {a.id}` sends it to one")
    first = agent.store.signoff(a.id)
    if first is not None:
        flags.append(f"Signed off by {first.by} at {_time(first.at)} for "
                     f"${first.amount_cents / 100:,.2f}; needs a second person")
    elif needs_two(a.amount_cents, agent.shop.info.desk.two_person_above_cents,
                   agent.store.approved_on(a.order_id)):
        flags.append("Needs two people: the first approval is a sign-off")
    return flags


def _how_many(text: str) -> int:
    """A --limit: a whole number from 1 (argparse turns the error into a usage mistake)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="refund-agent", description="A refund agent that waits for a person's approval "
        "before any refund, and finishes each run exactly once.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    sample = sub.add_parser("sample", help="send one of the sample emails")
    sample.add_argument("key", nargs="?", default="damaged",
                        help="damaged (default), past-window or angry")
    sub.add_parser("angry", help="the angry-customer sample; the model plays the customer")
    send = sub.add_parser("send", help="send your own email to the agent")
    send.add_argument("text")
    send.add_argument("--from", dest="sender", required=True, help="the customer's address")
    send.add_argument("--name", default="", help="the customer's name")
    send.add_argument("--subject", default="Refund request")
    for name, help_text in (("approve", "approve the waiting refund and finish its run"),
                            ("reject", "reject it with a note the agent passes on"),
                            ("ask", "ask the customer something before deciding; nothing is "
                                    "paid, and their reply continues the run")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--as", dest="by", metavar="NAME",
                       help="the account that decides (its password is asked for, or read "
                            "from REFUND_AGENT_PASSWORD); with no accounts, any name (default: "
                            "your login)")
        p.add_argument("--id", help="the approval id (needed when more than one is waiting)")
        if name == "approve":
            p.add_argument("--only", nargs="+", metavar="LINE",
                           help="approve only these lines (SKU), or fewer of a line's units "
                                "(SKU:N); the others are declined")
            p.add_argument("--note", help="a note for the agent, e.g. why a line was declined")
        if name == "reject":
            p.add_argument("--note", required=True, help="why; the customer hears it")
        if name == "ask":
            p.add_argument("question", help="the question, as the customer should read it")
    handoff = sub.add_parser("handoff", help="send the waiting refund, above your approval "
                             "limit, to a lead; it keeps waiting until a lead decides it")
    handoff.add_argument("--as", dest="by", metavar="NAME",
                         help="the account that sends it (signed as approve is)")
    handoff.add_argument("--id", help="the approval id (needed when more than one is waiting)")
    handoff.add_argument("--note", help="a note for the lead")
    take = sub.add_parser("take", help="pick up an open escalation (leads only; the first one "
                          "to take it wins)")
    take.add_argument("--as", dest="by", metavar="NAME",
                      help="the lead's account (signed as approve is)")
    which = take.add_mutually_exclusive_group()
    which.add_argument("--id", type=int, help="the escalation's number, as `queue` lists it "
                       "(needed when more than one is open)")
    which.add_argument("--run", help="take the open escalation on this run")
    sub.add_parser("expire", help="expire refunds nobody decided within "
                                  "REFUND_AGENT_APPROVAL_DAYS (default 7) and tell those "
                                  "customers; for cron")
    resume = sub.add_parser("resume", help="continue a stopped, failed or crashed run")
    resume.add_argument("--run", help="run id (default: the last one that needs it)")
    reply = sub.add_parser("reply", help="write back to a finished run as the customer")
    reply.add_argument("text")
    reply.add_argument("--run", help="run id (needed unless exactly one run is done or "
                                     "waiting on the customer)")
    work = sub.add_parser("work", help="advance runs that need a worker, one after another, "
                          "from any host sharing the store (PostgreSQL); Ctrl+C to stop")
    work.add_argument("--idle-exit", type=float, default=None, metavar="SECONDS",
                      help="exit after this long with nothing to do (default: never)")
    migrate = sub.add_parser(
        "migrate", help="copy the SQLite store in the output folder, with its refunds.log and "
                        "outbox.log, into an empty PostgreSQL database")
    migrate.add_argument("--to", metavar="URL",
                         help="the target, postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
                              "(default: REFUND_AGENT_DATABASE_URL)")
    sub.add_parser("doctor", help="check the model provider: key, model, effort, storage, "
                   "streaming (one tiny request), or say how to switch from the stand-in")
    sub.add_parser("web", allow_abbrev=False, help="the helpdesk page in your browser "
                   "(Streamlit; its options such as --server.port 8600 pass on)",
                   description="Start the helpdesk page: `streamlit run` on the page shipped "
                   "in the package, with the desk's Streamlit settings. Every other option "
                   "goes to Streamlit and wins over those settings, e.g. --server.port 8600, "
                   "--server.headless true, --server.address 0.0.0.0 (then set "
                   "REFUND_AGENT_ALLOWED_HOSTS).")
    hooks = sub.add_parser("webhooks", help="receive Stripe's webhooks (refund.updated, "
                           "refund.failed), check their signatures with STRIPE_WEBHOOK_SECRET, "
                           "and put failed refunds on the desk; Ctrl+C to stop")
    hooks.add_argument("--port", type=int, default=8790)
    hooks.add_argument("--host", default="127.0.0.1",
                       help="the address to listen on (default 127.0.0.1; put a TLS proxy in "
                            "front for Stripe to reach it)")
    queue = sub.add_parser("queue", help="list refunds waiting for approval, and open "
                           "escalations")
    queue.add_argument("--as", dest="by", metavar="NAME",
                       help="mark the refunds above this account's limit (needs a lead)")
    runs = sub.add_parser("runs", help="list runs, newest first")
    runs.add_argument("--limit", type=_how_many, default=20, help="how many (default 20)")
    show = sub.add_parser("show", help="show one run's timeline")
    show.add_argument("run")
    audit = sub.add_parser("audit", help="show the audit log")
    audit.add_argument("--limit", type=_how_many, default=50, help="how many (default 50)")
    audit.add_argument("--verify", action="store_true",
                       help="check the hash chain and reconcile the payment and email logs")
    users = sub.add_parser("users", help="the accounts that may decide refunds")
    users_sub = users.add_subparsers(dest="users_command", required=True)
    add = users_sub.add_parser("add", help="add an account (the password is asked for twice "
                                           "on a terminal, else read from "
                                           "REFUND_AGENT_NEW_PASSWORD or one line of standard "
                                           "input)")
    add.add_argument("name")
    add.add_argument("--role", required=True, choices=ROLES,
                     help="approver: may approve up to --limit; lead: no limit")
    add.add_argument("--limit", type=float, default=None,
                     help=f"an approver's limit in dollars (default ${DEFAULT_LIMIT:g})")
    users_sub.add_parser("list", help="list the accounts")
    remove = users_sub.add_parser("remove", help="remove an account")
    remove.add_argument("name")
    return parser


def _password(prompt: str, env: str) -> str:
    """A password from ``env``, else the terminal, else one line of standard input.

    Without a terminal (a script, cron, ``</dev/null``) getpass would fall back to reading
    standard input with a warning, or end in EOFError; here a piped line is the password and
    nothing at all is a one-line message naming both ways to give one.
    """
    password = os.environ.get(env)
    if password is not None:
        return password
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass(prompt)
    line = sys.stdin.readline() if sys.stdin is not None else ""
    if not line:
        raise SignInFailed(f"No password given: there is no terminal to ask on. Set {env}, or "
                           "pipe it in on one line (printf '%s\\n' \"$PASSWORD\" | "
                           "refund-agent ...).")
    return line.removesuffix("\n").removesuffix("\r")


def _new_password(name: str) -> str:
    """The new account's password: asked twice on a terminal, once from a script."""
    if os.environ.get("REFUND_AGENT_NEW_PASSWORD") is not None or not sys.stdin.isatty():
        password = _password("", "REFUND_AGENT_NEW_PASSWORD")
        _check_password_length(password)
        return password
    password = getpass.getpass(f"New password for {name}: ")
    _check_password_length(password)  # before asking again for a password that cannot do
    if getpass.getpass("Again: ") != password:
        raise DecisionRefused("The two passwords differ; nothing was changed.")
    return password


def _check_password_length(password: str) -> None:
    if len(password) < MIN_PASSWORD:
        raise DecisionRefused(f"The password needs at least {MIN_PASSWORD} characters; "
                              "nothing was changed.")


def _users(agent: Agent, args: argparse.Namespace) -> int:
    accounts = Accounts(agent.store)
    if args.users_command == "add":
        accounts.check(args.name, args.role, args.limit)  # before the password is asked for
        # Whether the name is free is known before any password is asked for, too.
        if accounts.get(" ".join(args.name.split())) is not None:
            raise DecisionRefused(f"An account called {args.name.strip()!r} already exists; "
                                  "`refund-agent users list` shows them all.")
        account = accounts.add(args.name, args.role, _new_password(args.name), args.limit)
        default = (" That is the default limit for an approver; --limit sets another."
                   if args.role == "approver" and args.limit is None else "")
        print(f"Added {account.describe()}.{default} Decisions now need an account's "
              "password.")
    elif args.users_command == "remove":
        accounts.remove(args.name)
        left = len(accounts.all())
        print(f"Removed {args.name}. " + (f"{left} account{'s' if left != 1 else ''} left." if
              left else "No accounts left: the desk is back in single-user demo mode."))
    else:
        listed = accounts.all()
        for account in listed:
            limit = "no limit" if account.limit is None else f"up to ${account.limit:,.2f}"
            print(f"{account.name:24} {account.role:9} {limit}")
        print(f"{len(listed)} account{'s' if len(listed) != 1 else ''}."
              if listed else "No accounts: the desk runs in single-user demo mode.")
    return 0


def _migrate(to: str | None) -> int:
    """Copy the SQLite store of these settings into PostgreSQL; say what to do next."""
    settings = load_settings()
    target = (to or "").strip() or settings.database_url
    if not target:
        raise MigrationRefused("Say where to copy the store: --to postgresql://USER:PASSWORD@"
                               "HOST:PORT/DATABASE, or set REFUND_AGENT_DATABASE_URL.")
    if not settings.db_path.exists():
        raise MigrationRefused(f"There is no SQLite store at {settings.db_path} to migrate "
                               "(REFUND_AGENT_OUTPUT names the output folder).")
    source = Store(settings.db_path, lease_seconds=settings.lease_seconds)
    try:
        report = migrate(source, settings.output_dir, target,
                         progress=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("\nStopped. A copy stopped before it committed is rolled back, so PostgreSQL is "
              "as it was; the SQLite store was only read. Run migrate again (it refuses a "
              "target that is not empty).")
        return 130
    counts = ", ".join(plural(report.rows[t], one, many) for t, one, many in (
        ("runs", "run", "runs"), ("steps", "step", "steps"), ("approvals", "approval",
                                                              "approvals"),
        ("audit", "audit entry", "audit entries"), ("accounts", "account", "accounts")))
    print("Reconciled on PostgreSQL: audit chain and anchor intact; the ledger table agrees "
          "with the approvals and the audit.\n")
    print(f"Migrated in {report.seconds:.1f} s: {counts}; "
          f"{plural(report.ledger['refunds'], 'refund', 'refunds')} and "
          f"{plural(report.ledger['outbox'], 'email', 'emails')} into the ledger table. "
          f"{plural(report.pending, 'refund waits', 'refunds wait')} for a decision, now on "
          "PostgreSQL.")
    if report.torn:
        print(f"Skipped {report.torn} torn log line(s): writes cut short by a crash, never "
              "acknowledged (reconcile skips them too).")
    if report.leases_cleared:
        print(f"Cleared {report.leases_cleared} abandoned lease(s), fencing epochs kept: "
              "`refund-agent resume` or `work` continues those runs.")
    if report.without_transcript:
        shown = ", ".join(report.without_transcript[:10])
        more = (f" and {len(report.without_transcript) - 10} more"
                if len(report.without_transcript) > 10 else "")
        print(f"Warning: {len(report.without_transcript)} unfinished run(s) have no complete "
              f"transcript ({shown}{more}): they continue only while the model still has "
              "their stored response (the offline model keeps them in this output folder's "
              "offline-model.sqlite3, xAI for 30 days).")
    if target == settings.database_url:
        use = "REFUND_AGENT_DATABASE_URL already names it: every command now uses PostgreSQL."
    else:
        use = (f"export REFUND_AGENT_DATABASE_URL='{report.target}'   (with the password, if "
               "it has one; on every host)")
    print(f"\nNext:\n  {use}\n  keep {settings.output_dir} as a read-only backup (its store is "
          "marked as moved: it still reads, and refuses every write)\n  refund-agent audit "
          "--verify   (checks the copy again, on PostgreSQL)")
    state = settings.output_dir / "offline-model.sqlite3"
    if settings.offline and not settings.offline_url and state.exists():
        print(f"\nThe offline model's stored responses, and the key its reasoning is sealed "
              f"with, stay in {state}: continue runs here with this output folder, or serve it "
              f"to every host (python -m offline_model --port 8787 --state {state}, "
              "then REFUND_AGENT_OFFLINE_URL). A stand-in on another file cannot continue "
              "them.")
    return 0


def _webhooks(agent: Agent, host: str, port: int) -> int:
    """``refund-agent webhooks``: Stripe's later word on refunds, into the store."""
    try:   # only this command needs it, and stripe is an optional extra
        from ..outside.webhooks import serve
    except ImportError:
        raise stripe_missing("refund-agent webhooks") from None

    secret = agent.settings.outside.stripe_webhook_secret
    if not secret:
        print("Set STRIPE_WEBHOOK_SECRET to the endpoint's signing secret (whsec_..., shown "
              "where the endpoint is added in Stripe's dashboard); without it no event can be "
              "checked, so none is accepted.")
        return 2
    try:
        server = serve(agent.store, secret, host, port)
    except OSError as exc:
        print(f"Cannot listen on {host}:{port}: {exc.strerror or exc}.")
        return 2
    print(f"Listening for Stripe webhooks on http://{host}:{server.server_port}/ "
          "(refund.updated, refund.failed, charge.refund.updated); Ctrl+C to stop.",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _doctor() -> int:
    """``refund-agent doctor``: exit 0 when the provider works (or the stand-in is in use)."""
    from ..providers.doctor import report  # only this command needs it

    lines, ok = report(load_settings())
    print("\n".join(lines))
    return 0 if ok else 1


def _web(streamlit_args: list[str]) -> int:
    """``refund-agent web [Streamlit options]``: the page, from wherever the package is.

    The settings are read first, so a bad one stops here in one line rather than on the page.
    Then this process becomes Streamlit (exec, not a child), so Ctrl+C and a SIGTERM reach the
    server itself, as with ``streamlit run``, and nothing is left running behind it.
    """
    from ..web.app import desk_options, streamlit_command

    load_settings()
    command = streamlit_command(streamlit_args, desk_options(), os.environ)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(command[0], command)
    return 0  # not reached: execv returns only by raising OSError


def run_command(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, passed_on = parser.parse_known_args(argv)
    if args.command == "web":
        return _web(passed_on)
    if passed_on:   # only `web` takes options it does not know (they are Streamlit's)
        parser.error(f"unrecognized arguments: {' '.join(passed_on)}")
    command = args.command or "sample"
    if command == "migrate":  # the source is always the SQLite store, whatever the settings
        return _migrate(args.to)
    if command == "doctor":
        return _doctor()
    agent = Agent()
    printer = Printer()
    if command in ("queue", "runs", "show", "audit"):
        return _list(agent, command, args)
    if command == "users":
        return _users(agent, args)
    if command == "handoff":
        return _handoff(agent, args)
    if command == "take":
        return _take(agent, args)
    if command == "webhooks":
        return _webhooks(agent, args.host, args.port)
    print(f"Model: {agent.settings.model_label}\n")
    run: Run | None
    if command == "sample":
        run = _start(agent, agent.start_sample(getattr(args, "key", "damaged")), printer)
    elif command == "angry":
        run = _start(agent, agent.start_sample("angry"), printer)
    elif command == "send":
        run = _start(agent, agent.start(args.sender, args.text, subject=args.subject,
                                        sender_name=args.name), printer)
    elif command in ("approve", "reject"):
        run = _decide(agent, args, command == "approve", printer)
    elif command == "ask":
        run = _ask(agent, args, printer)
    elif command == "expire":
        return _expire(agent, printer)
    elif command == "work":
        return _work(agent, args.idle_exit)
    elif command == "resume":
        run = _resume_target(agent, args.run)
        if run is None:
            print("Nothing to resume.")
            return 0
        print(f"Resuming run {run.id} ({run.status.value}).")
        run = _drive(agent, run.id, printer)
    else:  # reply
        run = _reply_target(agent, args.run)
        agent.add_reply(run.id, args.text)
        run = _drive(agent, run.id, printer, simulate=False)
    if run is not None:
        _summary(run, sys.stdout)
        return 1 if run.status == RunStatus.FAILED else 0
    return 0




#: Exit codes, documented in the epilog and the README.
EXIT_CODES = {AlreadyDecided: 3, NothingToDecide: 4}


class _Escaped:
    """A terminal stream that shows control characters as escapes instead of obeying them,
    and that a failed write cannot stop.

    Everything printed passes through it, so text from customers, approvers or the model can
    never move the cursor, recolour the screen or fake a line the program did not write.

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


def main(argv: list[str] | None = None) -> int:
    """Entry point: user mistakes print a message and exit non-zero, never a traceback."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Escaped(out), _Escaped(err)
    try:
        return run_command(argv)
    except KeyboardInterrupt:
        print("\nStopped. `refund-agent resume` continues from the last stored response.")
        return 130
    except RefundAgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CODES.get(type(exc), 1)
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()      # while still wrapped, so an output error stays quiet
        sys.stdout, sys.stderr = out, err
