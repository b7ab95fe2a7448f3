"""The web app's background worker: advances runs in threads owned by the server process.

A Streamlit script reruns for every click and every page refresh, and a browser tab can close
at any moment, so runs cannot live inside a page. One :class:`Worker` per server process owns
them instead: each active run gets a thread, a :class:`~refund_agent.desk.agent.Cancel` for the Stop
button, and a small in-memory buffer of the deltas the model is streaming, which any page may
read. Everything durable is in the store; the buffer is only for watching a turn as it happens.

At most ``settings.concurrency`` runs (REFUND_AGENT_CONCURRENCY, as ``refund-agent work``) have a
thread at once; the others wait in order for a free slot, shown as working, and Stop works on
them too (the run stops before its first request).

The worker never calls Streamlit. At start-up it resumes the runs an earlier process left
behind: runs cut off mid-turn, and runs whose refund was decided while nobody advanced them.
It also keeps the audit panel's integrity check going in the background (see integrity.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from ..desk.agent import Agent
from ..desk.customer import converse
from ..errors import RefundAgentError, RunNotReady
from ..models import Approval, Escalation, Run, RunStatus
from ..outside.mailin.intake import release_held
from ..outside.mailin.loops import MailCap
from ..streaming import Cancel, LiveEvent
from .integrity import IntegrityWatch
from .views import DrainMeter, LiveSegment

log = logging.getLogger(__name__)

SWEEP_EVERY = 60.0  # seconds between sweeps: approvals nobody decided in time, orphaned runs

# The persona model keeps an angry customer going; a person's reply does not (see
# cli/tickets.py:drive).
SIMULATED_KINDS = frozenset({"angry"})


@dataclass
class _Job:
    """One run's thread and what the page may want to know about it while it works."""

    cancel: Cancel = field(default_factory=Cancel)
    thread: threading.Thread | None = None
    segments: list[LiveSegment] = field(default_factory=list)
    # Set when someone asks to advance the run while this thread is finishing (an approval
    # clicked in the instant between the run pausing and its thread returning).
    again: bool | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Waiting for a free slot (the worker's bound): no thread yet.
    queued: bool = False
    simulate: bool = True   # the model plays the customer (see SIMULATED_KINDS)

    def alive(self) -> bool:
        """Advancing, or waiting in line to advance."""
        return self.queued or (self.thread is not None and self.thread.is_alive())


class Worker:
    """Runs the agent for every browser session of one server process.

    Args:
        agent: the agent whose store, model and shop the runs use.
    """

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.pid = os.getpid()
        self.started_at: float | None = None
        self.recovered: list[str] = []
        self._jobs: dict[str, _Job] = {}
        # The bound on runs advanced at once, and the runs waiting for a slot, oldest first.
        self.slots = agent.settings.concurrency
        self._advancing = 0
        self._queue: deque[str] = deque()
        # How fast the tickets waiting for the agent drain, as the inbox sees it (any host's).
        self.drain = DrainMeter()
        self._problems: dict[str, str] = {}
        self._lock = threading.RLock()
        self._running = False
        self._sweeper: threading.Thread | None = None
        # Moves with every streamed delta and every run starting or ending here: with the
        # store's change counter, it tells a page whether anything it shows has changed.
        self.version = 0
        self._stopping = threading.Event()
        self.integrity = IntegrityWatch(agent.store, agent.settings.output_dir, self._changed)

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> list[str]:
        """Start taking work and resume what an earlier process left unfinished.

        Returns:
            The ids of the runs it resumed.
        """
        with self._lock:
            if self._running:
                return self.recovered
            self._running = True
            self.started_at = time.time()
        # Open the model and the effect log once here, so the run threads do not race to
        # open them lazily.
        _ = self.agent.model, self.agent.effects
        self.recovered = [run.id for run in self.agent.resumable() if self._launch(run.id)]
        if self.recovered:
            log.info("Resumed %d run(s) left by an earlier process: %s", len(self.recovered),
                     ", ".join(self.recovered))
        self._stopping.clear()
        self._sweeper = threading.Thread(target=self._sweep, name="refund-sweep", daemon=True)
        self._sweeper.start()
        self.integrity.start()
        return self.recovered

    def _changed(self) -> None:
        """Something a page shows changed in this process (pages compare ``version``)."""
        self.version += 1

    def expire(self) -> list[Approval]:
        """Expire the approvals nobody decided in time and let their runs tell the customer."""
        self.agent.apply_timeouts()   # remind, then escalate, before the expiry (once each)
        expired = self.agent.expire()
        for approval in expired:
            self._launch(approval.run_id)
        return expired

    def release_held(self) -> list[str]:
        """Continue the runs whose customers' replies were held (they came while the run
        worked or waited on a person) and that can take them now; a receiver need not run."""
        if not self._running:   # shutting down: a later worker claims what is released
            return []
        released = release_held(self.agent.store, log.info, MailCap.of(self.agent.settings))
        for run_id in released:
            self._launch(run_id, simulate=False)
        return released

    def _sweep(self) -> None:
        """Every SWEEP_EVERY seconds: expire what waited too long, and pick up runs whose owner
        died since this server started (a terminal killed mid-turn, another host on
        PostgreSQL). Only runs whose lease is dead are taken; a live owner keeps its run."""
        first = True   # start() has just resumed what was orphaned; expiry is due now too
        while True:
            try:
                self.expire()
                self.release_held()
                for run in [] if first else self.agent.store.orphaned_runs(
                        self.agent.agent_name):
                    self._launch(run.id)
            except Exception:  # noqa: BLE001 - a sweep that failed is retried next time
                log.exception("The worker's sweep failed")
            first = False
            if self._stopping.wait(SWEEP_EVERY):
                return

    @property
    def running(self) -> bool:
        return self._running

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every active run at its last stored response and wait for the threads."""
        self._stopping.set()
        self.integrity.stop()
        with self._lock:
            self._running = False
            # Runs still in line never started here: they stay working and unleased, so the
            # next process (a page's, or `refund-agent work`) takes them up.
            for run_id in self._queue:
                self._jobs.pop(run_id, None)
            self._queue.clear()
            jobs = list(self._jobs.values())
        for job in jobs:
            job.cancel.set()
        deadline = time.monotonic() + timeout
        for job in jobs:
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))

    # -- what pages ask for --------------------------------------------------------------------

    def submit_sample(self, key: str) -> Run:
        """Start one of the shop's sample tickets."""
        self._check_running()
        run = self.agent.start_sample(key)
        self._launch(run.id)
        return run

    def submit_email(self, sender: str, body: str, *, subject: str = "Refund request",
                     sender_name: str = "", raised_by: str | None = None) -> Run:
        """Start a ticket from an email typed into the page.

        Raises:
            RunNotReady: the address or the email is not usable.
        """
        self._check_running()
        run = self.agent.start(sender, body, subject=subject, sender_name=sender_name,
                               raised_by=raised_by)
        self._launch(run.id)
        return run

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None = None,
               keep: list[str] | None = None, limit_cents: int | None = None,
               units: dict[str, int] | None = None, fingerprint: str | None = None
               ) -> Approval:
        """Record a decision, then continue its run in the background.

        Args:
            keep: for an approval, the lines (skus) to refund; the others are declined. None
                keeps every proposed line.
            units: kept lines approved for fewer units than proposed (sku -> units).
            limit_cents: the deciding account's approval limit (None: no limit).
            fingerprint: the approval as the review showed it (Approval.fingerprint).

        Raises:
            AlreadyDecided: someone decided first (its message names who).
            DecisionRefused: no name, a rejection without a note, no line kept, or a policy
                that no longer allows the refund.
        """
        self._check_running()
        decided = self.agent.decide(approval_id, approve, by, note, keep=keep,
                                    limit_cents=limit_cents, units=units,
                                    fingerprint=fingerprint)
        self._launch(decided.run_id)
        return decided

    def ask(self, approval_id: str, by: str, question: str,
            fingerprint: str | None = None) -> Approval:
        """Send a proposal back to the customer with a question, then continue its run.

        Raises:
            AlreadyDecided: someone decided first.
            DecisionRefused: no name or no question.
        """
        self._check_running()
        asked = self.agent.ask(approval_id, by, question, fingerprint=fingerprint)
        self._launch(asked.run_id)
        return asked

    def hand_off(self, approval_id: str, by: str, note: str | None = None) -> Escalation:
        """Send a pending refund to a lead (nothing runs: the refund keeps waiting)."""
        self._check_running()
        return self.agent.hand_off(approval_id, by, note)

    def take(self, escalation_id: int, by: str) -> Escalation:
        """A lead picks up an escalation."""
        return self.agent.take(escalation_id, by)

    def stop(self, run_id: str, by: str | None = None) -> bool:
        """Abort the run's in-flight model request; True if this process was advancing it.
        ``by``: who pressed Stop, for the audit (the run's step says only that it stopped)."""
        with self._lock:
            job = self._jobs.get(run_id)
            if job is None or not job.alive():
                return False
            job.again = None  # a stop also cancels a pending go-again
            job.cancel.set()
            if job.queued:
                # Out of line and started now, past the bound: with its cancel set, the
                # advance only marks the run stopped (no request), as Stop does mid-turn.
                self._queue.remove(run_id)
                self._start(run_id, job)
        if by:
            self.agent.store.record_stop(run_id, by)
        return True

    def resume(self, run_id: str) -> bool:
        """Continue a stopped, failed or orphaned run.

        Raises:
            RunNotReady: the run is waiting for a person, finished, or already active.
        """
        self._check_running()
        run = self.agent.store.run(run_id)
        if run.status == RunStatus.WAITING:
            raise RunNotReady("This run is waiting for a person to approve or reject its refund.")
        if run.status in (RunStatus.DONE, RunStatus.ASKED):
            raise RunNotReady("This run has finished; reply as the customer to continue it.")
        if self.is_active(run_id):
            raise RunNotReady("This run is already working.")
        return self._launch(run_id)

    def reply(self, run_id: str, text: str) -> None:
        """Save a customer's reply (typed by a person) and continue the run with it.

        Raises:
            RunNotReady: the reply is empty, or the run has not finished.
        """
        self._check_running()
        self.agent.add_reply(run_id, text)
        self._launch(run_id, simulate=False)

    def is_active(self, run_id: str) -> bool:
        """True while a thread of this process is advancing the run."""
        with self._lock:
            job = self._jobs.get(run_id)
        return job is not None and job.alive()

    def active_runs(self) -> list[str]:
        """The runs advancing here, or waiting for a slot."""
        with self._lock:
            return [run_id for run_id, job in self._jobs.items() if job.alive()]

    def load(self) -> tuple[int, int]:
        """(runs advancing now, runs waiting for a free slot)."""
        with self._lock:
            return self._advancing, len(self._queue)

    def live(self, run_id: str) -> list[LiveSegment]:
        """What the model has streamed so far in the run's current turn (empty between turns)."""
        with self._lock:
            job = self._jobs.get(run_id)
        if job is None:
            return []
        with job.lock:
            return list(job.segments)

    def problem(self, run_id: str) -> str | None:
        """Why this process could not advance the run last time (e.g. another process had it)."""
        return self._problems.get(run_id)

    # -- threads -------------------------------------------------------------------------

    def _check_running(self) -> None:
        if not self._running:
            raise RunNotReady("The background worker is not running; restart the server.")

    def _launch(self, run_id: str, simulate: bool = True) -> bool:
        """Advance the run in a thread of its own, or once a slot frees (the bound); False if
        it is already advancing (it will go again) or waiting in line."""
        with self._lock:
            if not self._running:
                return False
            job = self._jobs.get(run_id)
            if job is not None and job.queued:
                job.simulate = job.simulate or simulate   # as a go-again merges (below)
                return False
            if job is not None and job.alive():
                job.again = simulate if job.again is None else job.again or simulate
                return False
            job = _Job(simulate=simulate)
            self._jobs[run_id] = job
            self._problems.pop(run_id, None)
            if self._advancing < self.slots:
                self._start(run_id, job)
            else:
                job.queued = True
                self._queue.append(run_id)
            self.version += 1
            return True

    def _start(self, run_id: str, job: _Job) -> None:
        """Give the job its thread (the caller holds the lock and checked the bound)."""
        job.queued = False
        job.thread = threading.Thread(target=self._work, args=(run_id, job, job.simulate),
                                      name=f"refund-run-{run_id}", daemon=True)
        self._advancing += 1
        job.thread.start()

    def _work(self, run_id: str, job: _Job, simulate: bool) -> None:
        def on_event(event: LiveEvent) -> None:
            self.version += 1
            with job.lock:
                if event.kind == "step":
                    # The turn is committed: the page reads it from the store from now on.
                    job.segments.clear()
                elif event.kind == "call":
                    job.segments.append(LiveSegment("call", name=event.text))
                elif event.kind == "arguments" and job.segments and \
                        job.segments[-1].kind == "call":
                    last = job.segments[-1]
                    job.segments[-1] = LiveSegment("call", last.text + event.text, last.name)
                elif event.kind in ("reasoning", "text"):
                    if job.segments and job.segments[-1].kind == event.kind:
                        last = job.segments[-1]
                        job.segments[-1] = LiveSegment(event.kind, last.text + event.text)
                    else:
                        job.segments.append(LiveSegment(event.kind, event.text))

        try:
            run = self.agent.store.run(run_id)
            if simulate and run.kind in SIMULATED_KINDS:
                converse(self.agent, run_id, on_event, job.cancel)
            else:
                self.agent.advance(run_id, on_event, job.cancel)
        except RefundAgentError as exc:  # e.g. RunBusy: a terminal process has the run
            self._problems[run_id] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a thread has nobody to raise to
            # advance() has already marked the run failed with this message; keep it for the
            # page too, and log the traceback for whoever runs the server.
            log.exception("Run %s failed", run_id)
            self._problems[run_id] = f"{type(exc).__name__}: {exc}"
        finally:
            with job.lock:
                job.segments.clear()
            with self._lock:
                again = job.again
                if self._jobs.get(run_id) is job:
                    del self._jobs[run_id]
                self._advancing -= 1
                # The slot goes to the run that waited longest.
                while self._queue and self._advancing < self.slots and self._running:
                    queued = self._queue.popleft()
                    self._start(queued, self._jobs[queued])
                self.version += 1
            if again is not None and not job.cancel.is_set():
                self._launch(run_id, simulate=again)
            try:   # a reply that came while this run worked can be taken now
                self.release_held()
            except RefundAgentError:
                log.exception("Releasing held replies failed (the next sweep tries again)")
