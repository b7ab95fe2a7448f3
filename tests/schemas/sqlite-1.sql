-- A store as refund-agent created it at schema 1 (SQLite), from refund_agent/store.py in git:
-- the shape tests/test_schema_upgrade.py upgrades in place.

CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, kind TEXT NOT NULL,
    sender TEXT NOT NULL, sender_name TEXT NOT NULL, subject TEXT NOT NULL, email TEXT NOT NULL,
    status TEXT NOT NULL, last_response_id TEXT,
    requests INTEGER NOT NULL DEFAULT 0, cost_ticks INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, simulated_replies INTEGER NOT NULL DEFAULT 0,
    error TEXT, lease_pid INTEGER, lease_token TEXT, lease_at REAL, last_pid INTEGER,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, updated_at);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created_at);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL, pid INTEGER NOT NULL,
    kind TEXT NOT NULL, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps(run_id, id);
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, response_id TEXT NOT NULL,
    seq INTEGER NOT NULL, name TEXT NOT NULL, arguments TEXT NOT NULL, output TEXT
);
CREATE INDEX IF NOT EXISTS calls_by_response ON calls(response_id, seq);
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL, response_id TEXT NOT NULL, call_id TEXT NOT NULL,
    order_id TEXT NOT NULL, amount REAL NOT NULL, reason TEXT NOT NULL, customer TEXT NOT NULL,
    status TEXT NOT NULL, requested_at REAL NOT NULL, requested_pid INTEGER NOT NULL,
    decided_by TEXT, decided_at REAL, decided_pid INTEGER, note TEXT
);
CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals(status, requested_at);
CREATE TABLE IF NOT EXISTS replies (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL, text TEXT NOT NULL,
    simulated INTEGER NOT NULL, response_id TEXT
);
CREATE INDEX IF NOT EXISTS replies_by_run ON replies(run_id, id);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, event TEXT NOT NULL, actor TEXT NOT NULL,
    pid INTEGER NOT NULL, run_id TEXT, approval_id TEXT, order_id TEXT, amount REAL, note TEXT,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL
);
