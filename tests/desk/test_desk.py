"""The desk a lead runs: statuses that say what happened, escalations, hand-offs, four eyes.

Pure rules (desk_status.py, approving.py) are tested as functions; the store's decide path is
tested through the agent, and a Hypothesis property drives sequences of decisions by several
accounts against the real store (REFUND_AGENT_DESK_FULL=1 for a longer run).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from helpers.cli import DATA
from helpers.desk import desk_drift
from helpers.examples import examples
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from offline_model.brain import Reply
from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.desk.records import DeskStore
from refund_agent.desk.rules import (
    PAY,
    SIGN_OFF,
    SignOff,
    four_eyes,
    handoff_needed,
    needs_two,
    own_ticket_problem,
)
from refund_agent.desk.status import ApprovalFacts, DeskStatus, desk_status, needs_person
from refund_agent.errors import AlreadyDecided, DecisionRefused, RefundAgentError
from refund_agent.models import AGENT_KINDS, PROVIDER_FAILED, RunStatus
from refund_agent.providers.client import open_model
from refund_agent.store import Store
from refund_agent.web import views

TWO_LINE_EMAIL = ("Order A1043: the coffee maker arrived shattered, and honestly I also don't "
                  "want the mugs anymore.")   # proposes $48.00 + $18.50 = $66.50
MAYA = "maya.chen@example.com"
BOTH_BROKEN = ("Order A1043: the coffee maker arrived shattered and the mugs arrived "
               "shattered too.")                 # proposes $48.00 + $26.00 + $6.95 shipping
MUGS_TOO = "Order A1043: the stoneware mugs arrived shattered too."
COFFEE_MAKER = "Order A1043: the glass pour-over coffee maker arrived cracked."
MUGS = "Order A1043: the stoneware mugs arrived shattered."
ANGRY = ("If you don't refund the whole order I'm filing a chargeback with my bank and leaving "
         "a one-star review everywhere I can. Get me a manager.")


# -- statuses ----------------------------------------------------------------------------------


@pytest.mark.parametrize("run,latest,expected", [
    ("working", None, DeskStatus.WORKING),
    ("waiting", ApprovalFacts("pending", 4800, 4800), DeskStatus.WAITING),
    ("done", ApprovalFacts("approved", 6650, 6650), DeskStatus.PAID),
    ("done", ApprovalFacts("approved", 4800, 6650, 1), DeskStatus.PARTLY_PAID),
    ("done", ApprovalFacts("rejected", 1850, 1850), DeskStatus.REJECTED),
    ("asked", ApprovalFacts("asked", 1850, 1850), DeskStatus.ASKED),
    ("done", ApprovalFacts("expired", 4800, 4800), DeskStatus.EXPIRED),
    ("done", None, DeskStatus.DECLINED),
    ("failed", ApprovalFacts("approved", 4800, 4800), DeskStatus.FAILED),
    ("stopped", None, DeskStatus.STOPPED),
])
def test_desk_status_says_what_happened(run, latest, expected):
    assert desk_status(RunStatus(run), latest) == expected


def test_needs_a_person_and_every_status_has_its_own_badge_and_filter():
    assert needs_person(DeskStatus.EXPIRED, 0) and needs_person(DeskStatus.FAILED, 0)
    assert needs_person(DeskStatus.PAID, 1) and not needs_person(DeskStatus.PAID, 0)
    badges = {views.desk_view(s).badge for s in DeskStatus}
    assert len(badges) == len(DeskStatus)     # no two statuses read alike
    filtered = {s for f in views.DESK_FILTERS for s in f.statuses}
    assert filtered == set(DeskStatus)
    groups = [(DeskStatus.PAID, 0, 1), (DeskStatus.EXPIRED, 0, 1), (DeskStatus.REJECTED, 1, 1)]
    counts = views.desk_counts(groups)
    assert counts["needs"] == 2 and counts["paid"] == 1 and counts["escalated"] == 1
    assert counts["all"] == 3 and counts["rejected"] == 1


def test_reminder_badge_after_the_set_time():
    assert views.reminder(0, 24, 23 * 3600) is None
    assert views.reminder(0, 24, 26 * 3600) == "Waiting 26 h for approval"
    assert views.reminder(0, 24, 72 * 3600) == "Waiting 3 days for approval"


# -- the rules -----------------------------------------------------------------------------------


def test_four_eyes_rules():
    assert four_eyes("Ana", 4000, ["A"], None, None) == (PAY, None)
    assert four_eyes("Ana", 4000, ["A"], 5000, None) == (PAY, None)
    assert four_eyes("Ana", 6000, ["A"], 5000, None) == (SIGN_OFF, None)
    first = SignOff("Ana", 0.0, 6000, ("A",))
    step, why = four_eyes("ANA", 6000, ["A"], 5000, first)     # one person, any case
    assert step == "refuse" and "second, different person" in why
    step, why = four_eyes("Lee", 4000, ["B"], 5000, first)
    assert step == "refuse" and "same lines" in why
    assert four_eyes("Lee", 6000, ["A"], 5000, first) == (PAY, None)
    assert needs_two(5001, 5000) and not needs_two(5000, 5000) and not needs_two(10**9, None)
    assert handoff_needed(4800, 4000) and not handoff_needed(4800, None)
    assert own_ticket_problem("dana kim", "Dana Kim") and own_ticket_problem("Lee", "Dana") is None


# -- through the agent and the store -------------------------------------------------------------


def _data(tmp: Path, two_person_above: float | None) -> Path:
    data = Path(shutil.copytree(DATA, tmp / "data"))
    shop = json.loads((data / "shop.json").read_text())
    shop["desk"] = {"two_person_above": two_person_above, "remind_after_hours": 24}
    (data / "shop.json").write_text(json.dumps(shop))
    return data


def _agent(tmp: Path, two_person_above: float | None = None, model=None,
           database_url: str = "") -> Agent:
    settings = Settings(api_key="", data_dir=_data(tmp, two_person_above),
                        output_dir=tmp / "output", max_retries=2, timeout=30.0,
                        database_url=database_url)
    return Agent(settings, model=model or open_model(settings))


def test_an_angry_reply_is_escalated_once_and_only_then_a_lead_is_promised(agent: Agent):
    run = agent.advance(agent.start_sample("angry").id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    run = agent.advance(run.id)
    assert agent.store.escalations() == []
    assert "team lead" not in agent.outbox.messages()[-1]["request"]["body"]
    agent.add_reply(run.id, ANGRY)
    run = agent.advance(run.id)
    (escalation,) = agent.store.escalations(open_only=True)
    assert escalation.kind == "threat" and escalation.run_id == run.id
    assert "chargeback" in escalation.reason and escalation.raised_by == "agent"
    assert "team lead, who will look" in agent.outbox.messages()[-1]["request"]["body"]
    taken = agent.take(escalation.id, "Lee Park")
    assert taken.taken_by == "Lee Park" and taken.taken_at is not None
    with pytest.raises(AlreadyDecided):
        agent.take(escalation.id, "Sam Lee")
    events = [e.event for e in agent.store.audit()]
    assert events.count("escalated") == 1 and events.count("taken") == 1
    assert agent.store.verify_audit() is None
    (row,) = agent.store.inbox_rows([run.id])
    assert row.desk == DeskStatus.PAID and row.escalations == 0


def test_thirty_escalate_calls_open_one_escalation_and_the_model_hears_it_is_with_a_lead(
        scripted):
    """An email that talks the model into thirty escalate calls (in one response and over
    three). Before: thirty escalations, thirty audit lines, for one ticket."""
    call = ("escalate", {"kind": "manager", "reason": "The customer demands a manager."})
    agent, _brain, _server = scripted(*(Reply("Escalate.", calls=[call] * 10)
                                        for _ in range(3)))
    run = agent.advance(agent.start("maya.chen@example.com", ANGRY).id)
    assert run.status == RunStatus.DONE
    (escalation,) = agent.store.escalations()
    assert escalation.open and escalation.kind == "manager"
    outputs = [s.data["output"] for s in agent.store.steps(run.id)
               if s.kind == "result" and s.data["name"] == "escalate"]   # in the order run
    assert [o["status"] for o in outputs] == ["escalated"] + ["already_escalated"] * 29
    assert {o.get("escalation") for o in outputs[1:]} == {escalation.id}
    assert "already with a team lead" in outputs[-1]["next"]
    assert [e.event for e in agent.store.audit()].count("escalated") == 1
    assert [s.kind for s in agent.store.steps(run.id)].count("escalation") == 1
    (row,) = agent.store.inbox_rows([run.id])
    assert row.escalations == 1


def test_a_calm_reply_raises_nothing_and_promises_no_lead(agent: Agent):
    run = agent.advance(agent.start_sample("angry").id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, False, "Dana Kim", note="Final sale items cannot be refunded.",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    run = agent.advance(run.id)
    agent.add_reply(run.id, "That's not fair, the skillet was never used.")
    agent.advance(run.id)
    assert agent.store.escalations() == []
    assert all("team lead" not in m["request"]["body"] for m in agent.outbox.messages())
    (row,) = agent.store.inbox_rows([run.id])
    assert row.desk == DeskStatus.REJECTED


def test_hand_off_then_a_lead_approves_and_the_hand_off_closes(agent: Agent):
    run = agent.advance(agent.start(  "maya.chen@example.com", TWO_LINE_EMAIL).id)
    (approval,) = agent.store.approvals("pending")
    with pytest.raises(DecisionRefused, match="approval limit"):
        agent.decide(approval.id, True, "Ana Ruiz", limit_cents=4000,
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.hand_off(approval.id, "Ana Ruiz", "Over my limit")
    with pytest.raises(DecisionRefused, match="already waiting for a lead"):
        agent.hand_off(approval.id, "Ana Ruiz")
    assert agent.store.handed_off() == {approval.id}
    index = {run_id: (status, esc) for run_id, status, esc, _ in agent.store.desk_index()}
    assert index[run.id] == (DeskStatus.WAITING, 1)          # in the needs-a-person view
    agent.decide(approval.id, True, "Lee Park",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.store.handed_off() == set()
    (e,) = agent.store.escalations()
    assert e.kind == "over_limit" and e.taken_by == "Lee Park"
    assert [x.event for x in agent.store.audit()][-3:] == ["refused", "handed_off", "approved"]


def test_two_people_above_the_shop_amount_one_refund(tmp_path: Path):
    agent = _agent(tmp_path, two_person_above=50)
    run = agent.advance(agent.start("maya.chen@example.com", TWO_LINE_EMAIL).id)
    (approval,) = agent.store.approvals("pending")
    first = agent.decide(approval.id, True, "Ana Ruiz", note="Photos look right.",
                         fingerprint=agent.store.approval(approval.id).fingerprint)
    assert first.status == "pending" and agent.store.signoff(approval.id).by == "Ana Ruiz"
    with pytest.raises(DecisionRefused, match="second, different person"):
        agent.decide(approval.id, True, "ana ruiz",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    with pytest.raises(DecisionRefused, match="same lines"):
        agent.decide(approval.id, True, "Lee Park", keep=["POUR-GLS-01"],
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    done = agent.decide(approval.id, True, "Lee Park",
                        fingerprint=agent.store.approval(approval.id).fingerprint)
    assert done.status == "approved" and done.decided_by == "Lee Park"
    run = agent.advance(run.id)
    assert run.status == RunStatus.DONE and len(agent.payments.refunds()) == 1
    events = [e.event for e in agent.store.audit()]
    assert events.count("signed_off") == 1 and events.count("issued") == 1


def test_two_people_count_what_the_order_was_paid_not_one_proposal(tmp_path: Path):
    """Issue 33.1: with two people above $50, one lead approves only the $48.00 line, the
    customer writes again, and the $32.95 for the rest would bring the order to $80.95: that
    approval is a first sign-off, and only a second, different person pays it."""
    agent = _agent(tmp_path, two_person_above=50)
    agent.advance(agent.start(MAYA, BOTH_BROKEN).id)
    (whole,) = agent.store.approvals("pending")
    assert whole.amount_cents == 8095
    part = agent.decide(whole.id, True, "Lee Park", keep=["POUR-GLS-01"],
                        fingerprint=agent.store.approval(whole.id).fingerprint)
    assert part.status == "approved" and part.amount_cents == 4800   # within $50: one person
    agent.advance(part.run_id)

    run = agent.advance(agent.start(MAYA, MUGS_TOO).id)
    (rest,) = agent.store.approvals("pending")
    assert rest.amount_cents == 3295 and agent.store.approved_on("A1043") == 4800
    first = agent.decide(rest.id, True, "Lee Park",
                         fingerprint=agent.store.approval(rest.id).fingerprint)
    assert first.status == "pending", "one person paid $80.95 on one order"
    assert agent.store.signoff(rest.id).by == "Lee Park"
    with pytest.raises(DecisionRefused, match="second, different person"):
        agent.decide(rest.id, True, "lee park",
                     fingerprint=agent.store.approval(rest.id).fingerprint)
    assert agent.decide(rest.id, True, "Kai Moss",
                        fingerprint=agent.store.approval(rest.id).fingerprint).status == "approved"
    assert agent.advance(run.id).status == RunStatus.DONE
    assert [r["request"]["amount_cents"] for r in agent.payments.refunds()] == [4800, 3295]
    assert [(e.event, e.actor) for e in agent.store.audit() if e.approval_id == rest.id] == [
        ("requested", "agent"), ("signed_off", "Lee Park"), ("refused", "lee park"),
        ("approved", "Kai Moss"), ("issued", "payments")]


def test_two_approvals_racing_on_one_order_cannot_both_stay_under_the_amount(tmp_path: Path,
                                                                            backend):
    """Two tickets for one order, each under $50, together above it, approved by one lead at
    the same instant: the order's total is read inside each decision's transaction, under the
    order's lock, so the second one to commit sees the first and only signs off."""
    url = backend.url(tmp_path / "output") if backend.postgres else ""
    if backend.postgres:
        backend.prepare(tmp_path / "output")
    agent = _agent(tmp_path, two_person_above=50, database_url=url)
    for body in (COFFEE_MAKER, MUGS):
        agent.advance(agent.start(MAYA, body).id)
    pending = agent.store.approvals("pending")
    assert len(pending) == 2 and sum(a.amount_cents for a in pending) > 5000
    assert all(a.amount_cents <= 5000 for a in pending)
    barrier = threading.Barrier(2)

    def approve(approval_id: str) -> None:
        barrier.wait()
        agent.decide(approval_id, True, "Lee Park",
                     fingerprint=agent.store.approval(approval_id).fingerprint)

    threads = [threading.Thread(target=approve, args=(a.id,)) for a in pending]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = sorted(agent.store.approval(a.id).status for a in pending)
    assert after == ["approved", "pending"], after
    (signed,) = [a for a in pending if agent.store.approval(a.id).status == "pending"]
    assert agent.store.signoff(signed.id).by == "Lee Park"


