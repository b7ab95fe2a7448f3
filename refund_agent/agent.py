"""The agent: advance a run one model turn at a time, pause before a refund, resume exactly once.

Every front end (terminal, web page, notebook) drives runs through :class:`Agent`. It owns no
state of its own between calls: everything it needs to continue is in the store, so a run can
stop in one process and continue in another, days later.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2  # the openai SDK's HTTP client, whose errors reading a raw stream raises
import openai
from openai.types.responses import Response

from .config import Settings, load_settings
from .crash import crash_point
from .errors import DecisionRefused, LeaseLost, RefundAgentError, RunNotReady
from .escalations import Escalation
from .identity import address_problem
from .model import ModelAccess, open_model, provider_error
from .models import Approval, Call, Reply, Run, RunStatus, Step
from .outbox import Outbox, with_signature
from .payments import Payments
from .policy import SHIPPING, Held, Quote, QuotedLine, policy_facts, quote_refund
from .prompts import system_prompt
from .providers import ProviderError, effort_for, estimate_cost_ticks, needs_include
from .shop import Shop
from .store import Lease, Store
from .text import one_line
from .tools import IssueRefund, ShopTools, as_output, parse_args, tool_schemas

MAX_TURNS = 12
STORED_RESPONSE_DAYS = 30
MAX_EMAIL_CHARS = 20_000
# What a person writes with a decision (a note, a question for the customer), in characters:
# it goes on the card, into the audit and to the model; a page of text is the most it needs.
MAX_NOTE_CHARS = 2_000
# The model's own text (a note for the team, a reasoning summary, a call's arguments as the
# timeline shows them) is kept up to this many characters on the timeline, the rest cut with
# a marker saying how much: a note ends a turn, so there is no call to fail and no way to ask
# for a shorter one, and a 2 MB argument would freeze the page that draws it.
MAX_MODEL_TEXT_CHARS = 10_000
# Asked for where the response would not carry it otherwise (store=false, or a model that does
# not return it unasked; see providers.needs_include), so the transcript holds each reasoning
# item with the encrypted reasoning the provider needs to read it back when the run sends its
# history itself.
INCLUDE = ["reasoning.encrypted_content"]
# OpenAI's code for encrypted reasoning that does not verify (a changed transcript); xAI
# documents none, and its refusal is read from the message (providers.read_error).
BAD_REASONING = "invalid_encrypted_content"


@dataclass(frozen=True)
class LiveEvent:
    """Something a front end may show as it happens.

    ``kind`` is "reasoning", "text" or "arguments" for streamed deltas (``text`` holds the
    delta), "call" when a function call starts streaming (``text`` is its name), and "step"
    when a timeline step has been committed (``step`` holds it).
    """

    run_id: str
    kind: str
    text: str = ""
    step: Step | None = None


OnEvent = Callable[[LiveEvent], None]


class Cancel:
    """A stop button for one advance: sets a flag and closes the in-flight stream.

    Closing the HTTP response makes the streaming loop fail at once, even if the model is in the
    middle of a long pause between events.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._stream: Any = None

    def set(self) -> None:
        self._event.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a dead stream must not hide the stop
                pass

    def is_set(self) -> bool:
        return self._event.is_set()

    def attach(self, stream: Any) -> None:
        self._stream = stream
        if self.is_set():
            stream.close()


class _Heartbeat:
    """Renews a run's lease while a model request streams, so a slow request never loses it.

    If a renewal finds the lease taken over (this process was paused past it), the stream is
    closed and :meth:`check` raises LeaseLost, so nothing from that response is used.
    """

    def __init__(self, store: Store, lease: Lease) -> None:
        self.store, self.lease = store, lease
        self.lost: LeaseLost | None = None
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._beat, daemon=True, name="lease-heartbeat")

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def attach(self, stream: Any) -> None:
        self._stream = stream

    def _beat(self) -> None:
        while not self._stop.wait(self.store.lease_seconds / 3):
            try:
                self.store.renew(self.lease)
            except LeaseLost as lost:
                self.lost = lost
                if self._stream is not None:
                    self._stream.close()
                return
            except RefundAgentError:
                continue  # a busy database: the next beat tries again

    def check(self) -> None:
        if self.lost is not None:
            raise self.lost


