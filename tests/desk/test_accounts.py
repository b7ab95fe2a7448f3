"""Accounts, signed decisions and approval limits: the terminal commands, and the pieces."""

from __future__ import annotations

import json

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from refund_agent.desk.accounts import (
    Accounts,
    check_password,
    hash_password,
    host_allowed,
    host_name,
)
from refund_agent.desk.owners import OwnerChange
from refund_agent.desk.records import DeskStore
from refund_agent.errors import DecisionRefused, RefundAgentError, SignInFailed
from refund_agent.store import Store

ANA, LEE = "ana-password", "lee-password"


def refunds(out) -> list[dict]:
    path = out / "refunds.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def store_of(out) -> Store:
    return DeskStore(out / "refund-agent.sqlite3")


def add_users(out) -> None:
    ana = run_cli(out, "users", "add", "Ana Ruiz", "--role", "approver", "--limit", "40",
                  REFUND_AGENT_NEW_PASSWORD=ANA)
    assert ana.returncode == 0, ana.stderr
    assert "Added Ana Ruiz (approver, up to $40.00)" in ana.stdout
    lee = run_cli(out, "users", "add", "Lee Park", "--role", "lead",
                  REFUND_AGENT_NEW_PASSWORD=LEE)
    assert lee.returncode == 0, lee.stderr


# -- the terminal -----------------------------------------------------------------------------


def test_users_add_list_remove(tmp_path):
    out = tmp_path / "out"
    empty = run_cli(out, "users", "list")
    assert empty.returncode == 0 and "single-user demo mode" in empty.stdout
    add_users(out)
    listed = run_cli(out, "users", "list").stdout.splitlines()
    assert listed[0].split() == ["Ana", "Ruiz", "approver", "up", "to", "$40.00"]
    assert listed[1].split() == ["Lee", "Park", "lead", "no", "limit"]
    assert listed[2] == "2 accounts."
    # The password is stored only as a salted scrypt hash.
    rows = store_of(out).account_rows()
    assert all(r["password"].startswith("scrypt$16384$8$1$") for r in rows)
    assert not any(ANA in r["password"] or LEE in r["password"] for r in rows)
    again = run_cli(out, "users", "add", "Ana Ruiz", "--role", "lead",
                    REFUND_AGENT_NEW_PASSWORD=ANA)
    assert again.returncode == 1 and "already exists" in again.stderr
    short = run_cli(out, "users", "add", "Sam", "--role", "lead", REFUND_AGENT_NEW_PASSWORD="x")
    assert short.returncode == 1 and "at least 8 characters" in short.stderr
    bad_role = run_cli(out, "users", "add", "Sam", "--role", "admin",
                       REFUND_AGENT_NEW_PASSWORD=ANA)
    assert bad_role.returncode == 2
    store = store_of(out)   # Ana owns a ticket and acts for Lee: both end with her account
    run_id = store.create_run(sender="maya@example.com", sender_name="Maya", subject="Cracked",
                              email="A1043 arrived cracked").id
    store.change_owner(OwnerChange(run_id, "claim", "Ana Ruiz", False))
    store.set_away("Lee Park", "Ana Ruiz", 4_000_000_000)
    removed = run_cli(out, "users", "remove", "Ana Ruiz")
    assert removed.returncode == 0 and "1 account left" in removed.stdout
    assert "1 ticket released (nobody owns them now), 1 delegation to or from it ended" in \
        removed.stdout and store.owners() == {} and store.away() == {}
    missing = run_cli(out, "users", "remove", "Ana Ruiz")
    assert missing.returncode == 1 and "No account named 'Ana Ruiz'" in missing.stderr
    last = run_cli(out, "users", "remove", "Lee Park")
    assert "back in single-user demo mode" in last.stdout


