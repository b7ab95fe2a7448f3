"""Who is who (issue 21: 9, 11, 12, 15, 19): canonical names and addresses, the sign-in
throttle shared through the store, limits in whole cents, and CSV cells that stay text."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from refund_agent.accounts import SIGN_IN_FAILURES, Accounts, SignInFailed
from refund_agent.errors import DecisionRefused, RunNotReady
from refund_agent.identity import (
    address_problem,
    canonical_address,
    name_key,
    name_problem,
    same_address,
)
from refund_agent.models import AuditEntry
from refund_agent.store import SCHEMA_HISTORY, Store
from refund_agent.tools import LookupOrder, ShopTools
from refund_agent.web.views import audit_csv

LEE = "lee-password"
KELVIN_TOM = "tom.bec\u212aer@example.com"      # KELVIN SIGN, drawn like a K
CYRILLIC_DANA = "D\u0430na Kim"                 # CYRILLIC SMALL LETTER A


def store_at(tmp_path) -> Store:
    return Store(tmp_path / "out" / "refund-agent.sqlite3")


# -- 11: identity by canonical address ------------------------------------------------------


def test_addresses_compare_in_canonical_form_and_look_alikes_are_refused():
    assert same_address("Tom.Becker@EXAMPLE.com", "tom.becker@example.com")
    assert canonical_address("ÉLODIE@Bücher.Example") == "élodie@xn--bcher-kva.example"
    assert not same_address(KELVIN_TOM, "tom.becker@example.com")
    assert "U+212A KELVIN SIGN" in address_problem(KELVIN_TOM)
    assert "mixes alphabets" in address_problem("t\u043em.becker@example.com")  # Cyrillic о
    assert address_problem("ｔｏｍ@example.com")                               # full width
    assert address_problem("tom.becker@example.com") is None


def test_a_look_alike_sender_gets_no_order(agent):
    """Ownership compared `.lower()`: the KELVIN SIGN lowered to k and got Tom's order."""
    held = agent.store.held_lines
    kelvin = ShopTools(agent.shop, KELVIN_TOM, held).lookup_order(LookupOrder(order_id="A1021"))
    assert "No order A1021 was found" in kelvin["error"]
    tom = ShopTools(agent.shop, "Tom.Becker@Example.com", held)
    assert tom.lookup_order(LookupOrder(order_id="A1021"))["customer"]["name"] == "Tom Becker"
    # Such a ticket is not even taken in.
    with pytest.raises(RunNotReady, match="KELVIN SIGN"):
        agent.start(KELVIN_TOM, "Order A1021: where is my refund?")


def test_a_look_alike_sender_in_the_store_learns_nothing_through_the_model(agent):
    """A ticket written before the check (or by any other way in): the model's lookup, over
    the real SDK and the offline model, gets the stranger's answer, not Tom's order."""
    run = agent.store.create_run(sender=KELVIN_TOM, sender_name="Tom", subject="Refund",
                                 email="Order A1021: the lamp stopped working, refund please.",
                                 kind="custom")
    agent.advance(run.id)
    outputs = [s.data["output"] for s in agent.store.steps(run.id)
               if s.kind == "result" and s.data["name"] == "lookup_order"]
    assert outputs and all("error" in out for out in outputs)
    assert "Tom Becker" not in json.dumps(outputs)


# -- 19: account names ----------------------------------------------------------------------


def test_account_names_are_unique_in_canonical_form(tmp_path):
    accounts = Accounts(store_at(tmp_path))
    accounts.add("Dana Kim", "approver", "dana-password", limit=50)
    for twin in ("dana kim", "DANA  KIM", "Ｄａｎａ Ｋｉｍ", CYRILLIC_DANA):
        with pytest.raises(DecisionRefused):
            accounts.add(twin, "approver", "other-password", limit=50)
    # A whole-word look-alike in one alphabet collides with the Latin name it imitates.
    accounts.add("Paco Ruiz", "approver", "paco-password", limit=50)
    with pytest.raises(DecisionRefused, match="already exists"):
        accounts.add("\u0420\u0430\u0441\u043e Ruiz", "approver", "other-password", limit=50)
    assert "mixes alphabets" in name_problem(CYRILLIC_DANA)
    assert name_key("ＤＡＮＡ  Kim") == name_key("dana kim") == "dana kim"
    assert [a.name for a in accounts.all()] == ["Dana Kim", "Paco Ruiz"]  # display kept
    # Signing in works under any spelling of the name, and signs with the display name.
    assert accounts.sign_in("DANA KIM", "dana-password").name == "Dana Kim"


