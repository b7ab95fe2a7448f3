"""The store's schema on each engine, and the numbered steps that bring an older store up to it.

Each engine's schema is written out in its own spelling (nothing here is derived from the
other): SQLite's as one script, PostgreSQL's as a list of statements. Every statement is
``IF NOT EXISTS`` (or ``ON CONFLICT DO NOTHING``), so the schema runs on a new store and after
an older store's steps alike: the steps change the tables an older store already has (``CREATE
TABLE IF NOT EXISTS`` never adds a column), the schema then adds whatever table or index is new.

A schema change adds a line to :data:`SCHEMA_HISTORY` and, on each engine whose tables change,
a :class:`Step` with that number; the engine's store runs the steps its store is below, then the
schema, then the steps' data moves, in one transaction (see ``sqlite.py`` and ``postgres.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ..models import order_id_in
from .audit import GENESIS_HASH
from .inbox import refresh_stale_desk

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
        "rows with desk_status.py before it commits (see store/desk.py).",
    13: "Runs name the agent that made them (runs.agent; 'refunds' for the desk, the closure "
        "example's 'closure'), so a front end resumes, claims and decides only its own agent's "
        "runs in a store several agents share. Runs from before are the desk's, except those "
        "whose calls name only the closure example's tools. At most one open escalation per "
        "ticket, kind and refund (a unique index on the open ones): a second raise, a second "
        "webhook about one failed refund, is the first one; open duplicates from before are "
        "closed as merged into the oldest.",
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


def _data_v13(db: Any) -> None:
    runs_agent_v13(db)
    refresh_stale_desk(db)   # the runs whose duplicate escalations were closed


def _sqlite_calls_v6(db: Any) -> None:
    calls_v6(db, "calls_v5")
    db.execute("DROP TABLE calls_v5")


# -- SQLite ----------------------------------------------------------------------------------

SQLITE_STEPS: tuple[Step, ...] = (
    Step(3, ("DROP TABLE approvals", "ALTER TABLE audit ADD COLUMN lines TEXT",
             "ALTER TABLE runs ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0")),
    # Runs that already made a request have no transcript of it, so theirs is incomplete; a run
    # that has not started yet will keep one from its first request.
    Step(4, ("ALTER TABLE runs ADD COLUMN transcript_items INTEGER NOT NULL DEFAULT 0",
             "ALTER TABLE runs ADD COLUMN transcript_bytes INTEGER NOT NULL DEFAULT 0",
             "ALTER TABLE runs ADD COLUMN transcript_complete INTEGER NOT NULL DEFAULT 0",
             "UPDATE runs SET transcript_complete = 1 WHERE last_response_id IS NULL")),
    Step(5, ("ALTER TABLE runs ADD COLUMN lease_host TEXT",)),
    # The calls table gets a new primary key, which SQLite cannot alter: the old one is set
    # aside (with its indexes, whose names the new table's take) and copied over in Python,
    # in the same transaction, reading each call's order id without the database.
    Step(6, ("DROP INDEX IF EXISTS calls_by_response", "DROP INDEX IF EXISTS calls_by_run",
             "ALTER TABLE calls RENAME TO calls_v5"), data=_sqlite_calls_v6),
    # Old rows keep NULL units: a line refunded before units were counted is all its units.
    Step(8, ("DROP INDEX IF EXISTS lines_held_once",
             "ALTER TABLE approval_lines ADD COLUMN units INTEGER",
             "ALTER TABLE approval_lines ADD COLUMN quantity INTEGER"),
         adds=(("approval_lines", "units"), ("approval_lines", "quantity"))),
    # Every run starts stale; the step's data computes them all in the upgrade's transaction.
    Step(12, ("ALTER TABLE runs ADD COLUMN desk_status TEXT",
              "ALTER TABLE runs ADD COLUMN desk_escalations INTEGER NOT NULL DEFAULT 0",
              "ALTER TABLE runs ADD COLUMN desk_dirty INTEGER NOT NULL DEFAULT 1"),
         data=refresh_stale_desk, adds=(("runs", "desk_status"),
                                                 ("runs", "desk_escalations"),
                                                 ("runs", "desk_dirty"))),
    Step(13, ("ALTER TABLE runs ADD COLUMN agent TEXT NOT NULL DEFAULT 'refunds'",
              MERGE_OPEN_ESCALATIONS),
         data=_data_v13, adds=(("runs", "agent"),), updates=("escalations",)),
)

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, kind TEXT NOT NULL,
    sender TEXT NOT NULL, sender_name TEXT NOT NULL, subject TEXT NOT NULL, email TEXT NOT NULL,
    status TEXT NOT NULL, last_response_id TEXT,
    requests INTEGER NOT NULL DEFAULT 0, cost_ticks INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, simulated_replies INTEGER NOT NULL DEFAULT 0,
    error TEXT, lease_pid INTEGER, lease_token TEXT, lease_at REAL, last_pid INTEGER,
    lease_epoch INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    transcript_items INTEGER NOT NULL DEFAULT 0, transcript_bytes INTEGER NOT NULL DEFAULT 0,
    transcript_complete INTEGER NOT NULL DEFAULT 0, lease_host TEXT,
    desk_status TEXT, desk_escalations INTEGER NOT NULL DEFAULT 0,
    desk_dirty INTEGER NOT NULL DEFAULT 1, agent TEXT NOT NULL DEFAULT 'refunds'
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, updated_at);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created_at);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL, pid INTEGER NOT NULL,
    kind TEXT NOT NULL, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps(run_id, id);
-- A call is its run's, its response's, at its place in the response: provider call ids are not
-- unique across runs, and a model may even repeat one. ``key`` (see callrecords.py) is what
-- outlives the request, unique: the approval's id, the payment's or email's idempotency key;
-- NULL for a repeated call, which is answered without running. ``order_id`` is the one the
-- arguments name, read in Python when the call is saved (no query parses the arguments).
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT NOT NULL, run_id TEXT NOT NULL, response_id TEXT NOT NULL,
    seq INTEGER NOT NULL, name TEXT NOT NULL, arguments TEXT NOT NULL, output TEXT,
    key TEXT, order_id TEXT,
    PRIMARY KEY (run_id, response_id, seq)
);
CREATE INDEX IF NOT EXISTS calls_by_response ON calls(response_id, seq);
CREATE INDEX IF NOT EXISTS calls_by_run ON calls(run_id, name);
CREATE INDEX IF NOT EXISTS calls_by_call_id ON calls(run_id, call_id);
CREATE UNIQUE INDEX IF NOT EXISTS calls_by_key ON calls(key);
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL, response_id TEXT NOT NULL, call_id TEXT NOT NULL,
    order_id TEXT NOT NULL, amount_cents INTEGER NOT NULL, proposed_cents INTEGER NOT NULL,
    summary TEXT NOT NULL, customer TEXT NOT NULL,
    status TEXT NOT NULL, requested_at REAL NOT NULL, requested_pid INTEGER NOT NULL,
    decided_by TEXT, decided_at REAL, decided_pid INTEGER, note TEXT
);
CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals(status, requested_at);
CREATE INDEX IF NOT EXISTS approvals_by_run ON approvals(run_id);
CREATE INDEX IF NOT EXISTS approvals_by_order ON approvals(order_id);
-- The ledger: one row per order line of a proposed refund, with how many of the line's units
-- it refunds (units, of quantity; NULL on rows from before schema 8: all the line's units). A
-- row that is pending or approved is held; several refunds may hold one line, never more
-- units than it has (the code checks under the order's lock; a trigger as well, on both engines).
CREATE TABLE IF NOT EXISTS approval_lines (
    approval_id TEXT NOT NULL, order_id TEXT NOT NULL, seq INTEGER NOT NULL, line TEXT NOT NULL,
    name TEXT NOT NULL, reason TEXT NOT NULL, amount_cents INTEGER NOT NULL,
    allowed_cents INTEGER NOT NULL, fee_cents INTEGER NOT NULL, held INTEGER NOT NULL,
    decision TEXT, units INTEGER, quantity INTEGER, PRIMARY KEY (approval_id, line)
);
CREATE INDEX IF NOT EXISTS lines_held ON approval_lines(order_id, line) WHERE held = 1;
-- The database's own last guard on units: a held row may not bring a line's held units past
-- its quantity. A row without units (before schema 8, or shipping) holds the whole line, so
-- nothing else may hold that line beside it.
CREATE TRIGGER IF NOT EXISTS units_held_within_quantity
BEFORE INSERT ON approval_lines WHEN NEW.held = 1
BEGIN
    SELECT RAISE(ABORT, 'units held beyond the line quantity in approval_lines')
    WHERE (SELECT COUNT(*) FROM approval_lines WHERE order_id = NEW.order_id
               AND line = NEW.line AND held = 1 AND (units IS NULL OR NEW.units IS NULL)) > 0
       OR COALESCE((SELECT SUM(units) FROM approval_lines WHERE order_id = NEW.order_id
               AND line = NEW.line AND held = 1), 0) + COALESCE(NEW.units, 0)
          > COALESCE(NEW.quantity, 1);
END;
-- The same for an UPDATE that makes a row hold more than it did (held again, more units, a
-- smaller quantity, another line), counting every other held row of the line (schema 11).
-- The code only lowers units and releases rows, which this lets through unchecked.
CREATE TRIGGER IF NOT EXISTS units_held_within_quantity_on_update
BEFORE UPDATE OF held, units, quantity, order_id, line ON approval_lines
WHEN NEW.held = 1 AND (OLD.held <> 1 OR NEW.order_id IS NOT OLD.order_id
    OR NEW.line IS NOT OLD.line OR COALESCE(NEW.quantity, 1) < COALESCE(OLD.quantity, 1)
    OR (NEW.units IS NULL AND OLD.units IS NOT NULL) OR NEW.units > OLD.units)
BEGIN
    SELECT RAISE(ABORT, 'units held beyond the line quantity in approval_lines')
    WHERE (SELECT COUNT(*) FROM approval_lines WHERE order_id = NEW.order_id
               AND line = NEW.line AND held = 1
               AND NOT (approval_id = OLD.approval_id AND line = OLD.line)
               AND (units IS NULL OR NEW.units IS NULL)) > 0
       OR COALESCE((SELECT SUM(units) FROM approval_lines WHERE order_id = NEW.order_id
               AND line = NEW.line AND held = 1
               AND NOT (approval_id = OLD.approval_id AND line = OLD.line)), 0)
          + COALESCE(NEW.units, 0) > COALESCE(NEW.quantity, 1);
END;
-- The run's transcript: each request's new input items, then its response's output items exactly
-- as they arrived (reasoning with its encrypted_content), in order. Replayed as one input list it
-- is the conversation the model saw, which is what a request without previous_response_id needs.
CREATE TABLE IF NOT EXISTS transcript (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, response_id TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('input', 'output')), item TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS replies (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL, text TEXT NOT NULL,
    simulated INTEGER NOT NULL, response_id TEXT
);
CREATE INDEX IF NOT EXISTS replies_by_run ON replies(run_id, id);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, event TEXT NOT NULL, actor TEXT NOT NULL,
    pid INTEGER NOT NULL, run_id TEXT, approval_id TEXT, order_id TEXT, amount REAL, note TEXT,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL, lines TEXT
);
-- The chain's head, written with every audit entry: removing the newest entries (which the
-- chain alone cannot notice) leaves a head that no longer matches.
CREATE TABLE IF NOT EXISTS audit_anchor (
    id INTEGER PRIMARY KEY CHECK (id = 1), entries INTEGER NOT NULL, head TEXT NOT NULL
);
-- The people who may decide (see accounts.py). The password is never stored: only a salted
-- scrypt hash and the parameters that made it, so stronger parameters can come later.
CREATE TABLE IF NOT EXISTS accounts (
    name TEXT PRIMARY KEY, role TEXT NOT NULL, limit_cents INTEGER, password TEXT NOT NULL,
    created_at REAL NOT NULL
);
-- Failed sign-ins within the throttle's window (see accounts.py), by the name's canonical key
-- and the client that tried: shared by every page and terminal on this store, so a restart or
-- another tab does not reset it, and one client's failures never lock out another client.
CREATE TABLE IF NOT EXISTS sign_in_failures (
    id INTEGER PRIMARY KEY, name_key TEXT NOT NULL, client TEXT NOT NULL, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sign_in_failures_by_name ON sign_in_failures(name_key, client, at);
-- The payment and email stand-ins' idempotency records when the store is shared by several
-- hosts (PostgreSQL): one row per (log, key), the whole record as JSON, in the order written.
-- On SQLite the JSONL logs in output/ hold them instead and this table stays empty.
CREATE TABLE IF NOT EXISTS ledger (
    id INTEGER PRIMARY KEY, log TEXT NOT NULL, key TEXT NOT NULL, record TEXT NOT NULL,
    UNIQUE (log, key)
);
-- What an outside system reported after the fact (outside/webhooks.py): one row per provider
-- event id (a redelivery is a no-op), with the refund it is about and the status it reports.
CREATE TABLE IF NOT EXISTS provider_events (
    id TEXT PRIMARY KEY, at REAL NOT NULL, provider TEXT NOT NULL, type TEXT NOT NULL,
    refund_id TEXT NOT NULL, status TEXT, approval_id TEXT, data TEXT NOT NULL
);
-- Raised by the agent's escalate tool (key: the call's key, so a resumed call raises it once)
-- or by an approver handing a refund to a lead (approval_id set); open while taken_by is NULL.
CREATE TABLE IF NOT EXISTS escalations (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL, approval_id TEXT,
    kind TEXT NOT NULL, reason TEXT NOT NULL, raised_by TEXT NOT NULL, raised_at REAL NOT NULL,
    taken_by TEXT, taken_at REAL
);
CREATE INDEX IF NOT EXISTS escalations_by_run ON escalations(run_id);
CREATE INDEX IF NOT EXISTS escalations_open ON escalations(taken_by, raised_at);
-- At most one open escalation per ticket, kind and refund (schema 13): raising one again while
-- it is open (thirty escalate calls, Stripe's refund.failed then refund.updated about one
-- refund) finds this one, in the raising transaction, whoever races it (store/desk.py).
CREATE UNIQUE INDEX IF NOT EXISTS escalations_open_once
    ON escalations(run_id, kind, COALESCE(approval_id, '')) WHERE taken_by IS NULL;
-- The desk account that typed a ticket in (none for emails and samples): it may not approve
-- that ticket's refund.
CREATE TABLE IF NOT EXISTS raised_by (run_id TEXT PRIMARY KEY, account TEXT NOT NULL);
-- The first of two approvals a refund above the shop's two-person amount needs.
CREATE TABLE IF NOT EXISTS signoffs (
    approval_id TEXT PRIMARY KEY, signed_by TEXT NOT NULL, at REAL NOT NULL,
    amount_cents INTEGER NOT NULL, keep TEXT NOT NULL, note TEXT
);
-- Written by `refund-agent migrate` once the store was copied to PostgreSQL (SQLite only): the
-- store then refuses every write, naming the database it moved to (its URL without password).
CREATE TABLE IF NOT EXISTS store_moved (
    id INTEGER PRIMARY KEY CHECK (id = 1), target TEXT NOT NULL, at REAL NOT NULL
);
-- The desk's status kept on each run (schema 12): what changes it marks the run's row stale,
-- and every write transaction recomputes the stale rows before it commits (store/desk.py),
-- so the rule stays in one place, desk_status.py, and the inbox reads one column.
-- The indexes: a page of one status, newest first; every filter's count from the index
-- alone; a page of escalated tickets; the stale rows; a customer's latest name.
CREATE INDEX IF NOT EXISTS runs_by_desk ON runs(desk_status, created_at);
CREATE INDEX IF NOT EXISTS runs_desk_counts ON runs(desk_status, desk_escalations);
CREATE INDEX IF NOT EXISTS runs_escalated ON runs(created_at) WHERE desk_escalations > 0;
CREATE INDEX IF NOT EXISTS runs_desk_stale ON runs(id) WHERE desk_dirty = 1;
CREATE INDEX IF NOT EXISTS runs_by_sender ON runs(lower(sender), created_at);
CREATE TRIGGER IF NOT EXISTS desk_on_run AFTER UPDATE OF status ON runs
BEGIN UPDATE runs SET desk_dirty = 1 WHERE id = NEW.id; END;
CREATE TRIGGER IF NOT EXISTS desk_on_new_approval AFTER INSERT ON approvals
BEGIN UPDATE runs SET desk_dirty = 1 WHERE id = NEW.run_id; END;
CREATE TRIGGER IF NOT EXISTS desk_on_approval
AFTER UPDATE OF status, amount_cents, proposed_cents, requested_at ON approvals
BEGIN UPDATE runs SET desk_dirty = 1 WHERE id = NEW.run_id; END;
CREATE TRIGGER IF NOT EXISTS desk_on_gone_approval AFTER DELETE ON approvals
BEGIN UPDATE runs SET desk_dirty = 1 WHERE id = OLD.run_id; END;
CREATE TRIGGER IF NOT EXISTS desk_on_new_line AFTER INSERT ON approval_lines
BEGIN UPDATE runs SET desk_dirty = 1
      WHERE id = (SELECT run_id FROM approvals WHERE id = NEW.approval_id); END;
CREATE TRIGGER IF NOT EXISTS desk_on_line AFTER UPDATE OF decision ON approval_lines
BEGIN UPDATE runs SET desk_dirty = 1
      WHERE id = (SELECT run_id FROM approvals WHERE id = NEW.approval_id); END;
CREATE TRIGGER IF NOT EXISTS desk_on_new_escalation AFTER INSERT ON escalations
BEGIN UPDATE runs SET desk_dirty = 1 WHERE id = NEW.run_id; END;
CREATE TRIGGER IF NOT EXISTS desk_on_escalation AFTER UPDATE OF taken_by ON escalations
BEGIN UPDATE runs SET desk_dirty = 1 WHERE id = NEW.run_id; END;
INSERT OR IGNORE INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '""" + GENESIS_HASH + """')
    FROM audit;
"""