def test_without_accounts_the_terminal_says_it_is_a_demo(tmp_path):
    out = tmp_path / "out"
    run_cli(out)
    approved = run_cli(out, "approve", "--as", "Dana Kim")
    assert approved.returncode == 0, approved.stderr
    assert "Single-user demo mode (no accounts): signing as 'Dana Kim'" in approved.stdout
    assert store_of(out).approvals(None)[0].decided_by == "Dana Kim"


def refund_events(store):
    """The audit without the account changes that set the test up."""
    return [e for e in store.audit() if not e.event.startswith("account_")]


def test_a_signed_approval(tmp_path):
    out = tmp_path / "out"
    add_users(out)
    run_cli(out)
    approved = run_cli(out, "approve", "--as", "Lee Park", REFUND_AGENT_PASSWORD=LEE)
    assert approved.returncode == 0, approved.stderr
    assert "Approved $48.00 for A1043 (maya.chen@example.com) as Lee Park" in approved.stdout
    assert "demo mode" not in approved.stdout
    assert [(e.event, e.actor) for e in refund_events(store_of(out))] == [
        ("requested", "agent"), ("approved", "Lee Park"), ("issued", "payments")]
    assert len(refunds(out)) == 1


def test_a_wrong_password_or_no_account_decides_nothing(tmp_path):
    out = tmp_path / "out"
    add_users(out)
    run_cli(out)
    for args, password in ((("--as", "Lee Park"), "wrong-password"),
                           (("--as", "Nobody Here"), LEE)):
        refused = run_cli(out, "approve", *args, REFUND_AGENT_PASSWORD=password)
        assert refused.returncode == 1, refused.stdout
        assert "Wrong name or password." in refused.stderr
    # With accounts there is no default signer (the operating-system user signed before).
    unnamed = run_cli(out, "reject", "--note", "No.", REFUND_AGENT_PASSWORD=LEE)
    assert unnamed.returncode == 1 and "--as NAME" in unnamed.stderr
    store = store_of(out)
    assert store.approvals(None)[0].status == "pending"
    # Each failed sign-in is audited, by the name in canonical form (never the password).
    assert [(e.event, e.actor) for e in refund_events(store)] == [
        ("requested", "agent"), ("sign_in_failed", "lee park"), ("sign_in_failed", "nobody here")]
    assert refunds(out) == []


def test_an_approver_over_the_limit_is_refused_and_a_lead_approves(tmp_path):
    out = tmp_path / "out"
    add_users(out)
    run_cli(out)
    refused = run_cli(out, "approve", "--as", "Ana Ruiz", REFUND_AGENT_PASSWORD=ANA)
    assert refused.returncode == 1
    assert ("Cannot approve: $48.00 is above Ana Ruiz's approval limit of $40.00; a lead must "
            "decide this refund.") in refused.stderr
    store = store_of(out)
    assert store.approvals(None)[0].status == "pending" and refunds(out) == []
    approved = run_cli(out, "approve", "--as", "Lee Park", REFUND_AGENT_PASSWORD=LEE)
    assert approved.returncode == 0, approved.stderr
    assert [(e.event, e.actor) for e in refund_events(store)] == [
        ("requested", "agent"), ("refused", "Ana Ruiz"), ("approved", "Lee Park"),
        ("issued", "payments")]
    assert len(refunds(out)) == 1
    assert run_cli(out, "audit", "--verify").returncode == 0


def test_an_approver_may_reject_above_the_limit(tmp_path):
    out = tmp_path / "out"
    add_users(out)
    run_cli(out)
    rejected = run_cli(out, "reject", "--as", "Ana Ruiz", "--note", "Covered by the courier.",
                       REFUND_AGENT_PASSWORD=ANA)
    assert rejected.returncode == 0, rejected.stderr
    decided = store_of(out).approvals(None)[0]
    assert (decided.status, decided.decided_by) == ("rejected", "Ana Ruiz")


# -- the pieces ---------------------------------------------------------------------------------


