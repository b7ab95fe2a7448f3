"""The desk from the terminal: `handoff` and `take`, as the page's *Send to a lead* and *Take
it*, through the same agent and store calls (Agent.hand_off, Agent.take), signed by an account
as `approve --as` is, with the exit codes documented at the top of cli.py.

Every command is a new process (forked warm, helpers/cli.py); the accounts are made once for
the module and copied into each test's output folder.
"""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest
from helpers.cli import DATA
from helpers.cli import run_forked as run_cli

from refund_agent.desk.records import DeskStore
from refund_agent.store import Store

ANA, LEE, KAI = "ana-password", "lee-password", "kai-password"
PASSWORDS = {"Ana Ruiz": ANA, "Lee Park": LEE, "Kai Moss": KAI, "Sam Cho": "sam-password"}


@pytest.fixture(scope="module")
def accounts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with four accounts: Ana Ruiz and Sam Cho (approvers up to $30 and $20), two
    leads."""
    out = tmp_path_factory.mktemp("accounts")
    for name, role, limit in (("Ana Ruiz", "approver", ["--limit", "30"]),
                              ("Sam Cho", "approver", ["--limit", "20"]),
                              ("Lee Park", "lead", []), ("Kai Moss", "lead", [])):
        added = run_cli(out, "users", "add", name, "--role", role, *limit,
                        REFUND_AGENT_NEW_PASSWORD=PASSWORDS[name])
        assert added.returncode == 0, added.stderr
    return out


@pytest.fixture
def out(tmp_path: Path, accounts_dir: Path) -> Path:
    return Path(shutil.copytree(accounts_dir, tmp_path / "out"))


def as_(out: Path, who: str, *args: str, **extra: str):
    """A signed command: ``args`` then ``--as who``, with who's password."""
    return run_cli(out, *args, "--as", who, REFUND_AGENT_PASSWORD=PASSWORDS.get(who, "guess"),
                   **extra)


def refunds(out: Path) -> list[dict]:
    path = out / "refunds.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def events(out: Path) -> list[tuple[str, str]]:
    """The audit, oldest first, without the account changes that set the test up."""
    return [(e.event, e.actor) for e in DeskStore(out / "refund-agent.sqlite3").audit()
            if not e.event.startswith("account_")]


def store(out: Path) -> Store:
    return DeskStore(out / "refund-agent.sqlite3")


