"""The loop's PostgreSQL schema: its tables as a new database creates them, and the numbered
steps that bring an older database up to date (schema.py keeps what each version added). The
desk's tables, its units guard (schema 11) included, are the desk's own
(desk/records/schema_postgres.py), added when a desk store opens."""

from __future__ import annotations

from .audit import GENESIS_HASH
from .schema import MERGE_OPEN_ESCALATIONS, Step, _data_v13, calls_v6, fill_search

# One run's searchable text (schema 16; SQLite's SEARCH_BODY says why it is spelled so): the
# same fields, one a line, with the same ASCII letters lower-cased (translate, not lower(),
# which would fold other letters too, as SQLite's does not).
SEARCH_BODY = ("translate(r.sender || chr(10) || r.sender_name || chr(10) || r.subject"
               " || chr(10) || r.email || chr(10) || r.id || chr(10) || COALESCE((SELECT"
               " string_agg(a.order_id, chr(10)) FROM approvals a WHERE a.run_id = r.id), ''),"
               " 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')")


# The first PostgreSQL schema was 5: its steps start at 6. Its tables change their key in place.
POSTGRES_STEPS: tuple[Step, ...] = (
    Step(6, ("ALTER TABLE calls DROP CONSTRAINT calls_pkey",
             "ALTER TABLE calls ADD COLUMN key TEXT", "ALTER TABLE calls ADD COLUMN order_id TEXT",
             "ALTER TABLE calls ADD PRIMARY KEY (run_id, response_id, seq)"),
         data=lambda db: calls_v6(db, None)),
    Step(8, ("DROP INDEX IF EXISTS lines_held_once",
             "ALTER TABLE approval_lines ADD COLUMN IF NOT EXISTS units BIGINT",
             "ALTER TABLE approval_lines ADD COLUMN IF NOT EXISTS quantity BIGINT")),
    # 11's units guard and 12's columns on runs are the desk's: its part makes them (both
    # idempotent) on every store it opens without them. Nothing left for the loop.
    Step(11, ()),
    Step(12, ()),
    # The escalations table came with 9; a store from before has none to merge.
    Step(13, ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS agent TEXT NOT NULL DEFAULT 'refunds'",
              "DO $$ BEGIN IF to_regclass('escalations') IS NOT NULL THEN "
              f"{MERGE_OPEN_ESCALATIONS}; END IF; END $$"),
         data=_data_v13),
    Step(14, ()),   # the mail table only: the schema makes it
    Step(15, ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS last_front TEXT",)),
    # The extension, tables and triggers are the schema's; their rows come from the store's
    # (the desk's counts are the desk part's, filled when it makes their table).
    Step(16, (), data=fill_search(SEARCH_BODY)),
    Step(17, ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS trace_context TEXT",)),
)


# The store's version, where SQLite has PRAGMA user_version (absent: an empty database).
POSTGRES_VERSION_TABLE = ("CREATE TABLE IF NOT EXISTS refund_agent_schema ("
                          "id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)")


# The loop's tables, as SQLite's (what each one is for is said there). An ``id`` that SQLite
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
    agent TEXT NOT NULL DEFAULT 'refunds',
    last_front TEXT, trace_context TEXT)""",
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
    """CREATE TABLE IF NOT EXISTS ledger (
    id BIGSERIAL PRIMARY KEY, log TEXT NOT NULL, key TEXT NOT NULL, record TEXT NOT NULL,
    UNIQUE (log, key))""",
    """CREATE TABLE IF NOT EXISTS store_moved (
    id BIGINT PRIMARY KEY CHECK (id = 1), target TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL)""",
    # Search (schema 16; SQLite's schema says what each piece is for): run_search kept by one
    # trigger function on runs and approvals, and a pg_trgm GIN index that answers LIKE
    # '%word%' (pg_trgm is a trusted extension: the database's owner may create it).
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE TABLE IF NOT EXISTS run_search (run_id TEXT PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS run_search_trigrams ON run_search USING gin (body gin_trgm_ops)",
    f"""CREATE OR REPLACE FUNCTION refund_agent_search() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE target TEXT;
    BEGIN
        IF TG_TABLE_NAME = 'runs' AND TG_OP = 'DELETE' THEN
            DELETE FROM run_search WHERE run_id = OLD.id;
            RETURN NULL;
        ELSIF TG_TABLE_NAME = 'runs' THEN
            target := NEW.id;
        ELSIF TG_OP = 'DELETE' THEN
            target := OLD.run_id;
        ELSE
            target := NEW.run_id;
        END IF;
        INSERT INTO run_search(run_id, body) SELECT r.id, {SEARCH_BODY} FROM runs r
         WHERE r.id = target
        ON CONFLICT (run_id) DO UPDATE SET body = EXCLUDED.body;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE TRIGGER search_on_run
    AFTER INSERT OR DELETE OR UPDATE OF sender, sender_name, subject, email ON runs
    FOR EACH ROW EXECUTE FUNCTION refund_agent_search()""",
    """CREATE OR REPLACE TRIGGER search_on_approval AFTER INSERT OR DELETE OR UPDATE OF order_id
    ON approvals FOR EACH ROW EXECUTE FUNCTION refund_agent_search()""",
    "CREATE TABLE IF NOT EXISTS schema_parts (part TEXT PRIMARY KEY, version INTEGER NOT NULL)",
    # Keyset pages (schema 16), as on SQLite.
    "CREATE INDEX IF NOT EXISTS runs_page ON runs(created_at, id)",
    f"""INSERT INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '{GENESIS_HASH}')
    FROM audit ON CONFLICT DO NOTHING""",
)
