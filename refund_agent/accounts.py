"""The people who decide refunds: accounts, roles, approval limits, and who may open the page.

With no accounts the desk runs in single-user demo mode: a decision is signed with whatever
name is typed. Once one account exists, every decision is signed by an account whose password
was given for it (the page's sign-in, or the terminal's prompt), and an approver may approve
only up to their limit; a lead has none. Rejections are open to every account.

Passwords are never stored: only a salted scrypt hash (standard library) with its parameters,
so they can be raised later without breaking the accounts made before.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import os
import threading
import time
from collections import deque
from dataclasses import dataclass

from .errors import DecisionRefused, NotFound, RefundAgentError
from .store import Store
from .text import one_line

ROLES = ("approver", "lead")
DEFAULT_LIMIT = 100.0      # dollars an approver may approve when no --limit is given
MIN_PASSWORD = 8
# scrypt's cost: 16 MiB of memory and about 50 ms per check, slow enough to make guessing a
# stolen hash expensive and fast enough for a sign-in.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
# Failed sign-ins a name may have in SIGN_IN_WINDOW seconds before further tries are refused
# for the rest of the window, without checking the password (a page is a guessing machine).
SIGN_IN_FAILURES, SIGN_IN_WINDOW = 5, 300.0
# Host names the page answers to unless REFUND_AGENT_ALLOWED_HOSTS adds more.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class SignInFailed(RefundAgentError):
    """A wrong name or password, or an account that no longer exists."""


@dataclass(frozen=True)
class Account:
    name: str
    role: str
    limit: float | None     # dollars; None for a lead

    @property
    def limit_cents(self) -> int | None:
        return None if self.limit is None else round(self.limit * 100)

    def describe(self) -> str:
        return (f"{self.name} (lead, no limit)" if self.limit is None
                else f"{self.name} ({self.role}, up to ${self.limit:,.2f})")


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """``scrypt$n$r$p$salt$hash``, both in base64: everything needed to check it again."""
    salt = salt or os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            dklen=32)
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def check_password(password: str, encoded: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = encoded.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r),
                             p=int(p), dklen=len(expected), maxmem=256 * 1024 * 1024)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


# A check against this hash when the name is unknown, so an unknown name takes as long to
# refuse as a wrong password (the timing does not say which names exist).
_DUMMY = hash_password("not a password", salt=b"\0" * 16)


def _operator() -> str:
    """Who changes accounts from this machine: the operating-system login, as the audit says."""
    try:
        return f"{getpass.getuser()} (login)"
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "unknown login"


class _Throttle:
    """Recent failed sign-ins per name, shared by every session of this process."""

    def __init__(self) -> None:
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, name: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(name.casefold(), deque())
        while failures and now - failures[0] > SIGN_IN_WINDOW:
            failures.popleft()
        return failures

    def wait(self, name: str) -> float:
        """Seconds until ``name`` may try again (0: now)."""
        now = time.monotonic()
        with self._lock:
            failures = self._recent(name, now)
            if len(failures) < SIGN_IN_FAILURES:
                return 0.0
            return SIGN_IN_WINDOW - (now - failures[0])

    def failed(self, name: str) -> None:
        with self._lock:
            self._recent(name, time.monotonic()).append(time.monotonic())

    def clear(self, name: str) -> None:
        with self._lock:
            self._failures.pop(name.casefold(), None)


_THROTTLE = _Throttle()


def _account(row: dict) -> Account:
    cents = row["limit_cents"]
    return Account(row["name"], row["role"], None if cents is None else cents / 100)


class Accounts:
    """The accounts kept in one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def exist(self) -> bool:
        """False means single-user demo mode."""
        return self.store.has_accounts()

    def all(self) -> list[Account]:
        return [_account(row) for row in self.store.account_rows()]

    def get(self, name: str) -> Account | None:
        rows = self.store.account_rows(name)
        return _account(rows[0]) if rows else None

    def add(self, name: str, role: str, password: str, limit: float | None = None,
            by: str | None = None) -> Account:
        """Create an account; ``by`` (default: the operating-system login) is audited."""
        name = " ".join(one_line(name, "account name").split())
        if not name:
            raise DecisionRefused("An account needs a name.")
        if role not in ROLES:
            raise DecisionRefused(f"The role must be one of {', '.join(ROLES)}, not {role!r}.")
        if role == "lead" and limit is not None:
            raise DecisionRefused("A lead has no approval limit; leave out --limit.")
        if role == "approver":
            limit = DEFAULT_LIMIT if limit is None else limit
            if not limit >= 0:  # also refuses NaN
                raise DecisionRefused("The limit must be a number of dollars, 0 or more.")
        if len(password) < MIN_PASSWORD:
            raise DecisionRefused(f"The password needs at least {MIN_PASSWORD} characters.")
        cents = None if limit is None else round(limit * 100)
        self.store.add_account(name, role, cents, hash_password(password), by or _operator())
        return Account(name, role, None if cents is None else cents / 100)

    def remove(self, name: str, by: str | None = None) -> None:
        self.store.remove_account(name.strip(), by or _operator())

    def sign_in(self, name: str, password: str) -> Account:
        """The account, if ``password`` is its password; SignInFailed otherwise.

        After SIGN_IN_FAILURES wrong tries for a name within SIGN_IN_WINDOW seconds, this
        process refuses that name for the rest of the window without checking anything, so
        the page cannot be used to guess passwords. Unknown names count too, so the refusal
        does not tell which names exist.
        """
        name = " ".join((name or "").split())
        wait = _THROTTLE.wait(name)
        if wait:
            raise SignInFailed(f"Too many wrong passwords for this name; try again in "
                               f"{max(1, round(wait / 60))} min.")
        rows = self.store.account_rows(name) if name else []
        if not rows:
            check_password(password or "", _DUMMY)
        if not rows or not check_password(password or "", rows[0]["password"]):
            _THROTTLE.failed(name)
            raise SignInFailed("Wrong name or password.")
        _THROTTLE.clear(name)
        return _account(rows[0])

    def current(self, name: str) -> Account:
        """A signed-in account as it is now (its role or limit may have changed since)."""
        account = self.get(name)
        if account is None:
            raise NotFound(f"The account {name!r} no longer exists; sign in again.")
        return account


def host_name(header: str) -> str:
    """The name in a Host header, without the port: ``[::1]:8501`` -> ``::1``."""
    host = header.strip().lower()
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def host_allowed(header: str | None, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a request's Host header names this machine or one of the ``extra`` names.

    A page served under any name that resolves here (DNS rebinding, a stray hosts entry) would
    otherwise run the desk for whoever controls that name.
    """
    return bool(header) and host_name(header or "") in LOCAL_HOSTS | extra