def test_an_approver_over_the_limit_hands_off_and_a_lead_takes_and_approves_one_refund(out):
    assert run_cli(out).returncode == 0                  # Maya's coffee maker, $48.00
    (approval,) = store(out).approvals("pending")

    refused = as_(out, "Ana Ruiz", "approve")
    assert refused.returncode == 1
    assert (f"a lead must decide this refund. `refund-agent handoff --id {approval.id} --as "
            '"Ana Ruiz"` sends it to a lead.') in refused.stderr

    needs = f"Needs a lead: above Ana Ruiz's limit of $30.00; `refund-agent handoff --id " \
        f"{approval.id}` sends it to one"
    assert needs in run_cli(out, "queue", "--as", "ana ruiz").stdout   # any spelling
    assert "Needs a lead" not in run_cli(out, "queue", "--as", "Lee Park").stdout
    unknown = run_cli(out, "queue", "--as", "Nobody Here")
    assert unknown.returncode == 1 and "No account named 'Nobody Here'" in unknown.stderr

    # An unknown account (or a wrong password) sends nothing.
    stranger = as_(out, "Nobody Here", "handoff")
    assert stranger.returncode == 1 and "Wrong name or password." in stranger.stderr
    assert store(out).escalations() == []

    sent = as_(out, "Ana Ruiz", "handoff", "--note", "Over my limit")
    assert sent.returncode == 0, sent.stderr
    assert ("Sent $48.00 for A1043 (maya.chen@example.com) to a lead as Ana Ruiz "
            "(escalation 1). It keeps waiting") in sent.stdout
    again = as_(out, "Ana Ruiz", "handoff")              # a retried script: hers stands
    assert again.returncode == 0 and "You already sent this refund to a lead" in again.stdout

    queue = run_cli(out, "queue").stdout
    assert "    ** Sent to a lead\n1 waiting for approval." in queue
    assert "1 escalation is open; a lead picks one up with `refund-agent take" in queue
    assert ("  1    Over an approver's limit  run " + approval.run_id + "  raised by Ana Ruiz"
            in queue) and "Their note: Over my limit" in queue

    approver = as_(out, "Ana Ruiz", "take")
    assert approver.returncode == 1
    assert "Only a lead (an account without a limit) takes escalations." in approver.stderr
    taken = as_(out, "Lee Park", "take")
    assert taken.returncode == 0, taken.stderr
    assert (f"Took escalation 1 (Over an approver's limit) on run {approval.run_id} as Lee "
            f"Park: Ana Ruiz sent $48.00") in taken.stdout
    assert f'`refund-agent approve --id {approval.id} --as "Lee Park"`' in taken.stdout
    late = as_(out, "Kai Moss", "take", "--id", "1")
    assert late.returncode == 3, late.stderr
    assert late.stderr.startswith("error: Escalation 1 was already taken by Lee Park at ")
    assert "Traceback" not in late.stderr
    mine = as_(out, "Lee Park", "take", "--id", "1")
    assert mine.returncode == 0 and "You already took escalation 1 at" in mine.stdout
    (escalation,) = store(out).escalations()
    assert escalation.taken_by == "Lee Park"

    approved = as_(out, "Lee Park", "approve")
    assert approved.returncode == 0, approved.stderr
    assert "Approved $48.00 for A1043 (maya.chen@example.com) as Lee Park" in approved.stdout
    assert len(refunds(out)) == 1
    assert events(out) == [
        ("requested", "agent"), ("refused", "Ana Ruiz"), ("sign_in_failed", "nobody here"),
        ("handed_off", "Ana Ruiz"), ("taken", "Lee Park"), ("ignored", "Kai Moss"),
        ("approved", "Lee Park"), ("issued", "payments")]
    assert run_cli(out, "audit", "--verify").returncode == 0
    assert "escalation" not in run_cli(out, "queue").stdout


def test_take_names_one_of_several_and_a_decision_closes_a_hand_off(out):
    assert run_cli(out).returncode == 0                  # Maya's coffee maker, $48.00
    assert run_cli(out, "angry").returncode == 0         # Priya's skillet, $31.50
    maya, priya = sorted(store(out).approvals("pending"), key=lambda a: a.order_id)
    unnamed = as_(out, "Ana Ruiz", "handoff")
    assert unnamed.returncode == 1 and "2 refunds are waiting; name one with --id" in \
        unnamed.stderr
    for approval in (maya, priya):
        assert as_(out, "Ana Ruiz", "handoff", "--id", approval.id).returncode == 0

    again = run_cli(out, "handoff", "--id", maya.id, "--as", "Ana Ruiz", "--note", "Twice",
                    REFUND_AGENT_PASSWORD=ANA)
    assert again.returncode == 0 and "You already sent this refund to a lead" in again.stdout
    lead = as_(out, "Lee Park", "handoff", "--id", maya.id)   # a lead has no limit
    assert lead.returncode == 1 and "Lee Park has no approval limit" in lead.stderr
    other = as_(out, "Sam Cho", "handoff", "--id", maya.id)   # Ana's is open already
    assert other.returncode == 1 and "already waiting for a lead" in other.stderr

    several = as_(out, "Lee Park", "take")
    assert several.returncode == 1
    assert "2 escalations are open; name one with --id:" in several.stderr
    assert maya.run_id in several.stderr and priya.run_id in several.stderr
    assert all(e.open for e in store(out).escalations())
    by_run = as_(out, "Lee Park", "take", "--run", priya.run_id)
    assert by_run.returncode == 0 and f"on run {priya.run_id} as Lee Park" in by_run.stdout

    # Maya's hand-off was never taken: deciding the refund closes it, taken by the decider.
    assert as_(out, "Kai Moss", "approve", "--id", maya.id).returncode == 0
    assert [(e.run_id, e.taken_by) for e in store(out).escalations()] == [
        (maya.run_id, "Kai Moss"), (priya.run_id, "Lee Park")]
    none_left = as_(out, "Lee Park", "take")
    assert none_left.returncode == 4 and "No escalation is open (the last one" in none_left.stderr
    missing = as_(out, "Lee Park", "take", "--id", "99")
    assert missing.returncode == 1 and "No escalation 99." in missing.stderr
    assert run_cli(out, "take", "--id", "one", "--as", "Lee Park").returncode == 2
    assert run_cli(out, "take", "--id", "1", "--run", priya.run_id).returncode == 2
    # A hand-off of a decided refund is someone else's decision first (exit 3).
    decided = as_(out, "Ana Ruiz", "handoff", "--id", maya.id)
    assert decided.returncode == 3 and "already approved by Kai Moss" in decided.stderr


