"""The people who decide refunds: accounts, roles, approval limits, and who may open the page.

With no accounts the desk runs in single-user demo mode: a decision is signed with whatever
name is typed. Once one account exists, every decision is signed by an account whose password
was given for it (the page's sign-in, or the terminal's prompt), and an approver may approve
only up to their limit; a lead has none. Rejections are open to every account. Names are
unique by their skeleton, and signed in with in canonical form (identity.py: no name may pass
for another); the page shows nothing to a visitor who has not signed in (web/page.py).

Passwords are never stored: only a salted scrypt hash (standard library) with its parameters,
so they can be raised later without breaking the accounts made before.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import DecisionRefused, NotFound, SignInFailed
from ..text import one_line
from .identity import (
    LOGIN_SUFFIX,
    Actor,
    canonical_name,
    looks_like,
    name_key,
    name_problem,
    taken_problem,
)
from .records import DeskStore
from .shop import MAX_DOLLARS

ROLES = ("approver", "lead")
DEFAULT_LIMIT = 100.0      # dollars an approver may approve when no --limit is given
MIN_PASSWORD = 8
# scrypt's cost: 16 MiB of memory and about 50 ms per check, slow enough to make guessing a
# stolen hash expensive and fast enough for a sign-in.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
# The sign-in throttle, per account name (by its skeleton), whoever tries it from wherever:
# SIGN_IN_FREE wrong passwords cost nothing; each further one makes the name wait twice as
# long after it (SIGN_IN_BASE seconds, then 2x, 4x...), at most SIGN_IN_CAP, before its
# password is checked again. A page is a guessing machine: this lets one guess through per
# SIGN_IN_CAP, and never locks anyone out (the right password after the wait always works).
# Failures older than SIGN_IN_WINDOW are forgotten. Counted in the store, so every process,
# host and restart shares it.
SIGN_IN_FREE, SIGN_IN_BASE, SIGN_IN_CAP, SIGN_IN_WINDOW = 3, 2.0, 300.0, 3600.0
# Host names the page answers to unless REFUND_AGENT_ALLOWED_HOSTS adds more.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class Account:
    name: str
    role: str
    limit: float | None     # dollars; None for a lead
    version: str = field(default="", compare=False, repr=False)  # see fingerprint()

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


def sign_in_delay(failures: int) -> float:
    """Seconds a name waits after its latest wrong password, with ``failures`` in the window:
    none for the first SIGN_IN_FREE, then doubling from SIGN_IN_BASE up to SIGN_IN_CAP."""
    if failures < SIGN_IN_FREE:
        return 0.0
    return min(SIGN_IN_CAP, SIGN_IN_BASE * 2.0 ** min(failures - SIGN_IN_FREE, 32))


def sign_in_wait(failures: int, since_latest: float) -> float:
    """Seconds left before the name's password is checked again (0: now)."""
    return max(0.0, sign_in_delay(failures) - since_latest)


@dataclass(frozen=True)
class Tries:
    """Where one name stands with its throttle when someone tries it."""

    key: str             # what its failures are counted under (see Throttle.key)
    failures: int        # wrong passwords for it within SIGN_IN_WINDOW
    wait: float          # seconds before its password is checked again (0: now)
    now: float | None    # the throttle's clock when read (None: the database's)


