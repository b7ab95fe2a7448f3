"""The agent: advance a run one model turn at a time, pause before a gated call, resume once.

Every front end (terminal, web page, notebook) drives runs through :class:`Agent`. It owns no
state of its own between calls: everything it needs to continue is in the store, so a run can
stop in one process and continue in another, days later.

:class:`Loop` is the part any agent shares: it runs each saved call the way its tool is
declared (tools.ToolKind: read-only, an effect, or ``needs_approval``), and each turn ends in a
value (turns.NextInput, Waiting, Finished). :class:`Agent` is the refund desk on that loop;
``refund_agent/examples/closure.py`` is another agent on it. What a request sends and what a
response means are pure functions in turns.py; streaming is in streaming.py; what the refund
desk's tools do (paying, emailing) is in calls.py.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import openai

from .calls import HELD_BACK, REFUND_TOOLS, CallContext, DeskCall, Outcome, hand_over
from .config import Settings, load_settings
from .crash import crash_point
from .errors import DecisionRefused, LeaseLost, RunNotReady
from .identity import address_problem
from .model import ModelAccess, open_model, provider_error
from .models import Approval, ApprovalStatus, Call, Reply, Run, RunStatus, StepKind
from .outbox import Outbox
from .payments import Payments
from .policy import SHIPPING, Held, Quote, policy_facts, quote_refund
from .prompts import system_prompt
from .providers import ProviderError, effort_for, needs_include
from .shop import Shop
from .store import Lease, Store
from .streaming import Cancel, Heartbeat, LiveEvent, OnEvent, Stopped, stream_response
from .text import one_line
from .tools import ShopTools, Tool, ToolKind, as_output, parse_call, schemas
from .turns import (
    MAX_MODEL_TEXT_CHARS,
    Finished,
    NextInput,
    StepData,
    TurnResult,
    Waiting,
    build_request,
    call_output,
    first_input,
    read_response,
    replies_input,
    resend_request,
    transcript_problem,
)
from .turns import usage_of as _usage  # noqa: F401 - customer.py reads usage through here

__all__ = ["MAX_MODEL_TEXT_CHARS", "Agent", "Cancel", "LiveEvent", "Loop", "OnEvent"]

MAX_TURNS = 12
STORED_RESPONSE_DAYS = 30
MAX_EMAIL_CHARS = 20_000
# What a person writes with a decision (a note, a question for the customer), in characters:
# it goes on the card, into the audit and to the model; a page of text is the most it needs.
MAX_NOTE_CHARS = 2_000


class _NoTranscript(Exception):
    """The run needs its transcript, but it does not go back to the first request."""


@dataclass(frozen=True)
class _Ending:
    """How an advance that did not finish or pause leaves the run (stopped, failed)."""

    status: RunStatus
    error: str | None
    step: StepData | None = None


class Loop:
    """The durable loop for any agent: its tools are declarations, its state is the store.

    A subclass says what its tools are (``tools``), what the model is told first
    (:meth:`system_prompt`) and what a call's functions receive (:meth:`context`).

    Args:
        settings: configuration; read from the environment when omitted.
        model: an already opened model client (tests pass one to inspect the offline server).
    """

    tools: ClassVar[Mapping[str, Tool]] = {}
    #: The output a held-back effect gets (see Tool.done_status).
    held_back: ClassVar[str] = ("Not carried out: this call was written before a proposal in "
                                "the same response was decided, and that proposal was not "
                                "carried out. Make it again with the outcome.")
    default_subject: ClassVar[str] = "Request"
    _requote: Callable[[Approval, list[str], Mapping[str, Held]], Quote | str] | None = None

    def __init__(self, settings: Settings | None = None, *, model: ModelAccess | None = None):
        self.settings = settings or load_settings()
        self.store = Store(self.settings.store_target, lease_seconds=self.settings.lease_seconds)
        self._model = model
        self._crash = self.settings.crash_at
        self._claimed: dict[str, str] = {}

    @property
    def model(self) -> ModelAccess:
        # Opened lazily: deciding or listing the queue should not start a model server.
        if self._model is None:
            self._model = open_model(self.settings)
        return self._model

    def system_prompt(self, run: Run) -> str:
        raise NotImplementedError

    def context(self, run: Run, lease: Lease, call: Call) -> CallContext:
        """What a call's tool functions receive."""
        return CallContext(run, lease, call, self.store, self._crash_at)

    def hand_over(self, run_id: str, lease: Lease, why: str) -> str:
        """The failure message of a run that cannot continue (the refund desk also emails)."""
        return why

    def _crash_at(self, name: str) -> None:
        crash_point(name, self._crash)

    # -- starting runs ---------------------------------------------------------------------

    def start(self, sender: str, body: str, *, subject: str | None = None,
              sender_name: str = "", kind: str = "custom") -> Run:
        """Save a customer's email as a new run (nothing is sent to the model yet)."""
        subject = self.default_subject if subject is None else subject
        sender, body = sender.strip(), body.strip()
        _require_utf8(sender, body, subject, sender_name)
        # No whitespace or control characters: a newline in an address is a header injection.
        if ("@" not in sender or len(sender) > 254
                or any(c.isspace() or not c.isprintable() for c in sender)):
            raise RunNotReady(f"{sender!r} is not an email address.")
        if problem := address_problem(sender):  # a look-alike of someone else's address
            raise RunNotReady(problem)
        subject = one_line(subject, "subject")
        sender_name = one_line(sender_name, "sender's name")
        if not body:
            raise RunNotReady("The email is empty.")
        if len(body) > MAX_EMAIL_CHARS:
            raise RunNotReady(f"The email is {len(body):,} characters; the limit is "
                              f"{MAX_EMAIL_CHARS:,}. Trim it and send again.")
        run = self.store.create_run(sender=sender, sender_name=sender_name or sender,
                                    subject=subject.strip() or self.default_subject,
                                    email=body, kind=kind)
        self._crash_at("after_run_created")
        return run

    # -- the loop -------------------------------------------------------------------------

    def advance(self, run_id: str, on_event: OnEvent | None = None,
                cancel: Cancel | None = None) -> Run:
        """Advance the run until it finishes, waits for a person, stops, or fails.

        Each turn is one streamed model request. Before it, the calls of the previous response
        run (each output saved as soon as it returns); a call that needs approval pauses the
        run instead.

        Raises:
            RunBusy: another process is advancing this run.
            LeaseLost: another process took the run over while this one was paused or slow;
                this one stopped before doing anything more.
            KeyboardInterrupt: after marking the run stopped, so Ctrl+C still ends the program.
        """
        emit = on_event or (lambda _e: None)
        before = self.store.last_step_id(run_id)
        # A run this process claimed (see claim) is continued under the claim's token.
        lease = self.store.acquire(run_id, self._claimed.pop(run_id, None) or uuid.uuid4().hex)
        seen = self._emit_steps(run_id, before, emit)  # the "new process" mark, if any
        end: TurnResult | _Ending
        try:
            for _ in range(MAX_TURNS):
                if cancel and cancel.is_set():
                    raise Stopped
                run = self.store.run(run_id)
                end = self._next(run, lease)
                seen = self._emit_steps(run_id, seen, emit)
                if not isinstance(end, NextInput):
                    break
                self._turn(run, lease, end, emit, cancel)
                seen = self._emit_steps(run_id, seen, emit)
                self._crash_at("after_response")
            else:
                end = _Ending(RunStatus.FAILED, f"Stopped after {MAX_TURNS} turns without "
                              "finishing; resume to continue.")
        except LeaseLost:
            raise  # the new owner carries on; writing anything here would be refused anyway
        except BaseException as exc:
            self._end(lease, self._ending(exc, run_id, lease, cancel))
            if not isinstance(exc, Stopped | _NoTranscript | openai.APIError):
                raise  # Ctrl+C, or a programming error: the run is marked, the error goes on
        else:
            self._end(lease, end)
        self._emit_steps(run_id, seen, emit)
        return self.store.run(run_id)

    def _end(self, lease: Lease, end: Waiting | Finished | _Ending) -> None:
        match end:
            case Waiting():
                self.store.release(lease, RunStatus.WAITING)
            case Finished(status=status):
                self.store.release(lease, status)
            case _Ending(status=status, error=error, step=step):
                if error and step is None:
                    step = (StepKind.ERROR, {"message": error})
                self.store.release(lease, status, error, step)

    def _ending(self, exc: BaseException, run_id: str, lease: Lease,
                cancel: Cancel | None) -> _Ending:
        """How an advance that raised ``exc`` leaves the run."""
        stopped = _Ending(RunStatus.STOPPED, None, (StepKind.STOPPED, {}))
        if isinstance(exc, Stopped | KeyboardInterrupt):
            return stopped
        if isinstance(exc, _NoTranscript):
            return _Ending(RunStatus.FAILED, self.hand_over(run_id, lease, str(exc)))
        if not isinstance(exc, openai.APIError):
            return _Ending(RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
        if cancel and cancel.is_set():
            return stopped
        error = self._read_error(exc, run_id)
        if error.kind == "bad_reasoning":
            return _Ending(RunStatus.FAILED,
                           self.hand_over(run_id, lease, _refused_transcript(error)))
        if error.kind == "response_gone":
            previous = self.store.run(run_id).last_response_id
            return _Ending(RunStatus.FAILED,
                           f"The stored response {previous} is gone, and the request sent from "
                           f"the run's transcript instead was refused too "
                           f"({error.message or error.code}); resume retries.")
        return _Ending(RunStatus.FAILED, error.plain())

    def _next(self, run: Run, lease: Lease) -> TurnResult:
        """What the run does next, running any calls still owed an output first."""
        if run.last_response_id is None:
            return NextInput(first_input(run, self.system_prompt(run)))
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
                outputs.append(call_output(call.call_id, output))
            return NextInput(outputs)
        replies = self.store.replies(run.id, unsent_only=True)
        if replies:
            return replies_input(replies)
        return Finished(RunStatus.ASKED if self._asking(run.id) else RunStatus.DONE)

    def _run_call(self, run: Run, lease: Lease, call: Call) -> str | Waiting:
        """Run one saved call as its tool is declared; save its output at once (boundary 3).

        A ``needs_approval`` call is proposed the first time (the run then waits), waits while
        its proposal is pending, and is carried out (or told why not) once a person decided.
        """
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
            else:
                outcome = tool.run(self.context(run, lease, call), args, approval)  # type: ignore[misc]
        else:
            outcome = tool.run(self.context(run, lease, call), args)  # type: ignore[misc]
        text = self._record(lease, call, outcome)
        self._crash_at("after_tool")
        return text

    def _record(self, lease: Lease, call: Call, outcome: Outcome) -> str:
        text = as_output(outcome.output)
        steps = [(StepKind.RESULT, {"call_id": call.call_id, "name": call.name,
                                    "output": outcome.output}), *outcome.steps]
        self.store.record_output(lease, call.call_id, text, steps, outcome.audit)
        return text

    def _turn(self, run: Run, lease: Lease, step: NextInput, emit: OnEvent,
              cancel: Cancel | None) -> None:
        """One streamed request; its response is committed before any of its calls run.

        If the stored response is gone (a 404 naming it: expired, deleted), the same turn is
        sent once more with the transcript, stored again, and the run chains from there.
        """
        started = time.monotonic()
        model, keep_nothing = self.settings.model, self.settings.zero_retention
        params = build_request(
            model=model, run_id=run.id, items=step.items, tools=schemas(self.tools),
            previous_response_id=run.last_response_id, zero_retention=keep_nothing,
            include=needs_include(model, store=not keep_nothing),
            effort=effort_for(model, self.settings.reasoning_effort),
            history=self._history(run) if keep_nothing else None)
        resent: dict[str, Any] | None = None
        with Heartbeat(self.store, lease) as heartbeat:
            try:
                response = stream_response(self.model.client, run.id, params, emit, cancel,
                                           heartbeat)
            except openai.APIStatusError as exc:
                missing = params.get("previous_response_id")
                if not missing or not self._response_gone(exc, missing):
                    raise  # a wrong URL or model, a refused parameter: not the stored response
                history = self._history(run)
                params = resend_request(params, history, step.items)
                resent = {"missing": missing, "items": len(history),
                          "bytes": run.transcript_bytes}
                response = stream_response(self.model.client, run.id, params, emit, cancel,
                                           heartbeat)
        read = read_response(response, step.items, model=model,
                             seconds=time.monotonic() - started)
        self.store.record_response(lease, response_id=read.response_id, calls=read.calls,
                                   steps=read.steps, usage=read.usage,
                                   replies_sent=step.reply_ids, transcript=read.transcript,
                                   resent=resent)

    def _asking(self, run_id: str) -> bool:
        """Whether the run has a question out to the customer: its latest proposal was sent
        back with a question and no reply came since."""
        approvals = self.store.run_approvals(run_id)
        if not approvals or approvals[-1].status != ApprovalStatus.ASKED:
            return False
        asked_at = approvals[-1].decided_at or 0
        return not any(reply.at > asked_at for reply in self.store.replies(run_id))

    def _read_error(self, exc: openai.APIError, run_id: str | None = None) -> ProviderError:
        """The provider's error in plain words (its body read whatever the shape)."""
        previous = self.store.run(run_id).last_response_id if run_id else None
        return provider_error(exc, self.settings.provider, previous)

    def _response_gone(self, exc: openai.APIStatusError, missing: str) -> bool:
        """Whether a refused continuation means the stored response ``missing`` is gone.

        Recognised in every form providers use: a 404 or 400 naming the id anywhere in its
        body, OpenAI's or xAI's ``previous_response_not_found`` code; a bare 404 (xAI's flat
        body says only "Error code: 404") is confirmed by asking for the response itself.
        """
        if provider_error(exc, self.settings.provider, missing).kind == "response_gone":
            return True
        if exc.status_code != 404:
            return False
        try:
            self.model.client.responses.retrieve(missing)
        except openai.NotFoundError:
            return True
        except openai.APIError:
            return False
        return False  # the response is there: the 404 was about something else

    def _history(self, run: Run) -> list[dict[str, Any]]:
        """The run's transcript as input items, checked to reach from the first request to
        the run's last response.

        Raises:
            _NoTranscript: the run started before transcripts were kept (an upgraded store),
                or its transcript does not end at the run's last response.
        """
        if run.last_response_id is None:
            return []
        entries = self.store.transcript(run.id)
        why = transcript_problem(run, entries, self.store.steps(run.id))
        if why:
            raise _NoTranscript(
                f"Run {run.id} needs its own transcript (its stored response "
                f"{run.last_response_id} is gone, or zero retention is on), but {why}, so it "
                f"cannot continue; stored responses expire after {STORED_RESPONSE_DAYS} days.")
        return [entry.item for entry in entries]

    def _emit_steps(self, run_id: str, after: int, emit: OnEvent) -> int:
        steps = self.store.steps(run_id, after)
        for step in steps:
            emit(LiveEvent(run_id, "step", step=step))
        return steps[-1].id if steps else after

    # -- people ---------------------------------------------------------------------------

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None = None,
               keep: list[str] | None = None, limit_cents: int | None = None) -> Approval:
        """Record a person's decision. The run continues on the next :meth:`advance`.

        Args:
            keep: for an approval, the lines (skus) to refund; the others are declined.
                None keeps every proposed line.
            limit_cents: the most ``by`` may approve on the order, in all (an approver's
                limit, see accounts.py): this decision plus what ``by`` approved on the order
                before, on any ticket. None for no limit. Checked inside the decision's
                transaction.

        Raises:
            DecisionRefused: no name, a rejection without a note, lines that are not the
                proposal's, an amount above ``limit_cents``, a kept line that would now pay
                more than its card showed, or a policy that no longer
                allows the refund (a line was refunded elsewhere since, say). An approval
                decided after the run's stored response expired is decided like any other:
                the run continues from its own transcript.
            AlreadyDecided: someone else decided first (audited as 'ignored').
        """
        by, note = one_line(by or "", "approver's name"), (note or "").strip() or None
        if not by:
            raise DecisionRefused("Say who is deciding: an approver's name is required.")
        _check_note_length(note or "", "note")
        if not approve and not note:
            raise DecisionRefused("A rejection needs a note; the agent uses it to explain the "
                                  "decision to the customer.")
        # The policy is re-checked inside the decision's transaction (see Store.decide).
        decided = self.store.decide(approval_id, approve, by, note, keep=keep,
                                    requote=self._requote if approve else None,
                                    limit_cents=limit_cents if approve else None)
        self._crash_at("after_decision")
        return decided

    def ask(self, approval_id: str, by: str, question: str) -> Approval:
        """Send a proposal back: the customer gets ``question``, nothing is paid yet.

        The run emails the question and waits on the customer (RunStatus.ASKED); their reply
        continues it, and the agent may propose again.

        Raises:
            DecisionRefused: no name, or no question.
            AlreadyDecided: someone decided first (audited as 'ignored').
        """
        by, question = one_line(by or "", "approver's name"), (question or "").strip()
        if not by:
            raise DecisionRefused("Say who is asking: an approver's name is required.")
        if not question:
            raise DecisionRefused("Write the question for the customer; the agent sends it "
                                  "to them as it is.")
        _check_note_length(question, "question")
        asked = self.store.ask(approval_id, by, question)
        self._crash_at("after_decision")
        return asked

    def expire(self) -> list[Approval]:
        """Close the approvals nobody decided within ``settings.approval_days``.

        Their runs carry on at the next advance: they tell the customer and leave the team a
        note. Returns the approvals expired now.
        """
        return self.store.expire(self.settings.approval_days * 86400)

    def add_reply(self, run_id: str, text: str, simulated: bool = False) -> Reply:
        """Save a customer's reply to a finished run; the next advance sends it."""
        text = text.strip()
        _require_utf8(text)
        if not text:
            raise RunNotReady("The reply is empty.")
        if len(text) > MAX_EMAIL_CHARS:
            raise RunNotReady(f"The reply is longer than {MAX_EMAIL_CHARS:,} characters.")
        # Accepted or refused in one transaction: a refused reply is never stored.
        return self.store.add_reply(run_id, text, simulated)

    # -- finding runs -------------------------------------------------------------------------

    def claim(self) -> str | None:
        """Take one run that needs a worker, from any host (see Store.claim); its id or None.

        The next ``advance`` of that run in this process continues under the claim's lease.
        """
        lease = self.store.claim(uuid.uuid4().hex)
        if lease is None:
            return None
        self._claimed[lease.run_id] = lease.token
        return lease.run_id

    def resumable(self) -> list[Run]:
        """Runs a resume should pick up: orphaned mid-turn, or decided while nobody ran them."""
        return self.store.orphaned_runs() + self.store.decided_but_waiting()

    @property
    def pid(self) -> int:
        return os.getpid()