class _Pause(Exception):
    """Raised inside a turn when the run must wait for a person."""


class _Stopped(Exception):
    """Raised inside a turn when someone pressed Stop."""


class _NoTranscript(Exception):
    """The run needs its transcript, but it does not go back to the first request."""


def transcript_digest(entries: list[tuple[str, dict[str, Any]]]) -> str:
    """SHA-256 over one response's transcript items (origin and item, canonical JSON).

    Kept in the response's timeline step, written in the same transaction as the items, so an
    item changed, added or removed afterwards (a hand edit, a bad restore, a tampered reasoning
    blob) is found before the transcript is ever sent. It detects changes, it does not
    authenticate: whoever can rewrite the store can rewrite the step too.
    """
    digest = hashlib.sha256()
    for origin, item in entries:
        digest.update(json.dumps([origin, item], sort_keys=True, ensure_ascii=False,
                                 separators=(",", ":")).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _require_utf8(*texts: str) -> None:
    """Refuse text that cannot be stored or sent (undecodable bytes from a terminal or file)."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise RunNotReady("The text is not valid UTF-8 (it has undecodable bytes); save it "
                              "as UTF-8 and send it again.") from None


def _user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def _usage(response: Any, model: str = "") -> dict[str, int]:
    """Tokens and cost from a response; xAI reports cost as ``cost_in_usd_ticks``.

    A provider that reports no cost (OpenAI) gets an estimate from the price table in
    providers.py, marked ``cost_estimated`` so front ends can say so.
    """
    usage = response.usage
    if usage is None:
        return {}
    details = getattr(usage, "input_tokens_details", None)
    ticks = getattr(usage, "cost_in_usd_ticks", None)
    if ticks is None and usage.model_extra:
        ticks = usage.model_extra.get("cost_in_usd_ticks")
    cached = getattr(details, "cached_tokens", 0) or 0
    found = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
             "cached_tokens": cached, "cost_ticks": int(ticks or 0)}
    if ticks is None:
        estimate = estimate_cost_ticks(model or getattr(response, "model", "") or "",
                                       usage.input_tokens, cached, usage.output_tokens)
        if estimate is not None:
            found.update(cost_ticks=estimate, cost_estimated=1)
    return found


def _sse_events(stream: Any) -> Iterator[dict[str, Any]]:
    """The JSON events of a server-sent-event stream (``data:`` lines, blank line between).

    A connection that times out or breaks raises the SDK's own errors, as its streams do.
    """
    data: list[str] = []
    lines = stream.iter_lines()
    while True:
        try:
            line = next(lines, None)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=stream.http_request) from exc
        except (httpx2.RequestError, httpx2.StreamError) as exc:
            raise openai.APIConnectionError(request=stream.http_request) from exc
        if line is None:
            break
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            text = "\n".join(data)
            data = []
            if text.startswith("[DONE]"):
                return
            yield json.loads(text)
    if data and not data[0].startswith("[DONE]"):
        yield json.loads("\n".join(data))


def paid_summary(approval: Approval) -> str:
    """What the payment record says it refunds: the proposal's summary when every line was
    approved; otherwise only the kept lines (the summary names the declined ones too)."""
    if not approval.declined:
        return approval.summary
    kept = "; ".join(f"{line.name} ({line.reason.replace('_', ' ')}) ${line.amount:.2f}"
                     for line in approval.kept)
    return (f"Refund on order {approval.order_id}: {kept}. Approved {len(approval.kept)} of "
            f"{len(approval.lines)} lines.")


def paid_quote(approval: Approval) -> Quote:
    """The refund a decided approval pays: the lines the person kept, at their amounts."""
    return Quote(order_id=approval.order_id, lines=[
        QuotedLine(line=line.line, name=line.name, reason=line.reason,
                   amount_cents=line.amount_cents, allowed_cents=line.allowed_cents,
                   fee_cents=line.fee_cents) for line in approval.kept])


class Agent:
    """Runs refund conversations against one shop, store and model.

    Args:
        settings: configuration; read from the environment when omitted.
        model: an already opened model client (tests pass one to inspect the offline server).
    """

    def __init__(self, settings: Settings | None = None, *, model: ModelAccess | None = None):
        self.settings = settings or load_settings()
        self.shop = Shop(self.settings.data_dir)
        self.store = Store(self.settings.store_target, lease_seconds=self.settings.lease_seconds)
        # With a shared store (PostgreSQL) the stand-ins keep their records in it, where every
        # host sees them; with SQLite, in JSONL logs beside it.
        shared = self.store if self.store.shared else None
        self.payments = Payments(self.settings.output_dir, shared)
        self.outbox = Outbox(self.settings.output_dir, shared)
        self._model = model
        self._crash = self.settings.crash_at
        self._claimed: dict[str, str] = {}

    @property
    def model(self) -> ModelAccess:
        # Opened lazily: deciding or listing the queue should not start a model server.
        if self._model is None:
            self._model = open_model(self.settings)
        return self._model

    # -- starting runs ---------------------------------------------------------------------

    def start(self, sender: str, body: str, *, subject: str = "Refund request",
              sender_name: str = "", kind: str = "custom", raised_by: str | None = None) -> Run:
        """Save a customer's email as a new run (nothing is sent to the model yet).

        ``raised_by`` names the desk account that typed it in: that person may not approve
        its refund (approving.own_ticket_problem).
        """
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
                                    subject=subject.strip() or "Refund request", email=body,
                                    kind=kind, raised_by=raised_by)
        crash_point("after_run_created", self._crash)
        return run

    def start_sample(self, key: str) -> Run:
        sample = self.shop.sample(key)
        return self.start(sample.sender, sample.body, subject=sample.subject,
                          sender_name=sample.from_name, kind=sample.key)

    # -- the loop -------------------------------------------------------------------------

    def advance(self, run_id: str, on_event: OnEvent | None = None,
                cancel: Cancel | None = None) -> Run:
        """Advance the run until it finishes, waits for a person, stops, or fails.

        Each turn is one streamed model request. Before it, the calls of the previous response
        run (each output saved as soon as it returns); a refund call pauses the run instead.

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
        try:
            for _ in range(MAX_TURNS):
                if cancel and cancel.is_set():
                    raise _Stopped
                run = self.store.run(run_id)
                next_input = self._prepare_turn(run, lease)
                seen = self._emit_steps(run_id, seen, emit)
                if next_input is None:
                    self.store.release(lease, RunStatus.ASKED if self._asking(run_id)
                                       else RunStatus.DONE)
                    return self.store.run(run_id)
                items, reply_ids = next_input
                self._turn(run, lease, items, reply_ids, emit, cancel)
                seen = self._emit_steps(run_id, seen, emit)
                crash_point("after_response", self._crash)
            self._finish(lease, RunStatus.FAILED,
                         f"Stopped after {MAX_TURNS} turns without finishing; resume to continue.")
        except _Pause:
            self.store.release(lease, RunStatus.WAITING)
        except LeaseLost:
            raise  # the new owner carries on; writing anything here would be refused anyway
        except (_Stopped, KeyboardInterrupt) as exc:
            self._finish(lease, RunStatus.STOPPED, None, ("stopped", {}))
            if isinstance(exc, KeyboardInterrupt):
                raise
        except _NoTranscript as exc:
            self._finish(lease, RunStatus.FAILED, self._hand_over(run_id, lease, str(exc)))
        except openai.APIError as exc:
            if cancel and cancel.is_set():
                self._finish(lease, RunStatus.STOPPED, None, ("stopped", {}))
            else:
                error = self._read_error(exc, run_id)
                if error.kind == "bad_reasoning":
                    message = self._hand_over(run_id, lease, self._refused_transcript(error))
                elif error.kind == "response_gone":
                    message = self._not_found(run_id, error)
                else:
                    message = error.plain()
                self._finish(lease, RunStatus.FAILED, message)
        except BaseException as exc:
            self._finish(lease, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            raise
        self._emit_steps(run_id, seen, emit)
        return self.store.run(run_id)

    def _asking(self, run_id: str) -> bool:
        """Whether the run has a question out to the customer: its latest proposal was sent
        back with a question and no reply came since."""
        approvals = self.store.run_approvals(run_id)
        if not approvals or approvals[-1].status != "asked":
            return False
        asked_at = approvals[-1].decided_at or 0
        return not any(reply.at > asked_at for reply in self.store.replies(run_id))

    def _hand_over(self, run_id: str, lease: Lease, why: str) -> str:
        """A run that cannot continue: tell the customer a person will follow up, and leave
        the team a note (the run's failure) saying so.

        The email goes through the outbox under a key of the run's own, so however often the
        run is resumed and fails again, the customer gets it once; only ever to the sender.
        A refund paid before the failure is named in it, since the model never got to say so.
        """
        run = self.store.run(run_id)
        paid = [s.data for s in self.store.steps(run_id) if s.kind == "refund"]
        refund = ""
        if paid:
            total = sum(float(d.get("amount") or 0) for d in paid)
            refund = (f" Your refund of ${total:,.2f} has been issued and should reach you "
                      "within a few business days.")
        greeting = f"Hello {run.sender_name}," if run.sender_name else "Hello,"
        body = with_signature(
            f"{greeting}\n\nThank you for your patience.{refund} We could not finish handling "
            "your request automatically, so a member of our team will look at it and follow "
            "up with you personally.", self.shop.info.signature)
        self.store.check_lease(lease)   # a process that lost the run sends nothing
        _record, reused = self.outbox.send(f"{run_id}/follow-up", run.sender,
                                           f"Re: {run.subject}", body)
        told = "was already told" if reused else "was told"
        return (f"{why} A person needs to take this ticket over: the customer ({run.sender}) "
                f"{told} by email that a person will follow up.")

    def _read_error(self, exc: openai.APIError, run_id: str | None = None) -> ProviderError:
        """The provider's error in plain words (its body read whatever the shape)."""
        previous = self.store.run(run_id).last_response_id if run_id else None
        return provider_error(exc, self.settings.provider, previous)

    def _not_found(self, run_id: str, error: ProviderError) -> str:
        """The stored response is gone and the request sent from the transcript failed too."""
        previous = self.store.run(run_id).last_response_id
        return (f"The stored response {previous} is gone, and the request sent from the "
                f"run's transcript instead was refused too ({error.message or error.code}); "
                "resume retries.")

    @staticmethod
    def _refused_transcript(error: ProviderError) -> str:
        """The provider refused the transcript's encrypted reasoning: say so plainly."""
        return ("The model refused this run's transcript: the encrypted reasoning kept in the "
                f"store does not verify ({error.message}). The transcript was changed after the "
                "model wrote it, or was written under another key or provider, so the run "
                "stopped here rather than continue without its reasoning. Restore the store "
                "from a backup, or start a new ticket.")

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
        why = None
        if not run.transcript_complete:
            why = "the run started before refund-agent kept transcripts"
        elif not entries or entries[-1].response_id != run.last_response_id:
            why = ("its transcript does not end at that response (the store was edited, or "
                   "restored from an older copy)")
        else:
            why = self._changed_item(run, entries)
        if why:
            raise _NoTranscript(
                f"Run {run.id} needs its own transcript (its stored response "
                f"{run.last_response_id} is gone, or zero retention is on), but {why}, so it "
                f"cannot continue; stored responses expire after {STORED_RESPONSE_DAYS} days.")
        return [entry.item for entry in entries]

    def _changed_item(self, run: Run, entries: list[Any]) -> str | None:
        """Why the transcript fails its integrity check, or None (see transcript_digest)."""
        digests = {s.data["response_id"]: s.data["transcript_digest"]
                   for s in self.store.steps(run.id)
                   if s.kind == "response" and s.data.get("transcript_digest")}
        if not digests:
            return None   # written before transcripts were checked
        groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for entry in entries:
            groups.setdefault(entry.response_id, []).append((entry.origin, entry.item))
        for response_id, group in groups.items():
            expected = digests.get(response_id)
            if expected is not None and transcript_digest(group) != expected:
                return (f"its transcript was changed after it was written (an item of "
                        f"response {response_id} differs from what was sent or received)")
        missing = [rid for rid in digests if rid not in groups]
        if missing:
            return f"its transcript lost the items of response {missing[0]}"
        return None

    def _finish(self, lease: Lease, status: RunStatus, error: str | None,
                step: tuple[str, dict] | None = None) -> None:
        if error and step is None:
            step = ("error", {"message": error})
        self.store.release(lease, status, error, step)

    def _emit_steps(self, run_id: str, after: int, emit: OnEvent) -> int:
        steps = self.store.steps(run_id, after)
        for step in steps:
            emit(LiveEvent(run_id, "step", step=step))
        return steps[-1].id if steps else after

    def _prepare_turn(self, run: Run, lease: Lease
                      ) -> tuple[list[dict[str, Any]], list[int]] | None:
        """The input for the next request, running any calls still owed an output.

        Returns None when the run is finished (the last response made no calls and no customer
        reply is waiting). Raises _Pause when a refund waits for a person.
        """
        if run.last_response_id is None:
            email = (f"From: {run.sender_name} <{run.sender}>\nSubject: {run.subject}\n\n"
                     f"{run.email}")
            system = {"type": "message", "role": "system",
                      "content": system_prompt(self.shop.info.name, self.shop.today)}
            return [system, _user_message(email)], []
        calls = self.store.calls(run.last_response_id)
        if calls:
            outputs = []
            refund_not_made = False
            for call in calls:
                if call.output is not None:
                    output = call.output
                elif refund_not_made and call.name == "send_customer_message":
                    # Written in the same response as a refund proposal, before anyone decided
                    # it: it may promise a refund that was not made, so it does not go out.
                    output = as_output({"error": "Not sent: this email was written before the "
                                        "refund in the same response was decided, and that "
                                        "refund was not made. Write it again with the outcome."})
                    self.store.record_output(lease, call.call_id, output, [
                        ("result", {"call_id": call.call_id, "name": call.name,
                                    "output": json.loads(output)})])
                else:
                    output = self._run_call(run, lease, call)
                if call.name == "issue_refund":
                    refund_not_made = json.loads(output).get("status") != "refunded"
                outputs.append({"type": "function_call_output", "call_id": call.call_id,
                                "output": output})
            return outputs, []
        replies = self.store.replies(run.id, unsent_only=True)
        if replies:
            return ([_user_message(f"The customer wrote back:\n\n{r.text}") for r in replies],
                    [r.id for r in replies])
        return None

    def _turn(self, run: Run, lease: Lease, items: list[dict[str, Any]], reply_ids: list[int],
              emit: OnEvent, cancel: Cancel | None) -> None:
        """One streamed request; its response is committed before any of its calls run.

        The request continues the stored response with ``previous_response_id``, unless zero
        retention is on: then nothing is stored and the run's transcript goes along each time.
        If the stored response is gone (a 404 naming it: expired, deleted), the same turn is
        sent once more with the transcript, stored again, and the run chains from there.
        """
        started = time.monotonic()
        keep_nothing = self.settings.zero_retention
        model = self.settings.model
        params: dict[str, Any] = {
            "model": model, "input": items, "tools": tool_schemas(),
            "store": not keep_nothing, "stream": True,
            "parallel_tool_calls": False, "prompt_cache_key": run.id,
        }
        if needs_include(model, store=not keep_nothing):
            params["include"] = INCLUDE
        if keep_nothing:
            params["input"] = self._history(run) + items
        elif run.last_response_id:
            params["previous_response_id"] = run.last_response_id
        effort = effort_for(model, self.settings.reasoning_effort)
        if effort:
            params["reasoning"] = {"effort": effort}
        resent: dict[str, Any] | None = None
        with _Heartbeat(self.store, lease) as heartbeat:
            try:
                response = self._stream(run.id, params, emit, cancel, heartbeat)
            except openai.APIStatusError as exc:
                missing = params.get("previous_response_id")
                if not missing or not self._response_gone(exc, missing):
                    raise  # a wrong URL or model, a refused parameter: not the stored response
                history = self._history(run)
                params.pop("previous_response_id")
                params.update(input=history + items, store=True)  # chain from the new one
                resent = {"missing": missing, "items": len(history),
                          "bytes": run.transcript_bytes}
                response = self._stream(run.id, params, emit, cancel, heartbeat)
        steps: list[tuple[str, dict[str, Any]]] = []
        calls: list[tuple[str, str, str]] = []
        text = ""
        for item in response.output:
            if item.type == "reasoning":
                # Some models return a summary, others the reasoning text itself, others
                # (encrypted) nothing readable at all; show whatever is readable.
                parts = [*(item.summary or []), *(item.content or [])]
                summary = " ".join(p.text for p in parts)
                if summary.strip():
                    steps.append(("reasoning", {"text": _capped(summary)}))
            elif item.type == "message":
                text += "".join(getattr(c, "text", "") or "" for c in item.content)
            elif item.type == "function_call":
                calls.append((item.call_id, item.name, item.arguments))
                # The timeline shows the arguments; the call runs (and is refused, when too
                # long) from the calls table, which keeps them whole.
                steps.append(("call", {"call_id": item.call_id, "name": item.name,
                                       "arguments": _capped(item.arguments)}))
        if text.strip():
            # Text next to calls is commentary; text with no calls ends the turn: the note.
            steps.append(("text" if calls else "note", {"text": _capped(text.strip())}))
        usage = _usage(response, model)
        # What this request added to the conversation, then every output item as it arrived
        # (to_dict keeps exactly the fields the API sent, encrypted reasoning included).
        transcript = [*(("input", item) for item in items),
                      *(("output", item.to_dict(mode="json")) for item in response.output)]
        steps.append(("response", {"response_id": response.id,
                                   "seconds": round(time.monotonic() - started, 3), **usage,
                                   "transcript_digest": transcript_digest(transcript)}))
        self.store.record_response(lease, response_id=response.id, calls=calls, steps=steps,
                                   usage=usage, replies_sent=reply_ids, transcript=transcript,
                                   resent=resent)

    def _stream(self, run_id: str, params: dict[str, Any], emit: OnEvent,
                cancel: Cancel | None, heartbeat: _Heartbeat) -> Any:
        """Stream one response, surfacing deltas; returns the completed response.

        The SDK sends the request (retries, timeouts, errors as ever), but its events are read
        here as plain JSON: typing every event as a pydantic object, most of them deltas or
        echoes of the whole response, cost more CPU than anything else in a turn. Only the
        final response becomes the SDK's ``Response``. The input items and tool schemas go as
        ``extra_body``, already plain JSON, which skips the SDK's walk over them looking for
        fields to rename (there are none in them).
        """
        params = dict(params)
        body = {key: params.pop(key) for key in ("input", "tools") if key in params}
        raw = self.model.client.responses.with_streaming_response.create(
            **params, extra_body=body or None)
        stream = raw.__enter__()
        heartbeat.attach(stream)
        if cancel:
            cancel.attach(stream)
        final = None
        try:
            for event in _sse_events(stream):
                if cancel and cancel.is_set():
                    raise _Stopped
                kind = event.get("type")
                if kind in ("response.reasoning_summary_text.delta",
                            "response.reasoning_text.delta"):
                    emit(LiveEvent(run_id, "reasoning", event.get("delta") or ""))
                elif kind == "response.output_text.delta":
                    emit(LiveEvent(run_id, "text", event.get("delta") or ""))
                elif (kind == "response.output_item.added"
                      and (event.get("item") or {}).get("type") == "function_call"):
                    emit(LiveEvent(run_id, "call", event["item"].get("name") or ""))
                elif kind == "response.function_call_arguments.delta":
                    emit(LiveEvent(run_id, "arguments", event.get("delta") or ""))
                elif kind in ("response.completed", "response.incomplete"):
                    # xAI documents response.incomplete as a terminal event carrying the
                    # output (cut short by a limit); its items are kept like a completed one's.
                    final = Response.construct(**event["response"])
                elif kind in ("response.failed", "error"):
                    raise openai.APIError(f"The model stream ended with {kind}.",
                                          request=stream.http_request, body=event)
        except (openai.APIError, httpx2.HTTPError, httpx2.StreamError):
            heartbeat.check()   # the stream was closed because the run was lost
            if cancel and cancel.is_set():
                raise _Stopped from None
            raise
        finally:
            raw.__exit__(None, None, None)
        heartbeat.check()
        if final is None:
            raise openai.APIConnectionError(
                message="The model stream ended before the response was complete.",
                request=stream.http_request)
        return final

    # -- running calls -----------------------------------------------------------------------

    def _tools(self, run: Run) -> ShopTools:
        return ShopTools(self.shop, run.sender, self.store.held_lines)

    def _run_call(self, run: Run, lease: Lease, call: Call) -> str:
        """Run one saved call and save its output at once (boundary 3)."""
        crash_point("before_tool", self._crash)
        args = parse_args(call.name, call.arguments)
        audit = None
        if isinstance(args, str):
            output, steps = {"error": args}, []
        elif call.name == "issue_refund":
            output, steps, audit = self._refund(run, lease, call, args)
        elif call.name == "send_customer_message":
            output, steps = self._email(run, lease, call, args.message)
        elif call.name == "escalate":
            # Stored with the output, in its transaction, once per call key (escalations.py).
            reason = " ".join(args.reason.split())
            output = {"status": "escalated", "kind": args.kind,
                      "next": "A team lead sees this ticket in the escalation queue. You may "
                              "tell the customer a lead will look at it."}
            steps = [("escalation", {"key": call.key, "kind": args.kind, "reason": reason})]
        else:
            output = getattr(self._tools(run), call.name)(args)
            steps = []
        text = as_output(output)
        steps = [("result", {"call_id": call.call_id, "name": call.name, "output": output}),
                 *steps]
        self.store.record_output(lease, call.call_id, text, steps, audit)
        crash_point("after_tool", self._crash)
        return text

    def _refund(self, run: Run, lease: Lease, call: Call, args: IssueRefund
                ) -> tuple[dict[str, Any], list, dict[str, Any] | None]:
        """issue_refund: queue it for a person, or carry out the person's decision."""
        approval = self.store.find_approval(call.key)
        if approval is None:
            tools = self._tools(run)
            queued = self.store.queue_approval(
                lease, response_id=call.response_id, call_id=call.call_id,
                order_id=args.order_id, summary=args.summary.strip(), customer=run.sender,
                price=lambda held: tools.quote(args, held))
            if isinstance(queued, str):
                audit = {"event": "refused", "actor": "agent", "order_id": args.order_id,
                         "note": queued, "lines": [{"line": line, "reason": reason}
                                                   for line, reason in args.requested()]}
                return {"error": queued}, [], audit
            crash_point("after_approval_queued", self._crash)
            raise _Pause
        if approval.status == "pending":
            raise _Pause
        lines = [{"line": line.line, "item": line.name, "reason": line.reason,
                  "amount": line.amount} for line in approval.lines]
        if approval.status == "rejected":
            return ({"status": "rejected", "rejected_by": approval.decided_by,
                     "note": approval.note or "", "lines": lines}, [], None)
        if approval.status == "asked":
            return ({"status": "needs_information", "asked_by": approval.decided_by,
                     "question": approval.note or "", "lines": lines,
                     "next": "Nothing was refunded. Ask the customer the question; when they "
                             "reply, propose the refund again if the policy allows it."},
                    [], None)
        if approval.status == "expired":
            return ({"status": "expired", "note": approval.note or "", "lines": lines,
                     "next": "Nothing was refunded: nobody decided in time. Tell the customer "
                             "and leave a note so the team follows up."}, [], None)
        # Approved: pay exactly what the person approved. The policy was checked inside the
        # decision's transaction and the lines stay held, so nothing can have taken them since.
        quote = paid_quote(approval)
        crash_point("before_refund", self._crash)
        self.store.check_lease(lease)   # a process that lost the run pays nothing
        refund, reused = self.payments.refund(approval.id, quote, paid_summary(approval))
        crash_point("after_refund", self._crash)
        audit = {"event": "reused" if reused else "issued", "actor": "payments",
                 "approval_id": approval.id, "order_id": approval.order_id,
                 "amount": approval.amount, "note": refund["refund_id"],
                 "lines": [{"line": q.line, "reason": q.reason, "amount_cents": q.amount_cents}
                           for q in quote.lines]}
        output = {"status": "refunded", "refund_id": refund["refund_id"],
                  "amount": approval.amount, "approved_by": approval.decided_by,
                  "lines": [line for line in lines if line["line"] in quote.line_ids()]}
        if approval.declined:
            output["declined"] = [{"line": line.line, "item": line.name}
                                  for line in approval.declined]
            output["note"] = approval.note or ""
        return output, [("refund", {**output, "reused": reused})], audit

    def _email(self, run: Run, lease: Lease, call: Call, message: str
               ) -> tuple[dict[str, Any], list]:
        """send_customer_message: always to the sender, signed once, sent once per call key."""
        body = with_signature(message, self.shop.info.signature)
        self.store.check_lease(lease)   # a process that lost the run sends nothing
        record, reused = self.outbox.send(call.key, run.sender, f"Re: {run.subject}", body)
        crash_point("after_email", self._crash)
        output = {"status": "sent", "to": run.sender, "message_id": record["message_id"]}
        return output, [("message", {"to": run.sender, "body": body, "reused": reused})]

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
                                    limit_cents=limit_cents if approve else None,
                                    two_person_above_cents=self.shop.info.desk
                                    .two_person_above_cents)
        crash_point("after_decision", self._crash)
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
        crash_point("after_decision", self._crash)
        return asked

    def hand_off(self, approval_id: str, by: str, note: str | None = None) -> Escalation:
        """Send a pending refund to a lead (an approver over their limit); audited.

        Raises:
            DecisionRefused: no name, or it already waits for a lead.
            AlreadyDecided: it was decided already.
        """
        by, note = one_line(by or "", "approver's name"), (note or "").strip() or None
        if not by:
            raise DecisionRefused("Say who is sending it: an approver's name is required.")
        _check_note_length(note or "", "note")
        return self.store.hand_off(approval_id, by, note)

    def take(self, escalation_id: int, by: str) -> Escalation:
        """A lead picks up an escalation (compare-and-set, audited).

        Raises:
            DecisionRefused: no name.
            AlreadyDecided: someone took it first.
        """
        by = one_line(by or "", "lead's name")
        if not by:
            raise DecisionRefused("Say who takes it: a name is required.")
        return self.store.take_escalation(escalation_id, by)

    def expire(self) -> list[Approval]:
        """Close the approvals nobody decided within ``settings.approval_days``.

        Their runs carry on at the next advance: they tell the customer and leave the team a
        note. Returns the approvals expired now.
        """
        return self.store.expire(self.settings.approval_days * 86400)

    def _requote(self, approval: Approval, kept: list[str], held: Mapping[str, Held]
                 ) -> Quote | str:
        """What approving these lines of ``approval`` pays today, or why it may not.

        Its age does not matter: a run whose stored response expired meanwhile continues from
        its transcript (see :meth:`_turn`).
        """
        order = self._tools(self.store.run(approval.run_id)).owned_order(approval.order_id)
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


def _capped(text: str) -> str:
    """The model's text for the timeline, cut at MAX_MODEL_TEXT_CHARS with a marker."""
    if len(text) <= MAX_MODEL_TEXT_CHARS:
        return text
    cut = len(text) - MAX_MODEL_TEXT_CHARS
    return f"{text[:MAX_MODEL_TEXT_CHARS]} [... {cut:,} more characters not kept]"


def _check_note_length(text: str, what: str) -> None:
    """DecisionRefused for a person's note or question over MAX_NOTE_CHARS."""
    if len(text) > MAX_NOTE_CHARS:
        raise DecisionRefused(f"The {what} is {len(text):,} characters long; keep it to "
                              f"{MAX_NOTE_CHARS:,} or fewer.")