# -- PostgreSQL ------------------------------------------------------------------------------

# The database's own last guard on units, as SQLite's two triggers (what it refuses is said
# there): a row held may not bring its line's held units past the line's quantity, whatever
# wrote it. The function takes the order's advisory lock (postgres.py, _LOCK_ORDER), which the
# code already holds when it proposes a refund, so two writers that bypass the code cannot both
# pass the check at once. No ``?`` or ``%`` in here: the store's SQL goes through pyformat.
POSTGRES_UNITS_GUARD: tuple[str, ...] = (
    """CREATE OR REPLACE FUNCTION units_held_within_quantity() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    self_id TEXT;
    self_line TEXT;
BEGIN
    IF NEW.held <> 1 THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        -- A row that holds no more than it did passes: the code lowers units when an
        -- approver approves fewer, and that must never be refused.
        IF OLD.held = 1 AND NEW.order_id = OLD.order_id AND NEW.line = OLD.line
           AND COALESCE(NEW.quantity, 1) >= COALESCE(OLD.quantity, 1)
           AND NOT (OLD.units IS NOT NULL AND (NEW.units IS NULL OR NEW.units > OLD.units))
        THEN
            RETURN NEW;
        END IF;
        self_id := OLD.approval_id;
        self_line := OLD.line;
    END IF;
    PERFORM pg_advisory_xact_lock(15002, hashtext(NEW.order_id));
    IF EXISTS (SELECT 1 FROM approval_lines l WHERE l.order_id = NEW.order_id
               AND l.line = NEW.line AND l.held = 1
               AND (l.approval_id, l.line) IS DISTINCT FROM (self_id, self_line)
               AND (l.units IS NULL OR NEW.units IS NULL))
       OR COALESCE((SELECT SUM(l.units) FROM approval_lines l WHERE l.order_id = NEW.order_id
               AND l.line = NEW.line AND l.held = 1
               AND (l.approval_id, l.line) IS DISTINCT FROM (self_id, self_line)), 0)
          + COALESCE(NEW.units, 0) > COALESCE(NEW.quantity, 1) THEN
        RAISE EXCEPTION 'units held beyond the line quantity in approval_lines'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$""",
    "DROP TRIGGER IF EXISTS units_held_within_quantity ON approval_lines",
    """CREATE TRIGGER units_held_within_quantity
    BEFORE INSERT OR UPDATE OF held, units, quantity, order_id, line ON approval_lines
    FOR EACH ROW EXECUTE FUNCTION units_held_within_quantity()""",
)