def test_nothing_waiting_or_no_signer_changes_nothing(out):
    nothing = as_(out, "Ana Ruiz", "handoff")
    assert nothing.returncode == 4 and "Nothing is waiting for approval." in nothing.stderr
    assert run_cli(out).returncode == 0
    unsigned = run_cli(out, "handoff", REFUND_AGENT_PASSWORD=ANA)
    assert unsigned.returncode == 1 and "--as NAME" in unsigned.stderr
    assert store(out).escalations() == [] and events(out) == [("requested", "agent")]


def test_four_eyes_after_a_hand_off_from_the_terminal(out, tmp_path: Path):
    data = Path(shutil.copytree(DATA, tmp_path / "data"))
    shop = json.loads((data / "shop.json").read_text())
    shop["desk"] = {"two_person_above": 10, "remind_after_hours": 24}
    (data / "shop.json").write_text(json.dumps(shop))
    shop_env = {"REFUND_AGENT_DATA": str(data)}
    assert run_cli(out, **shop_env).returncode == 0
    assert "Needs two people: the first approval is a sign-off" in \
        run_cli(out, "queue", **shop_env).stdout
    assert as_(out, "Ana Ruiz", "handoff", **shop_env).returncode == 0
    assert as_(out, "Lee Park", "take", **shop_env).returncode == 0

    first = as_(out, "Lee Park", "approve", **shop_env)
    assert first.returncode == 0 and "Signed off $48.00 for A1043" in first.stdout
    assert "Signed off by Lee Park at" in run_cli(out, "queue", **shop_env).stdout
    twice = as_(out, "Lee Park", "approve", **shop_env)
    assert twice.returncode == 1 and "need a second, different person" in twice.stderr
    second = as_(out, "Kai Moss", "approve", **shop_env)
    assert second.returncode == 0 and "Approved $48.00" in second.stdout
    assert len(refunds(out)) == 1
    assert [event for event, _ in events(out)] == [
        "requested", "handed_off", "taken", "signed_off", "refused", "approved", "issued"]