@dataclass(frozen=True)
class Throttle:
    """The sign-in throttle, per name, kept in the store (so every process, host and restart
    shares it): a name's wrong passwords make that name, and no other, wait longer before its
    password is checked again (``sign_in_delay``); the right password after the wait works.

    ``door`` keeps one kind of login's names apart from another's: the desk's sign-in
    (``""``) and the SMTP listener's logins (``smtp_logins``) count their failures
    separately, so guessing at one door never slows a person at the other. ``logins`` is how
    the audit calls them ("sign-ins as Dana Kim wait 8 s...").
    """

    store: DeskStore
    clock: Callable[[], float] | None = None
    door: str = ""
    logins: str = "sign-ins"

    def key(self, name: str) -> str:
        """What ``name``'s failures are counted under: its key (identity.name_key), which
        every spelling of it shares, after the door's name and a tab (a name's key never
        holds a tab, so no name of one door can count as one of another)."""
        return f"{self.door}\t{name_key(name)}" if self.door else name_key(name)

    def tries(self, name: str) -> Tries:
        """Where ``name`` stands now (read before its password is checked)."""
        now = self.clock() if self.clock is not None else None
        key = self.key(name)
        failures, since = self.store.sign_in_failures(key, SIGN_IN_WINDOW, now=now)
        return Tries(key, failures, sign_in_wait(failures, since), now)

    def failed(self, tries: Tries, who: str, client: str, why: str,
               slowed_as: str | None = None) -> float:
        """Count a wrong password for the name ``tries`` was read for, and audit it as by
        ``who`` (the name as tried) with ``why`` and ``client`` (never the password); when
        the name now waits, a second audit line says whose name (``slowed_as``, else ``who``)
        and for how long. Returns that wait in seconds (0: none)."""
        failures = tries.failures + 1
        delay = sign_in_delay(failures)
        slowed = (f"{self.logins} as {slowed_as or who} wait {_seconds(delay)} after "
                  f"{failures} wrong passwords within {_seconds(SIGN_IN_WINDOW)} (the latest "
                  f"from {client})" if delay else None)
        self.store.sign_in_failed(tries.key, client, SIGN_IN_WINDOW, who, f"{why} from {client}",
                                  slowed=slowed, now=tries.now)
        return delay

    def succeeded(self, tries: Tries) -> None:
        """The right password: the name's failures are forgotten."""
        self.store.sign_in_succeeded(tries.key)


def smtp_logins(store: DeskStore) -> Throttle:
    """The throttle of the SMTP listener's logins (``receive --smtp``)."""
    return Throttle(store, door="smtp", logins="SMTP logins")


def _seconds(wait: float) -> str:
    """``8 s``, ``4 min 10 s``, ``1 h``: a wait, rounded up (never "0 s" while one is left)."""
    minutes, seconds = divmod(max(1, math.ceil(wait - 1e-9)), 60)
    hours, minutes = divmod(minutes, 60)
    return " ".join(f"{n} {unit}" for n, unit in ((hours, "h"), (minutes, "min"),
                                                   (seconds, "s")) if n)


# A check against this hash when the name is unknown, so an unknown name takes as long to
# refuse as a wrong password (the timing does not say which names exist).
_DUMMY = hash_password("not a password", salt=b"\0" * 16)


def _operator() -> str:
    """Who changes accounts from this machine: the operating-system login, as the audit says."""
    try:
        return f"{getpass.getuser()}{LOGIN_SUFFIX}"
    except (KeyError, OSError):  # no passwd entry (some containers)
        return Actor.UNKNOWN_LOGIN


def limit_to_cents(limit: float) -> int:
    """An approver's limit in dollars as whole cents, or DecisionRefused saying why not.

    Finite, above zero, at most the largest amount the shop handles, and in whole cents: a
    limit of 47.995 is refused rather than shown as $48.00 and enforced as something else.
    """
    if not isinstance(limit, (int, float)) or not math.isfinite(limit):
        raise DecisionRefused(f"The limit must be a number of dollars, not {limit!r}.")
    if not 0 < limit <= MAX_DOLLARS:
        raise DecisionRefused(f"The limit must be more than $0 and at most "
                              f"${MAX_DOLLARS:,}, not {limit:g}.")
    cents = round(limit * 100)
    if abs(limit * 100 - cents) > 1e-6:   # float noise (0.1 + 0.2) is not a fraction of a cent
        low = math.floor(limit * 100)
        raise DecisionRefused(f"The limit must be in whole cents: {limit:g} is not; give "
                              f"{low / 100:.2f} or {(low + 1) / 100:.2f}.")
    return cents


def fingerprint(row: dict) -> str:
    """What a signed-in session remembers of its account: any change to the account (removed
    and added again, a new password, role or limit) gives another value, ending the session."""
    fields = (row["name"], row["role"], row["limit_cents"], row["password"], row["created_at"])
    return hashlib.sha256(repr(fields).encode()).hexdigest()[:32]


