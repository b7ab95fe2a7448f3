"""Work finds someone who can decide it (issue 36, item 6): a refund above an approver's limit
is offered to the approvers whose limit covers it, counting what each approved on the order
before as the limit does, and to the leads; each reader's queue lists what they can decide
first. The invariant is a Hypothesis property: every offer goes only to people whose limit
covers it, and to all of them, agreeing with the decision's own check (rules.limit_problem)."""

from __future__ import annotations

from helpers.examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from refund_agent.desk.offers import Decider, covers, offered_to, offers
from refund_agent.desk.rules import limit_problem

ANA, SAM, KIM, LEE = (Decider("Ana Ruiz", 3000), Decider("Sam Cho", 2000),
                      Decider("Kim Vo", 6000), Decider("Lee Park", None))
PEOPLE = [ANA, SAM, KIM, LEE]


def test_a_refund_above_one_approver_is_offered_to_those_whose_limit_covers_it():
    # $48.00: above Ana's $30 and Sam's $20; Kim's $60 covers it, and the lead.
    assert offered_to(PEOPLE, 4800, {}) == [KIM, LEE]
    # Kim approved $20.00 on the order before: $48.00 more is above her $60 for the order.
    assert offered_to(PEOPLE, 4800, {"kim vo": 2000}) == [LEE]
    # Smallest covering limit first, leads last; the one who typed the ticket in never.
    assert offered_to(PEOPLE, 1500, {}) == [SAM, ANA, KIM, LEE]
    assert offered_to(PEOPLE, 1500, {}, raised_by="Sam Cho") == [ANA, KIM, LEE]


def test_the_queue_lists_what_the_reader_can_decide_first_and_who_can_decide_the_rest():
    waiting = [("maya", "A1043", 4800, None), ("priya", "A1066", 3150, None),
               ("leo", "A1058", 1200, None)]
    queue = offers(ANA, waiting, PEOPLE, lambda _order: {})
    assert [(o.approval_id, o.mine) for o in queue] == [
        ("leo", True), ("maya", False), ("priya", False)]
    assert queue[1].others_text(ANA.name) == ("Can decide: Kim Vo (up to $60.00), "
                                              "Lee Park (lead)")
    # A lead decides everything; with no reader (the demo) everything is everyone's.
    assert all(o.mine for o in offers(LEE, waiting, PEOPLE, lambda _order: {}))
    assert all(o.mine for o in offers(None, waiting, [], lambda _order: {}))


NAMES = ["Ana Ruiz", "Sam Cho", "Kim Vo", "Lee Park", "Bo Li"]
PERSON = st.builds(Decider, st.sampled_from(NAMES),
                   st.one_of(st.none(), st.integers(0, 20_000)))


@settings(max_examples=examples(300, fast=100), deadline=None)
@given(people=st.lists(PERSON, max_size=6, unique_by=lambda p: p.name),
       amount=st.integers(1, 20_000),
       before=st.dictionaries(st.sampled_from(NAMES), st.integers(0, 20_000), max_size=5),
       raised_by=st.one_of(st.none(), st.sampled_from(NAMES)))
def test_every_offer_goes_only_to_people_whose_limit_covers_the_order_total(
        people, amount, before, raised_by):
    offered = offered_to(people, amount, before, raised_by)
    for person in people:
        mine_before = before.get(person.name, 0)
        # The decision's own check, as the store runs it when that person approves.
        allowed = person.lead or limit_problem(person.name, person.limit_cents, "A1",
                                               amount, mine_before) is None
        assert covers(person, amount, mine_before) == allowed
        assert (person in offered) == (allowed and person.name != raised_by)
    # Nearest fit first: approvers by limit, then the leads.
    assert offered == sorted(offered, key=lambda p: (p.lead, p.limit_cents or 0,
                                                     p.name.casefold()))
