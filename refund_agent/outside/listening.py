"""How many connections a listener holds at once, and what it says when it refuses more.

A process may hold only so many open files (RLIMIT_NOFILE), and every connection is one. A
listener that accepts until none are left breaks in the worst way: asyncio and Tornado log a
traceback for each connection they can no longer accept (thousands a second, the CPU busy
writing them), and what the process itself needs next (the store, a module imported late)
fails too. So each listener (the SMTP mail-in listener, the Stripe webhook server) holds at most
a cap of connections, well below the limit, and answers the others at once with a refusal its
clients understand (SMTP's 421, HTTP's 503) before closing them. A refusal, or an accept the
system refused after all, is a fault said in one line per :data:`FAULT_EVERY` seconds with how
many there were, never one line per connection.

The cap is REFUND_AGENT_MAX_CONNECTIONS, by default derived from the limit
(:func:`connection_cap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

# Open files the rest of the process keeps for itself whatever the listener does: the store
# (a database file with its journal, per thread), the model's and the mail server's
# connections, modules imported late. At least RESERVE, or a quarter of the limit if more.
RESERVE = 64
# Connections a listener accepts in a row before it lets the loop serve the ones it holds.
ACCEPT_BATCH = 100
# The default cap never exceeds this: more connections at once than a mail system or Stripe
# ever opens to one desk, so anything past it is a flood, not traffic.
MOST_BY_DEFAULT = 1000
# Seconds between two lines about the same fault.
FAULT_EVERY = 60.0
# What accept() says when the process or the system is out of descriptors or memory: the
# listener pauses accepting for a moment instead of failing.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
SETTING = "REFUND_AGENT_MAX_CONNECTIONS"


def open_file_limit() -> int:
    """The process's soft limit on open files (RLIMIT_NOFILE); a large number if unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY or soft < 0 else soft


