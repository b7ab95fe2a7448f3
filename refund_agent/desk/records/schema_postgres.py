"""The desk's PostgreSQL tables, columns, indexes, functions and triggers, on top of the
loop's (store/schema_postgres.py): what :mod:`.schema_part` installs when a desk store opens.
Every statement is idempotent (``IF NOT EXISTS``, ``CREATE OR REPLACE``, the guard's trigger
dropped and made again). The schema numbers in the comments are the one history's
(store/schema.py) that made these before the desk kept its own part; what each piece is for is
said in the SQLite schema (schema_sqlite.py)."""

from __future__ import annotations

# The database's own last guard on units, as SQLite's two triggers (what it refuses is said
# there): a row held may not bring its line's held units past the line's quantity, whatever
# wrote it. The function takes the order's advisory lock (store/postgres.py, _LOCK_ORDER), which the
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


# The desk's status kept on each run (schema 12): its columns on the loop's runs table.
DESK_RUN_COLUMNS: tuple[str, ...] = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_status TEXT",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_escalations BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS desk_dirty BIGINT NOT NULL DEFAULT 1",
)


DESK_POSTGRES_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS approval_lines (
    approval_id TEXT NOT NULL, order_id TEXT NOT NULL, seq BIGINT NOT NULL, line TEXT NOT NULL,
    name TEXT NOT NULL, reason TEXT NOT NULL, amount_cents BIGINT NOT NULL,
    allowed_cents BIGINT NOT NULL, fee_cents BIGINT NOT NULL, held BIGINT NOT NULL,
    decision TEXT, units BIGINT, quantity BIGINT, PRIMARY KEY (approval_id, line))""",
    "CREATE INDEX IF NOT EXISTS lines_held ON approval_lines(order_id, line) WHERE held = 1",
    # The code checks units under the order's advisory lock (approvals.py); this is the
    # database's own last guard, as SQLite's triggers (schema 11).
    *POSTGRES_UNITS_GUARD,
    """CREATE TABLE IF NOT EXISTS accounts (
    name TEXT PRIMARY KEY, role TEXT NOT NULL, limit_cents BIGINT, password TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS sign_in_failures (
    id BIGSERIAL PRIMARY KEY, name_key TEXT NOT NULL, client TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS sign_in_failures_by_name
    ON sign_in_failures(name_key, client, at)""",
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
    "CREATE INDEX IF NOT EXISTS runs_desk_page ON runs(desk_status, created_at, id)",
    """CREATE INDEX IF NOT EXISTS runs_escalated_page ON runs(created_at, id)
    WHERE desk_escalations > 0""",
)
