"""The schema moves with its owners: the loop's store makes only the loop's tables, the desk's
store adds its own part (desk/records/schema_part.py) as it opens, and a store made by the one
numbered history (schema 16, every table in one; tests/schemas/*-16.sql) opens as either
unchanged. On both engines.

A fresh desk store's schema is compared, object by object, with the one the one history made
(the schema-16 fixture): the same tables and columns (the desk's columns on runs now come last:
SQLite adds them to the loop's table), the same indexes, triggers and functions.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from refund_agent.desk.records import DeskStore
from refund_agent.desk.records.schema_part import DESK_VERSION
from refund_agent.models import RunStatus
from refund_agent.store import SCHEMA_VERSION, Store

SCHEMAS = Path(__file__).parents[1] / "schemas"
# Every table the desk owns (the loop's store makes none of them).
DESK_TABLES = {"approval_lines", "accounts", "sign_in_failures", "provider_events",
               "escalations", "raised_by", "mail", "signoffs", "owners", "timeout_steps",
               "delegates", "desk_counts"}
DESK_COLUMNS = {"desk_status", "desk_escalations", "desk_dirty"}
LOOP_TABLES = {"runs", "steps", "calls", "approvals", "transcript", "replies", "audit",
               "audit_anchor", "ledger", "store_moved", "run_search", "schema_parts"}


# -- describing a schema -------------------------------------------------------------------------

def sqlite_schema(path: Path) -> dict[str, object]:
    """Every object of the SQLite file: each table's columns (as a set: order aside), each
    index's and trigger's SQL, each table's SQL but runs' (whose desk columns SQLite appends)."""
    db = sqlite3.connect(path)
    try:
        objects = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
        out: dict[str, object] = {}
        for kind, name, table, sql in objects:
            if kind == "table":
                out[f"columns {name}"] = {tuple(r[1:]) for r in
                                          db.execute(f"PRAGMA table_info({name})")}
                if name != "runs":
                    out[f"table {name}"] = sql
            else:
                out[f"{kind} {name}"] = (table, sql)
        return out
    finally:
        db.close()


def pg_schema(url: str) -> dict[str, object]:
    """Every object of the PostgreSQL database's public schema: columns (as a set), indexes,
    constraints, triggers and functions, as the catalogue spells them."""
    import psycopg

    with psycopg.connect(url) as conn:
        out: dict[str, object] = {}
        for table, column, kind, nullable, default in conn.execute(
                "SELECT table_name, column_name, data_type, is_nullable, column_default"
                " FROM information_schema.columns WHERE table_schema = 'public'"):
            out.setdefault(f"columns {table}", set()).add((column, kind, nullable, default))
        for name, table, sql in conn.execute(
                "SELECT indexname, tablename, indexdef FROM pg_indexes"
                " WHERE schemaname = 'public'"):
            out[f"index {name}"] = (table, sql)
        for name, table, sql in conn.execute(
                "SELECT c.conname, t.relname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
                " JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n"
                " ON n.oid = t.relnamespace WHERE n.nspname = 'public'"):
            out[f"constraint {name}"] = (table, sql)
        for name, table, sql in conn.execute(
                "SELECT t.tgname, c.relname, pg_get_triggerdef(t.oid) FROM pg_trigger t"
                " JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND NOT t.tgisinternal"):
            out[f"trigger {name}"] = (table, sql)
        for name, body in conn.execute(
                "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n"
                " ON n.oid = p.pronamespace WHERE n.nspname = 'public' AND p.prolang ="
                " (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')"):
            out[f"function {name}"] = body
        return out


def without_parts(schema: dict[str, object]) -> dict[str, object]:
    """The schema but the loop's schema_parts table (new since the one history) and the
    engine's version table."""
    return {k: v for k, v in schema.items()
            if "schema_parts" not in k and "refund_agent_schema" not in k}


def since_16(schema: dict[str, object]) -> dict[str, object]:
    """The schema without what the loop's schema added after the one history (17: the runs'
    trace context), to compare with the one history's 16."""
    return {k: ({c for c in v if c[0] != "trace_context"} if k == "columns runs" else v)
            for k, v in without_parts(schema).items()}  # type: ignore[union-attr]


def tables_of(schema: dict[str, object]) -> set[str]:
    return {key.split(" ", 1)[1] for key in schema if key.startswith("columns ")}