def test_nobody_approves_a_ticket_they_typed_in(tmp_path: Path):
    agent = _agent(tmp_path)
    run = agent.start("maya.chen@example.com", TWO_LINE_EMAIL, raised_by="Dana Kim")
    agent.advance(run.id)
    (approval,) = agent.store.approvals("pending")
    with pytest.raises(DecisionRefused, match="opened this ticket"):
        agent.decide(approval.id, True, "dana kim",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    shown = agent.store.approval(approval.id).fingerprint
    assert agent.decide(approval.id, True, "Lee Park", fingerprint=shown).status == "approved"


# -- no sequence of decisions pays twice or skips the second person -----------------------------

ACCOUNTS = {"Ana": None, "Lee": None, "Cy": 4000, "Opener": None}   # name -> limit in cents
DECISION = st.tuples(st.sampled_from(sorted(ACCOUNTS)),
                     st.sampled_from(["approve", "approve", "reject", "hand_off"]),
                     st.sampled_from([None, ["POUR-GLS-01"], ["MUG-STN-2"]]))
# 150 with REFUND_AGENT_DESK_FULL=1; 40 in the suite (CI); 15 in ./dev test --fast.
EXAMPLES = 150 if os.environ.get("REFUND_AGENT_DESK_FULL") == "1" else examples(40, fast=15)


@pytest.fixture(scope="module")
def shared_model(tmp_path_factory):
    base = tmp_path_factory.mktemp("desk-model")
    settings = Settings(api_key="", data_dir=DATA, output_dir=base / "output", max_retries=2,
                        timeout=30.0)
    model = open_model(settings)
    yield model


@hsettings(max_examples=EXAMPLES, deadline=None,
           suppress_health_check=[HealthCheck.function_scoped_fixture,
                                  HealthCheck.too_slow])
@given(decisions=st.lists(DECISION, min_size=1, max_size=6),
       above=st.sampled_from([None, 30.0, 50.0]))
def test_no_sequence_of_decisions_pays_twice_or_bypasses_the_second_person(
        shared_model, decisions, above):
    with tempfile.TemporaryDirectory() as tmp:
        agent = _agent(Path(tmp), above, model=shared_model)
        run = agent.start("maya.chen@example.com", TWO_LINE_EMAIL, raised_by="Opener")
        agent.advance(run.id)
        (approval,) = agent.store.approvals("pending")
        for name, action, keep in decisions:
            try:
                if action == "hand_off":
                    agent.hand_off(approval.id, name)
                else:
                    agent.decide(approval.id, action == "approve", name,
                                 None if action == "approve" else "no", keep=keep,
                                 limit_cents=ACCOUNTS[name],
                                 fingerprint=agent.store.approval(approval.id).fingerprint)
            except RefundAgentError:
                pass
        final = agent.store.approval(approval.id)
        first = agent.store.signoff(approval.id)
        if final.status == "approved":
            assert final.decided_by != "Opener"
            if above is not None and final.amount_cents > above * 100:
                assert first is not None and first.by != final.decided_by
                assert first.by != "Opener" and first.amount_cents == final.amount_cents
            limit = ACCOUNTS[final.decided_by]
            assert limit is None or final.amount_cents <= limit
            agent.advance(run.id)
            agent.advance(run.id)
        assert desk_drift(agent.store) == []
        assert len(agent.payments.refunds()) == (1 if final.status == "approved" else 0)
        assert [e.event for e in agent.store.audit()].count("approved") <= 1
        assert agent.store.verify_audit() is None
        agent.store.close()


# -- the desk status each row keeps, and the inbox's filters in SQL ----------------------------

# One generated ticket: the run's status, its approvals oldest first (status, amount,
# proposed, declined lines), its escalations (taken or not).
APPROVAL = st.tuples(st.sampled_from(["pending", "approved", "rejected", "asked", "expired"]),
                     st.sampled_from([4800, 9600]), st.sampled_from([4800, 9600]),
                     st.integers(0, 2))
TICKET = st.tuples(st.sampled_from(list(RunStatus)), st.lists(APPROVAL, max_size=3),
                   st.lists(st.booleans(), max_size=2))
CHANGE = st.tuples(st.integers(0, 7),
                   st.sampled_from(["run", "decide", "take", "escalate", "remove"]),
                   st.sampled_from(list(RunStatus)))


def _insert(store: Store, n: int, ticket) -> None:
    """Ticket ``n`` written row by row, past the agent, as any writer of the tables would."""
    run_status, approvals, escalations = ticket
    run = f"run_{n}"
    store.execute("INSERT INTO runs(id, created_at, kind, sender, sender_name, subject, email,"
                  " status, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                  (run, 1000.0 + n, "custom", f"c{n}@example.com", "", "s", "e", run_status,
                   1000.0 + n))
    for i, (status, amount, proposed, declined) in enumerate(approvals):
        approval = f"{run}-a{i}"
        store.execute("INSERT INTO approvals(id, run_id, response_id, call_id, order_id,"
                      " amount_cents, proposed_cents, summary, customer, status, requested_at,"
                      " requested_pid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                      (approval, run, "resp", f"call{i}", "A1043", amount, proposed, "s",
                       "c", status, 2000.0 + i, 1))
        for line in range(declined):
            store.execute("INSERT INTO approval_lines(approval_id, order_id, seq, line, name,"
                          " reason, amount_cents, allowed_cents, fee_cents, held, decision)"
                          " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                          (approval, "A1043", line, f"SKU-{line}", "x", "damaged", 100, 100, 0,
                           0, "declined"))
    for i, taken in enumerate(escalations):   # one open per kind (schema 13): two kinds
        store.execute("INSERT INTO escalations(key, run_id, kind, reason, raised_by, raised_at,"
                      " taken_by) VALUES (?,?,?,?,?,?,?)",
                      (f"{run}-e{i}", run, ("manager", "policy_exception")[i], "r", "agent",
                       3000.0 + i, "Lee" if taken else None))


