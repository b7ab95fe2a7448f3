"""``refund-agent receive``: customers' mail in, by SMTP (``--smtp HOST:PORT``, an aiosmtpd
server a mail system delivers to) or from a mailbox (``--imap URL``, polled, IDLE where the
server has it). Each message is taken once (outside/mailin/intake.py); the process then
advances the tickets and replies it took, unless ``--no-work`` leaves them to the page's worker
or ``refund-agent work`` (both pick up a new run nobody holds). It never claims other runs: a
decision made in a terminal or on the page is carried on by whoever made it."""

from __future__ import annotations

import argparse
import imaplib
import os
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ..desk.accounts import smtp_logins
from ..desk.agent import Agent
from ..errors import ConfigError, LeaseLost, RefundAgentError, RunBusy, StoreError
from ..outside.mailin.imap import Poller, mailbox_from_url
from ..outside.mailin.intake import describe, release_held, take
from ..outside.mailin.loops import MailCap
from ..outside.mailin.rows import MailRow
from .output import time_text
from .tickets import drive
from .typed import IDLE_EXIT, POLL_EVERY


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (argparse turns the error into a usage mistake)."""
    host, colon, port = text.strip().rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, e.g. 127.0.0.1:2525, got {text!r}")
    return host.strip("[]"), int(port)


class _Taken:
    """What the intake reports (from aiosmtpd's thread, or the poll): printed, and the runs
    it made or gave a reply kept for this process to advance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: list[str] = []

    def __call__(self, row: MailRow) -> None:
        print(describe(row), flush=True)
        if row.new and row.run_id and row.kind in RUN_KINDS:
            self.add(row.run_id)

    def add(self, run_id: str) -> None:
        with self._lock:
            if run_id not in self._runs:
                self._runs.append(run_id)

    def pop_all(self) -> list[str]:
        with self._lock:
            runs, self._runs = self._runs, []
        return runs


# The kinds of message that give a run work: a new ticket, or a reply added to one.
RUN_KINDS = ("ticket", "flagged", "reply")


def _advance(agent: Agent, run_ids: list[str]) -> int:
    """Advance these runs (the mail's); one that another process holds is left to it."""
    quiet: Callable[[Any], None] = lambda _event: None  # noqa: E731
    done = 0
    for run_id in run_ids:
        try:
            run = drive(agent, run_id, quiet)  # type: ignore[arg-type]
        except (RunBusy, LeaseLost) as exc:   # a worker (the page, `work`) has it
            print(f"{run_id}: {exc}", flush=True)
            continue
        except RefundAgentError as exc:   # one run's trouble does not stop the mail
            print(f"{run_id}: {exc}", flush=True)
            continue
        done += 1
        print(f"{run_id}: {run.status.value}", flush=True)
    return done


def receive(args: argparse.Namespace) -> int:
    """``refund-agent receive --smtp HOST:PORT | --imap URL``: take mail until Ctrl+C."""
    agent = Agent()
    taken = _Taken()
    cap = MailCap.of(agent.settings)
    taker = partial(take, agent.store, agent=agent.agent_name, crash_at=agent.settings.crash_at,
                    cap=cap)
    poller: Poller | None = None
    server: Any = None
    if not args.no_work:
        # Mailed runs an earlier receiver took and did not finish (killed mid-turn, or after
        # recording a message): nobody holds them, so this process carries them on.
        mailed = {m.run_id for m in agent.store.mail() if m.run_id}
        for run in agent.store.orphaned_runs(agent.agent_name):
            if run.id in mailed:
                taken.add(run.id)
    if args.imap:
        box = mailbox_from_url(args.imap, os.environ)
        poller = Poller(box, taker, taken)
        poller.connect()
        print(f"Reading customers' mail from {box.shown()}"
              f"{' (IDLE)' if poller.idles else f', every {args.every:g} s'}.", flush=True)
    else:
        from ..outside.mailin.smtp import desk_addresses, serve
        host, port = args.smtp
        outside = agent.settings.outside
        desk = desk_addresses(agent.shop.info.support_email, outside.smtp_from,
                              *outside.receive_addresses)
        login = (outside.receive_user, outside.receive_password) if outside.receive_user \
            else None
        try:
            server = serve(host, port, taker, taken, desk, login,
                           say=partial(print, flush=True), throttle=smtp_logins(agent.store),
                           max_connections=outside.max_connections)
        except OSError as exc:
            raise ConfigError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}.") from None
        print(f"Receiving customers' mail by SMTP on {host}:{port} for "
              f"{', '.join(sorted(desk))}"
              f"{f' (login required: {outside.receive_user})' if login else ''}.", flush=True)
    print("The tickets and replies it takes are advanced here." if not args.no_work else
          "The tickets and replies it takes are left to the page's worker or "
          "`refund-agent work`.", flush=True)
    idle_since = time.monotonic()
    try:
        while True:
            try:
                busy = poller.poll() if poller else 0
            except (OSError, imaplib.IMAP4.error) as exc:
                # The server hung up (a restart, a network cut): what was not flagged \Seen
                # is still unseen, so reconnecting and polling again loses nothing.
                print(f"Lost the mailbox connection ({exc or type(exc).__name__}); "
                      "connecting again.", flush=True)
                assert poller is not None
                poller.close()
                time.sleep(1)
                continue
            except StoreError as exc:
                # The store could not record a message (a database down, a full disk): it
                # stays unseen, so the next poll takes it once the store is back. A message
                # that cannot be read never lands here (intake records it as unreadable).
                print(f"Could not record the mail ({exc}); it stays unseen and is read "
                      "again shortly.", flush=True)
                time.sleep(min(args.every, 5.0))
                continue
            try:
                for run_id in release_held(agent.store, partial(print, flush=True), cap):
                    taken.add(run_id)
                    busy += 1
            except StoreError as exc:   # as above: the store is back later, and so is this
                print(f"Could not add the held replies ({exc}); trying again shortly.",
                      flush=True)
                time.sleep(min(args.every, 5.0))
                continue
            runs = [r for r in taken.pop_all() if r]
            if not args.no_work:
                busy += _advance(agent, runs)
            if busy:
                idle_since = time.monotonic()
            elif args.idle_exit is not None and time.monotonic() - idle_since >= args.idle_exit:
                print(f"Nothing new for {args.idle_exit:g} s.", flush=True)
                return 0
            if poller:
                try:
                    poller.wait(args.every if args.idle_exit is None
                                else min(args.every, args.idle_exit))
                except (OSError, imaplib.IMAP4.error):
                    poller.close()   # the next poll connects again
            else:
                agent.store.wait_for_change(agent.store.change_counter(), 0.5)
    except KeyboardInterrupt:
        print("\nStopped receiving.", flush=True)
        return 130
    finally:
        if poller:
            poller.close()
        if server is not None:
            server.stop()


