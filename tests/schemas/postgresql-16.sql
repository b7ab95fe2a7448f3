-- A store as refund-agent created it at schema 16 on PostgreSQL (refund_agent/store/
-- schema_postgres.py at loop-lift eae7148, the last one numbered history for the loop's and the
-- desk's tables), for tests/store/test_schema_upgrade.py and tests/store/test_schema_parts.py.
-- Its plpgsql bodies hold semicolons: statements end at a semicolon at the end of a line
-- outside $$ quotes.
CREATE TABLE IF NOT EXISTS runs (
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
    last_front TEXT);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, updated_at);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created_at);
CREATE TABLE IF NOT EXISTS steps (
    id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    pid BIGINT NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps(run_id, id);
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT NOT NULL, run_id TEXT NOT NULL, response_id TEXT NOT NULL,
    seq BIGINT NOT NULL, name TEXT NOT NULL, arguments TEXT NOT NULL, output TEXT,
    key TEXT, order_id TEXT,
    PRIMARY KEY (run_id, response_id, seq));
CREATE INDEX IF NOT EXISTS calls_by_response ON calls(response_id, seq);
CREATE INDEX IF NOT EXISTS calls_by_run ON calls(run_id, name);
CREATE INDEX IF NOT EXISTS calls_by_call_id ON calls(run_id, call_id);
CREATE UNIQUE INDEX IF NOT EXISTS calls_by_key ON calls(key);
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL, response_id TEXT NOT NULL, call_id TEXT NOT NULL,
    order_id TEXT NOT NULL, amount_cents BIGINT NOT NULL, proposed_cents BIGINT NOT NULL,
    summary TEXT NOT NULL, customer TEXT NOT NULL,
    status TEXT NOT NULL, requested_at DOUBLE PRECISION NOT NULL, requested_pid BIGINT NOT NULL,
    decided_by TEXT, decided_at DOUBLE PRECISION, decided_pid BIGINT, note TEXT);
CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals(status, requested_at);
CREATE INDEX IF NOT EXISTS approvals_by_run ON approvals(run_id);
CREATE INDEX IF NOT EXISTS approvals_by_order ON approvals(order_id);
CREATE TABLE IF NOT EXISTS approval_lines (
    approval_id TEXT NOT NULL, order_id TEXT NOT NULL, seq BIGINT NOT NULL, line TEXT NOT NULL,
    name TEXT NOT NULL, reason TEXT NOT NULL, amount_cents BIGINT NOT NULL,
    allowed_cents BIGINT NOT NULL, fee_cents BIGINT NOT NULL, held BIGINT NOT NULL,
    decision TEXT, units BIGINT, quantity BIGINT, PRIMARY KEY (approval_id, line));
CREATE INDEX IF NOT EXISTS lines_held ON approval_lines(order_id, line) WHERE held = 1;
CREATE OR REPLACE FUNCTION units_held_within_quantity() RETURNS trigger
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
$$;
DROP TRIGGER IF EXISTS units_held_within_quantity ON approval_lines;
CREATE TRIGGER units_held_within_quantity
    BEFORE INSERT OR UPDATE OF held, units, quantity, order_id, line ON approval_lines
    FOR EACH ROW EXECUTE FUNCTION units_held_within_quantity();
CREATE TABLE IF NOT EXISTS transcript (
    run_id TEXT NOT NULL, seq BIGINT NOT NULL, response_id TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('input', 'output')), item TEXT NOT NULL,
    PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS replies (
    id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    text TEXT NOT NULL, simulated BIGINT NOT NULL, response_id TEXT);
CREATE INDEX IF NOT EXISTS replies_by_run ON replies(run_id, id);
CREATE TABLE IF NOT EXISTS audit (
    id BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL, event TEXT NOT NULL,
    actor TEXT NOT NULL, pid BIGINT NOT NULL, run_id TEXT, approval_id TEXT, order_id TEXT,
    amount DOUBLE PRECISION, note TEXT, prev_hash TEXT NOT NULL, hash TEXT NOT NULL,
    lines TEXT);
