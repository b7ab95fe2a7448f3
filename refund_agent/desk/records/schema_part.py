"""The desk's part of a store's schema: its tables, the columns it keeps on the loop's runs,
their indexes and triggers, installed (and later upgraded) by the loop's store as the desk's
store opens, in one transaction with whatever the loop's own schema needs.

The desk's versions are its own (``schema_parts``, row ``desk``); the loop's numbered history
(store/schema.py) no longer makes any of this. Version 1 is the desk's tables exactly as the
one history's schema 16 made them, so a store made by that history holds version 1 already
(``SchemaPart.legacy``) and opens without a write. A later desk change adds a line here and a
step in :func:`install` for stores below it.
"""

from __future__ import annotations

from typing import Any

from ...store.schema import SchemaPart
from ...store.schema_sqlite import statements
from .schema_postgres import DESK_POSTGRES_SCHEMA, DESK_RUN_COLUMNS
from .schema_sqlite import DESK_RUN_COLUMNS as DESK_SQLITE_COLUMNS
from .schema_sqlite import DESK_SQLITE_SCHEMA

DESK_HISTORY: dict[int, str] = {
    1: "The desk's tables as the one history's schema 16 left them: approval_lines and the "
       "units guard, accounts and sign_in_failures, provider_events, escalations, raised_by, "
       "mail, signoffs, owners, timeout_steps, delegates; the desk status kept on runs "
       "(desk_status, desk_escalations, desk_dirty) with its triggers and indexes; "
       "desk_counts with its triggers, filled from the runs when it is made.",
}
DESK_VERSION = max(DESK_HISTORY)

# The desk's counts, from the runs' desk columns as they stand (the triggers keep them after).
RECOUNT_DESK = ("INSERT INTO desk_counts(status, escalated, n)"
                " SELECT COALESCE(desk_status, ''), CASE WHEN desk_escalations > 0 THEN 1"
                " ELSE 0 END, COUNT(*) FROM runs GROUP BY 1, 2")

_DESK_SQLITE_STATEMENTS = statements(DESK_SQLITE_SCHEMA)


def install(store: Any, db: Any, since: int) -> None:
    """Bring the desk's part of the store at ``store`` from ``since`` to DESK_VERSION, in the
    open transaction ``db``. Every statement keeps what is there (two processes may open one
    store at once, and a store from the one history has it all); the counts are filled only
    where their table is new, so an existing store's rows are not touched."""
    if since >= 1:
        return
    if store.engine == "sqlite":
        have = {row[1] for row in db.execute("PRAGMA table_info(runs)").fetchall()}
        counted = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                             " AND name = 'desk_counts'").fetchone() is not None
        for column, spelled in DESK_SQLITE_COLUMNS:
            if column not in have:
                db.execute(f"ALTER TABLE runs ADD COLUMN {spelled}")
        run = _DESK_SQLITE_STATEMENTS
    else:
        counted = db.execute("SELECT to_regclass('desk_counts') IS NOT NULL").fetchone()[0]
        run = (*DESK_RUN_COLUMNS, *DESK_POSTGRES_SCHEMA)
    for statement in run:
        db.execute(statement)
    if not counted:
        db.execute(RECOUNT_DESK)


DESK_PART = SchemaPart(name="desk", version=DESK_VERSION, install=install, legacy=1)
