"""The refund desk's own records, in a store that stands on the loop's store.

:class:`DeskStore` is the loop's :class:`~refund_agent.store.Store` (runs, leases, responses
and calls, approvals, replies, the audit chain, the ledger) with what only the desk keeps:

- ``approvals.py``: :class:`DeskApprovals`, the desk's part of boundaries 4 and 5 (a
  refund's lines and what they hold, the approval rules applied inside the decision);
- ``escalations.py``: :class:`DeskRecords` (escalations a lead takes, hand-offs, first
  sign-offs of a two-person refund, who typed a ticket in) and :class:`DeskInbox` (the inbox
  read by desk status: counts, keyset pages, customers' names);
- ``inbox.py``: the desk status each run's row keeps (schema 12), recomputed before every
  commit of the desk's store, in that commit's transaction;
- ``owners.py``: who has a ticket, who is away and who stands in; ``timeouts.py``: the
  timeout policy applied; ``accounts.py``: the desk's accounts and failed sign-ins;
- ``provider.py``: what the payment provider reports later about the desk's refunds (Stripe's
  webhooks) and refunds whose answer never came;
- ``mail.py``: :class:`Mail`, customers' mail in and the desk's mail out, once per Message-ID.

``DeskStore(target)`` opens the engine ``target`` names, as ``Store(target)`` does: an
instance is a :class:`DeskSQLiteStore` or a :class:`DeskPostgresStore`, and so still an
``SQLiteStore`` or ``PostgresStore``, whose engine methods come before the loop's store's.
The desk's mixins come first and fill the hooks the loop's store leaves empty
(``StoreCore._before_commit``, ``_output_kept``, ``_released_run``); they override nothing an
engine defines. SQL stays here and in ``refund_agent/store``.

The desk's tables, the columns it keeps on the loop's runs and their triggers are its own part
of the schema (``schema_part.py``, with each engine's DDL in ``schema_sqlite.py`` and
``schema_postgres.py``), versioned on its own in the loop's ``schema_parts``: the loop's store
installs the part, idempotently and in one transaction with its own upgrade, as a desk store
opens (``_parts``). A loop ``Store`` alone makes none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import StoreError
from ...models import Run
from ...store import LEASE_STALE_SECONDS, PostgresStore, SQLiteStore, Store, is_postgres_url
from .accounts import Accounts
from .approvals import DeskApprovals
from .escalations import DeskInbox, DeskRecords
from .inbox import DESK_COLUMNS, desk_of, refresh_stale_desk
from .mail import Mail
from .owners import Owners
from .provider import ProviderEvents
from .schema_part import DESK_PART
from .timeouts import Timeouts

if TYPE_CHECKING:
    from ...config import Settings


class DeskStore(DeskApprovals, DeskRecords, DeskInbox, Owners, Timeouts, Accounts,
                ProviderEvents, Mail, Store):
    """The loop's store with the desk's records, on the engine ``target`` names (SQLite file
    or ``postgresql://`` URL); ``open_desk_store(settings)`` does the same from the settings.
    """

    # The run a release returns carries its desk status, read by the releasing UPDATE itself.
    _released_columns = f", {DESK_COLUMNS}"
    # The desk's tables, installed as the store opens (schema_part.py).
    _parts = (DESK_PART,)

    def __new__(cls, target: Path | str, lease_seconds: float = LEASE_STALE_SECONDS
                ) -> DeskStore:
        if cls is DeskStore:
            cls = desk_engine_for(target)
        return super().__new__(cls, target, lease_seconds)  # type: ignore[return-value]

    def __init__(self, target: Path | str, lease_seconds: float = LEASE_STALE_SECONDS) -> None:
        super().__init__(target, lease_seconds)
        self._refresh_left_stale()

    def _before_commit(self, db: Any) -> None:
        """The desk rows this transaction left stale, recomputed before it commits (inbox.py),
        so no reader ever sees one stale."""
        if self._desk_may_be_stale(db):
            refresh_stale_desk(db)

    def _released_run(self, row: dict[str, Any]) -> Run:
        """With its desk status, from the DESK_COLUMNS the same UPDATE read. Nothing after
        that update in the transaction changes a desk fact (a timeline step, the response's
        rows), so the refresh at commit computes this same desk status."""
        return Run.model_validate({**row, "desk_status": str(desk_of(row)[0])})

    def _refresh_left_stale(self) -> None:
        """Rows a write through the loop's store alone left stale (it refreshes nothing, an
        upgrade it made included), recomputed as the desk opens the store: one indexed read
        when there are none."""
        if not self._read("SELECT 1 FROM runs WHERE desk_dirty = 1 LIMIT 1"):
            return
        try:
            with self._tx() as db:
                refresh_stale_desk(db)
        except StoreError:
            pass   # a store open read-only, or moved: the rows are read as they are


class DeskSQLiteStore(DeskStore, SQLiteStore):
    """The desk's store on an SQLite file."""


class DeskPostgresStore(DeskStore, PostgresStore):
    """The desk's store on a PostgreSQL database."""


def desk_engine_for(target: Path | str) -> type[DeskStore]:
    """The desk's store class for ``target``: PostgreSQL for a ``postgresql://`` URL, else
    SQLite (as ``store.engine_for``)."""
    return DeskPostgresStore if is_postgres_url(target) else DeskSQLiteStore


def open_desk_store(settings: Settings) -> DeskStore:
    """The desk's store the settings name, as ``store.open_store`` opens the loop's."""
    return DeskStore(settings.store_target, lease_seconds=settings.lease_seconds)


__all__ = [
    "Accounts", "DeskApprovals", "DeskInbox", "DeskPostgresStore", "DeskRecords",
    "DeskSQLiteStore", "DeskStore", "Owners", "ProviderEvents", "Timeouts", "desk_engine_for",
    "open_desk_store",
]
