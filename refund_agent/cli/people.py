"""People: the accounts that may decide refunds (``users add | list | remove``), and signing a
decision in as one of them (a password asked for, or read from the environment)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from ..desk.accounts import MIN_PASSWORD, Accounts
from ..desk.agent import Agent
from ..errors import DecisionRefused, SignInFailed
from ..text import plural


def signer(agent: Agent, name: str | None) -> tuple[str, int | None]:
    """Who signs a decision, and their approval limit in cents (None: no limit).

    With accounts, the named account's password is asked for (or read from
    REFUND_AGENT_PASSWORD, for scripts); without any, the demo signs with the name as given.
    """
    accounts = Accounts(agent.store)
    if not accounts.exist():
        name = getpass.getuser() if name is None else name  # --as "" is refused later
        print(f"Single-user demo mode (no accounts): signing as {name!r} without a password. "
              "`refund-agent users add` turns on sign-in.")
        return name, None
    if name is None:
        raise SignInFailed("Accounts are set up: say which one decides with --as NAME.")
    password = _password(f"Password for {name}: ", "REFUND_AGENT_PASSWORD")
    account = accounts.sign_in(name, password)
    return account.name, account.limit_cents


def _password(prompt: str, env: str) -> str:
    """A password from ``env``, else the terminal, else one line of standard input.

    Without a terminal (a script, cron, ``</dev/null``) getpass would fall back to reading
    standard input with a warning, or end in EOFError; here a piped line is the password and
    nothing at all is a one-line message naming both ways to give one.
    """
    password = os.environ.get(env)
    if password is not None:
        return password
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass(prompt)
    line = sys.stdin.readline() if sys.stdin is not None else ""
    if not line:
        raise SignInFailed(f"No password given: there is no terminal to ask on. Set {env}, or "
                           "pipe it in on one line (printf '%s\\n' \"$PASSWORD\" | "
                           "refund-agent ...).")
    return line.removesuffix("\n").removesuffix("\r")


def _new_password(name: str) -> str:
    """The new account's password: asked twice on a terminal, once from a script."""
    if os.environ.get("REFUND_AGENT_NEW_PASSWORD") is not None or not sys.stdin.isatty():
        password = _password("", "REFUND_AGENT_NEW_PASSWORD")
        _check_password_length(password)
        return password
    password = getpass.getpass(f"New password for {name}: ")
    _check_password_length(password)  # before asking again for a password that cannot do
    if getpass.getpass("Again: ") != password:
        raise DecisionRefused("The two passwords differ; nothing was changed.")
    return password


def _check_password_length(password: str) -> None:
    if len(password) < MIN_PASSWORD:
        raise DecisionRefused(f"The password needs at least {MIN_PASSWORD} characters; "
                              "nothing was changed.")


def users_add(args: argparse.Namespace) -> int:
    """``refund-agent users add NAME --role ROLE [--limit DOLLARS]``."""
    accounts = Accounts(Agent().store)
    # Before the password is asked for: the role, the limit, and a name nobody holds (nor one
    # that looks like theirs, identity.same_person).
    accounts.check(args.name, args.role, args.limit)
    account = accounts.add(args.name, args.role, _new_password(args.name), args.limit)
    default = (" That is the default limit for an approver; --limit sets another."
               if args.role == "approver" and args.limit is None else "")
    print(f"Added {account.describe()}.{default} Decisions now need an account's "
          "password.")
    return 0


def users_remove(args: argparse.Namespace) -> int:
    """``refund-agent users remove NAME``."""
    accounts = Accounts(Agent().store)
    released, ended = accounts.remove(args.name)
    left = len(accounts.all())
    freed = ", ".join(part for part in (
        released and f"{plural(released, 'ticket')} released (nobody owns them now)",
        ended and f"{plural(ended, 'delegation')} to or from it ended") if part)
    print(f"Removed {args.name}. " + (f"{freed}. " if freed else "")
          + (f"{plural(left, 'account')} left." if left else
             "No accounts left: the desk is back in single-user demo mode."))
    return 0


def users_list(_args: argparse.Namespace) -> int:
    """``refund-agent users list``."""
    listed = Accounts(Agent().store).all()
    for account in listed:
        limit = "no limit" if account.limit is None else f"up to ${account.limit:,.2f}"
        print(f"{account.name:24} {account.role:9} {limit}")
    print(f"{len(listed)} account{'s' if len(listed) != 1 else ''}."
          if listed else "No accounts: the desk runs in single-user demo mode.")
    return 0
