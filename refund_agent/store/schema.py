"""The store's schema versions: what each added, and the data moves both engines share.

Each engine's schema is written out in its own spelling, in its own module (nothing is derived
from the other): SQLite's as one script (schema_sqlite.py), PostgreSQL's as a list of
statements (schema_postgres.py). Every statement is
``IF NOT EXISTS`` (or ``ON CONFLICT DO NOTHING``), so the schema runs on a new store and after
an older store's steps alike: the steps change the tables an older store already has (``CREATE
TABLE IF NOT EXISTS`` never adds a column), the schema then adds whatever table or index is new.

A schema change adds a line to :data:`SCHEMA_HISTORY` and, on each engine whose tables change,
a :class:`Step` with that number; the engine's store runs the steps its store is below, then the
schema, then the steps' data moves, in one transaction (see ``sqlite.py`` and ``postgres.py``).

The schema here is the loop's: runs, steps, calls, approvals, transcript, replies, audit and its
anchor, ledger, store_moved, the runs' search, and ``schema_parts``. An agent's store that keeps
tables of its own (the refund desk: desk/records/schema_part.py) names a :class:`SchemaPart`,
numbered on its own in ``schema_parts``; the store installs or upgrades it, in the same
transaction as the loop's schema, when it opens. Up to 16 this one history made the desk's
tables too, so the steps below that change a desk table (8: approval_lines' units; 13: merging
open escalations) stay here: they only run on a store from before 16, which has those tables
(a step leaves out what a table it changes lacks). Steps 11 (PostgreSQL's units guard) and 12
(the desk status columns on runs) are left empty: the desk's part makes both wherever they are
missing. A new store runs no step, and gets none of the desk's tables. Schema 16 stays the
loop's version: a store made before parts records 16 and holds every desk table, which
:func:`parts_due` reads as the desk's part at its first version, so such a store opens without
a write.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ..models import order_id_in

# What each schema version added, oldest first. Every bump adds a line here and, when existing
# tables change, a numbered Step in each engine's list.
SCHEMA_HISTORY: dict[int, str] = {
    1: "runs, steps, calls, approvals, replies and the chained audit log.",
    2: "approvals_by_run and approvals_by_order indexes.",
    3: "Itemized refunds: approvals hold order lines (approval_lines), money in cents, audit "
       "entries record the lines; leases carry a fencing epoch; the audit anchor; accounts. "
       "Stores from 1 and 2 that hold approvals cannot be mapped to lines without guessing, "
       "so they are refused (see SQLiteStore._upgrade); empty ones are upgraded.",
    4: "The transcript: every item each request sent and each response returned (encrypted "
       "reasoning included), in order, so a run can continue without the provider's stored "
       "response; runs count its items and bytes and say whether it goes back to the start.",
    5: "Leases name their host (a pid means something only on the machine that wrote it), for "
       "several hosts on one PostgreSQL database; the ledger table holds the payment and email "
       "stand-ins' idempotency records there (on SQLite they stay in output/'s JSONL logs). "
       "The first schema on PostgreSQL.",
    6: "Calls are keyed by their run and response (provider call ids are not unique across "
       "runs) and carry their key (the approval id and idempotency key, with the run in it; "
       "calls saved before keep their call id as key) and the order id their arguments name, "
       "read in Python when the call is saved, so no query parses model-written JSON; "
       "approvals are requested by the database's clock; an SQLite store that `migrate` "
       "moved says where (store_moved) and refuses writes.",
    7: "sign_in_failures: recent failed sign-ins by canonical name and client, so the "
       "throttle is shared by every process and survives a restart (a new table only).",
    8: "Units: approval_lines say how many of the line's units they refund (units) out of how "
       "many it has (quantity); both NULL on rows from before, which refunded whole lines and "
       "so read as all units. A line may now be held by several refunds, so the unique index "
       "lines_held_once gives way to a trigger that refuses holding more units than the line "
       "has (on SQLite; the code checks the same under the order's lock on both engines).",
    9: "The desk: escalations (raised by the agent's escalate tool or by an approver sending a "
       "refund to a lead; who took each and when), signoffs (the first of two approvals above "
       "the shop's two-person amount) and raised_by (the desk account that typed a ticket "
       "in, so nobody approves a refund on their own ticket); new tables only.",
    10: "provider_events: what an outside system reported later (Stripe's refund.updated and "
        "refund.failed webhooks), one row per event id, so a redelivered event is recorded "
        "once and reconcile knows which failed refunds the desk was told of (a new table).",
    11: "The database's own guard on units on both engines: PostgreSQL gets the trigger SQLite "
        "has had since 8 (a plpgsql function, units_held_within_quantity, that refuses holding "
        "more units of a line than its quantity, under the order's advisory lock), and on "
        "both an UPDATE that makes a row hold more than it did is checked as an INSERT is "
        "(triggers only; no table changes).",
    12: "The desk's status kept on each run (desk_status, desk_escalations), so the inbox "
        "counts and pages by what happened without reading every run's approvals on every "
        "draw. Triggers mark a run's row stale (desk_dirty) when its status, an approval, a "
        "line's decision or an escalation changes; each write transaction recomputes the stale "
        "rows with desk/status.py before it commits (see desk/records/inbox.py).",
    13: "Runs name the agent that made them (runs.agent; 'refunds' for the desk, the closure "
        "example's 'closure'), so a front end resumes, claims and decides only its own agent's "
        "runs in a store several agents share. Runs from before are the desk's, except those "
        "whose calls name only the closure example's tools. At most one open escalation per "
        "ticket, kind and refund (a unique index on the open ones): a second raise, a second "
        "webhook about one failed refund, is the first one; open duplicates from before are "
        "closed as merged into the oldest.",
    14: "mail: one row per email in or out, keyed by its Message-ID (unique), so a message "
        "delivered again, retried or polled again is taken once; its run, what intake made of "
        "it (ticket, reply, held, flagged, auto, bounce, refused; sent for the desk's own), "
        "the thread ids (In-Reply-To, References), attachment names, its text and the raw "
        "message (a new table only).",
    15: "People: owners (one row per ticket that has an owner, so at most one; who assigned "
        "it), timeout_steps (each step of the shop's timeout policy, once per approval: the "
        "primary key makes a second remind or escalate a no-op under races and restarts), "
        "delegates (an account away until a time names who takes its tickets and approvals) and "
        "runs.last_front (what kind of process last took the run: page, terminal or worker, so "
        "the ticket says 'Server restarted' only when a page's server picked it up again).",
    16: "Search and counts through indexes: run_search holds each run's searchable text "
        "(sender, name, subject, email, run id, its approvals' order ids; ASCII letters "
        "lower-cased), kept by triggers and indexed by trigrams (SQLite FTS5, PostgreSQL "
        "pg_trgm), and desk_counts holds how many runs each (desk status, escalated) has, "
        "kept by triggers on runs; both filled from the existing rows on upgrade.",
    17: "runs.trace_context: the W3C trace context (traceparent, tracestate) of the span that "
        "started the run, when tracing was on (refund_agent/telemetry), so a decision and a "
        "resume in another process, days later, join the run's trace. NULL on runs from "
        "before and on runs made with tracing off (a new column only).",
}
SCHEMA_VERSION = max(SCHEMA_HISTORY)


@dataclass(frozen=True)
class Step:
    """One schema change, run on a store whose version is below ``version``.

    ``sql`` changes the tables the store already has, before the schema runs; ``data`` (if
    any) then moves rows in Python, in the same transaction, after the schema made the new
    tables. ``adds`` (table, column): the columns ``sql`` adds, which a store that has the
    table without them needs; the step's ``ALTER TABLE ... ADD COLUMN`` statements are left
    out where the table is missing (the schema makes it whole) or already has them.
    """

    version: int
    sql: tuple[str, ...]
    data: Callable[[Any], object] | None = None
    adds: tuple[tuple[str, str], ...] = ()
    updates: tuple[str, ...] = ()

    def statements(self, columns: Callable[[str], Collection[str]]) -> tuple[str, ...]:
        """The statements to run on a store whose tables have ``columns(table)``.

        ``updates``: tables whose ``UPDATE`` statements in ``sql`` are left out where the store
        does not have the table yet (the schema then makes it, empty: nothing to change).
        """
        if not self.adds and not self.updates:
            return self.sql
        skip = {table for table, column in self.adds
                if not columns(table) or column in columns(table)}
        missing = {table for table in self.updates if not columns(table)}
        return tuple(s for s in self.sql
                     if not any(s.startswith(f"ALTER TABLE {t} ADD COLUMN") for t in skip)
                     and not any(s.startswith(f"UPDATE {t} ") for t in missing))


def due(steps: Collection[Step], version: int) -> list[Step]:
    """The steps a store at ``version`` needs, oldest first (none for a new store, 0)."""
    return sorted((s for s in steps if version and version < s.version),
                  key=lambda s: s.version)


def shipped_version(version: int, call_columns: Collection[str]) -> int:
    """The version a store really is at, from the one it records.

    Schema 7 was first numbered on a branch that did not have 6 yet, and main shipped it so
    for half an hour (2026-12-01): such a store records 7, but its calls have no key. It is a
    schema-5 store with the sign-in throttle's table, and is upgraded as one (the throttle's
    table is ``IF NOT EXISTS``, so it is kept).
    """
    if version == 7 and "key" not in call_columns:
        return 5
    return version


def calls_v6(db: Any, old_table: str | None) -> None:
    """Step 6 for the calls a store already has: each keeps its call id as its key (the id its
    approval and its payment or email record already carry) and gets the order id its
    arguments name, read here, in Python, so bad JSON in one call cannot stop the upgrade.

    ``old_table``: on SQLite, the old table, copied into the new one; None on PostgreSQL,
    whose table gained the columns in place.
    """
    source = old_table or "calls"
    rows = db.execute(f"SELECT * FROM {source}").fetchall()
    for row in rows:
        # A table that already has keys (a store put back to an older version number by
        # hand, as tests do) keeps them: they are what its approvals and logs carry.
        kept = row["key"] if "key" in row.keys() and old_table else None
        fields = (kept or row["call_id"], order_id_in(row["arguments"]))
        where = (row["run_id"], row["response_id"], row["seq"])
        if old_table is None:
            db.execute("UPDATE calls SET key = ?, order_id = ?"
                       " WHERE run_id = ? AND response_id = ? AND seq = ?", fields + where)
        else:
            db.execute("INSERT INTO calls(key, order_id, run_id, response_id, seq, call_id, name,"
                       " arguments, output) VALUES (?,?,?,?,?,?,?,?,?)",
                       fields + where + (row["call_id"], row["name"], row["arguments"],
                                         row["output"]))


# Schema 13. Open escalations that repeat an older open one (same ticket, kind and refund) are
# closed as merged into it before the unique index on the open ones is made; the oldest stays
# open for a lead. The same statement on both engines (no ``?`` or ``%``: PostgreSQL's goes
# through pyformat inside a DO block).
_SAME_OPEN = ("(SELECT MIN(o.id) FROM escalations o WHERE o.run_id = escalations.run_id"
              " AND o.kind = escalations.kind AND o.taken_by IS NULL"
              " AND COALESCE(o.approval_id, '') = COALESCE(escalations.approval_id, ''))")
MERGE_OPEN_ESCALATIONS = (
    f"UPDATE escalations SET taken_by = 'merged into escalation ' || {_SAME_OPEN},"
    f" taken_at = raised_at WHERE taken_by IS NULL AND id > {_SAME_OPEN}")
# The desk's own tools and the closure example's, as they were at schema 13: a run from before
# whose calls name closure tools and no desk tool was made by the closure example.
_DESK_TOOLS_13 = ("lookup_order", "check_refund_policy", "issue_refund",
                  "send_customer_message", "escalate")
_CLOSURE_TOOLS_13 = ("lookup_account", "close_account")


def runs_agent_v13(db: Any) -> None:
    """Step 13's data: the closure example's runs in a store from before say so (every other
    run was the desk's, the column's default)."""
    closure = ",".join(f"'{name}'" for name in _CLOSURE_TOOLS_13)
    desk = ",".join(f"'{name}'" for name in _DESK_TOOLS_13)
    db.execute(f"UPDATE runs SET agent = 'closure' WHERE agent = 'refunds'"
               f" AND id IN (SELECT run_id FROM calls WHERE name IN ({closure}))"
               f" AND id NOT IN (SELECT run_id FROM calls WHERE name IN ({desk}))")


# Schema 16's data: the search text filled from the runs an older store holds (the triggers
# keep it from then on). ``body`` is the engine's expression for one run's text. (16's other
# derived table, the desk's counts, is the desk part's: it fills it when it makes it.)
def fill_search(body: str) -> Callable[[Any], None]:
    def fill(db: Any) -> None:
        db.execute("DELETE FROM run_search")
        db.execute(f"INSERT INTO run_search(run_id, body) SELECT r.id, {body} FROM runs r")
    return fill


@dataclass(frozen=True)
class SchemaPart:
    """Tables, columns and triggers an agent's store adds on the loop's, versioned on its own.

    ``install(store, db, since)`` brings the part from version ``since`` (0: not there) to
    ``version``, inside the opening transaction ``db`` (every statement idempotent: two
    processes may open one store at once). ``legacy``: the version a store made before parts
    holds (the one history to schema 16 made the desk's tables); 0 for any other part.
    """

    name: str
    version: int
    install: Callable[[Any, Any, int], None]
    legacy: int = 0


def parts_due(parts: Collection[SchemaPart], recorded: dict[str, int] | None,
              version: int) -> list[tuple[SchemaPart, int]]:
    """The parts a store needs installed or upgraded, each with the version it holds.

    ``recorded``: the store's ``schema_parts`` rows, None where it has no such table (a new
    store, or one made before parts); ``version``: the loop's version it records. A store below
    :data:`PARTS_SINCE` predates parts: it holds none (its upgrade runs each part's install
    whole, which keeps what is already there), whatever rows were put back in it by hand. One
    at PARTS_SINCE without the table was made by the one history: each part at ``legacy``.
    """
    due_parts = []
    for part in parts:
        if version < PARTS_SINCE:
            since = 0
        elif recorded is None:
            since = part.legacy
        else:
            since = recorded.get(part.name, 0)
        if since < part.version:
            due_parts.append((part, since))
    return due_parts


# The loop's version from which a store may record its parts (schema_parts came beside 16).
PARTS_SINCE = 16

RECORD_PART = ("INSERT INTO schema_parts(part, version) VALUES (?, ?)"
               " ON CONFLICT (part) DO UPDATE SET version = excluded.version")


def _data_v13(db: Any) -> None:
    # The runs whose duplicate escalations were closed are marked stale by the triggers; the
    # desk's store recomputes them before the upgrade commits (StoreCore._before_commit).
    runs_agent_v13(db)


# -- SQLite ----------------------------------------------------------------------------------


# -- PostgreSQL ------------------------------------------------------------------------------


# Every table of a store, with the columns its rows are ordered by (its primary key): what a
# copy of the whole store (store/migrate.py) reads and fills, in this order: the loop's and the
# desk's. A loop store alone lacks the desk's and reads or copies only those it has
# (StoreCore.tables); a copy's target must have every table and column its source has.
TABLES: dict[str, str] = {
    "runs": "id", "steps": "id", "calls": "run_id, response_id, seq", "approvals": "id",
    "approval_lines": "approval_id, line", "transcript": "run_id, seq", "replies": "id",
    "audit": "id", "audit_anchor": "id", "accounts": "name", "ledger": "id",
    "sign_in_failures": "id", "provider_events": "id", "escalations": "id",
    "signoffs": "approval_id", "raised_by": "run_id", "mail": "id",
    "owners": "run_id", "timeout_steps": "approval_id, step", "delegates": "account",
}
