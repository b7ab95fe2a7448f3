"""``refund-agent work``: claim runs and advance up to N of them at once, each in a thread of
its own under its own lease, with a progress line a team can read.

Why threads: the loop is synchronous and a run spends nearly all its time waiting on the
model (0.5 to 15 s a reply) while its own work is a few milliseconds of CPU; a thread per run
in flight costs a stack and a store connection, and the store (a connection per thread) and
the openai client are safe to share between threads. The boundaries, the leases and the crash
points are the loop's own, untouched: a crash point reached by any thread kills the process
with every run in flight, and each is then continued from its last boundary.

Stopping: the first Ctrl+C or SIGTERM stops taking runs; those in flight get ``grace``
seconds to reach the end of their advance (done, waiting on a person) on their own, then the
rest are cancelled (Loop.advance's ``cancel``: the run stops at its last stored response as the
reply it awaits arrives, unused; nobody watches a worker's runs, so it asks for whole replies,
which nothing cuts short before their first byte) and handed back, so the next worker, here or
on another host, claims them again. A second Ctrl+C cancels without waiting out the grace.
Nothing is left half done either way: what was not committed is sent again, each effect is
recorded once under its key.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

from ..desk.agent import Agent
from ..desk.customer import converse
from ..errors import LeaseLost, RefundAgentError, RunBusy
from ..models import Run, RunStatus
from ..outside.mailin.intake import release_held
from ..outside.mailin.loops import MailCap
from ..streaming import Cancel

SWEEP_EVERY = 60.0     # seconds between a worker's sweeps of the timeouts and the expiry
GRACE = 30.0           # seconds the runs in flight get to finish after Ctrl+C or SIGTERM
PROGRESS_EVERY = 10.0  # seconds between progress lines when the output is not a terminal
POLL = 0.2             # seconds between looks for new runs when there are none

# What a finished advance counts as on the progress line.
WAITING_ON_PERSON = (RunStatus.WAITING, RunStatus.ASKED)


@dataclass
class Tally:
    """What the worker has done since it started, for its progress line."""

    in_flight: int = 0
    done: int = 0
    waiting: int = 0        # left waiting on a person (an approval, the customer's answer)
    failed: int = 0         # failed or stopped
    rate_limited: int | None = None   # 429s the process's rate limiter met, if it has one

    def line(self) -> str:
        limited = ("" if self.rate_limited is None
                   else f", {self.rate_limited} rate-limited (429) answers")
        return (f"Working: {self.in_flight} in flight, {self.done} done, {self.waiting} waiting "
                f"on a person, {self.failed} failed or stopped{limited}")


class Progress:
    """The progress line: redrawn in place on a terminal (run lines print above it), a plain
    line every ``every`` seconds, when it changed, into a pipe or a file."""

    def __init__(self, out: TextIO, every: float = PROGRESS_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out
        self.live = hasattr(out, "isatty") and out.isatty()
        self.every = every
        self.clock = clock
        self._redraw: Callable[[str], None] = getattr(out, "redraw", None) or (
            lambda line: out.write("\r" + line))
        self._width = 0           # how much of the terminal's line the last redraw covered
        self._printed = ""        # the last plain progress line
        self._at = -every

    def say(self, text: str) -> None:
        """A line of its own (a run's end, a note), above the progress line on a terminal."""
        if self.live and self._width:
            self._redraw(text.ljust(self._width))
            self.out.write("\n")
            self._width = 0
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def show(self, tally: Tally, force: bool = False) -> None:
        text = tally.line()
        if self.live:
            self._redraw(text.ljust(self._width))
            self._width = len(text)
        elif (force or self.clock() - self._at >= self.every) and text != self._printed:
            self._at, self._printed = self.clock(), text
            self.out.write(text + "\n")
        self.out.flush()

    def end(self) -> None:
        """Leave the terminal's line as it is and go to the next one."""
        if self.live and self._width:
            self.out.write("\n")
            self._width = 0
        self.out.flush()


def advance_one(agent: Agent, run_id: str, cancel: Cancel) -> Run:
    """Advance one claimed run (the angry-customer sample with the model writing back as the
    customer, as cli/tickets.py:drive does); nobody watches, so no events are read back."""
    if agent.store.run(run_id).kind == "angry":
        return converse(agent, run_id, None, cancel)
    return agent.advance(run_id, None, cancel)


def hand_back(agent: Agent, run_id: str) -> None:
    """Put a run this worker stopped while shutting down back among the runs a worker claims
    (working, no lease), so a person need not resume it. Its timeline keeps the stop."""
    try:
        lease = agent.store.acquire(run_id, uuid.uuid4().hex)
        agent.store.release(lease, RunStatus.WORKING)
    except RefundAgentError:   # someone else took it meanwhile: theirs now
        pass


@dataclass
class _Flight:
    run_id: str
    cancel: Cancel = field(default_factory=Cancel)


@dataclass
class _Signals:
    """Ctrl+C and SIGTERM: the first stops taking runs, a second cancels those in flight."""

    stop: threading.Event = field(default_factory=threading.Event)
    hurry: threading.Event = field(default_factory=threading.Event)
    interrupted: bool = False   # by Ctrl+C (exit 130) rather than SIGTERM (exit 0)
    saved: dict[int, Any] = field(default_factory=dict)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return   # signals reach only the main thread (a test calling work in a thread)
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.saved[signum] = signal.signal(signum, self._on_signal)

    def restore(self) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.interrupted = self.interrupted or signum == signal.SIGINT
        (self.hurry if self.stop.is_set() else self.stop).set()


def few_malloc_arenas(arenas: int = 2) -> None:
    """Keep glibc's allocator to ``arenas`` memory pools, before the worker starts its threads.

    By default glibc gives threads pools of their own, up to eight per core, each grown and
    kept. With 16 runs in flight reading whole replies, a worker on PostgreSQL peaked at 686 MB
    with them and at 188 MB with two, its drain unchanged (docs/PERFORMANCE.md); the
    interpreter lock serializes the threads' Python anyway. Not glibc (macOS, musl): nothing."""
    try:
        ctypes.CDLL(None).mallopt(-8, arenas)   # -8: M_ARENA_MAX in glibc's malloc.h
    except (OSError, AttributeError):
        pass


def rate_limited_probe(agent: Agent) -> Callable[[], int] | None:
    """How many 429s the process's rate limiter has met so far, if the model client has one
    (``client.limiter.stats()``, providers/limiter.py); None without one."""
    stats = getattr(getattr(agent.model.client, "limiter", None), "stats", None)
    if not callable(stats):
        return None
    return lambda: int(stats().get("limited", 0))


class Drain:
    """One worker process: claims runs while it has a free slot and advances each in a thread.

    Args:
        agent: the agent whose runs it claims (its store, model and outside systems).
        concurrency: how many runs it advances at once.
        idle_exit: exit after this many seconds with nothing to do (None: never).
        grace: seconds the runs in flight get to finish once asked to stop.
    """

    def __init__(self, agent: Agent, concurrency: int, idle_exit: float | None = None,
                 grace: float = GRACE, out: TextIO | None = None) -> None:
        self.agent = agent
        self.concurrency = concurrency
        self.idle_exit = idle_exit
        self.grace = grace
        self.progress = Progress(out or sys.stdout)
        self.tally = Tally()
        self.signals = _Signals()
        self._flights: dict[Future[Run], _Flight] = {}
        self._stopped_here: list[str] = []
        self._probe: Callable[[], int] | None = None

    def run(self) -> int:
        """Work until idle (``idle_exit``) or asked to stop; the exit code."""
        agent = self.agent
        # Opened once here, before any thread could race to open them lazily.
        _ = agent.model, agent.effects
        self._probe = rate_limited_probe(agent)
        self.signals.install()
        few_malloc_arenas()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="refund-work")
        try:
            self._work(pool)
            self._wind_down()
            self._show(force=True)
        except BaseException:
            # The worker itself failed (the store went away, say): stop the runs in flight at
            # their last stored response rather than leave them running with nobody to report.
            for flight in self._flights.values():
                flight.cancel.set()
            raise
        finally:
            pool.shutdown(wait=True)
            self.signals.restore()
            self.progress.end()
        for run_id in self._stopped_here:
            hand_back(agent, run_id)
        if self._stopped_here:
            self.progress.say(f"Handed back {len(self._stopped_here)} run(s) stopped at their "
                              "last stored response: the next worker continues them.")
        return 130 if self.signals.interrupted else 0

    def _say(self, line: str) -> None:
        self.progress.say(line)

    def _work(self, pool: ThreadPoolExecutor) -> None:
        agent, swept = self.agent, -SWEEP_EVERY
        idle_since = time.monotonic()
        while not self.signals.stop.is_set():
            if time.monotonic() - swept >= SWEEP_EVERY:
                swept = time.monotonic()
                self._sweep()
            # Claim every free slot's run first, then start them: the claims (short
            # transactions) do not queue behind the new runs' first writes for the store's
            # write lock, and a kill finds the whole batch claimed.
            claimed: list[str] = []
            while len(self._flights) + len(claimed) < self.concurrency and \
                    not self.signals.stop.is_set() and (run_id := agent.claim()) is not None:
                claimed.append(run_id)
            for run_id in claimed:
                flight = _Flight(run_id)
                self._flights[pool.submit(advance_one, agent, run_id, flight.cancel)] = flight
            if self._flights:
                idle_since = time.monotonic()
                self._collect(POLL)
            elif self.idle_exit is not None and \
                    time.monotonic() - idle_since >= self.idle_exit:
                self._say(f"Nothing to do for {self.idle_exit:g} s; advanced "
                          f"{self.tally.done + self.tally.waiting + self.tally.failed} run(s).")
                return
            else:
                self.signals.stop.wait(POLL)
            self._show()

    def _sweep(self) -> None:
        """The shop's timeouts and the expiry, as the page's worker sweeps them (each step
        once per refund whoever applies it), and customers' replies held while their run
        worked or waited: each run they release is then claimed like a new one."""
        agent = self.agent
        for approval_id, step in agent.apply_timeouts():
            self._say(f"{approval_id}: {step}")
        for approval in agent.expire():
            self._say(f"{approval.id}: expired")
        release_held(agent.store, self._say, MailCap.of(agent.settings))

    def _collect(self, timeout: float) -> None:
        """Report the advances that ended within ``timeout`` seconds."""
        finished, _ = wait(list(self._flights), timeout=timeout, return_when=FIRST_COMPLETED)
        ended = False
        for future in finished:
            flight = self._flights.pop(future)
            try:
                run = future.result()
            except (RunBusy, LeaseLost) as exc:   # another worker got there first, or took over
                self._say(f"{flight.run_id}: {exc}")
                continue
            except RefundAgentError as exc:
                self.tally.failed += 1
                self._say(f"{flight.run_id}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - advance marked the run failed already
                self.tally.failed += 1
                self._say(f"{flight.run_id}: failed: {type(exc).__name__}: {exc}")
                continue
            ended = True
            if run.status == RunStatus.STOPPED and flight.cancel.is_set():
                self._stopped_here.append(run.id)
            if run.status in WAITING_ON_PERSON:
                self.tally.waiting += 1
            elif run.status == RunStatus.DONE:
                self.tally.done += 1
            else:
                self.tally.failed += 1
            self._say(f"{run.id}: {run.status.value}")
        if ended:   # a customer's reply that came while its run worked can be taken now
            release_held(self.agent.store, self._say, MailCap.of(self.agent.settings))

    def _show(self, force: bool = False) -> None:
        self.tally.in_flight = len(self._flights)
        if self._probe is not None:
            try:
                self.tally.rate_limited = self._probe()
            except Exception:  # noqa: BLE001 - a progress line never stops the worker
                self.tally.rate_limited = None
        self.progress.show(self.tally, force)

    def _wind_down(self) -> None:
        """Asked to stop (or idle): let the runs in flight end within ``grace`` seconds, then
        cancel the rest at their last stored response."""
        if not self._flights:
            return
        self._say(f"Stopping: no new runs; {len(self._flights)} in flight get up to "
                  f"{self.grace:g} s to finish (Ctrl+C again to stop them now).")
        deadline = time.monotonic() + self.grace
        while self._flights and time.monotonic() < deadline and \
                not self.signals.hurry.is_set():
            self._collect(min(POLL, max(0.0, deadline - time.monotonic())))
            self._show()
        if self._flights:
            self._say(f"Stopping the {len(self._flights)} run(s) still in flight at their "
                      "last stored response.")
            for flight in self._flights.values():
                flight.cancel.set()
            while self._flights:
                self._collect(POLL)