# The first PostgreSQL schema was 5: its steps start at 6. Its tables change their key in place.
POSTGRES_STEPS: tuple[Step, ...] = (
    Step(6, ("ALTER TABLE calls DROP CONSTRAINT calls_pkey",
             "ALTER TABLE calls ADD COLUMN key TEXT", "ALTER TABLE calls ADD COLUMN order_id TEXT",
             "ALTER TABLE calls ADD PRIMARY KEY (run_id, response_id, seq)"),
         data=lambda db: calls_v6(db, None)),
    Step(8, ("DROP INDEX IF EXISTS lines_held_once",
             "ALTER TABLE approval_lines ADD COLUMN IF NOT EXISTS units BIGINT",
             "ALTER TABLE approval_lines ADD COLUMN IF NOT EXISTS quantity BIGINT")),
    # The units guard (the schema makes it too, for a new store; both are idempotent).
    Step(11, POSTGRES_UNITS_GUARD),
    Step(12, ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_status TEXT",
              "ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_escalations BIGINT NOT NULL"
              " DEFAULT 0",
              "ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_dirty BIGINT NOT NULL DEFAULT 1"),
         data=refresh_stale_desk),
    # The escalations table came with 9; a store from before has none to merge.
    Step(13, ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS agent TEXT NOT NULL DEFAULT 'refunds'",
              "DO $$ BEGIN IF to_regclass('escalations') IS NOT NULL THEN "
              f"{MERGE_OPEN_ESCALATIONS}; END IF; END $$"),
         data=_data_v13),
)

