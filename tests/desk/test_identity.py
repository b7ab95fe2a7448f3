"""Who is who (issue 21: 9, 11, 12, 15, 19; issue 33: 3, 4): canonical names and addresses,
names compared by skeleton, the sign-in throttle per name shared through the store, limits in
whole cents, and CSV cells that stay text."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from helpers.cli import DATA
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)
from hypothesis import given
from hypothesis import strategies as st

from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.desk.accounts import (
    SIGN_IN_CAP,
    SIGN_IN_FREE,
    Accounts,
    hash_password,
    sign_in_delay,
)
from refund_agent.desk.identity import (
    DEFAULT_IGNORABLE_RANGES,
    confusable_pairs,
    name_key,
    name_problem,
    same_person,
)
from refund_agent.desk.records import DeskStore
from refund_agent.desk.tools import LookupOrder, ShopTools
from refund_agent.errors import DecisionRefused, RunNotReady, SignInFailed
from refund_agent.intake import address_problem, canonical_address, same_address
from refund_agent.models import AuditEntry
from refund_agent.providers.client import open_model
from refund_agent.store import SCHEMA_HISTORY, Store
from refund_agent.web.views import audit_csv

LEE = "lee-password"
KELVIN_TOM = "tom.bec\u212aer@example.com"      # KELVIN SIGN, drawn like a K
CYRILLIC_DANA = "D\u0430na Kim"                 # CYRILLIC SMALL LETTER A


def store_at(tmp_path) -> Store:
    return DeskStore(tmp_path / "out" / "refund-agent.sqlite3")


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
    assert name_key("ＤＡＮＡ  Kim") == name_key("dana kim") == name_key("Dana Kim")
    assert [a.name for a in accounts.all()] == ["Dana Kim", "Paco Ruiz"]  # display kept
    # Signing in works under any spelling of the name, and signs with the display name.
    assert accounts.sign_in("DANA KIM", "dana-password").name == "Dana Kim"


@pytest.mark.parametrize("name", ["agent", "Payments", "EXPIRY", "system", "ops (login)",
                                  "unknown login", "stripe", "SMTP", "Webhooks",
                                  "payrnents", "Sy\u034fstem"])
def test_actor_names_the_desk_writes_are_refused_as_people(tmp_path, name):
    """Issue 33, 3: the payment and email services' names were accepted, and so was any
    look-alike of a reserved one ("payrnents" with rn for m, an invisible space inside)."""
    with pytest.raises(DecisionRefused, match="the desk itself signs the audit log with"):
        Accounts(store_at(tmp_path)).add(name, "lead", LEE)


# -- issue 33, 3: names compared by skeleton ------------------------------------------------

DANA_TWINS = ["Dana K\u0131m",        # LATIN SMALL LETTER DOTLESS I
              "D\u0251na Kim",        # LATIN SMALL LETTER ALPHA
              "Dana Kim\u034f",       # COMBINING GRAPHEME JOINER, invisible
              "Dana K\u00edm"]        # i with an acute accent


@pytest.mark.parametrize("twin", DANA_TWINS)
def test_a_look_alike_of_an_account_name_is_refused_naming_whom_it_looks_like(tmp_path, twin):
    """Each of these was added as a second person beside Dana Kim."""
    accounts = Accounts(store_at(tmp_path))
    accounts.add("Dana Kim", "approver", "dana-password", limit=50)
    with pytest.raises(DecisionRefused) as refused:
        accounts.check(twin, "approver", 50)      # before the terminal asks for a password
    with pytest.raises(DecisionRefused) as again:
        accounts.add(twin, "approver", "other-password", limit=50)
    for message in (str(refused.value), str(again.value)):
        assert "'Dana Kim' already exists" in message and "looks like it" in message
        assert "\n" not in message
        assert "\\u034f" in message if "\u034f" in twin else "\\u" not in message  # shown
    assert [a.name for a in accounts.all()] == ["Dana Kim"]
    assert same_person(twin, "Dana Kim") and name_key(twin) == name_key("Dana Kim")


def test_the_terminal_refuses_a_look_alike_before_asking_for_a_password(tmp_path):
    out = tmp_path / "out"
    Accounts(DeskStore(out / "refund-agent.sqlite3")).add("Dana Kim", "approver", "dana-password")
    added = run_cli(out, "users", "add", "Dana Kim\u034f", "--role", "lead")  # no password
    assert added.returncode == 1 and "Traceback" not in added.stderr
    assert len(added.stderr.strip().splitlines()) == 1 and "'Dana Kim' already exists" \
        in added.stderr


def test_capitals_from_another_alphabet_pass_for_latin_ones():
    """Case folded first, a Cyrillic capital К becomes a small к that looks like no Latin
    letter; the skeleton taken before case folding still finds DANA KIM in it."""
    assert same_person("Dana \u041a\u0406\u041c", "Dana Kim")          # КІМ in Cyrillic
    assert same_person("\u0420\u0430\u0441\u043e Ruiz", "Paco Ruiz")    # Расо in Cyrillic
    assert same_person("Dana Kirn", "Dana Kim")                        # rn drawn as m
    assert not same_person("Dana Kim", "Dan Kim") and not same_person("Ana Ruiz", "Lee Park")


NAME = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ '-."),
               min_size=1, max_size=12).filter(lambda n: n.strip())
PAIRS = [(a, b) for a, b in confusable_pairs() if len(a) == 1]
IGNORABLE = st.sampled_from(DEFAULT_IGNORABLE_RANGES).flatmap(lambda r: st.integers(*r)).map(chr)


@given(name=NAME, at=st.integers(0, 12), pair=st.sampled_from(PAIRS),
       hidden=st.lists(st.tuples(st.integers(0, 14), IGNORABLE), max_size=3))
def test_no_look_alike_or_invisible_character_makes_another_person(name, at, pair, hidden):
    """Property (issue 33, 3): a character swapped for one Unicode's confusables table says
    it looks like, or default-ignorable characters put anywhere, never make a name that
    counts as someone else, for four eyes, one's own ticket or a new account."""
    at = min(at, len(name))
    a, b = pair
    one, other = name[:at] + a + name[at:], name[:at] + b + name[at:]
    assert same_person(one, other)
    invisible = one
    for where, char in hidden:
        where = min(where, len(invisible))
        invisible = invisible[:where] + char + invisible[where:]
    assert name_key(invisible) == name_key(one) and same_person(invisible, other)


