"""The loop's store: one SQLite file shared by every process (terminal, web, notebook), or one
PostgreSQL database shared by every host (``REFUND_AGENT_DATABASE_URL``).

SQL stays in this package (and in the records an agent adds on top, as the refund desk's
``refund_agent.desk.records``). It imports nothing of any one agent. ``Store(target)`` (or
:func:`open_store` from the settings) opens the right engine:

- ``base.py``: :class:`Store`, every durable boundary of the loop written once, by concern in
  ``runs.py``, ``leases.py`` (one fenced owner per run), ``responses.py`` (responses, calls,
  transcripts), ``approvals.py``, ``replies.py`` (replies, timeline), ``auditlog.py``,
  ``ledger.py``, on ``core.py`` (connections, the transaction,
  errors translated in one place, and the hooks an agent's own records fill);
  ``search.py``: searching and paging the runs.
- ``sqlite.py`` and ``postgres.py``: one class per engine, holding only what differs.
- ``schema.py``: what each version added, and the parts an agent's store adds (its own
  tables, versioned on their own in ``schema_parts``: the desk's); ``schema_sqlite.py``,
  ``schema_postgres.py``: each engine's loop tables and numbered steps; ``audit.py``: the
  chain's pure check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .audit import GENESIS_HASH, audit_hash
from .base import Store, engine_for, is_postgres_url
from .core import DB_ERRORS, LEASE_STALE_SECONDS, host_id, pid_alive
from .leases import Lease
from .postgres import BulkLoad, PostgresStore, redact
from .responses import Output
from .schema import SCHEMA_HISTORY, SCHEMA_VERSION, TABLES
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from ..config import Settings


def open_store(settings: Settings) -> Store:
    """The store the settings name (``database_url``, else the SQLite file in the output
    folder), with their lease time."""
    return Store(settings.store_target, lease_seconds=settings.lease_seconds)


__all__ = [
    "DB_ERRORS", "GENESIS_HASH", "LEASE_STALE_SECONDS", "SCHEMA_HISTORY", "SCHEMA_VERSION",
    "TABLES", "BulkLoad", "Lease", "Output", "PostgresStore", "SQLiteStore", "Store", "audit_hash",
    "engine_for", "host_id", "is_postgres_url", "open_store", "pid_alive", "redact",
]
