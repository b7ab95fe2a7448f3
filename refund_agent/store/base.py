"""The loop's store: one class holding every durable boundary of the loop once, over either
engine.

Each public write method is one transaction, and each is one of the durable boundaries the
loop relies on: a process killed between two of them leaves the store consistent, and the run
can be picked up from what was committed. The methods live by concern (runs, leases,
responses and calls, approvals, replies, the audit log, the ledger); what the two engines
do differently lives in their classes,
:class:`~refund_agent.store.sqlite.SQLiteStore` and
:class:`~refund_agent.store.postgres.PostgresStore`. Nothing here knows any one agent: an
agent that keeps records of its own (the refund desk: ``refund_agent.desk.records``) adds
them in a subclass, which fills the hooks :class:`~refund_agent.store.core.StoreCore` leaves
empty (what runs before each commit, what a call's output leaves behind, the run a release
returns), and opens its engine as :class:`Store` does.
"""

from __future__ import annotations

from pathlib import Path

from .approvals import Approvals
from .auditlog import AuditLog
from .core import LEASE_STALE_SECONDS
from .leases import Leases
from .ledger import Ledger
from .replies import Replies
from .responses import Responses
from .runs import Runs


def is_postgres_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than an SQLite file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


class Store(Runs, Leases, Responses, Approvals, Replies, AuditLog, Ledger):
    """Typed access to the SQLite file at ``target``, or to the PostgreSQL database when
    ``target`` is a ``postgresql://`` URL; safe to share between threads.

    ``Store(target)`` opens the engine's class (``SQLiteStore`` or ``PostgresStore``), so
    callers never choose; ``open_store(settings)`` does the same from the settings. Methods
    only one engine has (``writers_held_off``, ``bulk_load``) are on that engine's class.
    """

    def __new__(cls, target: Path | str, lease_seconds: float = LEASE_STALE_SECONDS
                ) -> Store:
        if cls is Store:
            cls = engine_for(target)
        return super().__new__(cls)

    def integrity_ok(self) -> bool:
        return self.integrity_problem() is None

    # -- what each engine does its own way (implemented by both) ----------------------------

    def change_counter(self) -> int:
        """A number that changes whenever anyone commits to the store, from any process."""
        raise NotImplementedError

    def wait_for_change(self, since: int, timeout: float) -> int:
        """The change counter once it differs from ``since``, or after ``timeout`` seconds."""
        raise NotImplementedError

    def integrity_problem(self, quick: bool = False) -> str | None:
        """None if the engine finds the store's pages and indexes sound; else what it found."""
        raise NotImplementedError

    def moved_to(self) -> str | None:
        """Where ``refund-agent migrate`` moved this store, or None while it is the live one."""
        raise NotImplementedError


def engine_for(target: Path | str) -> type[Store]:
    """The store class for ``target``: PostgreSQL for a ``postgresql://`` URL, else SQLite."""
    # Imported here: the engines' modules import this one for the base class.
    if is_postgres_url(target):
        from .postgres import PostgresStore
        return PostgresStore
    from .sqlite import SQLiteStore
    return SQLiteStore