def _change(store: Store, i: int, change, tickets: int) -> None:
    n, what, status = change
    run = f"run_{n % tickets}"
    if what == "run":
        store.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run))
    elif what == "decide":
        store.execute("UPDATE approvals SET status = 'rejected' WHERE run_id = ?"
                      " AND status = 'pending'", (run,))
    elif what == "take":
        store.execute("UPDATE escalations SET taken_by = 'Ana' WHERE run_id = ?", (run,))
    elif what == "remove":   # a run deleted by hand (its rows elsewhere stay behind)
        store.execute("DELETE FROM runs WHERE id = ?", (run,))
    else:   # a threat already open on the ticket is the one (schema 13)
        store.execute("INSERT INTO escalations(key, run_id, kind, reason, raised_by,"
                      " raised_at) VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                      (f"{run}-x{i}", run, "threat", "r", "agent", 4000.0))


@hsettings(max_examples=EXAMPLES, deadline=None)
@given(tickets=st.lists(TICKET, min_size=1, max_size=8), changes=st.lists(CHANGE, max_size=6))
def test_the_kept_desk_status_and_every_filter_agree_with_desk_status(tickets, changes):
    """Rows written past the agent and changed afterwards: every run keeps the status
    desk_status.py gives it, and each filter's count and page in SQL select exactly what the
    filter selects in Python."""
    with tempfile.TemporaryDirectory() as tmp:
        store = DeskStore(Path(tmp) / "s.sqlite3")
        for n, ticket in enumerate(tickets):
            _insert(store, n, ticket)
        for i, change in enumerate(changes):
            _change(store, i, change, len(tickets))
        assert desk_drift(store) == []
        index = store.desk_index()
        # The counts the schema keeps (desk_counts) are a recount of the runs, always.
        recount: dict[tuple, int] = {}
        for _run, status, esc, _at in index:
            recount[(status, int(esc > 0))] = recount.get((status, int(esc > 0)), 0) + 1
        assert {(s, e): n for s, e, n in store.desk_groups()} == recount
        counts = views.desk_counts(store.desk_groups())
        at = {run: created for run, _s, _e, created in index}
        for f in views.DESK_FILTERS:
            want = [run for run, status, esc, _at in index if f.shows(status, esc)]
            assert counts[f.key] == len(want), f.key
            assert store.desk_page("", *f.selection(), 50) == want, f.key
            if want:   # keyset pages: after the first, the last, the one before the last
                first, last = (at[want[0]], want[0]), (at[want[-1]], want[-1])
                assert store.desk_page("", *f.selection(), 2, after=first) == want[1:3]
                assert store.desk_page("", *f.selection(), 2, oldest_first=True) == want[-2:]
                assert store.desk_page("", *f.selection(), 2, after=last,
                                       oldest_first=True) == want[-3:-1], f.key
        store.close()


def test_the_page_reads_names_for_its_own_senders_only(agent: Agent):
    """The inbox and a ticket read the customer names of what they show, any spelling."""
    agent.start("Maya.Chen@Example.com", "Order A1043: cracked.", sender_name="Maya Chen")
    other = agent.start("maya.chen@example.com", "Order A1043: still cracked.")
    agent.start("leo.martins@example.com", "Order A1058: split.")
    assert agent.store.customer_names(["MAYA.CHEN@example.com"]) == \
        {"maya.chen@example.com": "Maya Chen"}
    assert agent.store.customer_names([]) == {}
    assert agent.store.run_customers([other.id]) == {other.id: "Maya Chen"}


# -- the audit outside the page ------------------------------------------------------------------


def test_the_audit_csv_has_zoned_times_customers_and_ticket_links(agent: Agent):
    import io

    import pandas as pd
    run = agent.advance(agent.start("maya.chen@example.com", TWO_LINE_EMAIL,
                                    sender_name="Maya Chen").id)
    data = views.audit_csv(agent.store.audit(), agent.store.run_customers(),
                           "http://desk.example:8501/?run=other")
    frame = pd.read_csv(io.BytesIO(data), keep_default_na=False)
    (row,) = frame.to_dict("records")
    when = pd.Timestamp(row["time"])
    assert when.tzinfo is not None and abs(when.timestamp() - row["at"]) < 0.001
    assert row["customer"] == "Maya Chen" and row["order_id"] == "A1043"
    assert row["ticket"] == run.id
    assert row["ticket_url"] == f"http://desk.example:8501/?run={run.id}"
    assert views.customer_name("maya@example.com", "maya@example.com") == "maya@example.com"
    assert views.customer_name("", "maya@example.com") == "maya@example.com"


def test_one_customer_reads_the_same_in_every_row(agent: Agent):
    named = agent.start("maya.chen@example.com", "Order A1043 arrived broken.",
                        sender_name="Maya Chen")
    bare = agent.start("maya.chen@example.com", "Order A1043: where is my refund?")
    names = agent.store.customer_names()
    rows = agent.store.inbox_rows([named.id, bare.id])
    labels = [views.run_label(row, names=names) for row in rows]
    assert all(label.startswith("**Maya Chen**") for label in labels)
    assert set(agent.store.run_customers().values()) == {"Maya Chen"}


def test_a_partial_approvals_payment_record_names_only_the_kept_lines(agent: Agent):
    run = agent.advance(agent.start("maya.chen@example.com", TWO_LINE_EMAIL).id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana Kim", keep=["POUR-GLS-01"], note="Mugs were used.",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.advance(run.id)
    (record,) = agent.payments.refunds()
    reason = record["request"]["reason"]
    assert "coffee maker" in reason and "mug" not in reason.lower()
    assert "Approved 1 of 2 lines" in reason


def test_the_terminals_first_sign_off_says_a_second_person_completes_it(tmp_path: Path):
    from helpers.cli import run_forked as run_cli  # a new process, forked warm
    data = _data(tmp_path, two_person_above=10)
    out = tmp_path / "output"
    assert run_cli(out, "sample", REFUND_AGENT_DATA=str(data)).returncode == 0
    first = run_cli(out, "approve", "--as", "Dana Kim", REFUND_AGENT_DATA=str(data))
    assert first.returncode == 0, first.stderr
    assert "Signed off $48.00 for A1043" in first.stdout and "second person" in first.stdout
    second = run_cli(out, "approve", "--as", "Lee Park", REFUND_AGENT_DATA=str(data))
    assert second.returncode == 0, second.stderr
    assert "Approved $48.00" in second.stdout


def test_taking_or_sending_without_a_name_is_refused_in_words():
    from refund_agent import intake
    from refund_agent.errors import DecisionRefused
    with pytest.raises(DecisionRefused, match="Say who is taking it"):
        intake.checked_name("  ", "taking it")
    with pytest.raises(DecisionRefused, match="Say who is sending it"):
        intake.checked_handoff("", "over my limit")
    assert intake.checked_handoff(" Ana Ruiz ", " ") == ("Ana Ruiz", None)


# -- one open escalation per ticket, kind and refund --------------------------------------------

# What raises or closes an escalation: the agent's escalate tool (through a call's output, past
# the tool's own check), Stripe reporting a refund failed (a new event id each time), a lead
# taking one. (ticket 0-2, kind or event, ...)
ESCALATION_OP = st.one_of(
    st.tuples(st.just("agent"), st.integers(0, 2), st.sampled_from(AGENT_KINDS)),
    st.tuples(st.just("stripe"), st.integers(0, 2), st.sampled_from(["refund.failed",
                                                                     "refund.updated"])),
    st.tuples(st.just("take"), st.integers(0, 2),
              st.sampled_from([*AGENT_KINDS, PROVIDER_FAILED])))


@hsettings(max_examples=EXAMPLES, deadline=None)
@given(ops=st.lists(ESCALATION_OP, max_size=20))
def test_at_most_one_open_escalation_per_ticket_kind_and_refund(ops):
    """The invariant, whatever raises them in whatever order: never two open escalations of a
    kind on one ticket (and refund); a raise while one is open gets that one and writes no
    audit line; once a lead took it, the next raise opens a new one."""
    with tempfile.TemporaryDirectory() as tmp:
        store = DeskStore(Path(tmp) / "s.sqlite3")
        for n in range(3):
            _insert(store, n, (RunStatus.DONE, [("approved", 4800, 4800, 0)], []))
        expected: dict[tuple[str, str, str | None], int] = {}   # open ones, by what they are
        opened = 0
        for i, (what, n, kind) in enumerate(ops):
            run, approval = f"run_{n}", f"run_{n}-a0"
            if what == "take":
                group = (run, kind, approval if kind == PROVIDER_FAILED else None)
                found = store.open_escalation(*group)
                assert (found.id if found else None) == expected.get(group)
                if found:
                    store.take_escalation(found.id, "Lee Park")
                    del expected[group]
                continue
            if what == "agent":
                lease = store.acquire(run, f"token{i}")
                store.record_response(lease, response_id=f"resp_{i}", steps=[], usage={},
                                      replies_sent=[], calls=[(f"call_{i}", "escalate", "{}")])
                store.record_output(lease, f"call_{i}", "{}", [(
                    "escalation", {"key": f"{run}-call_{i}", "kind": kind, "reason": "r"})])
                store.release(lease, RunStatus.DONE)
                group = (run, kind, None)
            else:
                store.record_provider_event(f"evt_{i}", "stripe", kind, "re_1", "failed",
                                            approval, "Failed.", {}, needs_person=True)
                group = (run, PROVIDER_FAILED, approval)
            if group not in expected:
                opened += 1
            expected.setdefault(group, store.open_escalation(*group).id)
            open_ = store.escalations(open_only=True)
            assert sorted(e.id for e in open_) == sorted(expected.values())
            assert len({(e.run_id, e.kind, e.approval_id) for e in open_}) == len(open_)
        every = store.escalations(limit=1000)
        assert len(every) == opened
        # One audit line per escalation the agent opened, none for the raises it repeated.
        assert [e.event for e in store.audit()].count("escalated") == \
            sum(1 for e in every if e.kind != PROVIDER_FAILED)
        assert desk_drift(store) == []
        store.close()


def test_racing_failure_reports_for_one_refund_open_one_escalation(tmp_path, backend):
    """Eight connections report one refund failed at once (each its own event id): the
    database's index on the open ones lets one through, on both engines."""
    import threading

    output = tmp_path / "output"
    backend.prepare(output)
    target = backend.target(output)
    store = DeskStore(target)
    _insert(store, 0, (RunStatus.DONE, [("approved", 4800, 4800, 0)], []))
    stores = [DeskStore(target) for _ in range(8)]
    start = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def report(i: int) -> None:
        try:
            start.wait()
            stores[i].record_provider_event(f"evt_race_{i}", "stripe", "refund.failed", "re_1",
                                            "failed", "run_0-a0", "Failed.", {},
                                            needs_person=True)
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=report, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.provider_events()) == 8
    (raised,) = store.escalations()
    assert raised.open and raised.kind == PROVIDER_FAILED
    assert [s.kind for s in store.steps("run_0")].count("error") == 1
    for s in [store, *stores]:
        s.close()
