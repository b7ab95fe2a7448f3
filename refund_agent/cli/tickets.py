"""Tickets: start one (a sample, the angry customer, your own email), carry one on (resume, the
customer's reply), and read them (runs, show). Also the helpers every command that advances a
run shares: the agent with its model line, driving a run, and its summary at the end."""

from __future__ import annotations

import argparse
import sys

from ..config import load_settings
from ..desk.agent import Agent
from ..desk.customer import converse
from ..errors import NotFound, RunNotReady
from ..models import Run, RunStatus, StepKind
from ..text import size_text
from ..web.views.format import cost_basis, cost_note
from .output import Printer, fingerprint_line, run_summary, time_text


def at_work() -> tuple[Agent, Printer]:
    """The agent and the printer of a command that advances runs; it names the model first."""
    agent = Agent()
    printer = Printer()
    print(f"Model: {agent.settings.model_label}\n")
    return agent, printer


def drive(agent: Agent, run_id: str, printer: Printer, simulate: bool = True) -> Run:
    """Advance a run; the angry-customer sample lets the model write back as the customer."""
    if simulate and agent.store.run(run_id).kind == "angry":
        return converse(agent, run_id, printer)
    return agent.advance(run_id, printer)


def finish(run: Run) -> int:
    """The run's summary; the command exits 1 when the run failed."""
    run_summary(run, sys.stdout, cost_basis(load_settings()))
    return 1 if run.status == RunStatus.FAILED else 0


def _start(agent: Agent, run: Run, printer: Printer) -> int:
    for step in agent.store.steps(run.id):
        printer.step(step)
    return finish(drive(agent, run.id, printer))


def sample(args: argparse.Namespace) -> int:
    """``refund-agent [sample KEY]``: one of the sample emails (the damaged item by default)."""
    agent, printer = at_work()
    return _start(agent, agent.start_sample(args.key), printer)


def angry(_args: argparse.Namespace) -> int:
    """``refund-agent angry``: the angry customer, whom the model plays."""
    agent, printer = at_work()
    return _start(agent, agent.start_sample("angry"), printer)


def send(args: argparse.Namespace) -> int:
    """``refund-agent send TEXT --from ADDRESS``: your own email to the agent."""
    agent, printer = at_work()
    return _start(agent, agent.start(args.sender, args.text, subject=args.subject,
                                     sender_name=args.name), printer)


def resume(args: argparse.Namespace) -> int:
    """``refund-agent resume [--run RUN]``: continue a stopped, failed or crashed run."""
    agent, printer = at_work()
    run = _resume_target(agent, args.run)
    if run is None:
        print("Nothing to resume.")
        return 0
    print(f"Resuming run {run.id} ({run.status.value}).")
    return finish(drive(agent, run.id, printer))


def _resume_target(agent: Agent, run_id: str | None) -> Run | None:
    if run_id:
        return agent.store.run(run_id)
    candidates = agent.resumable()
    if candidates:
        return candidates[0]
    return agent.store.latest_run({RunStatus.STOPPED, RunStatus.FAILED}, agent.agent_name)


def reply(args: argparse.Namespace) -> int:
    """``refund-agent reply TEXT [--run RUN]``: write back as the customer; a person's reply
    is never answered by the model playing the customer."""
    agent, printer = at_work()
    run = _reply_target(agent, args.run)
    agent.add_reply(run.id, args.text)
    return finish(drive(agent, run.id, printer, simulate=False))


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


def runs(args: argparse.Namespace) -> int:
    """``refund-agent runs [--limit N]``: the runs, newest first."""
    agent = Agent()
    found = agent.store.runs(limit=args.limit)
    if not found:
        print("No runs yet.")
        return 0
    # The desk's status, not the run's: a rejected or expired ticket is "done" to the loop.
    print(f"{'RUN':16}  {'STATUS':11}  {'CREATED':19}  {'CUSTOMER':28}  {'REQUESTS':8}  "
          f"{'COST':7}  {'KEPT':>8}  SUBJECT")
    for r in found:
        print(f"{r.id:16}  {r.desk_status or r.status.value:11}  {time_text(r.created_at):19}  "
              f"{r.sender:28}  {r.requests:2} req    ${r.cost_usd:.4f}  "
              f"{size_text(r.transcript_bytes):>8}  {r.subject}")
    if label := cost_note(cost_basis(agent.settings)):
        print(f"COST: {label}.")
    return 0


def show(args: argparse.Namespace) -> int:
    """``refund-agent show RUN``: one run's timeline, and its summary."""
    agent = Agent()
    printer = Printer()
    # A waiting approval's fingerprint as it is now, under its proposal: what a decision
    # names (--fingerprint) to sign exactly what was read here.
    waiting = {a.id: a.fingerprint for a in agent.store.approvals("pending", limit=-1)
               if a.run_id == args.run}
    for step in agent.store.steps(args.run):
        printer.step(step)
        if step.kind == StepKind.APPROVAL and step.data.get("approval_id") in waiting:
            print(fingerprint_line(waiting[step.data["approval_id"]], "  ** "))
    run_summary(agent.store.run(args.run), sys.stdout, cost_basis(agent.settings))
    return 0
