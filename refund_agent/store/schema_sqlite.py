"""The loop's SQLite schema: its tables as a new store creates them, and the numbered steps that
bring an older store up to date (schema.py keeps what each version added). The desk's tables are
the desk's own (desk/records/schema_sqlite.py), added when a desk store opens."""

from __future__ import annotations

import sqlite3
from typing import Any

from .audit import GENESIS_HASH
from .schema import MERGE_OPEN_ESCALATIONS, Step, _data_v13, calls_v6, fill_search


def _sqlite_calls_v6(db: Any) -> None:
    calls_v6(db, "calls_v5")
    db.execute("DROP TABLE calls_v5")


# One run's searchable text (schema 16), for the run ``r``: every field a search looks in, one a
# line (a search word never holds a line break, so it cannot match across two fields), ASCII
# letters lower-cased as SQLite's lower() does (PostgreSQL's spelling folds the same letters).
SEARCH_BODY = ("lower(r.sender || char(10) || r.sender_name || char(10) || r.subject"
               " || char(10) || r.email || char(10) || r.id || char(10) || COALESCE((SELECT"
               " group_concat(a.order_id, char(10)) FROM approvals a WHERE a.run_id = r.id),"
               " ''))")


def _text(run: str) -> str:
    """The text of the run whose id is ``run`` (a trigger's NEW.id), as a subquery."""
    return f"(SELECT {SEARCH_BODY} FROM runs r WHERE r.id = {run})"


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
    # Step 12's columns on runs are the desk's: its part adds them where missing (every run
    # stale, computed before the desk's opening commits). Nothing left for the loop.
    Step(12, ()),
    Step(13, ("ALTER TABLE runs ADD COLUMN agent TEXT NOT NULL DEFAULT 'refunds'",
              MERGE_OPEN_ESCALATIONS),
         data=_data_v13, adds=(("runs", "agent"),), updates=("escalations",)),
    Step(14, ()),   # the mail table only: the schema makes it
    Step(15, ("ALTER TABLE runs ADD COLUMN last_front TEXT",), adds=(("runs", "last_front"),)),
    # The new tables are the schema's; their rows come from the runs and approvals already kept
    # (the desk's counts are the desk's part's, filled when it makes their table).
    Step(16, (), data=fill_search(SEARCH_BODY)),
    Step(17, ("ALTER TABLE runs ADD COLUMN trace_context TEXT",),
         adds=(("runs", "trace_context"),)),
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
    agent TEXT NOT NULL DEFAULT 'refunds',
    last_front TEXT, trace_context TEXT
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
-- The version of each part of the schema an agent's store adds on the loop's tables (the desk's:
-- desk/records/schema_part.py), numbered on its own; a store made before parts has no rows here
-- (see schema.parts_due).
CREATE TABLE IF NOT EXISTS schema_parts (part TEXT PRIMARY KEY, version INTEGER NOT NULL);
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
BEGIN INSERT INTO run_search(run_id, body) VALUES (NEW.id, """ + _text("NEW.id") + """); END;
CREATE TRIGGER IF NOT EXISTS search_on_run AFTER UPDATE OF sender, sender_name, subject, email
ON runs BEGIN UPDATE run_search SET body = """ + _text("NEW.id") + """ WHERE run_id = NEW.id;
      END;
CREATE TRIGGER IF NOT EXISTS search_on_gone_run AFTER DELETE ON runs
BEGIN DELETE FROM run_search WHERE run_id = OLD.id; END;
CREATE TRIGGER IF NOT EXISTS search_on_new_approval AFTER INSERT ON approvals
BEGIN UPDATE run_search SET body = """ + _text("NEW.run_id") + """ WHERE run_id = NEW.run_id;
      END;
CREATE TRIGGER IF NOT EXISTS search_on_approval AFTER UPDATE OF order_id ON approvals
BEGIN UPDATE run_search SET body = """ + _text("NEW.run_id") + """ WHERE run_id = NEW.run_id;
      END;
CREATE TRIGGER IF NOT EXISTS search_on_gone_approval AFTER DELETE ON approvals
BEGIN UPDATE run_search SET body = """ + _text("OLD.run_id") + """ WHERE run_id = OLD.run_id;
      END;
-- Keyset pages (schema 16): newest first by (created_at, id), of every run; a page starts after
-- the last one's key, never at an offset (the desk adds its own, by desk status).
CREATE INDEX IF NOT EXISTS runs_page ON runs(created_at, id);
INSERT OR IGNORE INTO audit_anchor(id, entries, head) SELECT 1, COUNT(*),
    COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '""" + GENESIS_HASH + """')
    FROM audit;
"""


def statements(script: str) -> list[str]:
    """A script's statements one by one (a trigger's body whole), for ``execute`` inside an
    open transaction: ``executescript`` would commit it first. Comments ride with the
    statement after them; a script's trailing comments are dropped."""
    found, part = [], ""
    for line in script.splitlines(keepends=True):
        part += line
        if sqlite3.complete_statement(part):
            found.append(part.strip())
            part = ""
    return found


SQLITE_SCHEMA_STATEMENTS = statements(SQLITE_SCHEMA)