def test_passwords_are_salted_and_checked():
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first != second  # a fresh salt each time
    assert check_password("correct horse", first) and check_password("correct horse", second)
    assert not check_password("correct hors", first)
    assert not check_password("correct horse", "plain$text")
    assert not check_password("correct horse", "scrypt$x$8$1$AA==$AA==")


def test_accounts_refuse_bad_input(tmp_path):
    accounts = Accounts(DeskStore(tmp_path / "s.sqlite3"))
    assert not accounts.exist()
    with pytest.raises(RefundAgentError, match="line breaks"):
        accounts.add("Ana\nApproved by Lee", "lead", ANA)
    with pytest.raises(DecisionRefused, match="no approval limit"):
        accounts.add("Lee", "lead", LEE, limit=10)
    with pytest.raises(DecisionRefused, match="number of dollars"):
        accounts.add("Ana", "approver", ANA, limit=float("nan"))
    assert accounts.add("  Ana   Ruiz ", "approver", ANA).limit == 100.0  # the default limit
    assert accounts.sign_in("Ana Ruiz", ANA).name == "Ana Ruiz"
    with pytest.raises(SignInFailed):
        accounts.sign_in("Ana Ruiz", "")
    with pytest.raises(SignInFailed):
        accounts.sign_in("", ANA)


def test_the_limit_is_checked_inside_the_decision(agent):
    run = agent.start_sample("damaged")
    agent.advance(run.id)
    (approval,) = agent.store.approvals("pending")
    with pytest.raises(DecisionRefused, match="above Ana's approval limit of \\$47.99"):
        agent.decide(approval.id, True, "Ana", limit_cents=4799,
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.store.approval(approval.id).status == "pending"
    assert agent.decide(approval.id, True, "Ana", limit_cents=4800,
                        fingerprint=approval.fingerprint).status == "approved"


def test_a_refusal_over_the_limit_leaves_every_line_as_proposed(agent):
    """Refused inside the decision before any line changes: nothing declined, nothing freed."""
    run = agent.start("maya.chen@example.com", "Order A1043: the coffee maker arrived "
                      "shattered, and honestly I also don't want the mugs anymore.")
    agent.advance(run.id)
    (approval,) = agent.store.approvals("pending")
    before = [(x.line, x.decision, x.amount_cents) for x in approval.lines]
    with pytest.raises(DecisionRefused, match="above Ana's approval limit"):
        agent.decide(approval.id, True, "Ana", limit_cents=5000,   # both lines: $66.50
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    after = agent.store.approval(approval.id)
    assert [(x.line, x.decision, x.amount_cents) for x in after.lines] == before
    assert set(agent.store.held_lines("A1043")) == {"POUR-GLS-01", "MUG-STN-2"}
    kept = agent.decide(approval.id, True, "Ana", keep=["POUR-GLS-01"], limit_cents=5000,
                        fingerprint=agent.store.approval(approval.id).fingerprint)
    assert (kept.status, kept.amount_cents) == ("approved", 4800)


@pytest.mark.parametrize("header, extra, allowed", [
    ("localhost:8501", frozenset(), True),
    ("127.0.0.1:8501", frozenset(), True),
    ("[::1]:8501", frozenset(), True),
    ("LOCALHOST.", frozenset(), True),
    ("evil.example:8501", frozenset(), False),
    ("localhost.evil.example", frozenset(), False),
    ("", frozenset(), False),
    (None, frozenset(), False),
    ("desk.example.com:443", frozenset({"desk.example.com"}), True),
])
def test_host_check(header, extra, allowed):
    assert host_allowed(header, extra) is allowed


def test_host_name_drops_the_port():
    assert host_name("[::1]:8501") == "::1" and host_name("::1") == "::1"
    assert host_name("Desk.Example.com:80") == "desk.example.com"


def test_users_add_asks_twice_and_a_decision_asks_the_password(tmp_path, monkeypatch, capsys):
    from refund_agent import cli

    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(tmp_path / "out"))
    monkeypatch.delenv("REFUND_AGENT_NEW_PASSWORD", raising=False)
    monkeypatch.delenv("REFUND_AGENT_PASSWORD", raising=False)
    answers = iter(["lee-password", "lee-passwrod"])
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt="": next(answers))
    # A terminal to ask on (without one, the password is read from standard input).
    monkeypatch.setattr(cli.sys.stdin, "isatty", lambda: True, raising=False)
    assert cli.main(["users", "add", "Lee Park", "--role", "lead"]) == 1
    assert "The two passwords differ; nothing was changed." in capsys.readouterr().err
    store = store_of(tmp_path / "out")
    assert not Accounts(store).exist()
    answers = iter(["lee-password", "lee-password"])
    assert cli.main(["users", "add", "Lee Park", "--role", "lead"]) == 0
    prompts: list[str] = []

    def answer(prompt: str = "") -> str:
        prompts.append(prompt)
        return "lee-password"

    monkeypatch.setattr(cli.getpass, "getpass", answer)

    class Agentish:  # _signer needs only the store
        pass

    agent = Agentish()
    agent.store = store
    assert cli._signer(agent, "Lee Park") == ("Lee Park", None)
    assert prompts == ["Password for Lee Park: "]


