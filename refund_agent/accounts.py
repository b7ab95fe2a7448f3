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
import hashlib
import hmac
import os
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

    def add(self, name: str, role: str, password: str, limit: float | None = None) -> Account:
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
        self.store.add_account(name, role, cents, hash_password(password))
        return Account(name, role, None if cents is None else cents / 100)

    def remove(self, name: str) -> None:
        self.store.remove_account(name.strip())

    def sign_in(self, name: str, password: str) -> Account:
        """The account, if ``password`` is its password; SignInFailed otherwise."""
        name = " ".join((name or "").split())
        rows = self.store.account_rows(name) if name else []
        if not rows:
            check_password(password or "", _DUMMY)
            raise SignInFailed("Wrong name or password.")
        if not check_password(password or "", rows[0]["password"]):
            raise SignInFailed("Wrong name or password.")
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