@pytest.mark.parametrize("name", ["agent", "Payments", "EXPIRY", "system", "ops (login)",
                                  "unknown login"])
def test_actor_names_the_desk_writes_are_refused_as_people(tmp_path, name):
    with pytest.raises(DecisionRefused, match="the desk itself signs the audit log with"):
        Accounts(store_at(tmp_path)).add(name, "lead", LEE)


# -- 9: the sign-in throttle ----------------------------------------------------------------


def test_the_throttle_is_per_canonical_name_and_client_and_shared_by_processes(tmp_path):
    path = tmp_path / "out" / "refund-agent.sqlite3"
    Accounts(Store(path)).add("Lee Park", "lead", LEE)
    # Five wrong tries under five spellings, from one client, through two "processes" (two
    # stores on one file): one count.
    spellings = ["lee park", "LEE PARK", "Lee  Park", "Ｌｅｅ Ｐａｒｋ", "lee park"]
    for name in spellings[:SIGN_IN_FAILURES]:
        with pytest.raises(SignInFailed, match="Wrong name or password"):
            Accounts(Store(path)).sign_in(name, "guess", client="page 10.0.0.66")
    with pytest.raises(SignInFailed, match="Too many wrong passwords"):
        Accounts(Store(path)).sign_in("Lee Park", LEE, client="page 10.0.0.66")
    # The lead's own client has not failed: the right password still works there.
    assert Accounts(Store(path)).sign_in("Lee Park", LEE, client="page 10.0.0.7").name \
        == "Lee Park"
    # A restart (a new store object, as a new process has) keeps the count.
    with pytest.raises(SignInFailed, match="Too many"):
        Accounts(Store(path)).sign_in("lee park", LEE, client="page 10.0.0.66")
    # Every failure is audited by the canonical name, with the client; never the password.
    failed = [e for e in Store(path).audit() if e.event == "sign_in_failed"]
    assert [(e.actor, e.note) for e in failed] == [
        ("lee park", "wrong password from page 10.0.0.66")] * SIGN_IN_FAILURES
    assert not any("guess" in (e.note or "") + e.actor for e in Store(path).audit())
    assert Store(path).verify_audit() is None


def test_schema_7_is_the_throttle_table_and_a_version_5_store_gets_it(tmp_path):
    store = store_at(tmp_path)
    assert 7 in SCHEMA_HISTORY and "sign_in_failures" in SCHEMA_HISTORY[7]
    assert store.sign_in_failures("lee park", "page", 300.0) == (0, 0.0)
    # A store as version 5 left it (no throttle table) is upgraded on open, accounts kept.
    Accounts(store).add("Lee Park", "lead", LEE)
    with sqlite3.connect(store.path) as db:
        db.execute("DROP TABLE sign_in_failures")
        db.execute("PRAGMA user_version = 5")
    upgraded = Store(store.path)
    assert upgraded.sign_in_failures("lee park", "page", 300.0) == (0, 0.0)
    assert upgraded.schema_version() == max(SCHEMA_HISTORY)
    assert Accounts(upgraded).sign_in("Lee Park", LEE).name == "Lee Park"


# -- 15: limits -----------------------------------------------------------------------------


@pytest.mark.parametrize("limit, message", [
    ("inf", "must be a number of dollars, not inf"),
    ("1e308", "at most $1,000,000"),
    ("nan", "must be a number of dollars, not nan"),
    ("-5", "more than $0"),
    ("0", "more than $0"),
    ("47.995", "whole cents: 47.995 is not; give 47.99 or 48.00"),
])
def test_users_add_refuses_a_bad_limit_in_one_line(tmp_path, limit, message):
    out = tmp_path / "out"
    added = run_cli(out, "users", "add", "Ana Ruiz", "--role", "approver", "--limit", limit,
                    REFUND_AGENT_NEW_PASSWORD="ana-password")
    assert added.returncode == 1, added.stdout
    assert "Traceback" not in added.stderr and len(added.stderr.strip().splitlines()) == 1
    assert message in added.stderr
    assert Accounts(Store(out / "refund-agent.sqlite3")).all() == []   # nothing was added


