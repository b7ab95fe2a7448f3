"""The inbox's search, filters, counts and pages, and the page's change counter.

The search is checked against a plain-Python reading of the same rule over generated tickets
(names, subjects and emails full of LIKE's own wildcards), so a query can neither miss a
ticket nor match one it should not.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from helpers.examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refund_agent.desk.records import DeskStore
from refund_agent.models import RunStatus

# Letters, digits and the characters LIKE treats specially, so escaping is exercised.
TEXT = st.text(alphabet="abcAB12 %_\\-.@", min_size=1, max_size=12)
TICKET = st.fixed_dictionaries({
    "name": TEXT, "sender": TEXT.map(lambda t: t.replace(" ", "") + "@example.com"),
    "subject": TEXT, "email": TEXT, "status": st.sampled_from(list(RunStatus))})


def _matches(ticket: dict, run_id: str, search: str) -> bool:
    """The rule the inbox promises: every word appears (any case) in one of the fields."""
    fields = [ticket["name"], ticket["sender"], ticket["subject"], ticket["email"], run_id]
    return all(any(word.lower() in f.lower() for f in fields) for word in search.split())


@settings(max_examples=examples(60, fast=20), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(tickets=st.lists(TICKET, min_size=0, max_size=25), search=st.one_of(st.just(""), TEXT),
       statuses=st.lists(st.sampled_from(list(RunStatus)), unique=True, max_size=2),
       page=st.integers(1, 7))
def test_search_filters_and_pages_agree_with_the_rule(tickets, search, statuses, page):
    folder = Path(tempfile.mkdtemp(prefix="inbox-"))
    try:
        store = DeskStore(folder / "store.sqlite3")
        made = []
        for n, t in enumerate(tickets):
            run = store.create_run(sender=t["sender"], sender_name=t["name"],
                                   subject=t["subject"], email=t["email"])
            # Distinct creation times, so "newest first" is one order.
            store.execute("UPDATE runs SET status = ?, created_at = ? WHERE id = ?",
                          (t["status"], 1_000_000 + n, run.id))
            made.append((run.id, t))
        expected = [run_id for run_id, t in reversed(made) if _matches(t, run_id, search)
                    and (not statuses or t["status"] in statuses)]
        found = [row.run.id for row in store.inbox(search, statuses, limit=1000)]
        assert found == expected
        # Pages of any size put together are the whole list, in order, each ticket once.
        paged, offset = [], 0
        while True:
            rows = store.inbox(search, statuses, limit=page, offset=offset)
            if not rows:
                break
            paged += [row.run.id for row in rows]
            offset += page
        assert paged == expected
        # The counts are what each filter would list.
        counts = store.inbox_counts(search)
        for status in RunStatus:
            assert counts[status] == len(store.inbox(search, [status], limit=1000))
        store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_rows_carry_the_latest_proposal_order_and_amount(agent):
    run = agent.advance(agent.start_sample("damaged").id)
    (row,) = agent.store.inbox()
    assert (row.run.id, row.order_id, row.amount_cents) == (run.id, "A1043", 4800)
    assert [r.run.id for r in agent.store.inbox("A1043")] == [run.id]     # order, in text
    assert [r.run.id for r in agent.store.inbox("maya chen")] == [run.id]  # name, any case
    assert agent.store.inbox("maya zzz") == []                             # every word counts
    declined = agent.advance(agent.start_sample("past-window").id)
    row = next(r for r in agent.store.inbox() if r.run.id == declined.id)
    # Nothing proposed: the order comes from the lookup, and there is no amount to show.
    assert (row.order_id, row.amount_cents) == ("A1021", None)


def test_change_counter_moves_with_every_commit_from_anywhere(tmp_path):
    store = DeskStore(tmp_path / "store.sqlite3")
    before = store.change_counter()
    assert store.change_counter() == before          # reading changes nothing
    store.create_run(sender="a@example.com", sender_name="A", subject="s", email="e")
    after_own = store.change_counter()
    assert after_own != before                        # this process, another thread's connection

    def elsewhere() -> None:
        DeskStore(tmp_path / "store.sqlite3").create_run(sender="b@example.com", sender_name="B",
                                                     subject="s", email="e")

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    after_thread = store.change_counter()
    assert after_thread != after_own
    code = ("import sys; from refund_agent.store import Store; "
            "Store(sys.argv[1]).create_run(sender='c@example.com', sender_name='C', "
            "subject='s', email='e')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "store.sqlite3")], check=True)
    assert store.change_counter() != after_thread     # another process