# What a mail row can be (outside/mailin/decide.py, loops.py; "sent" is the desk's own).
MAIL_KINDS = ("ticket", "flagged", "reply", "held", "auto", "bounce", "refused", "unreadable",
              "looped", "sent")


def mail_list(args: argparse.Namespace) -> int:
    """``refund-agent mail [--kind KIND] [--limit N]``: the mail the desk received and sent,
    newest last, each with what became of it (an unreadable message, a refused or flagged
    one, and why)."""
    agent = Agent()
    rows = agent.store.mail(kind=args.kind)[-args.limit:]
    if not rows:
        print(f"No {args.kind + ' ' if args.kind else ''}mail.")
        return 0
    for row in rows:
        line = (describe(row) if row.direction == "in"
                else f"{row.message_id}: sent on {row.run_id} ({row.subject})")
        print(f"{time_text(row.at)}  {row.direction:3}  {line}")
    return 0


def _count(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1, got {text!r}")
    return int(text)


def add_parser(sub: Any) -> None:
    """The ``receive`` and ``mail`` commands on the parser's subcommands."""
    listing = sub.add_parser(
        "mail", help="list the mail received and sent, with what became of each message "
                     "(unreadable, refused, flagged, automatic, and why)")
    listing.add_argument("--kind", choices=MAIL_KINDS, metavar="KIND",
                         help=f"only this kind: {', '.join(MAIL_KINDS)}")
    listing.add_argument("--limit", type=_count, default=50, metavar="N",
                         help="the newest N (default 50)")
    listing.set_defaults(func=mail_list)
    receive_cmd = sub.add_parser(
        "receive", help="take customers' mail: listen as an SMTP server, or read a mailbox "
                        "(IMAP); each message becomes one ticket, and replies continue theirs")
    source = receive_cmd.add_mutually_exclusive_group(required=True)
    source.add_argument("--smtp", type=host_port, metavar="HOST:PORT",
                        help="listen for mail on this address, e.g. 127.0.0.1:2525 (needs "
                             "pip install 'refund-agent[mail]')")
    source.add_argument("--imap", metavar="URL",
                        help="read unseen mail from imaps://USER:PASSWORD@HOST[:PORT][/FOLDER] "
                             "(or imap:// on a trusted network; or the user and password in "
                             "REFUND_AGENT_IMAP_USER and REFUND_AGENT_IMAP_PASSWORD)")
    receive_cmd.add_argument("--every", type=POLL_EVERY, default=30.0, metavar="SECONDS",
                             help="IMAP: how often to look when the server has no IDLE "
                                  "(default 30)")
    receive_cmd.add_argument("--no-work", action="store_true",
                             help="only take mail; leave the runs to the page's worker or "
                                  "`refund-agent work`")
    receive_cmd.add_argument("--idle-exit", type=IDLE_EXIT, default=None, metavar="SECONDS",
                             help="exit after this long with nothing new (default: never)")
    receive_cmd.set_defaults(func=receive)
