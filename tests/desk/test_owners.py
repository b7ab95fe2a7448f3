"""An owner for every ticket (issue 36, item 5): the rules (desk/owners.py), the store that
applies them under the ticket's lock (desk/records/owners.py), and the inbox's owner filter.

The invariant is a Hypothesis property over generated histories of people claiming, assigning
and releasing tickets: a ticket has at most one owner at any time, the owner the store holds
is the one its audited changes leave, every change is signed by the account that made it,
and nobody but a lead ever takes a ticket from someone else or releases someone else's.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from helpers.examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refund_agent.desk.owners import OwnerChange, at_most_one_owner, owner_problem
from refund_agent.desk.records import DeskStore
from refund_agent.errors import DecisionRefused
from refund_agent.store import Store

ANA, SAM, LEE = "Ana Ruiz", "Sam Cho", "Lee Park"   # two approvers and a lead
LEADS = {LEE}


def store_with_accounts(folder: Path) -> Store:
    store = DeskStore(folder / "refund-agent.sqlite3")
    for name, limit in ((ANA, 3000), (SAM, 2000), (LEE, None)):
        store.add_account(name, "lead" if limit is None else "approver", limit, "scrypt$x",
                          by="test")
    return store


def new_ticket(store: Store) -> str:
    return store.create_run(sender="maya@example.com", sender_name="Maya", subject="Cracked",
                            email="A1043 arrived cracked").id


def change(run_id: str, action: str, by: str, to: str | None = None) -> OwnerChange:
    return OwnerChange(run_id, action, by, by in LEADS, to)  # type: ignore[arg-type]


def test_the_rules():
    # Anyone claims a ticket nobody has; a second approver may not take it from the first.
    assert owner_problem(change("r", "claim", ANA), None) is None
    assert "already Ana Ruiz's" in owner_problem(change("r", "claim", SAM), ANA)
    # Only a lead assigns to someone else; anyone may assign to themselves.
    assert "Only a lead assigns" in owner_problem(change("r", "assign", ANA, SAM), None)
    assert owner_problem(change("r", "assign", ANA, ANA), None) is None
    assert owner_problem(change("r", "assign", LEE, SAM), ANA) is None
    # Releasing someone else's ticket is a lead's act; your own, anyone's.
    assert "lead's act" in owner_problem(change("r", "release", SAM), ANA)
    assert owner_problem(change("r", "release", ANA), ANA) is None
    assert owner_problem(change("r", "release", LEE), ANA) is None
    # What is already so is no problem (a repeated click), and changes nothing.
    assert owner_problem(change("r", "claim", ANA), ANA) is None
    assert owner_problem(change("r", "release", SAM), None) is None


def test_changes_are_audited_signed_and_on_the_ticket(tmp_path):
    store = store_with_accounts(tmp_path)
    run_id = new_ticket(store)
    assert store.change_owner(change(run_id, "claim", ANA))
    assert not store.change_owner(change(run_id, "claim", ANA))      # already hers
    with pytest.raises(DecisionRefused, match="already Ana Ruiz's"):
        store.change_owner(change(run_id, "claim", SAM))
    with pytest.raises(DecisionRefused, match="lead's act"):
        store.change_owner(change(run_id, "release", SAM))
    assert store.change_owner(change(run_id, "assign", LEE, SAM))
    assert store.change_owner(change(run_id, "release", SAM))
    audit = [(e.event, e.actor, e.note) for e in store.audit() if e.run_id == run_id]
    assert audit == [("claimed", ANA, "claimed the ticket"),
                     ("assigned", LEE, "assigned the ticket to Sam Cho (was Ana Ruiz)"),
                     ("released", SAM, "released the ticket; nobody owns it now")]
    steps = [s.data for s in store.steps(run_id) if s.kind == "owner"]
    assert [(d["event"], d["owner"]) for d in steps] == [
        ("claimed", ANA), ("assigned", SAM), ("released", None)]
    assert store.owner(run_id) is None


def test_the_inbox_filters_by_mine_and_unassigned(tmp_path):
    store = store_with_accounts(tmp_path)
    ana, sam, nobody = new_ticket(store), new_ticket(store), new_ticket(store)
    store.change_owner(change(ana, "claim", ANA))
    store.change_owner(change(sam, "claim", SAM))
    page = lambda **whose: set(store.desk_page("", None, False, 50, **whose))  # noqa: E731
    assert page(owner=ANA) == {ana} and page(owner=SAM) == {sam}
    assert page(unassigned=True) == {nobody} and page() == {ana, sam, nobody}
    counted = lambda **whose: sum(n for _s, _e, n in store.desk_groups("", **whose))  # noqa: E731
    assert (counted(owner=ANA), counted(unassigned=True), counted()) == (1, 1, 3)


def test_two_people_claiming_at_once_leave_one_owner(tmp_path):
    store = store_with_accounts(tmp_path)
    run_id = new_ticket(store)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def claim(who: str) -> None:
        barrier.wait()
        try:
            store.change_owner(change(run_id, "claim", who))
            outcomes.append(who)
        except DecisionRefused:
            outcomes.append("refused")
    threads = [threading.Thread(target=claim, args=(who,)) for who in (ANA, SAM)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes)[1] == "refused" and store.owner(run_id) == sorted(outcomes)[0]
    assert [e.actor for e in store.audit() if e.event == "claimed"] == [store.owner(run_id)]


_FOLDER: dict[str, Path] = {}


def _shared_store() -> Store:
    """One store for every generated history (each history gets its own tickets)."""
    if "store" not in _FOLDER:
        _FOLDER["store"] = Path(tempfile.mkdtemp(prefix="owners-"))
        store_with_accounts(_FOLDER["store"]).close()
    return DeskStore(_FOLDER["store"] / "refund-agent.sqlite3")


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    if "store" in _FOLDER:
        shutil.rmtree(_FOLDER.pop("store"), ignore_errors=True)


ACTS = st.tuples(st.integers(0, 2), st.sampled_from(["claim", "assign", "release"]),
                 st.sampled_from([ANA, SAM, LEE]), st.sampled_from([ANA, SAM, LEE]))


@settings(max_examples=examples(60, fast=20), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(history=st.lists(ACTS, max_size=14))
def test_a_ticket_has_at_most_one_owner_and_the_audit_agrees(history):
    store = _shared_store()
    try:
        tickets = [new_ticket(store) for _ in range(3)]
        for which, action, by, to in history:
            run_id = tickets[which]
            before = store.owner(run_id)
            try:
                changed = store.change_owner(change(run_id, action, by, to))
            except DecisionRefused:
                changed = False
                assert store.owner(run_id) == before          # a refusal changes nothing
            after = store.owner(run_id)
            if before not in (None, after) and by not in LEADS:
                # Only a lead takes a ticket from someone else or releases someone else's.
                assert before == by
            assert changed == (after != before)
        owners = store._read("SELECT run_id, COUNT(*) FROM owners GROUP BY run_id")
        assert all(n == 1 for _run, n in owners)
        for run_id in tickets:
            steps = [s.data for s in store.steps(run_id) if s.kind == "owner"]
            assert at_most_one_owner([(d["event"], d["owner"]) for d in steps]) == \
                store.owner(run_id)
            audit = [(e.event, e.actor) for e in store.audit() if e.run_id == run_id]
            assert audit == [(d["event"], d["by"]) for d in steps]   # each one signed
    finally:
        store.close()


def test_out_of_office_hands_tickets_reminders_and_offers_to_the_delegate(tmp_path):
    """Issue 36, item 8: an account away until a date names a delegate; its tickets list as
    the delegate's, a ticket assigned to it goes to the delegate, a timeout reminder reaches
    the delegate, offers skip the account away, and the audit names both."""
    import time

    from refund_agent.desk.accounts import Accounts
    from refund_agent.desk.owners import stand_in
    from refund_agent.desk.timeouts import TimeoutPolicy

    assert stand_in("a", {"a": "b", "b": "c"}) == "c"            # a delegate away hands on
    assert stand_in("a", {"a": "b", "b": "a"}) == "b"            # a circle ends
    assert stand_in("a", {}) == "a" and stand_in(None, {"a": "b"}) is None

    store = store_with_accounts(tmp_path)
    accounts = Accounts(store)
    ana, other = new_ticket(store), new_ticket(store)
    store.change_owner(change(ana, "claim", ANA))
    with pytest.raises(DecisionRefused, match="someone else"):
        accounts.go_away(ANA, "ana ruiz", time.time() + 86400)
    with pytest.raises(DecisionRefused, match="has passed"):
        accounts.go_away(ANA, SAM, time.time() - 1)
    assert accounts.go_away(ANA, "sam cho", time.time() + 86400) == SAM
    assert store.away() == {ANA: SAM}
    assert set(store.desk_page("", None, False, 50, owner=SAM)) == {ana}   # Sam's "mine"
    accounts.change_owner(other, "assign", LEE, ANA)
    assert store.owner(other) == SAM
    (assigned,) = [e for e in store.audit() if e.event == "assigned"]
    assert assigned.note == "assigned the ticket to Sam Cho for Ana Ruiz, who is away"
    (away,) = [e for e in store.audit() if e.event == "away"]
    assert away.actor == ANA and away.note.endswith("tickets and approvals go to Sam Cho")
    assert sorted(d.name for d in accounts.offers_people()) == [LEE, SAM]   # not Ana

    # A reminder about Ana's ticket reaches Sam, and says for whom.
    from test_timeouts import waiting_refund
    run_id, approval_id = waiting_refund(store)
    store.change_owner(change(run_id, "assign", LEE, ANA))
    store.execute("UPDATE approvals SET requested_at = requested_at - 18000 WHERE id = ?",
                  (approval_id,))
    store.apply_timeouts(TimeoutPolicy(4 * 3600, None))
    (reminded,) = [e for e in store.audit() if e.event == "reminded"]
    assert reminded.note == ("waiting 5 h for a decision: reminded Sam Cho (for Ana Ruiz, "
                             "away), who owns the ticket")
    assert store.set_back(ANA) and not store.set_back(ANA)
    assert store.away() == {} and [e.event for e in store.audit()][-1] == "back"


def test_removing_an_account_releases_its_tickets_and_ends_its_delegations(tmp_path, backend):
    """Nothing names an account once it is removed: its tickets are released (audited, by
    whoever removed it, and on each ticket's timeline), the delegation it made ends, and so
    does one that named it (that account's work is its own again); the others stay."""
    import time

    from refund_agent.desk.accounts import Accounts
    backend.prepare(tmp_path)
    store = DeskStore(backend.target(tmp_path))
    for name, limit in ((ANA, 3000), (SAM, 2000), (LEE, None), ("Kim Vo", 4000)):
        store.add_account(name, "lead" if limit is None else "approver", limit, "scrypt$x",
                          by="test")
    first, second, kept = new_ticket(store), new_ticket(store), new_ticket(store)
    store.change_owner(change(first, "claim", ANA))
    store.change_owner(change(second, "claim", ANA))
    store.change_owner(change(kept, "claim", SAM))
    until = time.time() + 86400
    store.set_away(ANA, SAM, until)         # Ana away, Sam acting for her
    store.set_away(LEE, ANA, until)         # Lee away, Ana acting for him
    store.set_away("Kim Vo", SAM, until)    # unrelated: stays

    Accounts(store).remove("ana ruiz", by="ops (login)")
    assert store.owners() == {kept: SAM}
    assert store.away() == {"Kim Vo": SAM}
    released = [(e.run_id, e.actor, e.note) for e in store.audit() if e.event == "released"]
    assert sorted(released) == sorted(
        (run_id, "ops (login)", "released the ticket (Ana Ruiz's): the account Ana Ruiz was "
                                "removed; nobody owns it now") for run_id in (first, second))
    for run_id in (first, second):
        [step] = [s.data for s in store.steps(run_id) if s.data.get("event") == "released"]
        assert (step["owner"], step["was"], step["by"]) == (None, ANA, "ops (login)")
    ended = sorted(e.note for e in store.audit() if e.event == "back")
    assert ended == ["the account Ana Ruiz was removed: it no longer acts for Lee Park, whose "
                     "tickets and approvals are theirs again",
                     "the account Ana Ruiz was removed; Sam Cho no longer acts for them"]
    assert store.verify_audit() is None
    store.close()