def test_a_limit_in_whole_cents_is_kept_exactly(tmp_path):
    accounts = Accounts(store_at(tmp_path))
    assert accounts.add("Ana Ruiz", "approver", "ana-password", limit=47.99).limit_cents == 4799
    assert accounts.add("Bo Chen", "approver", "bo-password", limit=0.1 + 0.2).limit_cents == 30


# -- 12: formula injection in the CSV -------------------------------------------------------


def test_the_audit_csv_neutralises_formula_cells():
    hostile = ['=HYPERLINK("https://evil.example","Approved")', "@SUM(A1:A9)", "+1+1",
               "-2+3", "\tTAB", "\rCR"]
    entries = [AuditEntry(id=i, at=1.0, event="approved", actor=text, pid=1, run_id=None,
                          approval_id=None, order_id=text, amount=-5.0 if i == 1 else 1.0,
                          note=text, prev_hash="0" * 64, hash="1" * 64)
               for i, text in enumerate(hostile, start=1)]
    rows = list(csv.DictReader(io.StringIO(audit_csv(entries).decode(), newline="")))
    assert len(rows) == len(hostile)
    for row in rows:
        for field in ("actor", "order_id", "note"):
            assert row[field].startswith("'"), row[field]
            assert row[field][1:] in hostile
    assert {row["amount"] for row in rows} == {"-5.0", "1.0"}   # numbers stay numbers
    from refund_agent.web.views import csv_cell
    assert csv_cell("Lee Park") == "Lee Park" and csv_cell(None) is None


def test_the_throttle_and_canonical_names_on_both_engines(backend, tmp_path):
    """The throttle's table and the database's clock, and the name check under the write
    lock, on SQLite and PostgreSQL alike."""
    out = tmp_path / "out"
    backend.prepare(out)
    target = backend.url(out) if backend.postgres else out / "refund-agent.sqlite3"
    accounts = Accounts(Store(target))
    accounts.add("Lee Park", "lead", LEE)
    with pytest.raises(DecisionRefused, match="already exists"):
        accounts.add("LEE PARK", "lead", "other-password")
    for _ in range(SIGN_IN_FAILURES):
        with pytest.raises(SignInFailed, match="Wrong name"):
            accounts.sign_in("lee park", "guess", client="page 10.0.0.66")
    other = Accounts(Store(target))   # another process on the same store
    with pytest.raises(SignInFailed, match="Too many"):
        other.sign_in("Lee Park", LEE, client="page 10.0.0.66")
    assert other.sign_in("Lee Park", LEE, client="terminal").name == "Lee Park"
    count, age = other.store.sign_in_failures("lee park", "page 10.0.0.66", 300.0)
    assert count == SIGN_IN_FAILURES and 0 <= age < 60
    assert other.store.verify_audit() is None


def test_a_look_alike_spelling_counts_with_the_name_and_shows_in_the_audit(tmp_path):
    store = store_at(tmp_path)
    accounts = Accounts(store)
    accounts.add("Lee Park", "lead", LEE)
    cyrillic_lee = "L\u0435\u0435 Park"          # CYRILLIC SMALL LETTER IE, twice
    for _ in range(SIGN_IN_FAILURES):
        with pytest.raises(SignInFailed):
            accounts.sign_in(cyrillic_lee, "guess", client="page 10.0.0.66")
    with pytest.raises(SignInFailed, match="Too many"):
        accounts.sign_in("Lee Park", LEE, client="page 10.0.0.66")
    actors = {e.actor for e in store.audit() if e.event == "sign_in_failed"}
    assert actors == {"l\u0435\u0435 park"}      # the spelling tried, so the attempt is visible
