-- A store as refund-agent created it at schema 16 on SQLite (refund_agent/store/schema_sqlite.py
-- at loop-lift eae7148, the last one numbered history for the loop's and the desk's tables), for
-- tests/store/test_schema_upgrade.py and tests/store/test_schema_parts.py.
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
    desk_dirty INTEGER NOT NULL DEFAULT 1, agent TEXT NOT NULL DEFAULT 'refunds',
    last_front TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, updated_at);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created_at);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL, pid INTEGER NOT NULL,
    kind TEXT NOT NULL, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps(run_id, id);
-- A call is its run's, its response's, at its place in the response: provider call ids are not
-- unique across runs, and a model may even repeat one. ``key`` (see models.py (call_key)) is what
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
-- Written by `refund-agent migrate` once the store was copied to PostgreSQL (SQLite only): the
-- store then refuses every write, naming the database it moved to (its URL without password).
CREATE TABLE IF NOT EXISTS store_moved (
    id INTEGER PRIMARY KEY CHECK (id = 1), target TEXT NOT NULL, at REAL NOT NULL
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
-- Search (schema 16): each run's text (SEARCH_BODY) in run_search, kept by the triggers below
-- as runs and approvals change, and an FTS5 trigram index over it (external content: the text
-- is stored once, in run_search). Case-sensitive trigrams over text already lower-cased, read
-- with GLOB, so a word matches as a substring with the case of ASCII letters ignored, exactly
-- as on PostgreSQL; a word under three letters has no trigram and scans the index instead.
CREATE TABLE IF NOT EXISTS run_search (
    doc INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, body TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS run_search_index USING fts5(
    body, content='run_search', content_rowid='doc', tokenize='trigram case_sensitive 1'
);
CREATE TRIGGER IF NOT EXISTS run_search_added AFTER INSERT ON run_search
BEGIN INSERT INTO run_search_index(rowid, body) VALUES (NEW.doc, NEW.body); END;
CREATE TRIGGER IF NOT EXISTS run_search_gone AFTER DELETE ON run_search
BEGIN INSERT INTO run_search_index(run_search_index, rowid, body)
      VALUES ('delete', OLD.doc, OLD.body); END;
CREATE TRIGGER IF NOT EXISTS run_search_changed AFTER UPDATE ON run_search
BEGIN INSERT INTO run_search_index(run_search_index, rowid, body)
      VALUES ('delete', OLD.doc, OLD.body);
      INSERT INTO run_search_index(rowid, body) VALUES (NEW.doc, NEW.body); END;
CREATE TRIGGER IF NOT EXISTS search_on_new_run AFTER INSERT ON runs
BEGIN INSERT INTO run_search(run_id, body) VALUES (NEW.id, (SELECT lower(r.sender || char(10) || r.sender_name || char(10) || r.subject || char(10) || r.email || char(10) || r.id || char(10) || COALESCE((SELECT group_concat(a.order_id, char(10)) FROM approvals a WHERE a.run_id = r.id), '')) FROM runs r WHERE r.id = NEW.id)); END;
CREATE TRIGGER IF NOT EXISTS search_on_run AFTER UPDATE OF sender, sender_name, subject, email
ON runs BEGIN UPDATE run_search SET body = (SELECT lower(r.sender || char(10) || r.sender_name || char(10) || r.subject || char(10) || r.email || char(10) || r.id || char(10) || COALESCE((SELECT group_concat(a.order_id, char(10)) FROM approvals a WHERE a.run_id = r.id), '')) FROM runs r WHERE r.id = NEW.id) WHERE run_id = NEW.id;
      END;
CREATE TRIGGER IF NOT EXISTS search_on_gone_run AFTER DELETE ON runs
BEGIN DELETE FROM run_search WHERE run_id = OLD.id; END;
CREATE TRIGGER IF NOT EXISTS search_on_new_approval AFTER INSERT ON approvals
BEGIN UPDATE run_search SET body = (SELECT lower(r.sender || char(10) || r.sender_name || char(10) || r.subject || char(10) || r.email || char(10) || r.id || char(10) || COALESCE((SELECT group_concat(a.order_id, char(10)) FROM approvals a WHERE a.run_id = r.id), '')) FROM runs r WHERE r.id = NEW.run_id) WHERE run_id = NEW.run_id;
      END;
CREATE TRIGGER IF NOT EXISTS search_on_approval AFTER UPDATE OF order_id ON approvals
BEGIN UPDATE run_search SET body = (SELECT lower(r.sender || char(10) || r.sender_name || char(10) || r.subject || char(10) || r.email || char(10) || r.id || char(10) || COALESCE((SELECT group_concat(a.order_id, char(10)) FROM approvals a WHERE a.run_id = r.id), '')) FROM runs r WHERE r.id = NEW.run_id) WHERE run_id = NEW.run_id;
      END;
CREATE TRIGGER IF NOT EXISTS search_on_gone_approval AFTER DELETE ON approvals
BEGIN UPDATE run_search SET body = (SELECT lower(r.sender || char(10) || r.sender_name || char(10) || r.subject || char(10) || r.email || char(10) || r.id || char(10) || COALESCE((SELECT group_concat(a.order_id, char(10)) FROM approvals a WHERE a.run_id = r.id), '')) FROM runs r WHERE r.id = OLD.run_id) WHERE run_id = OLD.run_id;
      END;
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
-- Keyset pages (schema 16): newest first by (created_at, id), of every run, of one desk
-- status, of the escalated ones; a page starts after the last one's key, never at an offset.
CREATE INDEX IF NOT EXISTS runs_page ON runs(created_at, id);
CREATE INDEX IF NOT EXISTS runs_desk_page ON runs(desk_status, created_at, id);
CREATE INDEX IF NOT EXISTS runs_escalated_page ON runs(created_at, id) WHERE desk_escalations > 0;
INSERT OR IGNORE INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '0000000000000000000000000000000000000000000000000000000000000000')
    FROM audit;
