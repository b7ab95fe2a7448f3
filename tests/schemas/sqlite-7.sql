-- A store as refund-agent created it at schema 7 (SQLite), from refund_agent/store.py in git:
-- the shape tests/test_schema_upgrade.py upgrades in place.

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
    transcript_complete INTEGER NOT NULL DEFAULT 0, lease_host TEXT
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
-- The ledger's unit: one row per order line of a proposed refund. A line that is pending or
-- approved is held; the partial unique index makes "each line held by at most one refund"
-- a property of the database, not only of the code that checks it first.
CREATE TABLE IF NOT EXISTS approval_lines (
    approval_id TEXT NOT NULL, order_id TEXT NOT NULL, seq INTEGER NOT NULL, line TEXT NOT NULL,
    name TEXT NOT NULL, reason TEXT NOT NULL, amount_cents INTEGER NOT NULL,
    allowed_cents INTEGER NOT NULL, fee_cents INTEGER NOT NULL, held INTEGER NOT NULL,
    decision TEXT, PRIMARY KEY (approval_id, line)
);
CREATE UNIQUE INDEX IF NOT EXISTS lines_held_once ON approval_lines(order_id, line)
    WHERE held = 1;
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
-- Written by `refund-agent migrate` once the store was copied to PostgreSQL (SQLite only): the
-- store then refuses every write, naming the database it moved to (its URL without password).
CREATE TABLE IF NOT EXISTS store_moved (
    id INTEGER PRIMARY KEY CHECK (id = 1), target TEXT NOT NULL, at REAL NOT NULL
);
INSERT OR IGNORE INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '0000000000000000000000000000000000000000000000000000000000000000')
    FROM audit;