# The store's version, where SQLite has PRAGMA user_version (absent: an empty database).
POSTGRES_VERSION_TABLE = ("CREATE TABLE IF NOT EXISTS refund_agent_schema ("
                          "id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)")

# The same tables as SQLite's (what each one is for is said there). An ``id`` that SQLite
# numbers itself (INTEGER PRIMARY KEY) is a BIGSERIAL; integers are BIGINT, times and amounts
# DOUBLE PRECISION; the store_moved table is made too, though only SQLite stores are moved.
POSTGRES_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL, kind TEXT NOT NULL,
    sender TEXT NOT NULL, sender_name TEXT NOT NULL, subject TEXT NOT NULL, email TEXT NOT NULL,
    status TEXT NOT NULL, last_response_id TEXT,
    requests BIGINT NOT NULL DEFAULT 0, cost_ticks BIGINT NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0, cached_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0, simulated_replies BIGINT NOT NULL DEFAULT 0,
    error TEXT, lease_pid BIGINT, lease_token TEXT, lease_at DOUBLE PRECISION, last_pid BIGINT,
    lease_epoch BIGINT NOT NULL DEFAULT 0,
    updated_at DOUBLE PRECISION NOT NULL,
    transcript_items BIGINT NOT NULL DEFAULT 0, transcript_bytes BIGINT NOT NULL DEFAULT 0,
    transcript_complete BIGINT NOT NULL DEFAULT 0, lease_host TEXT,
    desk_status TEXT, desk_escalations BIGINT NOT NULL DEFAULT 0,
    desk_dirty BIGINT NOT NULL DEFAULT 1, agent TEXT NOT NULL DEFAULT 'refunds')""",
    "CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, updated_at)",
    "CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created_at)",
    """CREATE TABLE IF NOT EXISTS steps (
    id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    pid BIGINT NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS steps_by_run ON steps(run_id, id)",
    """CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT NOT NULL, run_id TEXT NOT NULL, response_id TEXT NOT NULL,
    seq BIGINT NOT NULL, name TEXT NOT NULL, arguments TEXT NOT NULL, output TEXT,
    key TEXT, order_id TEXT,
    PRIMARY KEY (run_id, response_id, seq))""",
    "CREATE INDEX IF NOT EXISTS calls_by_response ON calls(response_id, seq)",
    "CREATE INDEX IF NOT EXISTS calls_by_run ON calls(run_id, name)",
    "CREATE INDEX IF NOT EXISTS calls_by_call_id ON calls(run_id, call_id)",
    "CREATE UNIQUE INDEX IF NOT EXISTS calls_by_key ON calls(key)",
    """CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL, response_id TEXT NOT NULL, call_id TEXT NOT NULL,
    order_id TEXT NOT NULL, amount_cents BIGINT NOT NULL, proposed_cents BIGINT NOT NULL,
    summary TEXT NOT NULL, customer TEXT NOT NULL,
    status TEXT NOT NULL, requested_at DOUBLE PRECISION NOT NULL, requested_pid BIGINT NOT NULL,
    decided_by TEXT, decided_at DOUBLE PRECISION, decided_pid BIGINT, note TEXT)""",
    "CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals(status, requested_at)",
    "CREATE INDEX IF NOT EXISTS approvals_by_run ON approvals(run_id)",
    "CREATE INDEX IF NOT EXISTS approvals_by_order ON approvals(order_id)",
    """CREATE TABLE IF NOT EXISTS approval_lines (
    approval_id TEXT NOT NULL, order_id TEXT NOT NULL, seq BIGINT NOT NULL, line TEXT NOT NULL,
    name TEXT NOT NULL, reason TEXT NOT NULL, amount_cents BIGINT NOT NULL,
    allowed_cents BIGINT NOT NULL, fee_cents BIGINT NOT NULL, held BIGINT NOT NULL,
    decision TEXT, units BIGINT, quantity BIGINT, PRIMARY KEY (approval_id, line))""",
    "CREATE INDEX IF NOT EXISTS lines_held ON approval_lines(order_id, line) WHERE held = 1",
    # The code checks units under the order's advisory lock (approvals.py); this is the
    # database's own last guard, as SQLite's triggers (schema 11).
    *POSTGRES_UNITS_GUARD,
    """CREATE TABLE IF NOT EXISTS transcript (
    run_id TEXT NOT NULL, seq BIGINT NOT NULL, response_id TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('input', 'output')), item TEXT NOT NULL,
    PRIMARY KEY (run_id, seq))""",
    """CREATE TABLE IF NOT EXISTS replies (
    id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    text TEXT NOT NULL, simulated BIGINT NOT NULL, response_id TEXT)""",
    "CREATE INDEX IF NOT EXISTS replies_by_run ON replies(run_id, id)",
    """CREATE TABLE IF NOT EXISTS audit (
    id BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL, event TEXT NOT NULL,
    actor TEXT NOT NULL, pid BIGINT NOT NULL, run_id TEXT, approval_id TEXT, order_id TEXT,
    amount DOUBLE PRECISION, note TEXT, prev_hash TEXT NOT NULL, hash TEXT NOT NULL,
    lines TEXT)""",
    """CREATE TABLE IF NOT EXISTS audit_anchor (
    id BIGINT PRIMARY KEY CHECK (id = 1), entries BIGINT NOT NULL, head TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS accounts (
    name TEXT PRIMARY KEY, role TEXT NOT NULL, limit_cents BIGINT, password TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS sign_in_failures (
    id BIGSERIAL PRIMARY KEY, name_key TEXT NOT NULL, client TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS sign_in_failures_by_name
    ON sign_in_failures(name_key, client, at)""",
    """CREATE TABLE IF NOT EXISTS ledger (
    id BIGSERIAL PRIMARY KEY, log TEXT NOT NULL, key TEXT NOT NULL, record TEXT NOT NULL,
    UNIQUE (log, key))""",
    """CREATE TABLE IF NOT EXISTS provider_events (
    id TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, provider TEXT NOT NULL,
    type TEXT NOT NULL, refund_id TEXT NOT NULL, status TEXT, approval_id TEXT,
    data TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS escalations (
    id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL, approval_id TEXT,
    kind TEXT NOT NULL, reason TEXT NOT NULL, raised_by TEXT NOT NULL,
    raised_at DOUBLE PRECISION NOT NULL, taken_by TEXT, taken_at DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS escalations_by_run ON escalations(run_id)",
    "CREATE INDEX IF NOT EXISTS escalations_open ON escalations(taken_by, raised_at)",
    """CREATE UNIQUE INDEX IF NOT EXISTS escalations_open_once
    ON escalations(run_id, kind, COALESCE(approval_id, '')) WHERE taken_by IS NULL""",
    "CREATE TABLE IF NOT EXISTS raised_by (run_id TEXT PRIMARY KEY, account TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS signoffs (
    approval_id TEXT PRIMARY KEY, signed_by TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    amount_cents BIGINT NOT NULL, keep TEXT NOT NULL, note TEXT)""",
    """CREATE TABLE IF NOT EXISTS store_moved (
    id BIGINT PRIMARY KEY CHECK (id = 1), target TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL)""",
    # The desk's status kept on each run (schema 12; what each piece is for is said in
    # SQLite's schema). One trigger function serves every table: a run's own status change
    # marks its row before it is written, the others mark the run they belong to.
    "CREATE INDEX IF NOT EXISTS runs_by_desk ON runs(desk_status, created_at)",
    "CREATE INDEX IF NOT EXISTS runs_desk_counts ON runs(desk_status, desk_escalations)",
    "CREATE INDEX IF NOT EXISTS runs_escalated ON runs(created_at) WHERE desk_escalations > 0",
    "CREATE INDEX IF NOT EXISTS runs_desk_stale ON runs(id) WHERE desk_dirty = 1",
    "CREATE INDEX IF NOT EXISTS runs_by_sender ON runs(lower(sender), created_at)",
    """CREATE OR REPLACE FUNCTION refund_agent_desk_stale() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_TABLE_NAME = 'runs' THEN
            NEW.desk_dirty := 1;
            RETURN NEW;
        ELSIF TG_TABLE_NAME = 'approval_lines' THEN
            UPDATE runs SET desk_dirty = 1
             WHERE id = (SELECT run_id FROM approvals WHERE id = NEW.approval_id);
        ELSIF TG_OP = 'DELETE' THEN
            UPDATE runs SET desk_dirty = 1 WHERE id = OLD.run_id;
        ELSE
            UPDATE runs SET desk_dirty = 1 WHERE id = NEW.run_id;
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE TRIGGER desk_on_run BEFORE UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_stale()""",
    """CREATE OR REPLACE TRIGGER desk_on_approval
    AFTER INSERT OR DELETE OR UPDATE OF status, amount_cents, proposed_cents, requested_at
    ON approvals FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_stale()""",
    """CREATE OR REPLACE TRIGGER desk_on_line AFTER INSERT OR UPDATE OF decision
    ON approval_lines FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_stale()""",
    """CREATE OR REPLACE TRIGGER desk_on_escalation AFTER INSERT OR UPDATE OF taken_by
    ON escalations FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_stale()""",
    f"""INSERT INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '{GENESIS_HASH}')
    FROM audit ON CONFLICT DO NOTHING""",
)

# Every table of a store, with the columns its rows are ordered by (its primary key): what a
# copy of the whole store (migrate.py) reads and fills, in this order.
TABLES: dict[str, str] = {
    "runs": "id", "steps": "id", "calls": "run_id, response_id, seq", "approvals": "id",
    "approval_lines": "approval_id, line", "transcript": "run_id, seq", "replies": "id",
    "audit": "id", "audit_anchor": "id", "accounts": "name", "ledger": "id",
    "sign_in_failures": "id", "provider_events": "id", "escalations": "id",
    "signoffs": "approval_id", "raised_by": "run_id",
}
