"""Decisions: approve, reject or ask about a waiting refund; hand it to a lead, who takes the
escalation; the queue they all read; and expiring what nobody decided.

Every decision names the approval's fingerprint (Approval.fingerprint): the one given with
``--fingerprint`` (a script that read ``queue`` or ``show`` decides exactly what it read),
else that of the approval as the command read it just before deciding. The store refuses a
pending approval whose fingerprint no longer matches, and audits the attempt as 'refused'.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..desk.accounts import Account, Accounts
from ..desk.agent import Agent
from ..desk.rules import handoff_needed, handoff_problem, needs_two, take_problem
from ..errors import AlreadyDecided, DecisionRefused, NotFound, NothingToDecide
from ..models import HANDOFF, Approval, Escalation, Run, RunStatus
from ..text import plural
from .output import EXIT_CODES, Printer, fingerprint_line, line_text, quoted, time_text
from .people import signer
from .tickets import at_work, drive, finish


def approve(args: argparse.Namespace) -> int:
    """``refund-agent approve [--id ID] [--only LINE...] [--fingerprint FP] --as NAME``."""
    agent, printer = at_work()
    run = _decide(agent, args, True, printer)
    return finish(run) if run is not None else 0


def reject(args: argparse.Namespace) -> int:
    """``refund-agent reject --note WHY [--id ID] [--fingerprint FP] --as NAME``."""
    agent, printer = at_work()
    run = _decide(agent, args, False, printer)
    return finish(run) if run is not None else 0


def ask(args: argparse.Namespace) -> int:
    """``refund-agent ask QUESTION [--id ID] [--fingerprint FP] --as NAME``: nothing is paid;
    the customer's answer continues the run."""
    agent, printer = at_work()
    by, _limit = signer(agent, args.by)
    approval = _waiting(agent, args.id)
    try:
        asked = agent.ask(approval.id, by, args.question,
                          fingerprint=args.fingerprint or approval.fingerprint)
    except AlreadyDecided as exc:
        if not _repeated(exc, "asked"):
            raise
        return _already_yours(agent, exc)
    print(f"Sent the refund for {asked.order_id} ({asked.customer}) back with a question, as "
          f"{asked.decided_by}. Nothing is paid; the customer's reply continues run "
          f"{asked.run_id}.")
    return finish(drive(agent, asked.run_id, printer))


def _decide(agent: Agent, args: argparse.Namespace, approve: bool, printer: Printer) -> Run | None:
    by, limit_cents = signer(agent, args.by)  # before anything is looked at or changed
    approval = _waiting(agent, args.id)
    keep, units = only_lines(getattr(args, "only", None))
    fingerprint = args.fingerprint or approval.fingerprint
    try:
        decided = agent.decide(approval.id, approve, by, getattr(args, "note", None),
                               keep=keep, limit_cents=limit_cents, units=units,
                               fingerprint=fingerprint)
    except AlreadyDecided as exc:
        if not _repeated(exc, "approved" if approve else "rejected"):
            raise
        _already_yours(agent, exc)
        return None
    except DecisionRefused as exc:
        # Above the approver's limit (with what they approved on the order before, as the
        # decision counts it) the way on is a lead, as the page's Send to a lead: `handoff`
        # accepts exactly these (handoff_problem, on the same sum). Not when the refusal is
        # that the approval changed since it was read: a lead would not sign it either.
        if approve and handoff_needed(approval.amount_cents, limit_cents,
                                      agent.store.approved_on(approval.order_id, by)) \
                and agent.store.approval(approval.id).fingerprint == fingerprint:
            raise DecisionRefused(f"{exc} `refund-agent handoff --id {approval.id} --as "
                                  f"{quoted(by)}` sends it to a lead.") from None
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
    return drive(agent, decided.run_id, printer)


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
                     f"{a.status} by {a.decided_by} at {time_text(a.decided_at)}.")
        raise NothingToDecide(f"Nothing is waiting for approval.{hint}")
    return approval


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


def _already_yours(agent: Agent, exc: AlreadyDecided) -> int:
    """Say that this person's decision stands; point at `resume` if its run is not finished."""
    run = agent.store.run(agent.store.approval(exc.approval_id).run_id)
    hint = ""
    if run.status in (RunStatus.WAITING, RunStatus.STOPPED, RunStatus.FAILED):
        hint = f" Run {run.id} is {run.status.value}: `refund-agent resume` continues it."
    print(f"{exc}{hint}")
    return 0


def handoff(args: argparse.Namespace) -> int:
    """``refund-agent handoff``: send a waiting refund to a lead, as the page's *Send to a
    lead* does (Agent.hand_off: an escalation of kind over limit, audited; the refund keeps
    waiting, its lines held, until someone decides it)."""
    agent = Agent()
    by, limit_cents = signer(agent, args.by)   # before anything is looked at or changed
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
        print(f"You already sent this refund to a lead at {time_text(mine.raised_at)} "
              f"(escalation {mine.id}); nothing more to do.")
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


