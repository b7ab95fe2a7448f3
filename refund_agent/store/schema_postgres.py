"""The PostgreSQL schema: the tables as a new database creates them, the units guard
(schema 11), and the numbered steps that bring an older database up to date (schema.py keeps
what each version added)."""

from __future__ import annotations

from .audit import GENESIS_HASH
from .schema import MERGE_OPEN_ESCALATIONS, Step, _data_v13, calls_v6, fill_search_and_counts

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
    # The units guard (the schema makes it too, for a new store; both are idempotent).
    Step(11, POSTGRES_UNITS_GUARD),
    Step(12, ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_status TEXT",
              "ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_escalations BIGINT NOT NULL"
              " DEFAULT 0",
              "ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_dirty BIGINT NOT NULL DEFAULT 1")),
    # The escalations table came with 9; a store from before has none to merge.
    Step(13, ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS agent TEXT NOT NULL DEFAULT 'refunds'",
              "DO $$ BEGIN IF to_regclass('escalations') IS NOT NULL THEN "
              f"{MERGE_OPEN_ESCALATIONS}; END IF; END $$"),
         data=_data_v13),
    Step(14, ()),   # the mail table only: the schema makes it
    Step(15, ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS last_front TEXT",)),
    # The extension, tables and triggers are the schema's; their rows come from the store's.
    Step(16, (), data=fill_search_and_counts(SEARCH_BODY)),
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
    desk_dirty BIGINT NOT NULL DEFAULT 1, agent TEXT NOT NULL DEFAULT 'refunds',
    last_front TEXT)""",
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
    """CREATE TABLE IF NOT EXISTS mail (
    id BIGSERIAL PRIMARY KEY, message_id TEXT NOT NULL UNIQUE, run_id TEXT,
    direction TEXT NOT NULL, kind TEXT NOT NULL, sender TEXT, recipient TEXT, subject TEXT,
    in_reply_to TEXT, refs TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    attachments TEXT NOT NULL, note TEXT, reply_id BIGINT, text TEXT, raw BYTEA)""",
    "CREATE INDEX IF NOT EXISTS mail_by_run ON mail(run_id, id)",
    "CREATE INDEX IF NOT EXISTS mail_held ON mail(id) WHERE kind = 'held'",
    """CREATE TABLE IF NOT EXISTS signoffs (
    approval_id TEXT PRIMARY KEY, signed_by TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    amount_cents BIGINT NOT NULL, keep TEXT NOT NULL, note TEXT)""",
    """CREATE TABLE IF NOT EXISTS owners (
    run_id TEXT PRIMARY KEY, account TEXT NOT NULL, since DOUBLE PRECISION NOT NULL,
    assigned_by TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS owners_by_account ON owners(account)",
    """CREATE TABLE IF NOT EXISTS timeout_steps (
    approval_id TEXT NOT NULL, step TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (approval_id, step))""",
    """CREATE TABLE IF NOT EXISTS delegates (
    account TEXT PRIMARY KEY, delegate TEXT NOT NULL, until DOUBLE PRECISION NOT NULL,
    at DOUBLE PRECISION NOT NULL)""",
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
    # The desk's counts (schema 16). The two rows a run moves between are changed in one order
    # (by key), so two transactions moving runs between the same two rows wait, never deadlock.
    """CREATE TABLE IF NOT EXISTS desk_counts (
    status TEXT NOT NULL, escalated BIGINT NOT NULL, n BIGINT NOT NULL,
    PRIMARY KEY (status, escalated))""",
    """CREATE OR REPLACE FUNCTION refund_agent_desk_count() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        gone TEXT; gone_esc BIGINT; came TEXT; came_esc BIGINT;
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            gone := COALESCE(OLD.desk_status, '');
            gone_esc := CASE WHEN OLD.desk_escalations > 0 THEN 1 ELSE 0 END;
        END IF;
        IF TG_OP <> 'DELETE' THEN
            came := COALESCE(NEW.desk_status, '');
            came_esc := CASE WHEN NEW.desk_escalations > 0 THEN 1 ELSE 0 END;
        END IF;
        IF gone IS NOT DISTINCT FROM came AND gone_esc IS NOT DISTINCT FROM came_esc THEN
            RETURN NULL;
        END IF;
        IF gone IS NOT NULL AND (came IS NULL OR (gone, gone_esc) < (came, came_esc)) THEN
            UPDATE desk_counts SET n = n - 1 WHERE status = gone AND escalated = gone_esc;
            gone := NULL;
        END IF;
        IF came IS NOT NULL THEN
            INSERT INTO desk_counts(status, escalated, n) VALUES (came, came_esc, 1)
            ON CONFLICT (status, escalated) DO UPDATE SET n = desk_counts.n + 1;
        END IF;
        IF gone IS NOT NULL THEN
            UPDATE desk_counts SET n = n - 1 WHERE status = gone AND escalated = gone_esc;
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE TRIGGER desk_count_on_run
    AFTER INSERT OR DELETE OR UPDATE OF desk_status, desk_escalations ON runs
    FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_count()""",
    # Keyset pages (schema 16), as on SQLite.
    "CREATE INDEX IF NOT EXISTS runs_page ON runs(created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_desk_page ON runs(desk_status, created_at, id)",
    """CREATE INDEX IF NOT EXISTS runs_escalated_page ON runs(created_at, id)
    WHERE desk_escalations > 0""",
    f"""INSERT INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '{GENESIS_HASH}')
    FROM audit ON CONFLICT DO NOTHING""",
)
