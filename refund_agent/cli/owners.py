"""Owners: who has which ticket (``assign``, ``claim``, ``release``, signed as a decision is),
and the tickets by owner (``tickets --mine | --unassigned``), as the page's ticket buttons and
inbox filter do. The rules are desk/owners.py's; the store applies them under the ticket's
lock, and audits each change signed by the account."""

from __future__ import annotations

import argparse
import math
import time
from datetime import datetime, timedelta

from ..desk.accounts import Accounts
from ..desk.agent import Agent
from ..desk.owners import AWAY_DAYS_MAX, until_problem
from ..errors import DecisionRefused
from .output import time_text
from .people import signer

# How each command says what it did, and what it says when it was already so.
DONE = {"assign": "Assigned {run} to {to}", "claim": "Claimed {run}",
        "release": "Released {run}; nobody owns it now"}
ALREADY = {"assign": "{run} is already {to}'s; nothing changed.",
           "claim": "{run} is already yours; nothing changed.",
           "release": "Nobody owns {run}; nothing changed."}


def _change(args: argparse.Namespace, action: str) -> int:
    agent = Agent()
    accounts = Accounts(agent.store)
    if not accounts.exist():   # said before any password is asked for
        raise DecisionRefused("Tickets have owners once accounts exist (only someone signed "
                              "in owns one): `refund-agent users add` makes one.")
    by, _limit = signer(agent, args.by)
    run = agent.store.run(args.run)
    to = getattr(args, "to", None)
    changed = accounts.change_owner(run.id, action, by, to)
    owner = agent.store.owner(run.id)
    words = (DONE if changed else ALREADY)[action].format(run=run.id, to=owner or to)
    print(f"{words} ({run.sender}, {run.subject!r}), as {by}." if changed else words)
    return 0


def assign(args: argparse.Namespace) -> int:
    """``refund-agent assign RUN --to NAME --as NAME``: a lead gives a ticket to anyone; anyone
    else only to themselves."""
    return _change(args, "assign")


def claim(args: argparse.Namespace) -> int:
    """``refund-agent claim RUN --as NAME``: take a ticket nobody has (a lead: any ticket)."""
    return _change(args, "claim")


def release(args: argparse.Namespace) -> int:
    """``refund-agent release RUN --as NAME``: give up your ticket (a lead: anyone's)."""
    return _change(args, "release")


def tickets(args: argparse.Namespace) -> int:
    """``refund-agent tickets [--mine --as NAME | --unassigned] [--limit N]``: tickets newest
    first, with what happened and who owns them."""
    agent = Agent()
    store = agent.store
    owner = None
    if args.mine:
        if not args.by:
            raise DecisionRefused("--mine needs --as NAME: whose tickets to list.")
        account = Accounts(store).get(args.by)
        if account is None:
            raise DecisionRefused(f"No account named {args.by!r}.")
        owner = account.name
    ids = store.desk_page("", None, False, args.limit, owner=owner,
                          unassigned=args.unassigned)
    rows = store.inbox_rows(ids)
    owners = store.owners(ids)
    if not rows:
        print("No tickets" + (f" owned by {owner}." if owner else
                              " without an owner." if args.unassigned else " yet."))
        return 0
    print(f"{'RUN':16}  {'STATUS':11}  {'OWNER':16}  {'CREATED':19}  {'CUSTOMER':28}  SUBJECT")
    for row in rows:
        r = row.run
        print(f"{r.id:16}  {row.desk or r.status.value:11}  {owners.get(r.id, '-'):16}  "
              f"{time_text(r.created_at):19}  {r.sender:28}  {r.subject}")
    return 0


def _until(text: str, now: float) -> float:
    """``--until``: a date (the end of that day, local time) or a date and time, as seconds
    since 1970; refused in one line when it is malformed, past or too far ahead."""
    for fmt, end_of_day in (("%Y-%m-%d", True), ("%Y-%m-%d %H:%M", False),
                            ("%Y-%m-%dT%H:%M", False)):
        try:
            when = datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
        # Checked as dates first: the end of 9999-12-31 is past what datetime can hold, and
        # year 1 before what the clock can (both ended in a traceback here).
        today = datetime.fromtimestamp(now)
        if when < today - timedelta(days=1):
            return 0.0   # past: desk/owners.until_problem says so
        if when > today + timedelta(days=AWAY_DAYS_MAX + 1):
            return math.inf   # too far ahead: until_problem says so
        return (when + timedelta(days=1)).timestamp() if end_of_day else when.timestamp()
    raise DecisionRefused(f"--until takes a date as YYYY-MM-DD (or YYYY-MM-DD HH:MM), not "
                          f"{text!r}.")


def away(args: argparse.Namespace) -> int:
    """``refund-agent away --to NAME --until DATE --as NAME``: out of office; your tickets and
    approvals go to NAME until then (audited, naming both)."""
    agent = Agent()
    accounts = Accounts(agent.store)
    if not accounts.exist():
        raise DecisionRefused("Out of office is for accounts: `refund-agent users add` makes "
                              "one.")
    # A bad date before any password is asked for: malformed, past or too far ahead.
    now = time.time()
    until = _until(args.until, now)
    if problem := until_problem(until, now):
        raise DecisionRefused(problem)
    by, _limit = signer(agent, args.by)
    delegate = accounts.go_away(by, args.to, until)
    print(f"{by} is away until {time_text(until)}: tickets and approvals go to {delegate}.")
    return 0


def back(args: argparse.Namespace) -> int:
    """``refund-agent back --as NAME``: back in the office."""
    agent = Agent()
    if not Accounts(agent.store).exist():
        raise DecisionRefused("Out of office is for accounts: `refund-agent users add` makes "
                              "one.")
    by, _limit = signer(agent, args.by)
    print(f"Welcome back, {by}." if agent.store.set_back(by) else f"{by} was not away.")
    return 0