def take(args: argparse.Namespace) -> int:
    """``refund-agent take``: a lead picks up an escalation, as the page's *Take it* does
    (Agent.take: a compare-and-set, audited; the first one wins)."""
    agent = Agent()
    by, limit_cents = signer(agent, args.by)
    if problem := take_problem(limit_cents):
        raise DecisionRefused(problem)
    escalation_id = args.id if args.id is not None else _open_escalation(agent, args.run).id
    try:
        taken = agent.take(escalation_id, by)
    except AlreadyDecided as exc:
        when = f" at {time_text(exc.decided_at)}" if exc.decided_at else ""
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
                f"{quoted(by)}` or `reject` decides it.")
    reason = taken.reason if taken.reason.endswith((".", "!", "?")) else f"{taken.reason}."
    print(f"Took escalation {taken.id} ({taken.label}) on run {taken.run_id} as {by}: "
          f"{reason} {then}")
    return 0


def _open_escalation(agent: Agent, run_id: str | None) -> Escalation:
    """The escalation ``take`` is about when none is named: the only open one (of the run, if
    named); several open is refused with the list, as a decision without an id is.

    With none open but exactly one there (on the run, if named), that one: two leads racing
    for the only escalation, the second is told who took it first (exit 3; 0 for the lead who
    did), as with ``--id``. With several taken, which one this take was after cannot be known:
    nothing is open (exit 4), and the message names the one taken last.
    """
    open_ = agent.store.escalations(open_only=True, run_id=run_id)
    if not open_:
        taken = [e for e in agent.store.escalations(run_id=run_id, limit=-1) if e.taken_at]
        if len(taken) == 1:
            return taken[0]
        where = f" on run {run_id}" if run_id else ""
        last = max(taken, key=lambda e: (e.taken_at or 0, e.id), default=None)
        before = (f" (the last one, {last.id}, was taken by {last.taken_by} at "
                  f"{time_text(last.taken_at)})" if last else "")
        raise NothingToDecide(f"No escalation is open{where}{before}.")
    if len(open_) > 1:
        listing = "\n".join(f"  {_escalation_line(e)}" for e in open_[:20])
        raise DecisionRefused(f"{len(open_)} escalations are open; name one with --id:\n"
                              f"{listing}")
    return open_[0]


def _escalation_line(e: Escalation) -> str:
    return (f"{e.id:<4} {e.label}  run {e.run_id}  raised by {e.raised_by} at "
            f"{time_text(e.raised_at)}: {e.reason}")


def queue(args: argparse.Namespace) -> int:
    """``refund-agent queue [--as NAME]``: the refunds waiting, each with its fingerprint and
    flags, then the open escalations."""
    agent = Agent()
    pending = agent.store.approvals("pending")
    handed_off = agent.store.handed_off()
    reader = _reader(agent, args.by)
    # Read for an account: what it can decide first, and for the rest who can (offers.py).
    offered = {o.approval_id: o for o in (Accounts(agent.store).offers(pending, reader.name)
                                          if reader else [])}
    if offered:
        pending = sorted(pending, key=lambda a: not offered[a.id].mine)
    for a in pending:
        print(f"{_describe(a)}  {a.summary}")
        print(fingerprint_line(a.fingerprint, "    "))
        for line in a.lines:
            print(f"    {line_text(line.model_dump())}  {line.name}")
        for flag in _queue_flags(agent, a, handed_off, reader):
            print(f"    ** {flag}")
        if a.id in offered and not offered[a.id].mine:
            print(f"    ** {offered[a.id].others_text(reader.name if reader else None)}")
    print(f"{len(pending)} waiting for approval.")
    open_ = agent.store.escalations(open_only=True)
    if open_:
        print(f"\n{plural(len(open_), 'escalation is', 'escalations are')} open; a lead "
              "picks one up with `refund-agent take --id N --as NAME`:")
        for e in open_:
            print(f"  {_escalation_line(e)}")
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
        flags.append(f"Signed off by {first.by} at {time_text(first.at)} for "
                     f"${first.amount_cents / 100:,.2f}; needs a second person")
    elif needs_two(a.amount_cents, agent.shop.info.desk.two_person_above_cents,
                   agent.store.approved_on(a.order_id)):
        flags.append("Needs two people: the first approval is a sign-off")
    return flags


def expire(_args: argparse.Namespace) -> int:
    """``refund-agent expire``: expire what waited too long and finish those runs (for cron;
    exit 0 with nothing due)."""
    agent, printer = at_work()
    for approval_id, step in agent.apply_timeouts():   # shop.json "timeouts", once each
        print(f"Timeout policy: {step} on {approval_id}.")
    expired = agent.expire()
    for approval in expired:
        print(f"Expired {approval.id} ({approval.customer}, order {approval.order_id}, "
              f"${approval.amount:,.2f}), requested {time_text(approval.requested_at)}.")
        drive(agent, approval.run_id, printer)
    days = agent.settings.approval_days
    print(f"{len(expired)} approval{'s' if len(expired) != 1 else ''} expired (older than "
          f"{days:g} day{'s' if days != 1 else ''}; REFUND_AGENT_APPROVAL_DAYS sets it).")
    return 0
