"""The loop's store carries nothing of the desk; the desk's store stands on it (issue #44).

``Store`` keeps the loop's boundaries and runs no desk code on commit; ``DeskStore`` adds the
desk's records, opens its engine as ``Store`` does, and keeps the desk's rows fresh in the
same transaction as every write.
"""

from __future__ import annotations

import pytest

from refund_agent.desk.records import (
    DeskPostgresStore,
    DeskSQLiteStore,
    DeskStore,
    desk_engine_for,
)
from refund_agent.store import PostgresStore, SQLiteStore, Store

DESK_METHODS = ("escalations", "take_escalation", "hand_off", "desk_page", "desk_groups",
                "owners", "change_owner", "set_away", "apply_timeouts", "add_account",
                "sign_in_failures", "record_provider_event", "provider_events")


def _run(store: Store) -> str:
    return store.create_run(sender="c@example.com", sender_name="C", subject="s",
                            email="e").id


def _desk_row(store: Store, run_id: str) -> tuple:
    return tuple(store.query("SELECT desk_status, desk_dirty FROM runs WHERE id = ?",
                             (run_id,))[0])


def test_the_loops_store_has_none_of_the_desks_records(tmp_path):
    # Old code: Store had every one of these (14 mixins, about 104 public methods).
    store = Store(tmp_path / "loop.sqlite3")
    assert [name for name in DESK_METHODS if hasattr(store, name)] == []
    desk = DeskStore(tmp_path / "desk.sqlite3")
    assert [name for name in DESK_METHODS if not hasattr(desk, name)] == []


def test_the_desks_store_opens_the_engine_its_target_names(tmp_path):
    desk = DeskStore(tmp_path / "desk.sqlite3")
    assert type(desk) is DeskSQLiteStore and isinstance(desk, SQLiteStore)
    assert isinstance(desk, Store) and isinstance(desk, DeskStore)
    assert desk_engine_for("postgresql://u@h/db") is DeskPostgresStore
    assert issubclass(DeskPostgresStore, PostgresStore)
    assert DeskStore.__new__(DeskStore, "postgres://u@h/db").__class__ is DeskPostgresStore


def test_the_engines_methods_win_and_the_desk_overrides_none_of_them():
    for combined, engine in ((DeskSQLiteStore, SQLiteStore), (DeskPostgresStore, PostgresStore)):
        mro = combined.__mro__
        assert mro.index(engine) < mro.index(Store)
        own = {name for cls in mro[:mro.index(engine)] for name in vars(cls)
               if not name.startswith("__")}
        assert own.isdisjoint(vars(engine))
        for name in ("change_counter", "integrity_problem", "_upgrade", "_begin", "_connect"):
            assert getattr(combined, name) is getattr(engine, name)


def test_a_commit_of_the_loops_store_runs_no_desk_code(tmp_path):
    # Old code: every commit of the store recomputed the run's desk status (desk/status.py).
    path = tmp_path / "store.sqlite3"
    DeskStore(path).close()   # the desk's tables, its columns on runs and their triggers
    loop = Store(path)
    run_id = _run(loop)
    assert _desk_row(loop, run_id) == (None, 1)   # left as the triggers marked it
    desk = DeskStore(path)
    other = _run(desk)
    assert _desk_row(desk, other) == ("working", 0)   # in the write's own transaction


def test_the_desk_brings_rows_the_loops_store_left_stale_up_to_date_as_it_opens(tmp_path):
    path = tmp_path / "store.sqlite3"
    run_id = _run(Store(path))
    desk = DeskStore(path)
    assert _desk_row(desk, run_id) == ("working", 0)
    assert desk.desk_groups() and desk.desk_page("", None, False, 10) == [run_id]


def test_who_typed_a_run_in_is_the_desks_record_and_the_loops_store_refuses_to_drop_it(
        tmp_path):
    # Before: the loop's store wrote the desk's raised_by table itself, so a run typed in on a
    # plain Store failed with "no such table: raised_by" once the desk's tables were its own.
    store = Store(tmp_path / "loop.sqlite3")
    with pytest.raises(TypeError, match="keeps no record of who typed a run in"):
        store.create_run(sender="c@example.com", sender_name="C", subject="s", email="e",
                         raised_by="Ana Ruiz")
    assert store.runs() == []   # refused in its transaction: nothing half written
    desk = DeskStore(tmp_path / "desk.sqlite3")
    run = desk.create_run(sender="c@example.com", sender_name="C", subject="s", email="e",
                          raised_by="Ana Ruiz")
    assert desk.raised_by_of([run.id]) == {run.id: "Ana Ruiz"}