def _account(row: dict) -> Account:
    cents = row["limit_cents"]
    return Account(row["name"], row["role"], None if cents is None else cents / 100,
                   fingerprint(row))


class Accounts:
    """The accounts kept in one store."""

    def __init__(self, store: DeskStore, clock: Callable[[], float] | None = None) -> None:
        """``clock``: seconds since 1970 for the sign-in throttle; by default the database's
        own clock, which every process and host on the store shares (tests pass their own)."""
        self.store = store
        self.clock = clock

    def exist(self) -> bool:
        """False means single-user demo mode."""
        return self.store.has_accounts()

    def all(self) -> list[Account]:
        return [_account(row) for row in self.store.account_rows()]

    def _rows(self, name: str) -> list[dict]:
        """The account rows ``name`` signs in as: the one with this exact name in canonical
        form, else those with its key (one, unless a store made before names were compared by
        skeleton holds two that now share one; each still signs in under its own spelling,
        and they count as one person wherever that matters, see identity.same_person)."""
        key, canonical = name_key(name), canonical_name(name)
        rows = [row for row in self.store.account_rows() if name_key(row["name"]) == key]
        return [row for row in rows if canonical_name(row["name"]) == canonical] or rows

    def get(self, name: str) -> Account | None:
        """The account named ``name`` under any spelling of it (case, width, spacing)."""
        rows = self._rows(name) if name else []
        return _account(rows[0]) if rows else None

    def check(self, name: str, role: str, limit: float | None = None
              ) -> tuple[str, int | None]:
        """The name to keep and the limit in cents for a new account, or DecisionRefused.

        Separate from :meth:`add`, so the terminal refuses a bad name or limit before it asks
        for a password.
        """
        name = " ".join(one_line(name, "account name").split())
        if problem := name_problem(name):
            raise DecisionRefused(problem)
        # Again in the store, under its write lock; here so the terminal says it before it
        # asks for a password.
        existing = looks_like(name, [row["name"] for row in self.store.account_rows()])
        if existing is not None:
            raise DecisionRefused(taken_problem(name, existing))
        if role not in ROLES:
            raise DecisionRefused(f"The role must be one of {', '.join(ROLES)}, not {role!r}.")
        if role == "lead" and limit is not None:
            raise DecisionRefused("A lead has no approval limit; leave out --limit.")
        if role == "lead":
            return name, None
        return name, limit_to_cents(DEFAULT_LIMIT if limit is None else limit)

    def add(self, name: str, role: str, password: str, limit: float | None = None,
            by: str | None = None) -> Account:
        """Create an account; ``by`` (default: the operating-system login) is audited.

        The name is kept as written (spaces collapsed) for display; it is unique, and signed
        in with, by its canonical form (see identity.py).
        """
        name, cents = self.check(name, role, limit)
        if len(password) < MIN_PASSWORD:
            raise DecisionRefused(f"The password needs at least {MIN_PASSWORD} characters.")
        self.store.add_account(name, role, cents, hash_password(password), by or _operator())
        return self.current(name)

    def change_owner(self, run_id: str, action: str, by: str, to: str | None = None) -> bool:
        """Assign (to ``to``), claim or release a ticket as the account ``by`` (who signed in);
        False when it was already so. Only an account owns a ticket, so in the demo (no
        accounts) nobody does. The rules are desk/owners.py's, checked in the store against
        the owner as it is when the change commits.

        Raises:
            DecisionRefused: no accounts, an unknown account, or a rule refuses it.
            NotFound: no such ticket.
        """
        from .owners import OwnerChange, stand_in
        if not self.exist():
            raise DecisionRefused("Tickets have owners once accounts exist (only someone "
                                  "signed in owns one): `refund-agent users add` makes one.")
        actor = self.get(by)
        if actor is None:
            raise DecisionRefused(f"No account named {by!r}.")
        target, instead_of = None, None
        if action == "assign":
            account = self.get(to or "")
            if account is None:
                raise DecisionRefused(f"No account named {to!r}: only an account owns a "
                                      "ticket (`refund-agent users list`).")
            # Out of office: a ticket given to someone away goes to their delegate.
            target = stand_in(account.name, self.store.away())
            instead_of = account.name if target != account.name else None
        return self.store.change_owner(OwnerChange(run_id, action, actor.name,  # type: ignore[arg-type]
                                                   actor.limit is None, target, instead_of))

    def go_away(self, account: str, delegate: str, until: float) -> str:
        """``account`` is away until ``until`` (seconds since 1970); its tickets and approvals
        go to ``delegate`` (an account). Returns the delegate's name as stored."""
        from .owners import away_problem
        me, other = self.get(account), self.get(delegate)
        if me is None:
            raise DecisionRefused(f"No account named {account!r}.")
        if other is None:
            raise DecisionRefused(f"No account named {delegate!r}: a delegate is an account "
                                  "(`refund-agent users list`).")
        if problem := away_problem(me.name, other.name, until, time.time()):
            raise DecisionRefused(problem)
        self.store.set_away(me.name, other.name, until)
        return other.name

    def offers_people(self) -> list:
        """The accounts work is offered to (desk/offers.Decider): nobody away; their delegate
        is, within the delegate's own limit."""
        from .offers import Decider
        away = self.store.away()
        return [Decider(a.name, a.limit_cents) for a in self.all() if a.name not in away]

    def offers(self, waiting: list, reader: str | None = None) -> list:
        """The waiting refunds (Approval rows) as ``reader``'s queue shows them: each with who
        it is offered to (desk/offers.py), what the reader can decide first."""
        from .offers import Decider, offers
        people = self.offers_people()
        me = self.get(reader) if reader else None
        raised = self.store.raised_by_of([a.run_id for a in waiting])
        return offers(Decider(me.name, me.limit_cents) if me else None,
                      [(a.id, a.order_id, a.amount_cents, raised.get(a.run_id))
                       for a in waiting], people, self.store.approved_by_on)

    def remove(self, name: str, by: str | None = None) -> tuple[int, int]:
        """Remove the account (its tickets released, delegations to and from it ended);
        returns (tickets released, delegations ended)."""
        rows = self._rows(name.strip()) if name.strip() else []
        return self.store.remove_account(rows[0]["name"] if rows else name.strip(),
                                         by or _operator())

    def sign_in(self, name: str, password: str, client: str = "terminal") -> Account:
        """The account, if ``password`` is its password; SignInFailed otherwise.

        Throttled per name, never per client: everyone behind one proxy, NAT or host is one
        client, so counting by client would let a stranger's wrong passwords lock the real
        person out. Instead each wrong password for a name (counted by its key, which every
        spelling that signs in as it shares; unknown names too, so the answer does not tell
        which names exist) makes that name wait longer (sign_in_delay) before its
        password is checked again, from any client; tries during the wait are refused unchecked
        and uncounted. The right password after the wait always works and clears the count, and
        a name's failures never slow any other name. Every failure is audited with its
        ``client``, and each one that makes the name wait says in the audit whose name and for
        how long (``sign_in_slowed``).
        """
        name = " ".join((name or "").split())
        throttle = Throttle(self.store, self.clock)
        tries = throttle.tries(name)
        if tries.wait > 0:
            raise SignInFailed(f"Too many wrong passwords for this name: its password is "
                               f"checked again in {_seconds(tries.wait)}.")
        rows = self._rows(name) if name else []
        if not rows:
            check_password(password or "", _DUMMY)
        account = next((row for row in rows if check_password(password or "", row["password"])),
                       None)
        if account is None:
            # The audit names the name as tried (NFKC, case-folded): a look-alike spelling
            # shows as one there, while the throttle counts it with the name it imitates. The
            # line saying it now waits names the account.
            delay = throttle.failed(tries, canonical_name(name), client,
                                    "wrong password" if rows else "no such account",
                                    slowed_as=rows[0]["name"] if rows else None)
            wait = f" Sign-ins as this name now wait {_seconds(delay)}." if delay else ""
            raise SignInFailed(f"Wrong name or password.{wait}")
        throttle.succeeded(tries)
        return _account(account)

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
