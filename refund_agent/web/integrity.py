"""The audit panel's integrity check, done in the background instead of inside a page.

Reconciling reads the whole history: the audit chain, every approval, every payment and email
record. At 10,000 runs that takes seconds, and doing it in a page's script run blocked the
page each time the audit grew. One thread per server process checks instead, whenever the
store or the payment and email logs changed since its last check, and for no more than a tenth
of a core (a check that used 2 s of CPU is followed by 18 s of rest before the next). Pages show the
latest verdict with the time it was reached; ``refund-agent audit --verify`` still checks from
scratch, in the foreground, whenever asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..desk.reconcile import reconcile
from ..store import Store

log = logging.getLogger(__name__)

POLL_EVERY = 1.0   # seconds between looks at whether anything changed (cheap: no table read)
DUTY = 0.1         # the share of one core the checks may take, at most


@dataclass(frozen=True)
class Verdict:
    """What one check found."""

    problem: str | None     # the first problem, as a sentence; None when everything agrees
    entries: int            # audit entries there were when the check began
    at: float               # when it finished (time.time())
    seconds: float          # how long it took
    key: tuple              # what the store and logs looked like when it began


Check = Callable[[Store, Path], str | None]


class IntegrityWatch:
    """Keeps a recent verdict on the audit chain and the payment and email logs.

    Args:
        store: the store to check (its connections are per thread, so this one is the watch's).
        output_dir: where the SQLite store's payment and email logs are.
        on_verdict: called from the watch's thread when a check found something else than the
            one before (another problem, or none; more entries): the worker bumps its version,
            so pages draw the new verdict.
        check: what checks; :func:`~refund_agent.desk.reconcile.reconcile` unless a test says.
    """

    def __init__(self, store: Store, output_dir: Path, on_verdict: Callable[[], None],
                 check: Check = reconcile, poll: float = POLL_EVERY, duty: float = DUTY) -> None:
        self.store, self.output_dir = store, Path(output_dir)
        self._on_verdict, self._check = on_verdict, check
        self._poll, self._duty = poll, duty
        self._verdict: Verdict | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.checks = 0

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="refund-integrity", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def latest(self) -> Verdict | None:
        """The newest verdict; None until the first check ends."""
        return self._verdict

    def key(self) -> tuple:
        """What changes with any commit to the store and any write to its logs.

        The store's change counter moves with every commit from any process (an edit made by
        hand included); the logs are files beside an SQLite store, compared by size and time.
        """
        files = () if self.store.shared else tuple(
            (s.st_size, s.st_mtime_ns) if (s := _stat(self.output_dir / name)) else None
            for name in ("refunds.log", "outbox.log"))
        return self.store.change_counter(), files

    def _loop(self) -> None:
        delay = 0.0   # the first check at once
        while not self._stopping.wait(delay):
            delay = self._poll
            try:
                key = self.key()
                if self._verdict is not None and key == self._verdict.key:
                    continue
                entries = self.store.audit_head()[0]
                began, cpu = time.monotonic(), time.thread_time()
                problem = self._check(self.store, self.output_dir)
                seconds, cpu = time.monotonic() - began, time.thread_time() - cpu
            except Exception:  # noqa: BLE001 - a check that could not run is tried again later
                log.exception("The integrity check could not run")
                delay = 10 * self._poll
                continue
            before, self._verdict = self._verdict, Verdict(problem, entries, time.time(),
                                                           seconds, key)
            self.checks += 1
            # Rest, so that checking takes at most DUTY of a core however long the history. By
            # the check's own CPU time, not its wall time: on a busy host a small check waits
            # seconds for the GIL and the disk, and resting nine times that left pages showing
            # a verdict tens of seconds old.
            delay = max(self._poll, cpu * (1 - self._duty) / self._duty)
            # Pages draw again only when what they say changes: a redraw cancels a download
            # someone may have just started.
            if before is None or (before.problem, before.entries) != (problem, entries):
                self._on_verdict()


def _stat(path: Path):  # noqa: ANN202 - os.stat_result | None
    try:
        return path.stat()
    except FileNotFoundError:
        return None
