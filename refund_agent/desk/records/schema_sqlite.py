"""The desk's SQLite tables, columns, indexes and triggers, on top of the loop's
(store/schema_sqlite.py): what :mod:`.schema_part` installs when a desk store opens. Every
statement is idempotent (``IF NOT EXISTS``); the columns the desk keeps on the loop's runs are
added where missing (SQLite has no ``ADD COLUMN IF NOT EXISTS``). The schema numbers in the
comments are the one history's (store/schema.py) that made these tables before the desk kept
its own part."""

from __future__ import annotations

# The desk's status kept on each run (schema 12; see the triggers below): the column, and how
# SQLite adds it to a runs table that lacks it. Every run starts stale (desk_dirty 1): the desk
# store computes them all before its opening transaction commits.
DESK_RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("desk_status", "desk_status TEXT"),
    ("desk_escalations", "desk_escalations INTEGER NOT NULL DEFAULT 0"),
    ("desk_dirty", "desk_dirty INTEGER NOT NULL DEFAULT 1"),
)

DESK_SQLITE_SCHEMA = """
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
-- refund) finds this one, in the raising transaction, whoever races it
-- (desk/records/escalations.py).
CREATE UNIQUE INDEX IF NOT EXISTS escalations_open_once
    ON escalations(run_id, kind, COALESCE(approval_id, '')) WHERE taken_by IS NULL;
-- The desk account that typed a ticket in (none for emails and samples): it may not approve
-- that ticket's refund.
CREATE TABLE IF NOT EXISTS raised_by (run_id TEXT PRIMARY KEY, account TEXT NOT NULL);
-- Every email in or out (schema 14), once per Message-ID: a redelivery finds its row and makes
-- nothing new. kind: what intake made of it (desk/records/mail.py); text: what the model may read;
-- raw: the message exactly as it arrived.
CREATE TABLE IF NOT EXISTS mail (
    id INTEGER PRIMARY KEY, message_id TEXT NOT NULL UNIQUE, run_id TEXT,
    direction TEXT NOT NULL, kind TEXT NOT NULL, sender TEXT, recipient TEXT, subject TEXT,
    in_reply_to TEXT, refs TEXT NOT NULL, at REAL NOT NULL, attachments TEXT NOT NULL,
    note TEXT, reply_id INTEGER, text TEXT, raw BLOB
);
CREATE INDEX IF NOT EXISTS mail_by_run ON mail(run_id, id);
CREATE INDEX IF NOT EXISTS mail_held ON mail(id) WHERE kind = 'held';
-- The first of two approvals a refund above the shop's two-person amount needs.
CREATE TABLE IF NOT EXISTS signoffs (
    approval_id TEXT PRIMARY KEY, signed_by TEXT NOT NULL, at REAL NOT NULL,
    amount_cents INTEGER NOT NULL, keep TEXT NOT NULL, note TEXT
);
-- A ticket's owner (schema 15): one row per ticket at most (the key), so two claims racing
-- leave one owner; released is the row deleted. assigned_by: the owner, on a claim.
CREATE TABLE IF NOT EXISTS owners (
    run_id TEXT PRIMARY KEY, account TEXT NOT NULL, since REAL NOT NULL,
    assigned_by TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS owners_by_account ON owners(account);
-- Each step of the shop's timeout policy (remind, escalate), once per approval (schema 15):
-- the key makes a second worker's (or a restarted one's) attempt a no-op.
CREATE TABLE IF NOT EXISTS timeout_steps (
    approval_id TEXT NOT NULL, step TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (approval_id, step)
);
-- Out of office (schema 15): while ``until`` (by the database's clock) has not passed, the
-- account's tickets and the refunds offered to it go to ``delegate``.
CREATE TABLE IF NOT EXISTS delegates (
    account TEXT PRIMARY KEY, delegate TEXT NOT NULL, until REAL NOT NULL, at REAL NOT NULL
);
-- The desk's status kept on each run (schema 12): what changes it marks the run's row stale,
-- and every write transaction recomputes the stale rows before it commits (desk/records/inbox.py),
-- so the rule stays in one place, desk/status.py, and the inbox reads one column.
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
-- The desk's counts (schema 16): how many runs each (desk status, escalated) has, moved by one
-- as a run is added, changes status or is removed, in the transaction that changes it, so the
-- page reads a dozen rows instead of counting every run ('' is a run not yet computed).
CREATE TABLE IF NOT EXISTS desk_counts (
    status TEXT NOT NULL, escalated INTEGER NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (status, escalated)
);
CREATE TRIGGER IF NOT EXISTS desk_count_new AFTER INSERT ON runs
BEGIN INSERT INTO desk_counts(status, escalated, n)
      VALUES (COALESCE(NEW.desk_status, ''), NEW.desk_escalations > 0, 1)
      ON CONFLICT (status, escalated) DO UPDATE SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS desk_count_moved AFTER UPDATE OF desk_status, desk_escalations
ON runs WHEN COALESCE(OLD.desk_status, '') <> COALESCE(NEW.desk_status, '')
          OR (OLD.desk_escalations > 0) <> (NEW.desk_escalations > 0)
BEGIN UPDATE desk_counts SET n = n - 1
      WHERE status = COALESCE(OLD.desk_status, '') AND escalated = (OLD.desk_escalations > 0);
      INSERT INTO desk_counts(status, escalated, n)
      VALUES (COALESCE(NEW.desk_status, ''), NEW.desk_escalations > 0, 1)
      ON CONFLICT (status, escalated) DO UPDATE SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS desk_count_gone AFTER DELETE ON runs
BEGIN UPDATE desk_counts SET n = n - 1
      WHERE status = COALESCE(OLD.desk_status, '') AND escalated = (OLD.desk_escalations > 0);
      END;
-- Keyset pages of one desk status, of the escalated ones (schema 16; every run's is the
-- loop's, runs_page).
CREATE INDEX IF NOT EXISTS runs_desk_page ON runs(desk_status, created_at, id);
CREATE INDEX IF NOT EXISTS runs_escalated_page ON runs(created_at, id) WHERE desk_escalations > 0;
"""