# -- the one history's schema-16 store ---------------------------------------------------------

def pg_statements(script: str) -> list[str]:
    """A schema file's statements (as tests/store/test_schema_upgrade.py reads them)."""
    script = "\n".join(line for line in script.splitlines() if not line.startswith("--"))
    statements, part = [], ""
    for piece in f"{script}\n".split(";\n"):
        part = f"{part};\n{piece}" if part else piece
        if part.count("$$") % 2 == 0:
            if part.strip():
                statements.append(part.strip())
            part = ""
    return statements


def old_sqlite_store(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript((SCHEMAS / "sqlite-16.sql").read_text())
    db.execute("PRAGMA user_version = 16")
    db.commit()
    db.close()
    return path


def old_pg_store(cluster, name: str) -> str:
    import psycopg

    url = cluster.create(f"{name}_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in pg_statements((SCHEMAS / "postgresql-16.sql").read_text()):
            conn.execute(statement)
        conn.execute("CREATE TABLE refund_agent_schema (id INTEGER PRIMARY KEY CHECK (id = 1),"
                     " version INTEGER NOT NULL)")
        conn.execute("INSERT INTO refund_agent_schema VALUES (1, 16)")
    return url


def sqlite_dump(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()


# -- SQLite --------------------------------------------------------------------------------------

def test_a_new_loop_store_on_sqlite_has_none_of_the_desks_tables(tmp_path):
    store = Store(tmp_path / "loop.sqlite3")
    schema = sqlite_schema(tmp_path / "loop.sqlite3")
    store.close()
    fts = {t for t in tables_of(schema) if t.startswith("run_search_index")}   # FTS5's own
    assert tables_of(schema) - fts == LOOP_TABLES
    assert not DESK_COLUMNS & {c[0] for c in schema["columns runs"]}
    assert not [k for k in schema if "desk" in k or "units_held" in k]
    assert store.schema_version() == SCHEMA_VERSION
    assert store.query("SELECT COUNT(*) FROM schema_parts")[0][0] == 0


def test_a_new_desk_store_on_sqlite_has_the_schema_the_one_history_made(tmp_path):
    DeskStore(tmp_path / "desk.sqlite3").close()
    made = sqlite_schema(tmp_path / "desk.sqlite3")
    assert DESK_TABLES <= tables_of(made)
    old = old_sqlite_store(tmp_path / "old.sqlite3")
    assert since_16(made) == without_parts(sqlite_schema(old))
    assert "trace_context" in {c[0] for c in made["columns runs"]}   # type: ignore[union-attr]
    DeskStore(old).close()   # the one history's store, upgraded: as a new one is made
    assert without_parts(sqlite_schema(old)) == without_parts(made)
    db = sqlite3.connect(tmp_path / "desk.sqlite3")
    assert db.execute("SELECT part, version FROM schema_parts").fetchall() == [
        ("desk", DESK_VERSION)]
    db.close()


def test_a_loop_store_opened_as_the_desks_gets_the_desks_tables_in_place(tmp_path):
    path = tmp_path / "shared.sqlite3"
    loop = Store(path)
    run = loop.create_run(sender="maya@example.com", sender_name="Maya Chen", subject="Hi",
                          email="Hello.", agent="refunds")
    loop.close()
    desk = DeskStore(path)
    assert DESK_TABLES <= tables_of(sqlite_schema(path))
    # The run made before the desk's tables has its desk status and is counted.
    assert desk.run(run.id).desk_status and sum(n for _s, _e, n in desk.desk_groups()) == 1
    assert run.id in desk.desk_page("maya", None, False, 50)
    assert [tuple(r) for r in desk.query("SELECT part, version FROM schema_parts")] == [
        ("desk", DESK_VERSION)]
    desk.close()
    before = sqlite_dump(path)
    DeskStore(path).close()      # opening it again changes nothing
    Store(path).close()
    assert sqlite_dump(path) == before


def test_a_schema_16_sqlite_store_opens_as_either_store_unchanged(tmp_path):
    path = old_sqlite_store(tmp_path / "old.sqlite3")
    desk = DeskStore(path)       # the one history's store, upgraded to 17 as it opens
    run_id = desk.create_run(sender="maya@example.com", sender_name="Maya Chen",
                             subject="Cracked", email="It arrived cracked.",
                             raised_by="Dana Kim").id
    desk.add_account("Dana Kim", "lead", None, "scrypt$x", by="Dana Kim")
    desk.close()
    before, schema = sqlite_dump(path), sqlite_schema(path)
    assert since_16(schema) == without_parts(sqlite_schema(old_sqlite_store(
        tmp_path / "again.sqlite3")))   # the desk's tables kept as they were, none made
    Store(path).close()
    assert sqlite_dump(path) == before
    desk = DeskStore(path)
    assert desk.run(run_id).status == RunStatus.WORKING
    assert desk.account_rows("Dana Kim")[0]["password"] == "scrypt$x"
    desk.close()
    assert sqlite_dump(path) == before           # no table made, no row written


# -- PostgreSQL ----------------------------------------------------------------------------------

def test_a_new_loop_store_on_postgresql_has_none_of_the_desks_tables(pg_cluster):
    url = pg_cluster.create(f"loop_{uuid.uuid4().hex[:8]}")
    Store(url).close()
    schema = pg_schema(url)
    assert tables_of(schema) == LOOP_TABLES | {"refund_agent_schema"}
    assert not DESK_COLUMNS & {c[0] for c in schema["columns runs"]}
    assert not [k for k in schema if "desk" in k or "units_held" in k]


def test_a_new_desk_store_on_postgresql_has_the_schema_the_one_history_made(pg_cluster):
    url = pg_cluster.create(f"desk_{uuid.uuid4().hex[:8]}")
    store = DeskStore(url)
    assert [tuple(r) for r in store.query("SELECT part, version FROM schema_parts")] == [
        ("desk", DESK_VERSION)]
    store.close()
    made = pg_schema(url)
    assert DESK_TABLES <= tables_of(made)
    assert since_16(made) == without_parts(pg_schema(old_pg_store(pg_cluster, "old")))
    assert "trace_context" in {c[0] for c in made["columns runs"]}   # type: ignore[union-attr]


def test_a_loop_store_on_postgresql_opened_as_the_desks_gets_its_tables(pg_cluster):
    url = pg_cluster.create(f"shared_{uuid.uuid4().hex[:8]}")
    loop = Store(url)
    run = loop.create_run(sender="maya@example.com", sender_name="Maya Chen", subject="Hi",
                          email="Hello.", agent="refunds")
    loop.close()
    desk = DeskStore(url)
    assert DESK_TABLES <= tables_of(pg_schema(url))
    assert desk.run(run.id).desk_status and sum(n for _s, _e, n in desk.desk_groups()) == 1
    desk.close()


def test_a_schema_16_postgresql_store_opens_as_either_store_unchanged(pg_cluster):
    url = old_pg_store(pg_cluster, "old16")
    desk = DeskStore(url)   # upgraded to 17 (the runs' trace context) as it opens
    run_id = desk.create_run(sender="maya@example.com", sender_name="Maya Chen",
                             subject="Cracked", email="It arrived cracked.",
                             raised_by="Dana Kim").id
    desk.close()
    schema = pg_schema(url)
    counts = DeskStore(url).row_counts()
    Store(url).close()
    desk = DeskStore(url)
    assert pg_schema(url) == schema
    assert desk.row_counts() == counts and desk.run(run_id).status == RunStatus.WORKING
    desk.close()


def test_which_parts_are_due_reads_the_stores_history():
    from refund_agent.desk.records.schema_part import DESK_PART
    from refund_agent.store.schema import parts_due

    assert parts_due([DESK_PART], None, 0) == [(DESK_PART, 0)]        # a new store
    assert parts_due([DESK_PART], {}, SCHEMA_VERSION) == [(DESK_PART, 0)]   # a loop store
    assert parts_due([DESK_PART], None, SCHEMA_VERSION) == []         # the one history's 16
    assert parts_due([DESK_PART], None, 12) == [(DESK_PART, 0)]       # older: installed whole
    # Rows put back by hand in a store below 16 (as tests turn one back) do not count.
    assert parts_due([DESK_PART], {"desk": DESK_VERSION}, 7) == [(DESK_PART, 0)]
    assert parts_due([DESK_PART], {"desk": DESK_VERSION}, SCHEMA_VERSION) == []