def test_in_the_demo_anyone_takes_the_agents_escalation_and_is_pointed_at_the_ticket(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    demo = DeskStore(out / "refund-agent.sqlite3")
    # As the agent's escalate tool stores one (store/desk.py), without a model run.
    demo.execute("INSERT INTO escalations(key, run_id, kind, reason, raised_by, raised_at)"
                 " VALUES ('call_esc', 'run_0123456789ab', 'threat', 'Chargeback threatened.',"
                 " 'agent', 0)")
    demo.close()
    queue = run_cli(out, "queue").stdout
    assert "0 waiting for approval.\n\n1 escalation is open" in queue
    assert "Threat (chargeback, review, legal)  run run_0123456789ab  raised by agent" in queue
    taken = run_cli(out, "take", "--run", "run_0123456789ab", "--as", "Dana Kim")
    assert taken.returncode == 0, taken.stderr
    assert "Single-user demo mode (no accounts): signing as 'Dana Kim'" in taken.stdout
    assert ("Took escalation 1 (Threat (chargeback, review, legal)) on run run_0123456789ab as "
            "Dana Kim: Chargeback threatened. `refund-agent show run_0123456789ab` shows the "
            "ticket.") in taken.stdout
    assert events(out) == [("taken", "Dana Kim")]


def test_a_hand_off_is_for_a_refund_above_the_senders_limit():
    from refund_agent.desk.rules import handoff_problem
    assert handoff_problem("Ana Ruiz", 4800, 3000) is None
    assert handoff_problem("Ana Ruiz", 2500, 3000) == (
        "$25.00 is within Ana Ruiz's approval limit of $30.00: approve, reject or ask the "
        "customer; a hand-off is for refunds above it.")
    assert "has no approval limit" in handoff_problem("Lee Park", 10**6, None)


def test_what_the_lead_saw_that_was_wrong(out):
    """Issue 36, item 9, from the terminal. On the old code: a second `take` without --id
    exited 4 "No escalation is open" (the docs promise 3, "already taken"); the `taken` audit
    row had no order or amount; `runs` printed no header and called the rejected ticket
    "done"; and the ticket's timeline said "Server restarted" though only commands drove it."""
    from refund_agent.web import views

    assert run_cli(out).returncode == 0                  # Maya's coffee maker, $48.00
    assert as_(out, "Ana Ruiz", "handoff", "--note", "Over my limit").returncode == 0
    assert as_(out, "Lee Park", "take").returncode == 0
    late = as_(out, "Kai Moss", "take")                  # no --id: the one taken last
    assert late.returncode == 3, late.stderr
    assert late.stderr.startswith("error: Escalation 1 was already taken by Lee Park at ")
    again = as_(out, "Lee Park", "take")
    assert again.returncode == 0 and "You already took escalation 1 at" in again.stdout
    taken = next(e for e in store(out).audit() if e.event == "taken")
    assert (taken.order_id, taken.amount) == ("A1043", 48.0)

    assert as_(out, "Lee Park", "reject", "--note", "The carafe was used").returncode == 0
    header, row = run_cli(out, "runs").stdout.splitlines()[:2]   # then the cost's footnote
    assert header.split()[:3] == ["RUN", "STATUS", "CREATED"]
    assert row.split()[1] == "rejected"
    audit = run_cli(out, "audit").stdout
    assert "$48.00 (proposed)" in audit.splitlines()[-1]   # the rejection paid nothing

    run_id = row.split()[0]
    restarts = [s for s in store(out).steps(run_id) if s.kind == "restart"]
    assert restarts and all(s.data["front"] == "terminal" for s in restarts)
    titles = [b.title for b in views.timeline(store(out).steps(run_id))]
    assert not [t for t in titles if "Server restarted" in t]
    assert [t for t in titles if t.startswith("Continued by a terminal command: process")]


def test_owners_from_the_terminal(out):
    """Issue 36, item 5: claim, assign, release and `tickets --mine/--unassigned`, each signed
    by an account and audited (none of these commands existed)."""
    assert run_cli(out).returncode == 0
    run_id = store(out).runs()[0].id
    listed = run_cli(out, "tickets", "--unassigned").stdout.splitlines()
    assert listed[0].split()[:3] == ["RUN", "STATUS", "OWNER"] and listed[1].startswith(run_id)
    claimed = as_(out, "Ana Ruiz", "claim", run_id)
    assert claimed.returncode == 0, claimed.stderr
    assert claimed.stdout.startswith(f"Claimed {run_id} (maya.chen@example.com")
    assert "Ana Ruiz" in run_cli(out, "tickets", "--mine", "--as", "ana ruiz").stdout
    assert run_cli(out, "tickets", "--unassigned").stdout == "No tickets without an owner.\n"
    stolen = as_(out, "Sam Cho", "claim", run_id)
    assert stolen.returncode == 1 and "already Ana Ruiz's" in stolen.stderr
    other = as_(out, "Sam Cho", "release", run_id)
    assert other.returncode == 1 and "releasing someone else's ticket is a lead's act" \
        in other.stderr
    given = as_(out, "Ana Ruiz", "assign", run_id, "--to", "Sam Cho")
    assert given.returncode == 1 and "Only a lead assigns" in given.stderr
    nobody = as_(out, "Lee Park", "assign", run_id, "--to", "Nobody Here")
    assert nobody.returncode == 1 and "only an account owns a ticket" in nobody.stderr
    assert as_(out, "Lee Park", "assign", run_id, "--to", "Sam Cho").returncode == 0
    assert as_(out, "Sam Cho", "release", run_id).returncode == 0
    again = as_(out, "Sam Cho", "release", run_id)
    assert again.returncode == 0 and again.stdout == f"Nobody owns {run_id}; nothing changed.\n"
    assert [(e, who) for e, who in events(out) if e in ("claimed", "assigned", "released")] == [
        ("claimed", "Ana Ruiz"), ("assigned", "Lee Park"), ("released", "Sam Cho")]
    shown = run_cli(out, "show", run_id).stdout
    assert "-- Assigned to Sam Cho by Lee Park (was Ana Ruiz's) --" in shown
    wrong = run_cli(out, "claim", run_id, "--as", "Ana Ruiz", REFUND_AGENT_PASSWORD="wrong")
    assert wrong.returncode == 1 and store(out).owner(run_id) is None


def test_a_refund_above_an_approvers_limit_is_offered_to_one_whose_limit_covers_it(out):
    """Issue 36, item 6: `queue --as` lists first what the account can decide and names who
    can decide the rest; that approver then approves it with no hand-off. On the old code the
    queue kept its order and only said "Needs a lead" for Maya's $48.00."""
    added = run_cli(out, "users", "add", "Kim Vo", "--role", "approver", "--limit", "40",
                    REFUND_AGENT_NEW_PASSWORD="kim-password")
    assert added.returncode == 0, added.stderr
    assert run_cli(out).returncode == 0                  # Maya's coffee maker, $48.00 (older)
    assert run_cli(out, "angry").returncode == 0         # Priya's skillet, $31.50
    kim = run_cli(out, "queue", "--as", "Kim Vo").stdout
    assert kim.index("order A1066") < kim.index("order A1043")      # hers first
    assert "** Can decide: Kai Moss (lead), Lee Park (lead)" in kim   # Maya: above $40 for Kim
    ana = run_cli(out, "queue", "--as", "Ana Ruiz").stdout
    assert "** Can decide: Kim Vo (up to $40.00), Kai Moss (lead), Lee Park (lead)" in ana
    priya = next(a for a in store(out).approvals("pending") if a.order_id == "A1066")
    approved = run_cli(out, "approve", "--id", priya.id, "--as", "Kim Vo",
                       REFUND_AGENT_PASSWORD="kim-password")
    assert approved.returncode == 0, approved.stderr
    assert "handed_off" not in [e for e, _who in events(out)]   # no hand-off was needed
    assert store(out).approval(priya.id).decided_by == "Kim Vo"


def test_out_of_office_from_the_terminal(out):
    """Issue 36, item 8: `away --to NAME --until DATE` and `back`, signed and audited; the
    delegate's `tickets --mine` lists the tickets of the one away."""
    assert run_cli(out).returncode == 0
    run_id = store(out).runs()[0].id
    assert as_(out, "Ana Ruiz", "claim", run_id).returncode == 0
    bad = as_(out, "Ana Ruiz", "away", "--to", "Sam Cho", "--until", "next week")
    assert bad.returncode == 1 and "--until takes a date as YYYY-MM-DD" in bad.stderr
    # A date some months ahead (out of office is bounded to a year; test_typed_times.py).
    until = datetime.date.today() + datetime.timedelta(days=120)
    gone = as_(out, "Ana Ruiz", "away", "--to", "sam cho", "--until", until.isoformat())
    assert gone.returncode == 0, gone.stderr
    assert (f"Ana Ruiz is away until {until + datetime.timedelta(days=1)} 00:00:00: tickets "
            "and approvals go to Sam Cho.") in gone.stdout
    assert run_id in run_cli(out, "tickets", "--mine", "--as", "Sam Cho").stdout
    assert as_(out, "Ana Ruiz", "back").stdout == "Welcome back, Ana Ruiz.\n"
    assert "No tickets owned by Sam Cho." in run_cli(out, "tickets", "--mine", "--as",
                                                     "Sam Cho").stdout
    assert [(e, who) for e, who in events(out) if e in ("away", "back")] == [
        ("away", "Ana Ruiz"), ("back", "Ana Ruiz")]
