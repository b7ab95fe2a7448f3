"""The durable loop: any agent's run, one model turn at a time, paused before a call that
needs a person and continued from the stored response once they decide, exactly once.

Start here. An agent is a :class:`Loop` subclass naming its ``tools`` (tools.Tool: read-only,
an effect, or an effect that needs approval), its ``system_prompt`` and the ``context`` a
call's functions get (:class:`CallContext`). Everything it needs to continue is in the store,
so a run can stop in one process and continue in another, days later. ``refund_agent/desk/``
is the refund desk built on it; ``refund_agent/examples/`` two agents of a page each.

The seven durable boundaries. Each is one committed transaction (or, for 6, one record under
a key), so a process killed between any two leaves nothing half done:

1. The run and the customer's email exist before any model request:
   ``store/runs.py:create_run``.
2. A model response, its calls and its steps are committed before any call with an effect
   runs (with it, the outputs of the read-only calls it starts with; a last response, with the
   run's end): ``store/responses.py:record_response``.
3. Any other call's output is committed the moment it returns; a resumed run sends saved
   outputs and never runs a call twice: ``store/responses.py:record_output``.
4. A call that needs approval only proposes: the approval, its audit line and the run's pause
   (its lease given up) in one transaction: ``store/approvals.py:queue_approval``.
5. A decision is a compare-and-set on 'pending' (and on the fingerprint of what the person
   was shown), with its audit line: ``store/approvals.py:decide``.
6. An outside effect happens once per key (the run and the call id): a repeat gets the first
   result back, a different request under the same key is refused: ``CallContext.once``
   (``outside/ledger.py:IdempotentLog.once``, or the store's ledger where hosts share it).
7. One process advances a run at a time, under a lease whose token grows with every takeover;
   every write checks it: ``store/leases.py:acquire``.

Named crash points (crash.py) sit at each, so tests can kill the process there.

Safe by default: a proposal not approved never reaches the tool's effect function (the model
gets the decision, Tool.declined); the lease is checked before every effect function runs; a
decision names the fingerprint of what was shown.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any, ClassVar

import openai

from . import intake, telemetry, turns
from .config import Settings, load_settings
from .crash import LOOP_POINTS, crash_point, undeclared
from .errors import ConfigError, DecisionRefused, EndRun, LeaseLost, RunNotReady, Stopped
from .models import Approval, ApprovalStatus, Call, Reply, Run, RunStatus, stable_name
from .providers.client import ModelAccess, open_model
from .providers.endings import Ending, end_run, ending_for
from .providers.stored import response_gone
from .providers.table import effort_for, needs_include
from .store import Lease, Output, Store
from .streaming import Cancel, Heartbeat, LiveEvent, OnEvent, stream_response
from .tools import (
    CallContext,
    Outcome,
    Tool,
    ToolKind,
    done_at_once,
    open_effect_log,
    parse_call,
    run_ahead,
    schemas,
)
from .turns import NextInput, Waiting

MAX_TURNS = 12
log = logging.getLogger(__name__)
# Asked before a run that answered ends done (see Loop.advance): True when it added input.
FollowUp = Callable[[Run, Lease], bool]


class Loop:
    """The durable loop for any agent: its tools are declarations, its state is the store.

    A subclass names its ``tools``, what the model is told first (:meth:`system_prompt`) and
    what a call's functions receive (:meth:`context`). ``settings`` default to the
    environment's; ``model`` is an opened client (tests pass one to inspect the stand-in).
    """

    #: On its runs; it advances and decides only those (Run.owner_problem). Unset: its
    #: module's import name and its class's (stable_name: the same run as a script).
    agent_name: ClassVar[str] = ""
    #: What its proposals are called in a person's messages ("This refund was already ...").
    proposal_noun: ClassVar[str] = "proposal"
    #: Where ``ctx.once`` records: ``<name>.log`` beside an SQLite store, else its ledger.
    effect_log: ClassVar[str] = "effects"
    tools: ClassVar[Mapping[str, Tool]] = {}
    #: The output a held-back effect gets (see Tool.done_status).
    held_back: ClassVar[str] = ("Not carried out: it was written beside a proposal that was "
                                "not carried out. Make it again with the outcome.")
    default_subject: ClassVar[str] = "Request"
    #: Its SQLite file in the output folder (None: the settings' own, the refund desk's).
    #: On PostgreSQL every agent shares the database.
    store_file: ClassVar[str | None] = None
    #: The loop's own store, or a subclass adding the agent's records (desk: DeskStore).
    store_class: ClassVar[type[Store]] = Store
    #: The crash points this agent's code reaches (name -> what has happened there): the
    #: loop's own, plus any its tools name with ``ctx.crash(...)``.
    crash_points: ClassVar[Mapping[str, str]] = LOOP_POINTS

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.agent_name = cls.agent_name or f"{stable_name(cls.__module__)}.{cls.__qualname__}"

    def __init__(self, settings: Settings | None = None, *, model: ModelAccess | None = None):
        self.settings = settings or load_settings()
        if problem := undeclared(self.settings.crash_at, self.crash_points):
            raise ConfigError(problem)   # before anything is opened or written
        self.store = self.store_class(self.settings.store_for(self.store_file),
                                      lease_seconds=self.settings.lease_seconds)
        self._model = model
        self._crash = self.settings.crash_at
        self._claimed: dict[str, str] = {}
        # Where ``ctx.once`` records (opening it reads nothing until an effect looks).
        self.effects = open_effect_log(self.store, self.effect_log, self.settings.output_dir)

    @property
    def model(self) -> ModelAccess:
        # Opened lazily: deciding or listing the queue should not start a model server.
        if self._model is None:
            self._model = open_model(self.settings)
        return self._model

    def system_prompt(self, run: Run) -> str:
        raise NotImplementedError

    def context(self, run: Run, lease: Lease, call: Call) -> CallContext:
        """What a call's tool functions receive (an agent adds its own: CallContext.extend)."""
        return CallContext(run, call, lease, self.store, self._crash_at, self.effects)

    def hand_over(self, run_id: str, lease: Lease, why: str) -> str:
        """The failure message of a run that cannot continue (``why``); an agent may put the
        run before a person here, and say so in the message."""
        return why

    def money_moved(self, run_id: str) -> bool:
        """Whether the run's effects already did what no retry should repeat unannounced; if
        so, a failure no retry cures goes to :meth:`hand_over`. None did, by default."""
        return False

    def _crash_at(self, name: str) -> None:
        crash_point(name, self._crash)

    def start(self, sender: str, body: str, *, subject: str | None = None,
              sender_name: str = "", kind: str = "custom", raised_by: str | None = None) -> Run:
        """Save a customer's email as a new run (nothing is sent to the model yet).
        ``raised_by``: the desk account that typed it in, who may not approve its refund."""
        sender, body, subject, sender_name = intake.checked_email(
            sender, body, self.default_subject if subject is None else subject, sender_name)
        with telemetry.starting(self.agent_name) as create:   # its trace, if on
            run = create(self.store.create_run, sender=sender, sender_name=sender_name or sender,
                         subject=subject.strip() or self.default_subject, email=body,
                         kind=kind, raised_by=raised_by, agent=self.agent_name)
        self._crash_at("after_run_created")
        return run

    # -- the loop -------------------------------------------------------------------------

    def advance(self, run_id: str, on_event: OnEvent | None = None,
                cancel: Cancel | None = None, follow_up: FollowUp | None = None) -> Run:
        """Advance the run until it finishes, waits for a person, stops, or fails.

        Each turn is one request; before it, the previous response's calls run (the
        read-only ones it starts with are saved with it, any other as it returns), or a call
        that needs approval pauses the run. ``follow_up`` is asked, still under the run's
        lease, each time the run would end done: it may add input (a reply) and answer True
        to go on (the simulated customer, desk/customer.py), or raise EndRun.

        Raises:
            RunBusy: another process is advancing this run.
            LeaseLost: another process took the run over while this one was paused or slow;
                this one stopped before doing anything more.
            KeyboardInterrupt: after marking the run stopped, so Ctrl+C still ends the program.
            RunNotReady: another agent made the run.
        """
        # Nobody listening (the terminal, a worker): no steps read back, each reply asked whole.
        before = self.store.last_step_id(run_id) if on_event else -1
        # A run this process claimed (see claim) is continued under the claim's token. The run
        # as acquiring it left it (another agent's is refused there, RunNotReady), then as each
        # response's commit left it, with its calls: what the loop writes, it does not read back.
        lease, run = self.store.acquire_run(
            run_id, self._claimed.pop(run_id, None) or uuid.uuid4().hex, self.agent_name)
        calls: list[Call] | None = None
        seen = self._emit_steps(run_id, before, on_event)  # the "new process" mark, if any
        end: turns.TurnResult | turns.Released | Ending
        # One heartbeat for the whole advance, not one per request: it renews the lease while
        # requests stream and tools run, and closes whichever stream is open if it is lost.
        with telemetry.advancing(self, run, lease), Heartbeat(self.store, lease) as heartbeat:
            try:
                budget = MAX_TURNS
                while budget:
                    budget -= 1
                    if cancel and cancel.is_set():
                        raise Stopped
                    end = self._next(run, lease, calls)
                    if follow_up and end == turns.Finished() and follow_up(run, lease):
                        budget, end = MAX_TURNS, self._next(run, lease, calls)  # a new input
                    seen = self._emit_steps(run_id, seen, on_event)
                    if not isinstance(end, NextInput):
                        break
                    run, calls, ended = self._turn(run, lease, end, on_event, cancel, heartbeat,
                                                   follow_up is not None)
                    seen = self._emit_steps(run_id, seen, on_event)
                    if ended:   # that response ended the run, and its commit the lease: one
                        end = turns.Released(run)   # boundary, the run's end (no calls to run)
                        break
                    self._crash_at("after_response")
                else:
                    end = Ending(RunStatus.FAILED, f"Stopped after {MAX_TURNS} turns without "
                                  "finishing; resume to continue.")
            except LeaseLost:
                raise  # the new owner carries on; writing anything here would be refused
            except BaseException as exc:
                handled = isinstance(exc, Stopped | EndRun | turns.NoTranscript |
                                     openai.APIError)
                try:
                    left = end_run(self.store, lease, ending_for(self, exc, run_id, lease, cancel))
                except LeaseLost:
                    if handled:
                        raise
                    # Let go already (Ctrl+C just after a proposal's commit paused the run and
                    # gave up the lease) or taken over: nothing to mark, the error goes on.
                    raise exc from None
                if not handled:
                    raise  # Ctrl+C, or a programming error: the run is marked, the error goes on
            else:
                left = end_run(self.store, lease, end)
        self._emit_steps(run_id, seen, on_event)
        return left   # as the release left it: not read again

    def _next(self, run: Run, lease: Lease, calls: list[Call] | None = None
              ) -> turns.TurnResult:
        """What the run does next, running any calls still owed an output first (``calls``:
        the last response's, as its commit saved them; None: read from the store)."""
        if run.last_response_id is None:
            return NextInput(turns.first_input(run, self.system_prompt(run)))
        if calls is None:
            calls = self.store.calls(run.last_response_id)
        if calls:
            outputs = []
            undone = False   # a proposal earlier in this response was not carried out
            for call in calls:
                tool = self.tools.get(call.name)
                if call.output is not None:
                    output = call.output
                elif undone and tool is not None and tool.kind is ToolKind.EFFECT:
                    # Written beside a proposal, before anyone decided it: it may promise what
                    # did not happen, so it is not carried out.
                    output = self._record(lease, call, Outcome({"error": self.held_back}, []))
                else:
                    result = self._run_call(run, lease, call)
                    if isinstance(result, Waiting):
                        return result
                    output = result
                if tool is not None and tool.needs_approval:
                    undone = json.loads(output).get("status") != tool.done_status
                outputs.append(turns.call_output(call.call_id, output))
            return NextInput(outputs)
        return self._after_answer(run.id)

    def _after_answer(self, run_id: str, sending: Collection[int] = ()
                      ) -> NextInput | turns.Finished:
        """After a response without calls: the replies not yet sent (but ``sending``'s, which
        that response answered), or the run's end."""
        replies = [r for r in self.store.replies(run_id, unsent_only=True) if r.id not in sending]
        if replies:
            return turns.replies_input(replies)
        return turns.Finished(RunStatus.ASKED if self._asking(run_id) else RunStatus.DONE)

    @telemetry.traced_call   # its execute_tool span
    def _run_call(self, run: Run, lease: Lease, call: Call) -> str | Waiting:
        """Run one saved call as its tool is declared; save its output at once (boundary 3).

        A ``needs_approval`` call is proposed first (the run waits), waits while pending, and
        runs once approved; a rejection, a question or an expiry goes back to the model as
        its output (Tool.declined). The lease is checked before any effect function runs."""
        self._crash_at("before_tool")
        tool = self.tools.get(call.name)
        args = parse_call(self.tools, call.name, call.arguments)
        if isinstance(args, str) or tool is None:
            outcome = Outcome({"error": str(args)}, [])
        elif tool.needs_approval:
            approval = self.store.find_approval(call.key) if call.key else None
            if approval is None:
                proposed = tool.propose(self.context(run, lease, call), args)  # type: ignore[misc]
                if isinstance(proposed, Waiting):
                    self._crash_at("after_approval_queued")
                    return proposed
                outcome = proposed
            elif approval.status == ApprovalStatus.PENDING:
                return Waiting(approval.id)
            elif approval.status != ApprovalStatus.APPROVED or (
                    (approval.run_id, approval.call_id) != (run.id, call.call_id)):
                outcome = Outcome(tool.not_carried_out(args, approval), [])
            else:
                self.store.check_lease(lease)   # a process that lost the run does nothing
                outcome = tool.run(self.context(run, lease, call), args, approval)  # type: ignore[misc]
        else:
            if tool.has_effect:
                self.store.check_lease(lease)   # a process that lost the run does nothing
            outcome = tool.run(self.context(run, lease, call), args)  # type: ignore[misc]
        text = self._record(lease, call, outcome)
        self._crash_at("after_tool")
        return text

    def _record(self, lease: Lease, call: Call, outcome: Outcome) -> str:
        output = outcome.saved(call)
        self.store.record_output(lease, call.call_id, output.text, output.steps, output.audit)
        return output.text

    def _leading_reads(self, run: Run, lease: Lease, read: turns.ReadResponse
                       ) -> dict[str, Output]:
        calls = (Call.new(run.id, read.response_id, *c) for c in read.calls)  # as needed
        return run_ahead(self.tools, calls, partial(self.context, run, lease))

    def _turn(self, run: Run, lease: Lease, step: NextInput, emit: OnEvent | None,
              cancel: Cancel | None, heartbeat: Heartbeat, following: bool = False
              ) -> tuple[Run, list[Call], bool]:
        """One request; its response is committed before any call with an effect runs.
        Returns the run and the response's calls as that commit left them, and whether the
        response ended the run: no calls and nothing else to send, so the same commit set the
        run's end and gave up the lease (one transaction, not a second one to release it).

        If the stored response is gone (a 404 naming it: expired, deleted), the same turn is
        sent once more with the transcript, stored again, and the run chains from there.
        """
        started = time.monotonic()
        model, keep_nothing = self.settings.model, self.settings.zero_retention
        params = turns.build_request(
            model=model, run_id=run.id, items=step.items, tools=schemas(self.tools),
            previous_response_id=run.last_response_id, zero_retention=keep_nothing,
            include=needs_include(model, store=not keep_nothing),
            effort=effort_for(model, self.settings.reasoning_effort),
            history=self._history(run) if keep_nothing else None)
        resent: dict[str, Any] | None = None
        try:
            response = self._stream(run.id, params, emit, cancel, heartbeat)
        except openai.APIStatusError as exc:
            missing = params.get("previous_response_id")
            if not missing or not response_gone(self.model.client, self.settings.provider,
                                                exc, missing):
                raise  # a wrong URL or model, a refused parameter: not the stored response
            history = self._history(run)
            params = turns.resend_request(params, history, step.items)
            resent = {"missing": missing, "items": len(history),
                      "bytes": run.transcript_bytes}
            response = self._stream(run.id, params, emit, cancel, heartbeat)
        read = turns.read_response(response, step.items, model=model,
                                   seconds=time.monotonic() - started)
        after = None if read.calls else self._after_answer(run.id, step.reply_ids)
        # Not when a follow-up is to be asked first (it may go on): then _next ends the run.
        finish = (after.status if isinstance(after, turns.Finished)
                  and not (following and after == turns.Finished()) else None)
        recorded = self.store.record_response(
            lease, response_id=read.response_id, calls=read.calls, steps=read.steps,
            usage=read.usage, replies_sent=step.reply_ids, transcript=read.transcript,
            resent=resent, outputs=self._leading_reads(run, lease, read), finish=finish,
            effects=done_at_once(self.tools, read.calls))
        return recorded.run, recorded.calls, finish is not None

    def _stream(self, run_id: str, params: dict[str, Any], emit: OnEvent | None,
                cancel: Cancel | None, heartbeat: Heartbeat) -> Any:
        """One request (a method of its own, so bench/ can time it)."""
        return stream_response(self.model.client, run_id, params, emit, cancel, heartbeat)

    def _asking(self, run_id: str) -> bool:
        """Whether its latest proposal was sent back with a question, and no reply came since."""
        latest = self.store.latest_decision(run_id)
        if latest is None or latest[0] != ApprovalStatus.ASKED:
            return False
        asked_at = latest[1] or 0
        return not any(reply.at > asked_at for reply in self.store.replies(run_id))

    def _history(self, run: Run) -> list[dict[str, Any]]:
        """The run's transcript as input items (turns.NoTranscript when it cannot serve)."""
        if run.last_response_id is None:
            return []
        return turns.history(run, self.store.transcript(run.id), self.store.steps(run.id))

    def _emit_steps(self, run_id: str, after: int, emit: OnEvent | None) -> int:
        if after < 0 or emit is None:   # no listener (see advance)
            return after
        steps = self.store.steps(run_id, after)
        for step in steps:
            emit(LiveEvent(run_id, "step", step=step))
        return steps[-1].id if steps else after

    # -- people ---------------------------------------------------------------------------

    def approve(self, approval_id: str, fingerprint: str, *, by: str,
                note: str | None = None) -> Approval:
        """Approve what the person was shown (its Approval.fingerprint). See :meth:`decide`."""
        return self.decide(approval_id, True, by=by, note=note, fingerprint=fingerprint)

    def reject(self, approval_id: str, fingerprint: str, *, by: str, note: str) -> Approval:
        """Reject it with a note the customer will read. See :meth:`decide`."""
        return self.decide(approval_id, False, by=by, note=note, fingerprint=fingerprint)

    def decide(self, approval_id: str, approve: bool, *, by: str, note: str | None = None,
               fingerprint: str | None) -> Approval:
        """Record a person's decision; the run continues on the next :meth:`advance`.
        ``fingerprint`` (required): Approval.fingerprint as the person saw it; a pending
        approval that no longer matches is refused (audited), never decided.

        Raises:
            DecisionRefused: no fingerprint, no name, a rejection without a note, or a rule
                of the agent's (checked inside the decision's transaction).
            AlreadyDecided: someone else decided first (audited as 'ignored').
        """
        return self._decide(approval_id, approve, by, note, fingerprint)

    def _decide(self, approval_id: str, approve: bool, by: str, note: str | None,
                fingerprint: str | None, **rules: Any) -> Approval:
        """Every agent's decide: checks, the store's compare-and-set (``rules``: the agent's
        own, for its store: the desk's keep, requote, limits), the crash point."""
        by, note = intake.checked_decision(by, note, approve)
        self._own_approval(approval_id, DecisionRefused, fingerprint)
        decided = self.store.decide(approval_id, approve, by, note, fingerprint=fingerprint,
                                    noun=self.proposal_noun, **rules)
        telemetry.decided(self, decided)
        self._crash_at("after_decision")
        return decided

    def ask(self, approval_id: str, by: str, question: str, *,
            fingerprint: str | None) -> Approval:
        """Send a proposal back: the customer gets ``question`` (the run waits on their
        reply, RunStatus.ASKED), nothing is done yet. Raises as :meth:`decide` does."""
        by, question = intake.checked_question(by, question)
        self._own_approval(approval_id, DecisionRefused, fingerprint)
        asked = self.store.ask(approval_id, by, question, fingerprint=fingerprint,
                               noun=self.proposal_noun)
        telemetry.decided(self, asked)
        self._crash_at("after_decision")
        return asked

    def expire(self) -> list[Approval]:
        """Close (and return) the approvals nobody decided within ``settings.approval_days``;
        their runs carry on at the next advance, telling the customer and the team."""
        return self.store.expire(self.settings.approval_days * 86400, agent=self.agent_name)

    def add_reply(self, run_id: str, text: str, simulated: bool = False) -> Reply:
        """Save a customer's reply to a finished run; the next advance sends it."""
        text = text.strip()
        if problem := intake.utf8_problem(text) or intake.reply_problem(text):
            raise RunNotReady(problem)
        self._own(run_id, "continue", RunNotReady)
        # Accepted or refused in one transaction: a refused reply is never stored.
        return self.store.add_reply(run_id, text, simulated)

    def claim(self) -> str | None:
        """Take one run that needs a worker, from any host (see Store.claim); its id or None.
        The next ``advance`` of that run in this process continues under the claim's lease."""
        lease = self.store.claim(uuid.uuid4().hex, self.agent_name)
        if lease is not None:
            self._claimed[lease.run_id] = lease.token
        return lease and lease.run_id

    def resumable(self) -> list[Run]:
        """Its runs a resume should pick up: orphaned mid-turn, or decided while nobody ran
        them. Another agent's are left alone, and logged (see :meth:`foreign_runs`)."""
        mine = self.agent_name
        runs = self.store.orphaned_runs(mine) + self.store.decided_but_waiting(mine)
        if foreign := self.foreign_runs():
            log.warning(self.foreign_note(foreign))
        return runs

    def foreign_runs(self) -> dict[str, int]:
        """Runs a resume would pick up that another agent made (its name -> how many)."""
        runs = self.store.orphaned_runs() + self.store.decided_but_waiting()
        return dict(Counter(run.agent for run in runs if run.agent != self.agent_name))

    def foreign_note(self, foreign: Mapping[str, int]) -> str:
        """One line naming the runs :meth:`foreign_runs` found, for a worker to print."""
        named = ", ".join(f"{n} of agent {name!r}" for name, n in sorted(foreign.items()))
        return (f"Left for their own agent: {named} (this is {self.agent_name!r}; run that "
                "agent's worker, or give agent_name the name the runs were made with).")

    def _own(self, run_id: str, doing: str, refused: type[Exception]) -> None:
        if problem := self.store.run(run_id).owner_problem(self.agent_name, doing):
            raise refused(problem)

    def _own_approval(self, approval_id: str, refused: type[Exception],
                      fingerprint: str | None) -> None:
        """:meth:`_own` for deciding (one read: the approval's run), naming what was shown."""
        if not fingerprint:
            raise refused("A decision names the fingerprint of the approval as it was shown "
                          "(Approval.fingerprint); open it and decide on what it says.")
        if problem := self.store.approval_run(approval_id).owner_problem(self.agent_name,
                                                                         "decide"):
            raise refused(problem)