class Agent(Loop):
    """Runs refund conversations against one shop, store and model.

    Args:
        settings: configuration; read from the environment when omitted.
        model: an already opened model client (tests pass one to inspect the offline server).
    """

    tools = REFUND_TOOLS
    held_back = HELD_BACK
    default_subject = "Refund request"

    def __init__(self, settings: Settings | None = None, *, model: ModelAccess | None = None):
        super().__init__(settings, model=model)
        self.shop = Shop(self.settings.data_dir)
        # With a shared store (PostgreSQL) the stand-ins keep their records in it, where every
        # host sees them; with SQLite, in JSONL logs beside it.
        shared = self.store if self.store.shared else None
        self.payments = Payments(self.settings.output_dir, shared)
        self.outbox = Outbox(self.settings.output_dir, shared)

    def system_prompt(self, run: Run) -> str:
        return system_prompt(self.shop.info.name, self.shop.today)

    def context(self, run: Run, lease: Lease, call: Call) -> DeskCall:
        return DeskCall(run, lease, call, self.store, self._crash_at, shop=self.shop,
                        payments=self.payments, outbox=self.outbox)

    def hand_over(self, run_id: str, lease: Lease, why: str) -> str:
        return hand_over(self.store, self.shop, self.outbox, run_id, lease, why)

    def start_sample(self, key: str) -> Run:
        sample = self.shop.sample(key)
        return self.start(sample.sender, sample.body, subject=sample.subject,
                          sender_name=sample.from_name, kind=sample.key)

    def _requote(self, approval: Approval, kept: list[str],  # type: ignore[override]
                 held: Mapping[str, Held]) -> Quote | str:
        """What approving these lines of ``approval`` pays today, or why it may not.

        Its age does not matter: a run whose stored response expired meanwhile continues from
        its transcript (see :meth:`_turn`).
        """
        sender = self.store.run(approval.run_id).sender
        order = ShopTools(self.shop, sender, self.store.held_lines).owned_order(approval.order_id)
        if isinstance(order, str):
            return order
        reasons = {line.line: line.reason for line in approval.item_lines}
        shipping = any(line.reason == "shipping" for line in approval.lines)
        requested = [(line, reasons[line]) for line in kept]
        if not approval.item_lines and shipping:
            # The shipping alone, owed after every item was refunded as damaged: priced again
            # as it was proposed (SHIPPING named on its own, see quote_refund).
            requested = [(SHIPPING, "damaged")]
        return quote_refund(order, self.shop.terms, requested, held, self.shop.today,
                            shipping=shipping)

    def quote_kept(self, approval: Approval, keep: list[str] | None = None) -> Quote | str:
        """What approving these lines (all when None) would pay now, or why it would be refused.

        The same pricing the decision runs inside its transaction, for the approver's card.
        """
        keep = [line.line for line in approval.item_lines] if keep is None else keep
        unknown = set(keep) - {line.line for line in approval.item_lines}
        if unknown or (not keep and approval.item_lines):
            return "keep at least one of the proposed lines, and only those."
        held = self.store.held_lines(approval.order_id, except_id=approval.id)
        return self._requote(approval, keep, held)

    def approval_problem(self, approval: Approval) -> str | None:
        """Why approving this refund in full now would be refused, or None."""
        quote = self.quote_kept(approval)
        return quote if isinstance(quote, str) else None

    def policy_facts(self, approval: Approval) -> dict[str, Any]:
        """The policy facts for an approval's order (its own lines left out), for the card."""
        order = self.shop.order(approval.order_id)
        if order is None:
            return {}
        held = self.store.held_lines(approval.order_id, except_id=approval.id)
        return policy_facts(order, self.shop.terms, held, self.shop.today).model_dump(mode="json")


def _require_utf8(*texts: str) -> None:
    """Refuse text that cannot be stored or sent (undecodable bytes from a terminal or file)."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise RunNotReady("The text is not valid UTF-8 (it has undecodable bytes); save it "
                              "as UTF-8 and send it again.") from None


def _refused_transcript(error: ProviderError) -> str:
    """The provider refused the transcript's encrypted reasoning: say so plainly."""
    return ("The model refused this run's transcript: the encrypted reasoning kept in the "
            f"store does not verify ({error.message}). The transcript was changed after the "
            "model wrote it, or was written under another key or provider, so the run "
            "stopped here rather than continue without its reasoning. Restore the store "
            "from a backup, or start a new ticket.")


def _check_note_length(text: str, what: str) -> None:
    """DecisionRefused for a person's note or question over MAX_NOTE_CHARS."""
    if len(text) > MAX_NOTE_CHARS:
        raise DecisionRefused(f"The {what} is {len(text):,} characters long; keep it to "
                              f"{MAX_NOTE_CHARS:,} or fewer.")