def _two_person_agent(tmp: Path) -> Agent:
    data = Path(shutil.copytree(DATA, tmp / "data"))
    shop = json.loads((data / "shop.json").read_text())
    shop["desk"] = {"two_person_above": 50, "remind_after_hours": 24}
    (data / "shop.json").write_text(json.dumps(shop))
    settings = Settings(api_key="", data_dir=data, output_dir=tmp / "output", max_retries=2,
                        timeout=30.0)
    return Agent(settings, model=open_model(settings))


def test_one_person_with_a_twin_account_cannot_be_both_people(tmp_path):
    """The issue's case: Dana Kim and an invisible-suffixed twin signed off and approved a
    refund above the two-person amount. A store from before keeps such a pair (both still
    sign in, each with its own password), but they count as one person."""
    agent = _two_person_agent(tmp_path)
    accounts = Accounts(agent.store)
    accounts.add("Dana Kim", "lead", "dana-password")
    accounts.add("Lee Park", "lead", LEE)
    twin = "Dana Kim\u034f"
    with pytest.raises(DecisionRefused, match="'Dana Kim' already exists"):
        accounts.add(twin, "lead", "twin-password")
    # Written into the table as an older release let it be.
    agent.store.execute("INSERT INTO accounts(name, role, limit_cents, password, created_at)"
                        " VALUES (?, 'lead', NULL, ?, ?)",
                        (twin, hash_password("twin-password"), time.time()))
    dana = accounts.sign_in("Dana Kim", "dana-password")
    other = accounts.sign_in(twin, "twin-password")
    assert (dana.name, other.name) == ("Dana Kim", twin)
    assert (accounts.get("Dana Kim").name, accounts.get(twin).name) == ("Dana Kim", twin)
    with pytest.raises(SignInFailed):
        accounts.sign_in(twin, "dana-password")         # each with its own password only
    run = agent.advance(agent.start(
        "maya.chen@example.com", "Order A1043: the coffee maker arrived shattered, and "
        "honestly I also don't want the mugs anymore.").id)       # $66.50, above $50
    (approval,) = agent.store.approvals("pending")
    shown = agent.store.approval(approval.id).fingerprint
    assert agent.decide(approval.id, True, dana.name,
                        fingerprint=shown).status == "pending"   # the sign-off
    with pytest.raises(DecisionRefused, match="second, different person"):
        agent.decide(approval.id, True, other.name,
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.store.approval(approval.id).status == "pending"
    assert agent.payments.refunds() == []
    shown = agent.store.approval(approval.id).fingerprint
    assert agent.decide(approval.id, True, "Lee Park", fingerprint=shown).status == "approved"
    agent.advance(run.id)
    assert len(agent.payments.refunds()) == 1


# -- 9: the sign-in throttle ----------------------------------------------------------------


class Clock:
    """The throttle's clock in a test: time moves only when the test says (never a sleep)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fail(accounts: Accounts, name: str, client: str) -> str:
    with pytest.raises(SignInFailed) as failed:
        accounts.sign_in(name, "guess", client=client)
    return str(failed.value)


def wait_out(accounts: Accounts, clock: Clock, name: str) -> float:
    """Move the clock past the name's wait, if any; the seconds it moved."""
    failures, since = accounts.store.sign_in_failures(name_key(name), 3600.0, now=clock.now)
    wait = max(0.0, sign_in_delay(failures) - since)
    clock.now += wait
    return wait


def test_a_strangers_wrong_passwords_never_lock_the_lead_out(tmp_path):
    """Issue 33, 4: five wrong passwords from one address locked that address out of the name
    for five minutes, so a stranger behind the lead's own proxy or NAT (or any other terminal
    user on the host) kept her out. Now the name waits a while, and then her password works,
    from any address, the stranger's own included."""
    path, clock = tmp_path / "out" / "refund-agent.sqlite3", Clock()
    Accounts(DeskStore(path)).add("Lee Park", "lead", LEE)
    # Eight wrong passwords under several spellings, through two "processes" (two stores on
    # one file), each after the name's wait: one count, shared.
    for name in ["lee park", "LEE PARK", "Lee  Park", "Ｌｅｅ Ｐａｒｋ"] * 2:
        wait_out(Accounts(DeskStore(path), clock), clock, name)
        fail(Accounts(DeskStore(path), clock), name, "page 10.0.0.66")
    # Right after the stranger's last try the name waits, from every address alike...
    for client in ("page 10.0.0.66", "page 10.0.0.7", "terminal"):
        with pytest.raises(SignInFailed, match="Too many wrong passwords.*checked again in"):
            Accounts(DeskStore(path), clock).sign_in("Lee Park", LEE, client=client)
    # ...and once it has passed, the right password works from the stranger's address (the
    # shared NAT) as from her own, and clears the count for everyone.
    assert 0 < wait_out(Accounts(DeskStore(path), clock), clock, "Lee Park") <= SIGN_IN_CAP
    assert Accounts(DeskStore(path), clock).sign_in("Lee Park", LEE, client="page 10.0.0.66").name \
        == "Lee Park"
    assert DeskStore(path).sign_in_failures(name_key("Lee Park"), 3600.0, now=clock.now) == (0, 0.0)
    assert Accounts(DeskStore(path), clock).sign_in("Lee Park", LEE, client="page 10.0.0.7").name \
        == "Lee Park"
    # Every failure is audited by the name as tried, with the client; never the password.
    failed = [e for e in DeskStore(path).audit() if e.event == "sign_in_failed"]
    assert len(failed) == 8 and failed[0].actor == "lee park"
    assert all(e.note == "wrong password from page 10.0.0.66" for e in failed)
    assert not any("guess" in (e.note or "") + e.actor for e in DeskStore(path).audit())
    assert DeskStore(path).verify_audit() is None


def test_the_wait_grows_and_says_in_the_audit_whose_name_was_slowed(tmp_path):
    store, clock = store_at(tmp_path), Clock()
    accounts = Accounts(store, clock)
    accounts.add("Lee Park", "lead", LEE)
    accounts.add("Ana Ruiz", "approver", "ana-password", limit=40)
    waits, messages = [], []
    for _ in range(12):
        waits.append(wait_out(accounts, clock, "Lee Park"))
        messages.append(fail(accounts, "lee park", "page 10.0.0.66"))
        # The name's failures slow nobody else: Ana signs in at once, from the same address.
        assert accounts.sign_in("Ana Ruiz", "ana-password", client="page 10.0.0.66")
    # No wait for the first few, then one that doubles with each wrong password, capped.
    assert waits == [0.0] * SIGN_IN_FREE + [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0]
    assert [sign_in_delay(n) for n in range(1, 14)] == [
        0, 0, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]
    assert messages[SIGN_IN_FREE - 2] == "Wrong name or password."
    assert messages[SIGN_IN_FREE - 1] == ("Wrong name or password. Sign-ins as this name now "
                                          "wait 2 s.")
    assert messages[-1].endswith("now wait 5 min.")
    # A try during the wait is refused unchecked, uncounted and unaudited, saying how long.
    clock.now += 100
    entries = len(store.audit())
    with pytest.raises(SignInFailed, match=r"checked again in 3 min 20 s\.$"):
        accounts.sign_in("Lee Park", LEE, client="terminal")
    assert len(store.audit()) == entries
    slowed = [(e.actor, e.note) for e in store.audit() if e.event == "sign_in_slowed"]
    assert len(slowed) == 12 - SIGN_IN_FREE + 1
    assert slowed[0] == ("lee park", "sign-ins as Lee Park wait 2 s after 3 wrong passwords "
                                     "within 1 h (the latest from page 10.0.0.66)")
    assert slowed[-1][1].startswith("sign-ins as Lee Park wait 5 min after 12 wrong passwords")
    assert store.verify_audit() is None


def test_a_look_alike_spelling_counts_with_the_name_and_shows_in_the_audit(tmp_path):
    store, clock = store_at(tmp_path), Clock()
    accounts = Accounts(store, clock)
    accounts.add("Lee Park", "lead", LEE)
    cyrillic_lee = "L\u0435\u0435 Park"          # CYRILLIC SMALL LETTER IE, twice
    for _ in range(SIGN_IN_FREE):
        fail(accounts, cyrillic_lee, "page 10.0.0.66")
    with pytest.raises(SignInFailed, match="Too many"):
        accounts.sign_in("Lee Park", LEE, client="page 10.0.0.7")
    actors = {e.actor for e in store.audit() if e.event == "sign_in_failed"}
    assert actors == {"l\u0435\u0435 park"}      # the spelling tried, so the attempt is visible
    assert [e.note for e in store.audit() if e.event == "sign_in_slowed"] == [
        "sign-ins as Lee Park wait 2 s after 3 wrong passwords within 1 h (the latest "
        "from page 10.0.0.66)"]


def test_the_terminal_follows_the_same_rule(tmp_path):
    """A stranger's wrong passwords on the page slow the name in the terminal too, for the
    wait only: failures placed with the test's clock just now (the name waits) and long
    enough ago (it does not), read by the command with the database's clock."""
    out = tmp_path / "out"
    store = DeskStore(out / "refund-agent.sqlite3")
    Accounts(store).add("Lee Park", "lead", LEE)

    def stranger(ending: float) -> None:
        """Twelve wrong passwords, each after the wait, the last one at ``ending``."""
        clock = Clock(ending - sum(sign_in_delay(n) for n in range(1, 12)))
        for _ in range(12):
            wait_out(Accounts(store, clock), clock, "Lee Park")
            fail(Accounts(store, clock), "Lee Park", "page 10.0.0.66")
        assert clock.now == ending

    stranger(ending=time.time())
    waiting = run_cli(out, "approve", "--as", "Lee Park", REFUND_AGENT_PASSWORD=LEE)
    assert waiting.returncode == 1 and "Traceback" not in waiting.stderr
    assert "Too many wrong passwords for this name" in waiting.stderr
    store.execute("DELETE FROM sign_in_failures")
    stranger(ending=time.time() - SIGN_IN_CAP - 60)  # the wait is over; the count is not
    passed = run_cli(out, "approve", "--as", "Lee Park", REFUND_AGENT_PASSWORD=LEE)
    assert "Too many" not in passed.stderr and "Wrong name" not in passed.stderr
    assert passed.returncode == 4, passed.stderr                 # signed in; nothing waiting
    assert store.sign_in_failures(name_key("Lee Park"), 3600.0) == (0, 0.0)


def test_schema_7_is_the_throttle_table_and_a_version_5_store_gets_it(tmp_path):
    store = store_at(tmp_path)
    assert 7 in SCHEMA_HISTORY and "sign_in_failures" in SCHEMA_HISTORY[7]
    assert store.sign_in_failures("lee park", 300.0) == (0, 0.0)
    # A store as version 5 left it (no throttle table) is upgraded on open, accounts kept.
    Accounts(store).add("Lee Park", "lead", LEE)
    with sqlite3.connect(store.path) as db:
        db.execute("DROP TABLE sign_in_failures")
        db.execute("PRAGMA user_version = 5")
    upgraded = DeskStore(store.path)
    assert upgraded.sign_in_failures("lee park", 300.0) == (0, 0.0)
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
    assert Accounts(DeskStore(out / "refund-agent.sqlite3")).all() == []   # nothing was added


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
    """The throttle's table, the database's clock and a test's own, and the name check
    under the write lock, on SQLite and PostgreSQL alike."""
    out = tmp_path / "out"
    backend.prepare(out)
    target = backend.url(out) if backend.postgres else out / "refund-agent.sqlite3"
    accounts = Accounts(DeskStore(target))
    accounts.add("Lee Park", "lead", LEE)
    for twin in ("LEE PARK", "L\u00e9e Park", "Lee Park\u034f"):
        with pytest.raises(DecisionRefused, match="already exists"):
            accounts.add(twin, "lead", "other-password")
    for _ in range(SIGN_IN_FREE):
        fail(accounts, "lee park", "page 10.0.0.66")
    other = Accounts(DeskStore(target))   # another process on the same store, another client
    with pytest.raises(SignInFailed, match="Too many"):
        other.sign_in("Lee Park", LEE, client="terminal")
    count, since = other.store.sign_in_failures(name_key("Lee Park"), 300.0)
    assert count == SIGN_IN_FREE and 0 <= since < 60
    clock = Clock(time.time() + 10)     # past the 2 s wait, by a clock of the test's own
    assert Accounts(DeskStore(target), clock).sign_in("Lee Park", LEE, client="terminal").name \
        == "Lee Park"
    assert other.store.sign_in_failures(name_key("Lee Park"), 300.0) == (0, 0.0)
    assert other.store.verify_audit() is None
