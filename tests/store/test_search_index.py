"""Search through an index (schema 16) answers the same on both engines, and as documented.

A search is words; a ticket matches when every word is a substring of one of its fields
(address, name, subject, email text, run id, an approval's order id), the case of ASCII letters
ignored and nothing else folded (docs/PERFORMANCE.md, "Search"). SQLite reads an FTS5 trigram
index with GLOB, PostgreSQL a pg_trgm index with LIKE, each over the lower-cased text the
triggers keep in run_search. Hypothesis makes the tickets and the searches: words cut from the
tickets' own fields, in mixed case, with the characters either engine would read as wildcards
(``% _ \\ * ? [``), short words (no trigram), letters whose case only Unicode folds.
"""

from __future__ import annotations

import string
import uuid

import pytest
from helpers.examples import examples
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from refund_agent.desk.records import DeskStore
from refund_agent.store import Store

ALPHABET = string.ascii_letters[:8] + "ÉéĞğ%_\\*?[]-.@ 1"
FIELD = st.text(ALPHABET, max_size=12)
TICKET = st.fixed_dictionaries({
    "sender": FIELD, "sender_name": FIELD, "subject": FIELD, "email": FIELD,
    "orders": st.lists(st.text(ALPHABET.replace(" ", ""), min_size=1, max_size=6), max_size=2)})


def _fold(text: str) -> str:
    return text.translate(str.maketrans(string.ascii_uppercase, string.ascii_lowercase))


def expected(tickets: list[dict], search: str) -> set[str]:
    """The documented meaning, in Python: each word inside one field, ASCII case ignored."""
    words = [_fold(w) for w in search.split()]
    return {t["id"] for t in tickets
            if all(any(w in _fold(f) for f in (t["sender"], t["sender_name"], t["subject"],
                                                t["email"], t["id"], *t["orders"]))
                   for w in words)}


def _fill(store: Store, tickets: list[dict]) -> None:
    with store.transaction() as db:
        db.execute("DELETE FROM approvals")
        db.execute("DELETE FROM runs")
        for n, t in enumerate(tickets):
            db.execute("INSERT INTO runs(id, created_at, kind, sender, sender_name, subject,"
                       " email, status, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                       (t["id"], 1000.0 + n, "custom", t["sender"], t["sender_name"],
                        t["subject"], t["email"], "done", 1000.0 + n))
            for i, order in enumerate(t["orders"]):
                db.execute("INSERT INTO approvals(id, run_id, response_id, call_id, order_id,"
                           " amount_cents, proposed_cents, summary, customer, status,"
                           " requested_at, requested_pid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                           (f"{t['id']}-a{i}", t["id"], "resp", f"c{i}", order, 100, 100,
                            "s", "c", "approved", 2000.0 + i, 1))


@pytest.fixture(scope="module")
def stores(pg_cluster, tmp_path_factory):
    folder = tmp_path_factory.mktemp("search")
    lite = DeskStore(folder / "search.sqlite3")
    pg = DeskStore(pg_cluster.create(f"search_{uuid.uuid4().hex[:8]}"))
    yield lite, pg
    lite.close()
    pg.close()


@st.composite
def case(draw):
    tickets = draw(st.lists(TICKET, min_size=1, max_size=6))
    for n, t in enumerate(tickets):
        t["id"] = f"run_{n:02d}X"
    fields = [f for t in tickets for f in (t["sender"], t["subject"], t["email"], *t["orders"])]
    cut = st.sampled_from(fields or [""]).flatmap(
        lambda f: st.tuples(st.integers(0, len(f)), st.integers(0, len(f))).map(
            lambda ij, f=f: f[min(ij):max(ij)]))
    word = st.one_of(cut, st.text(ALPHABET, max_size=4)).map(
        lambda w: "".join(c.swapcase() if c.isascii() and i % 2 else c
                          for i, c in enumerate(w)))
    searches = draw(st.lists(st.lists(word, min_size=1, max_size=2).map(" ".join),
                             min_size=1, max_size=4))
    return tickets, searches


@pytest.mark.postgres
@hsettings(max_examples=examples(40, fast=12), deadline=None,
           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case())
def test_both_engines_find_the_same_tickets_as_the_documented_rule(stores, case) -> None:
    tickets, searches = case
    lite, pg = stores
    _fill(lite, tickets)
    _fill(pg, tickets)
    for search in searches:
        want = expected(tickets, search)
        assert {r.run.id for r in lite.inbox(search, limit=100)} == want, search
        assert {r.run.id for r in pg.inbox(search, limit=100)} == want, search
        assert set(lite.desk_page(search, None, False, 100)) == want, search
        assert set(pg.desk_page(search, None, False, 100)) == want, search
        assert sum(n for _s, _e, n in lite.desk_groups(search)) == len(want) or not search.split()
        assert sum(n for _s, _e, n in pg.desk_groups(search)) == len(want) or not search.split()


@pytest.mark.postgres
def test_search_reads_the_trigram_index_on_both_engines(stores) -> None:
    """The plan, not the time: SQLite asks the FTS5 table, PostgreSQL the GIN index (with
    plain scans off, as a large table's statistics would have it; bench/ times them)."""
    lite, pg = stores
    _fill(lite, [{"id": "run_1", "sender": "a@b", "sender_name": "Maya", "subject": "mug",
                  "email": "cracked", "orders": ["A1043"]}])
    _fill(pg, [{"id": "run_1", "sender": "a@b", "sender_name": "Maya", "subject": "mug",
                "email": "cracked", "orders": ["A1043"]}])
    where, args = lite._inbox_filter("crack", ())  # noqa: SLF001
    plan = " ".join(str(tuple(r)) for r in lite.query(
        f"EXPLAIN QUERY PLAN SELECT id FROM runs {where}", args))
    assert "run_search_index VIRTUAL TABLE INDEX" in plan, plan
    where, args = pg._inbox_filter("crack", ())  # noqa: SLF001
    with pg.transaction() as db:
        db.execute("SET LOCAL enable_seqscan = off")
        db.execute("SET LOCAL enable_indexscan = off")
        plan = " ".join(r[0] for r in db.execute(f"EXPLAIN SELECT id FROM runs {where}",
                                                  args).fetchall())
    assert "run_search_trigrams" in plan, plan