CREATE TABLE IF NOT EXISTS audit_anchor (
    id BIGINT PRIMARY KEY CHECK (id = 1), entries BIGINT NOT NULL, head TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (
    name TEXT PRIMARY KEY, role TEXT NOT NULL, limit_cents BIGINT, password TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS sign_in_failures (
    id BIGSERIAL PRIMARY KEY, name_key TEXT NOT NULL, client TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS sign_in_failures_by_name
    ON sign_in_failures(name_key, client, at);
CREATE TABLE IF NOT EXISTS ledger (
    id BIGSERIAL PRIMARY KEY, log TEXT NOT NULL, key TEXT NOT NULL, record TEXT NOT NULL,
    UNIQUE (log, key));
CREATE TABLE IF NOT EXISTS provider_events (
    id TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, provider TEXT NOT NULL,
    type TEXT NOT NULL, refund_id TEXT NOT NULL, status TEXT, approval_id TEXT,
    data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS escalations (
    id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL, approval_id TEXT,
    kind TEXT NOT NULL, reason TEXT NOT NULL, raised_by TEXT NOT NULL,
    raised_at DOUBLE PRECISION NOT NULL, taken_by TEXT, taken_at DOUBLE PRECISION);
CREATE INDEX IF NOT EXISTS escalations_by_run ON escalations(run_id);
CREATE INDEX IF NOT EXISTS escalations_open ON escalations(taken_by, raised_at);
CREATE UNIQUE INDEX IF NOT EXISTS escalations_open_once
    ON escalations(run_id, kind, COALESCE(approval_id, '')) WHERE taken_by IS NULL;
CREATE TABLE IF NOT EXISTS raised_by (run_id TEXT PRIMARY KEY, account TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mail (
    id BIGSERIAL PRIMARY KEY, message_id TEXT NOT NULL UNIQUE, run_id TEXT,
    direction TEXT NOT NULL, kind TEXT NOT NULL, sender TEXT, recipient TEXT, subject TEXT,
    in_reply_to TEXT, refs TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    attachments TEXT NOT NULL, note TEXT, reply_id BIGINT, text TEXT, raw BYTEA);
CREATE INDEX IF NOT EXISTS mail_by_run ON mail(run_id, id);
CREATE INDEX IF NOT EXISTS mail_held ON mail(id) WHERE kind = 'held';
CREATE TABLE IF NOT EXISTS signoffs (
    approval_id TEXT PRIMARY KEY, signed_by TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    amount_cents BIGINT NOT NULL, keep TEXT NOT NULL, note TEXT);
CREATE TABLE IF NOT EXISTS owners (
    run_id TEXT PRIMARY KEY, account TEXT NOT NULL, since DOUBLE PRECISION NOT NULL,
    assigned_by TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS owners_by_account ON owners(account);
CREATE TABLE IF NOT EXISTS timeout_steps (
    approval_id TEXT NOT NULL, step TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (approval_id, step));
CREATE TABLE IF NOT EXISTS delegates (
    account TEXT PRIMARY KEY, delegate TEXT NOT NULL, until DOUBLE PRECISION NOT NULL,
    at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS store_moved (
    id BIGINT PRIMARY KEY CHECK (id = 1), target TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_desk ON runs(desk_status, created_at);
CREATE INDEX IF NOT EXISTS runs_desk_counts ON runs(desk_status, desk_escalations);
CREATE INDEX IF NOT EXISTS runs_escalated ON runs(created_at) WHERE desk_escalations > 0;
CREATE INDEX IF NOT EXISTS runs_desk_stale ON runs(id) WHERE desk_dirty = 1;
CREATE INDEX IF NOT EXISTS runs_by_sender ON runs(lower(sender), created_at);
CREATE OR REPLACE FUNCTION refund_agent_desk_stale() RETURNS trigger
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
    END $$;
CREATE OR REPLACE TRIGGER desk_on_run BEFORE UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_stale();
CREATE OR REPLACE TRIGGER desk_on_approval
    AFTER INSERT OR DELETE OR UPDATE OF status, amount_cents, proposed_cents, requested_at
    ON approvals FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_stale();
CREATE OR REPLACE TRIGGER desk_on_line AFTER INSERT OR UPDATE OF decision
    ON approval_lines FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_stale();
CREATE OR REPLACE TRIGGER desk_on_escalation AFTER INSERT OR UPDATE OF taken_by
    ON escalations FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_stale();
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE IF NOT EXISTS run_search (run_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS run_search_trigrams ON run_search USING gin (body gin_trgm_ops);
CREATE OR REPLACE FUNCTION refund_agent_search() RETURNS trigger
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
        INSERT INTO run_search(run_id, body) SELECT r.id, translate(r.sender || chr(10) || r.sender_name || chr(10) || r.subject || chr(10) || r.email || chr(10) || r.id || chr(10) || COALESCE((SELECT string_agg(a.order_id, chr(10)) FROM approvals a WHERE a.run_id = r.id), ''), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') FROM runs r
         WHERE r.id = target
        ON CONFLICT (run_id) DO UPDATE SET body = EXCLUDED.body;
        RETURN NULL;
    END $$;
CREATE OR REPLACE TRIGGER search_on_run
    AFTER INSERT OR DELETE OR UPDATE OF sender, sender_name, subject, email ON runs
    FOR EACH ROW EXECUTE FUNCTION refund_agent_search();
CREATE OR REPLACE TRIGGER search_on_approval AFTER INSERT OR DELETE OR UPDATE OF order_id
    ON approvals FOR EACH ROW EXECUTE FUNCTION refund_agent_search();
CREATE TABLE IF NOT EXISTS desk_counts (
    status TEXT NOT NULL, escalated BIGINT NOT NULL, n BIGINT NOT NULL,
    PRIMARY KEY (status, escalated));
CREATE OR REPLACE FUNCTION refund_agent_desk_count() RETURNS trigger
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
    END $$;
CREATE OR REPLACE TRIGGER desk_count_on_run
    AFTER INSERT OR DELETE OR UPDATE OF desk_status, desk_escalations ON runs
    FOR EACH ROW EXECUTE FUNCTION refund_agent_desk_count();
CREATE INDEX IF NOT EXISTS runs_page ON runs(created_at, id);
CREATE INDEX IF NOT EXISTS runs_desk_page ON runs(desk_status, created_at, id);
CREATE INDEX IF NOT EXISTS runs_escalated_page ON runs(created_at, id)
    WHERE desk_escalations > 0;
INSERT INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '0000000000000000000000000000000000000000000000000000000000000000')
    FROM audit ON CONFLICT DO NOTHING;