def most_for(limit: int) -> int:
    """The most connections a listener may hold under an open-file ``limit``: the limit less
    what the rest of the process keeps (:data:`RESERVE`, or a quarter of the limit). A
    connection past the cap holds a descriptor only while it is refused (:class:`Acceptor`)."""
    return max(0, limit - max(RESERVE, limit // 4))


def connection_cap(limit: int, setting: int = 0) -> int:
    """The cap on a listener's connections: ``setting`` if given (above 0), else the default
    derived from the open-file ``limit``.

    Raises:
        ConfigError: the setting, or the limit, leaves the process too few open files.
    """
    most = most_for(limit)
    if most < 1:
        raise ConfigError(f"The open-file limit (ulimit -n) is {limit}: too low to listen for "
                          f"connections; raise it above {RESERVE + 1}.")
    if setting > most:
        raise ConfigError(f"{SETTING} is {setting}, but with an open-file limit of {limit} "
                          f"(ulimit -n) at most {most} leaves the process the files it needs; "
                          "lower it, or raise the limit.")
    return setting if setting > 0 else min(most, MOST_BY_DEFAULT)


def fault_due(last: float | None, now: float, every: float = FAULT_EVERY) -> bool:
    """Whether a fault seen at ``now`` is said (its last line was at ``last``, or never)."""
    return last is None or now - last >= every


@dataclass
class _Fault:
    last: float | None = None   # when its latest line was said
    since: int = 0               # how many happened since then, unsaid


@dataclass
class Gate:
    """The connections one listener holds: :meth:`enter` as each one comes (False: refuse
    it), :meth:`leave` when it closes; its faults said through ``say``, one line per kind
    per ``every`` seconds. Used from the listener's event loop thread only.

    Args:
        name: the listener, as its fault lines begin ("The SMTP listener").
        cap: the most connections held at once (:func:`connection_cap`).
        say: where a fault line goes (the listener's log).
    """

    name: str
    cap: int
    say: Callable[[str], None]
    every: float = FAULT_EVERY
    clock: Callable[[], float] = time.monotonic
    held: int = 0
    _faults: dict[str, _Fault] = field(default_factory=dict)

    def enter(self) -> bool:
        """Count a new connection in, or False (and the fault noted) when at the cap."""
        if self.held < self.cap:
            self.held += 1
            return True
        self.fault("connections", lambda n, again: (
            f"{self.name} refused {_count(n, 'connection')}{again}: it holds at most "
            f"{self.cap} at once ({SETTING}; the open-file limit is {open_file_limit()})."))
        return False

    def leave(self) -> None:
        """A counted connection closed."""
        self.held = max(0, self.held - 1)

    def out_of_files(self, exc: OSError) -> None:
        """The system refused to accept a connection (no descriptor or memory left)."""
        self.fault("accept", lambda n, again: (
            f"{self.name} could not accept {_count(n, 'connection')}{again}: "
            f"{exc.strerror or exc} ({self.held} held); it pauses accepting for a moment."))

    def fault(self, kind: str, line: Callable[[int, str], str]) -> None:
        """One more fault of ``kind``: said if its last line is at least ``every`` seconds
        old (``line(how many since that line, " since ..." or "")``), else only counted."""
        fault = self._faults.setdefault(kind, _Fault())
        fault.since += 1
        now = self.clock()
        if fault_due(fault.last, now, self.every):
            again = "" if fault.last is None else \
                f" in the last {_duration(now - fault.last)}"
            self.say(line(fault.since, again))
            fault.last, fault.since = now, 0


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _duration(seconds: float) -> str:
    """``2 min``, ``3 h``: how long since a fault's previous line, roughly."""
    minutes = max(1, round(seconds / 60))
    return f"{minutes} min" if minutes < 120 else f"{round(minutes / 60)} h"


# Seconds a listener stops accepting after the system refused it a descriptor: what the
# process holds is freed in that time, and the connections meanwhile wait in the kernel's queue.
PAUSE = 1.0
# The most bytes of a refused client's request read before closing: closing with unread data
# would make the kernel reset the connection, which can throw away the refusal unread.
DRAIN = 64 * 1024


def refuse(conn: socket.socket, refusal: bytes) -> None:
    """Answer a connection past the cap with ``refusal`` and close it, without waiting."""
    with contextlib.suppress(OSError):
        conn.setblocking(False)
        conn.send(refusal)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(DRAIN)   # what the client already sent, so the close is not a reset
    conn.close()


@dataclass
class Acceptor:
    """Accepts the connections of one listening socket on an asyncio loop, as a server's own
    accept loop would: each counted in by ``gate`` and handed to ``take(conn, address)``, or,
    past the cap, answered ``refusal`` and closed. When the system has no descriptor left, it
    stops accepting for :data:`PAUSE` seconds instead of trying again at once (and logging a
    traceback each time, as Tornado's own loop does), and says so through the gate."""

    loop: asyncio.AbstractEventLoop
    sock: socket.socket
    gate: Gate
    take: Callable[[socket.socket, Any], None]
    refusal: bytes
    _stopped: bool = False

    def start(self) -> None:
        if not self._stopped:
            self.loop.add_reader(self.sock.fileno(), self._ready)

    def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError, ValueError):   # already closed
            self.loop.remove_reader(self.sock.fileno())

    def _ready(self) -> None:
        # A batch at a time, so that a flood of connections leaves the loop time for the
        # connections already held.
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if self._stopped or self.sock.fileno() < 0:   # closed under it
                    return
                if exc.errno not in OUT_OF_RESOURCES:
                    # A network error of the connection at the head of the queue (Linux's
                    # accept(2) says: treat as "try again"); the next one is taken.
                    self.gate.fault("accept-error", lambda n, again, exc=exc: (
                        f"{self.gate.name} lost {n} connection{'s' * (n != 1)} as it "
                        f"accepted {'them' if n != 1 else 'it'}{again}: {exc}."))
                    continue
                self.gate.out_of_files(exc)
                self.loop.remove_reader(self.sock.fileno())
                self.loop.call_later(PAUSE, self.start)
                return
            if not self.gate.enter():
                refuse(conn, self.refusal)
                continue
            try:
                self.take(conn, address)
            except Exception as exc:  # noqa: BLE001 - the loop has nobody to raise to
                self.gate.leave()
                conn.close()
                self.gate.fault("take", lambda n, again, exc=exc: (
                    f"{self.gate.name} dropped {n} connection{'s' * (n != 1)}{again}: "
                    f"{type(exc).__name__}: {exc}."))
