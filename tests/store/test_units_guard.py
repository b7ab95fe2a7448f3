"""The database's own guard on units (schema 11), on both engines: whatever writes
``approval_lines`` (a repair script, a bug that skips the code's check, a hand in psql), a held
row may not bring its line's held units past the line's quantity.

The code checks the same under the order's lock before it proposes a refund (approvals.py);
these tests go past it on purpose, with raw INSERT and UPDATE statements through
``Store.execute``, and show that with the trigger dropped the code's check still refuses and the
raw write then goes through (so it is the trigger that refused it).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from refund_agent.desk.policy import quote_refund, units_left
from refund_agent.desk.records import DeskStore
from refund_agent.desk.records.schema_postgres import POSTGRES_UNITS_GUARD
from refund_agent.desk.shop import Shop
from refund_agent.errors import StoreError
from refund_agent.store import SCHEMA_HISTORY, Store

CORPUS_SHOP = Path(__file__).parents[1] / "corpus" / "shop"
TUMBLERS = "GT-DW-350"   # RT20602: four double-wall tumblers at $14.50, and a tray
REFUSED = "beyond the line quantity"


def _open(backend, folder: Path, name: str) -> Store:
    if backend.postgres:
        return DeskStore(backend.cluster.create(f"guard_{name}_{uuid.uuid4().hex[:8]}"))
    return DeskStore(folder / f"{name}.sqlite3")


@pytest.fixture(scope="module")
def store(backend, tmp_path_factory):
    """One store per engine for the module; each test uses its own order ids."""
    opened = _open(backend, tmp_path_factory.mktemp(f"guard-{backend.name}"), "shared")
    yield opened
    opened.close()


def hold(store: Store, order: str, units: int | None, quantity: int | None = 4,
         line: str = TUMBLERS, held: int = 1) -> str:
    """A raw approval_lines row, past the code: its approval id."""
    approval_id = f"raw_{uuid.uuid4().hex[:10]}"
    store.execute(
        "INSERT INTO approval_lines(approval_id, order_id, seq, line, name, reason,"
        " amount_cents, allowed_cents, fee_cents, held, units, quantity)"
        " VALUES (?, ?, 0, ?, 'Tumbler', 'damaged', 1450, 1450, 0, ?, ?, ?)",
        (approval_id, order, line, held, units, quantity))
    return approval_id


def update(store: Store, approval_id: str, sets: str, args: tuple = ()) -> int:
    return store.execute(f"UPDATE approval_lines SET {sets} WHERE approval_id = ?",
                         (*args, approval_id))


def held_units(store: Store, order: str) -> list[int | None]:
    return [r[0] for r in store.query("SELECT units FROM approval_lines WHERE order_id = ?"
                                      " AND line = ? AND held = 1 ORDER BY units",
                                      (order, TUMBLERS))]


def test_a_raw_insert_past_the_quantity_is_refused(store):
    order = f"O{uuid.uuid4().hex[:6]}"
    hold(store, order, 3)
    with pytest.raises(StoreError, match=REFUSED):
        hold(store, order, 2)                        # 3 + 2 > 4
    hold(store, order, 1)                            # 3 + 1 = 4: the line is full
    with pytest.raises(StoreError, match=REFUSED):
        hold(store, order, 1)
    hold(store, order, 2, held=0)                    # a released row holds nothing
    assert held_units(store, order) == [1, 3]
    # A row without units holds the whole line: nothing beside it, and it beside nothing.
    with pytest.raises(StoreError, match=REFUSED):
        hold(store, order, None)
    whole = f"O{uuid.uuid4().hex[:6]}"
    hold(store, whole, None, None)
    with pytest.raises(StoreError, match=REFUSED):
        hold(store, whole, 1)
    # Shipping (no units, no quantity) is held once.
    hold(store, order, None, None, line="shipping")
    with pytest.raises(StoreError, match=REFUSED):
        hold(store, order, None, None, line="shipping")
    assert held_units(store, order) == [1, 3]


def test_a_raw_update_that_holds_more_is_refused_and_lowering_passes(store):
    order = f"O{uuid.uuid4().hex[:6]}"
    first, second = hold(store, order, 2), hold(store, order, 2)
    for sets, args in (("units = ?", (3,)), ("units = NULL", ()), ("quantity = ?", (3,))):
        with pytest.raises(StoreError, match=REFUSED):
            update(store, first, sets, args)
    assert update(store, first, "units = ?", (1,)) == 1       # what an approver lowering does
    assert update(store, first, "units = ?, quantity = ?", (2, 4)) == 1   # back within 4
    assert update(store, second, "held = 0, decision = 'declined'") == 1
    third = hold(store, order, 2)
    with pytest.raises(StoreError, match=REFUSED):
        update(store, second, "held = 1")                     # 2 + 2 + 2 > 4
    assert update(store, third, "held = 0") == 1
    assert update(store, second, "held = 1") == 1             # 2 + 2 = 4
    # Moved onto another order's full line, a row is counted there.
    other = f"O{uuid.uuid4().hex[:6]}"
    hold(store, other, 4)
    with pytest.raises(StoreError, match=REFUSED):
        store.execute("UPDATE approval_lines SET order_id = ? WHERE approval_id = ?",
                      (other, first))
    assert held_units(store, order) == [2, 2] and held_units(store, other) == [4]


def test_an_old_whole_line_row_may_be_lowered_to_units(store):
    # A refund proposed before schema 8 holds its line without units or quantity; approving
    # fewer of its units sets them (approvals.py), which holds less, so it passes.
    order = f"O{uuid.uuid4().hex[:6]}"
    old = hold(store, order, None, None)
    assert update(store, old, "decision = 'approved', units = COALESCE(?, units)", (3,)) == 1
    assert held_units(store, order) == [3]


def test_without_the_trigger_the_code_still_refuses_and_the_raw_write_goes_through(
        backend, tmp_path: Path):
    store = _open(backend, tmp_path, "dropped")
    shop = Shop(CORPUS_SHOP)
    try:
        order = shop.order("RT20602")
        pending = hold(store, "RT20602", 4)
        store.execute("INSERT INTO approvals(id, run_id, response_id, call_id, order_id,"
                      " amount_cents, proposed_cents, summary, customer, status, requested_at,"
                      " requested_pid) VALUES (?, 'run_x', 'resp', 'call', 'RT20602', 5800,"
                      " 5800, 'Four cracked.', 'd', 'pending', 0, 1)", (pending,))
        store.execute("DROP TRIGGER units_held_within_quantity"
                      + (" ON approval_lines" if backend.postgres else ""))
        # The code's own check (the quote under the order's lock) refuses a fifth tumbler.
        held = store.held_lines("RT20602")
        assert units_left(order, TUMBLERS, held) == 0
        assert isinstance(quote_refund(order, shop.terms, [(TUMBLERS, "damaged", 1)], held,
                                       shop.today), str)
        hold(store, "RT20602", 1)          # past the code, nothing refuses it any more
        assert held_units(store, "RT20602") == [1, 4]
    finally:
        store.close()


def test_the_guard_takes_the_lock_the_code_takes():
    from refund_agent.store.postgres import _LOCK_ORDER
    assert f"pg_advisory_xact_lock({_LOCK_ORDER}, hashtext(NEW.order_id))" in \
        POSTGRES_UNITS_GUARD[0]
    assert 11 in SCHEMA_HISTORY and "units" in SCHEMA_HISTORY[11]