def test_the_card_names_the_limit_only_above_it():
    from refund_agent.web.views import limit_notice
    assert limit_notice(48.0, None) is None            # a lead, or the demo
    assert limit_notice(40.0, 40.0) is None            # up to the limit, inclusive
    assert limit_notice(40.01, 40.0).startswith(
        "Needs a lead: $40.01 is above your approval limit of $40.00. Send it to a lead")


def test_account_changes_are_audited_with_who_made_them(tmp_path):
    store = store_of(tmp_path / "out")
    accounts = Accounts(store)
    accounts.add("Ana Ruiz", "approver", ANA, limit=40, by="ops (login)")
    accounts.add("Lee Park", "lead", LEE)                  # by the operating-system login
    accounts.remove("Ana Ruiz", by="ops (login)")
    entries = [(e.event, e.actor, e.note) for e in store.audit()]
    assert entries[0] == ("account_added", "ops (login)", "Ana Ruiz: approver, up to $40.00")
    assert entries[1][0] == "account_added" and entries[1][1].endswith("(login)")
    assert entries[1][2] == "Lee Park: lead, no limit"
    assert entries[2] == ("account_removed", "ops (login)", "Ana Ruiz")
    assert store.verify_audit() is None


def test_sign_in_guessing_waits_longer_after_each_wrong_try(tmp_path):
    from refund_agent.desk import accounts as module
    clock = [1_000_000.0]
    store = store_of(tmp_path / "out")
    accounts = Accounts(store, clock=lambda: clock[0])
    accounts.add("Lee Park", "lead", LEE)
    for _ in range(module.SIGN_IN_FREE):
        with pytest.raises(SignInFailed, match="Wrong name or password"):
            accounts.sign_in("Lee Park", "guess")
    # Now even the right password is refused, without being checked, for a while.
    with pytest.raises(SignInFailed, match="Too many wrong passwords"):
        accounts.sign_in("lee  park".title(), LEE)
    # Other names are not held up, and an unknown name is throttled the same way.
    for _ in range(module.SIGN_IN_FREE):
        with pytest.raises(SignInFailed, match="Wrong name or password"):
            accounts.sign_in("Nobody", "guess")
    with pytest.raises(SignInFailed, match="Too many"):
        accounts.sign_in("Nobody", "guess")
    # The wait passes: the right password works again and clears the count.
    clock[0] += module.sign_in_delay(module.SIGN_IN_FREE)
    assert accounts.sign_in("Lee Park", LEE).name == "Lee Park"
    with pytest.raises(SignInFailed, match="Wrong name or password.$"):
        accounts.sign_in("Lee Park", "guess")     # a fresh count: no wait after one
