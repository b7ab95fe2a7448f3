"""The crash matrix with the real outside systems: refunds on Stripe, email over SMTP.

The same scenarios, kills and baseline comparisons as tests/reliability/test_crash_matrix.py (the
stand-ins'), with every command run with ``REFUND_AGENT_PAYMENTS=stripe`` against a localstripe
server and ``REFUND_AGENT_EMAIL=smtp`` against an aiosmtpd server, both started once for the
module on loopback (tests/helpers/outside_servers.py). Every command also passes the adapters'
own crash points (OUTSIDE_CRASH_POINTS in refund_agent/outside/__init__.py):
``after_provider_refund`` (Stripe made the refund, nothing recorded it: the kill right after
the refund request left, before its answer was written down), ``email_recorded`` (the outbox
recorded the message, the server never got it) and ``after_smtp_send`` (the server took it,
the outbox never marked it sent: SMTP's one window, where the customer may get the message
twice).

Each output folder (each baseline's and each case's) has a shop of its own whose five orders were
paid with fresh charges at localstripe, so every case's refunds are on payments no other case
touched. After each kill and resume, besides :func:`helpers.crash.measure` against the
crash-free baseline, the test asks the servers themselves:

- localstripe: exactly one refund per approved call id (its metadata ``refund_agent_call_id``),
  for the approved amount, the one the ledger names, and no refund nobody approved. localstripe
  ignores ``Idempotency-Key`` and Stripe forgets keys after about a day, so a kill after the
  refund request and a resume *is* the "resumed a day later" case: only the adapter's look-up
  by call id keeps the refund single;
- aiosmtpd: exactly one delivered message per email call the case's commands made, its
  ``Message-ID`` derived from the call key (refund_agent.outside.smtp.message_id), to the sender;
  killed at ``after_smtp_send``, exactly one duplicate with the same Message-ID, and
  ``audit --verify`` says so (a kill at either email point is reported by ``audit --verify``
  before the resume: never silent).

By default SQLite runs the adapters' three points in every command that passes them and every
other point once (the stand-in matrix kills those everywhere); PostgreSQL runs the damaged-item
approval at the adapters' points and the refund and email points around them.
``REFUND_AGENT_OUTSIDE_FULL_MATRIX=1`` runs every case (every point of every command) on both
engines.
"""

from __future__ import annotations

import email
import email.policy
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import cli_env
from helpers.crash import (
    APPROVER,
    PASSES,
    SCENARIOS,
    Baselines,
    assert_held,
    crash_again,
    expect_ok,
    finish_chain,
    measure,
    read_outcome,
    record,
)
from helpers.outside_servers import (
    SMTP_PASSWORD,
    SMTP_USER,
    STRIPE_KEY,
    Mailbox,
    StripeProxy,
    charge,
    localstripe,
    order_totals,
    proxy,
    refunds_of,
    shop_paid_with,
    smtp_server,
    stripe_client,
)
from helpers.pg import Backend

pytest.importorskip("stripe")
pytest.importorskip("localstripe")
pytest.importorskip("aiosmtpd")

from refund_agent.desk.agent import CRASH_POINTS  # noqa: E402
from refund_agent.desk.records import DeskStore
from refund_agent.outside import OUTSIDE_CRASH_POINTS  # noqa: E402
from refund_agent.outside.smtp import message_id  # noqa: E402
from refund_agent.outside.stripe import CALL_ID  # noqa: E402
from refund_agent.store import LEASE_STALE_SECONDS  # noqa: E402

FROM = "help@juniperpine.example"
DAY = 24 * 3600


# -- the cases -----------------------------------------------------------------------------------

def with_outside(points: tuple[str, ...]) -> tuple[str, ...]:
    """A command's crash points with the adapters' own, where the adapters pass them: inside
    the refund (between before_refund and after_refund) and inside the send (before
    after_email)."""
    out: list[str] = []
    for point in points:
        if point == "after_refund":
            out.append("after_provider_refund")
        if point == "after_email":
            out += ["email_recorded", "after_smtp_send"]
        out.append(point)
    return tuple(out)


OUTSIDE_PASSES = {command: with_outside(points) for command, points in PASSES.items()}
ALL_CASES = [(scenario, index, point) for (scenario, index), points in OUTSIDE_PASSES.items()
             for point in points]
# The stand-in points that sit right next to an outside system's call.
NEXT_TO_OUTSIDE = {"after_decision", "before_refund", "after_refund", "after_email"}
FULL_MATRIX = os.environ.get("REFUND_AGENT_OUTSIDE_FULL_MATRIX", "") not in ("", "0")


def first_case_per_point(cases: list[tuple[str, int, str]]) -> set[tuple[str, int, str]]:
    """The first case (in the scenarios' order, cheapest first) that kills at each point."""
    first: dict[str, tuple[str, int, str]] = {}
    for case in cases:
        first.setdefault(case[2], case)
    return set(first.values())


# By default, SQLite: the adapters' points in every command that passes them, and every other
# point once (the stand-in matrix kills those in every command already). PostgreSQL: the
# damaged-item approval, which passes all three adapter points, at those and the points
# around them.
SQLITE_CASES = {case for case in ALL_CASES if case[2] in OUTSIDE_CRASH_POINTS} \
    | first_case_per_point(ALL_CASES)
PG_CASES = {case for case in ALL_CASES if case[:2] == ("approve", 1)
            and (case[2] in OUTSIDE_CRASH_POINTS or case[2] in NEXT_TO_OUTSIDE)}
EVERY_POINT = set(CRASH_POINTS) | set(OUTSIDE_CRASH_POINTS)


def test_every_crash_point_is_in_the_outside_matrix():
    """A point the adapters' commands pass but no case kills would go untested: the cases that
    run by default kill at every stand-in point and every adapter point, on both engines."""
    assert {p for _s, _i, p in ALL_CASES} == EVERY_POINT
    assert {p for _s, _i, p in SQLITE_CASES} == EVERY_POINT
    assert {p for _s, _i, p in PG_CASES} >= set(OUTSIDE_CRASH_POINTS)
    # Every command that refunds or emails passes the adapters' points, and is killed there.
    for (scenario, index), points in PASSES.items():
        outside = set(OUTSIDE_PASSES[scenario, index]) - set(points)
        assert outside == ({"after_provider_refund"} if "after_refund" in points else set()) \
            | ({"email_recorded", "after_smtp_send"} if "after_email" in points else set())
        assert {(scenario, index, p) for p in outside} <= SQLITE_CASES


# -- the servers, and the backend that points every command at them ------------------------------

@dataclass
class Servers:
    """localstripe and aiosmtpd for the module, and the shop each output folder was paid with."""

    stripe_url: str
    client: Any
    smtp_port: int
    mailbox: Mailbox
    shops_root: Path
    refs: dict[Path, dict[str, str]] = field(default_factory=dict)
    _data: dict[Path, Path] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {"REFUND_AGENT_PAYMENTS": "stripe", "STRIPE_API_KEY": STRIPE_KEY,
                "STRIPE_API_BASE": self.stripe_url, "STRIPE_TIMEOUT_SECONDS": "10",
                "REFUND_AGENT_EMAIL": "smtp", "SMTP_HOST": "127.0.0.1",
                "SMTP_PORT": str(self.smtp_port), "SMTP_USER": SMTP_USER,
                "SMTP_PASSWORD": SMTP_PASSWORD, "SMTP_SECURITY": "none",
                "REFUND_AGENT_SMTP_FROM": FROM, "SMTP_TIMEOUT_SECONDS": "10"}

    def shop_for(self, output: Path) -> Path:
        """The shop data ``output``'s commands read: made on first use, every order paid with a
        new charge at localstripe (so no two folders share a payment)."""
        key = Path(output).resolve()
        if key not in self._data:
            refs = {order: charge(self.client, cents) for order, cents in order_totals().items()}
            self.refs[key] = refs
            self._data[key] = shop_paid_with(self.shops_root / f"shop-{len(self._data)}", refs)
        return self._data[key]


class OutsideBackend(Backend):
    """A backend (SQLite, or a database of the session's PostgreSQL cluster) whose commands
    use Stripe and SMTP on the module's servers, each output folder with its own paid shop."""

    def __init__(self, inner: Backend, servers: Servers) -> None:
        super().__init__(inner.name, inner.cluster)
        self.servers = servers

    def env(self, output: Path) -> dict[str, str]:
        return {**super().env(output), **self.servers.env(),
                "REFUND_AGENT_DATA": str(self.servers.shop_for(output))}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Servers:
    root = tmp_path_factory.mktemp("outside-servers")
    with localstripe(root) as url, smtp_server() as (port, box):
        yield Servers(url, stripe_client(url), port, box, root)


@pytest.fixture(scope="module")
def outside_baselines(tmp_path_factory: pytest.TempPathFactory, backend: Backend,
                      servers: Servers) -> Baselines:
    """Crash-free runs of each scenario with Stripe and SMTP, on this backend."""
    return Baselines(tmp_path_factory.mktemp(f"outside-baselines-{backend.name}"),
                     OutsideBackend(backend, servers))


# -- what the servers themselves hold ------------------------------------------------------------

def at_stripe(servers: Servers, output: Path, outcome: Any) -> dict[str, int]:
    """What localstripe holds for the payments this folder's refunds touched, against the
    approvals (all zero = one refund per approved call id, for its amount, in the ledger)."""
    payments = {r["payment"] for r in outcome.refunds if r.get("payment")}
    payments |= set(servers.refs[Path(output).resolve()].values())
    listed = [r for ref in sorted(payments) for r in refunds_of(servers.client, ref)]
    by_call = Counter((r.get("metadata") or {}).get(CALL_ID) for r in listed)
    approved = {a["id"]: a for a in outcome.approvals if a["status"] == "approved"}
    ledger = {r["idempotency_key"]: r["refund_id"] for r in outcome.refunds}
    return {
        "stripe_refunds_not_once": sum(1 for key in approved if by_call[key] != 1),
        "stripe_refunds_without_approval": sum(n for key, n in by_call.items()
                                               if key not in approved),
        "stripe_amount_mismatch": sum(
            1 for r in listed if r["metadata"].get(CALL_ID) in approved
            and r["amount"] != approved[r["metadata"][CALL_ID]]["amount_cents"]),
        "stripe_refund_not_the_ledgers": sum(
            1 for r in listed if ledger.get(r["metadata"].get(CALL_ID)) != r["id"]),
        "stripe_refunds_not_succeeded": sum(1 for r in listed if r["status"] != "succeeded"),
    }


def at_smtp(delivered: list[Any], outcome: Any, before: set[str], point: str) -> dict[str, int]:
    """What aiosmtpd accepted while the case ran, against the email calls its commands made
    (those not already in the folder it started from). Killed at ``after_smtp_send``, one
    message may arrive twice, with its one Message-ID; nowhere else."""
    made = {e["idempotency_key"]: e for e in outcome.emails if e["idempotency_key"] not in before}
    want = {message_id(key, FROM): e for key, e in made.items()}
    ids = Counter(m["Message-ID"].strip() for m in delivered)
    duplicates = sum(n - 1 for n in ids.values())
    return {
        "smtp_emails_not_delivered": sum(1 for mid in want if ids[mid] == 0),
        "smtp_messages_for_no_call": sum(n for mid, n in ids.items() if mid not in want),
        "smtp_duplicates_outside_the_window":
            max(0, duplicates - (1 if point == "after_smtp_send" else 0)),
        "smtp_message_id_not_the_calls": sum(1 for key, e in made.items()
                                             if e["message_id"] != message_id(key, FROM)),
        "smtp_to_someone_else": sum(
            1 for m in delivered if m["Message-ID"].strip() in want
            and m["To"] != want[m["Message-ID"].strip()]["request"]["to"]),
    }


# -- kill, resume, check -------------------------------------------------------------------------

def crash_again_outside(baselines: Baselines, output: Path, point: str) -> int:
    """Resume with the same crash point once more; returns the extra kills.

    ``email_recorded`` is reached again at the same spot (the record is there, the mark is not),
    so the resume dies there again, harmlessly: nothing was handed to the server.
    ``after_provider_refund`` is never reached again: the resume finds the refund at Stripe by
    its call id and creates nothing, so it passes. ``after_smtp_send`` is not repeated: each
    kill there is one more message the customer may get twice (the window), and one is the
    case. The stand-ins' points repeat as in the stand-in matrix (helpers.crash.crash_again).
    """
    if point == "email_recorded":
        again = baselines.cli(output, "resume", REFUND_AGENT_CRASH_AT=point)
        assert again.returncode == -9, f"resume did not reach {point} again:\n{again.stdout}"
        return 1
    if point == "after_provider_refund":
        expect_ok(baselines.cli(output, "resume", REFUND_AGENT_CRASH_AT=point),
                  "resume with after_provider_refund (the refund is found, not made again)")
        return 0
    if point == "after_smtp_send":
        return 0
    return crash_again(output, point, baselines.backend)


_BEFORE_KEYS: dict[tuple[str, str, int], set[str]] = {}


def email_keys_before(baselines: Baselines, scenario: str, index: int) -> set[str]:
    """The email calls already in the folder a case of command ``index`` starts from."""
    key = (baselines.backend.name, scenario, index)
    if key not in _BEFORE_KEYS:
        before = baselines.get(scenario).before[index]
        _BEFORE_KEYS[key] = {e["idempotency_key"] for e in baselines.read(before).emails}
    return _BEFORE_KEYS[key]


def kill_resume_check(baselines: Baselines, servers: Servers, scenario: str, index: int,
                      point: str, tmp_path: Path) -> tuple[int, dict[str, int]]:
    """Kill command ``index`` at ``point``, resume, run the rest; (kills, what broke)."""
    base = baselines.get(scenario)
    before = email_keys_before(baselines, scenario, index)
    output = baselines.copy(base.before[index], tmp_path / "output")
    mark = len(servers.mailbox.messages)
    command = SCENARIOS[scenario][index]
    crashed = baselines.cli(output, *command, REFUND_AGENT_CRASH_AT=point)
    assert crashed.returncode == -9, (
        f"{' '.join(command)} was meant to die at {point} but exited {crashed.returncode}:\n"
        f"{crashed.stdout}\n{crashed.stderr}")
    assert f"[crash point {point}:" in crashed.stderr and "Traceback" not in crashed.stderr
    if point in ("email_recorded", "after_smtp_send"):
        # Never silent: before anyone resumes, the audit names the message recorded and not
        # marked sent (the server may or may not have it).
        told = baselines.cli(output, "audit", "--verify")
        assert told.returncode == 1 and "never marked sent" in told.stdout, told.stdout
    kills = 1 + crash_again_outside(baselines, output, point)
    finish_chain(output, scenario, index, baselines.backend)
    outcome = baselines.read(output)
    metrics = measure(outcome, base.outcome)
    metrics |= at_stripe(servers, output, outcome)
    delivered = servers.mailbox.messages[mark:]
    metrics |= at_smtp(delivered, outcome, before, point)
    if point == "after_smtp_send":
        # The window: the message reached the server before the kill and again on resume,
        # one Message-ID twice, and the audit says the customer may have it twice.
        twice = [mid for mid, n in Counter(m["Message-ID"].strip() for m in delivered).items()
                 if n == 2]
        assert len(twice) == 1, [m["Message-ID"] for m in delivered]
        verified = baselines.cli(output, "audit", "--verify")
        assert verified.returncode == 0 and "may have it twice" in verified.stdout \
            and twice[0] in verified.stdout, verified.stdout
    elif point in OUTSIDE_CRASH_POINTS:
        # After the resume the ledger agrees with Stripe's own list and every email is marked
        # sent. Killed at email_recorded, the message reached the server once (checked above),
        # but the resume could not know that no earlier attempt had handed it over, so the
        # audit says, conservatively, that the customer may have it twice; after a refund
        # kill it has nothing to say about email.
        verified = baselines.cli(output, "audit", "--verify")
        assert verified.returncode == 0, verified.stdout
        assert ("may have it twice" in verified.stdout) == (point == "email_recorded"), \
            verified.stdout
    return kills, metrics


@pytest.mark.parametrize(("scenario", "index", "point"), ALL_CASES,
                         ids=[f"{s}-{SCENARIOS[s][i][0]}-{p}" for s, i, p in ALL_CASES])
def test_crash_then_resume_with_stripe_and_smtp(scenario: str, index: int, point: str,
                                                outside_baselines: Baselines, servers: Servers,
                                                tmp_path: Path):
    """Killed at ``point`` in the scenario's command ``index``, resumed: nothing happened twice
    or went missing, in our records and at localstripe and aiosmtpd."""
    backend = outside_baselines.backend
    if not FULL_MATRIX and (scenario, index, point) not in (
            PG_CASES if backend.postgres else SQLITE_CASES):
        pytest.skip("not in the default selection (every point is killed in it on both "
                    "engines); REFUND_AGENT_OUTSIDE_FULL_MATRIX=1 runs every case")
    kills, metrics = kill_resume_check(outside_baselines, servers, scenario, index, point,
                                       tmp_path)
    command = " ".join(SCENARIOS[scenario][index])
    record("crash_matrix", scenario=f"{scenario} (Stripe + SMTP)", command=command,
           point=point, killed=True, kills=kills, backend=backend.name, **metrics)
    assert_held(metrics, f"Stripe + SMTP: {scenario} / {command} / {point}")


def test_the_server_checks_catch_what_they_claim_to(outside_baselines: Baselines,
                                                   servers: Servers, tmp_path: Path):
    """at_stripe and at_smtp are only worth something if they fail on a broken outcome: a
    refund twice or nobody's at localstripe, a message lost, twice, foreign or misaddressed."""
    if outside_baselines.backend.postgres:
        pytest.skip("the checks read the servers, not the store: once, on SQLite, is enough")
    base = outside_baselines.get("approve")
    before = email_keys_before(outside_baselines, "approve", 1)
    output = outside_baselines.copy(base.before[1], tmp_path / "output")
    mark = len(servers.mailbox.messages)
    expect_ok(outside_baselines.cli(output, "approve", "--as", APPROVER), "approve")
    outcome = outside_baselines.read(output)
    delivered = servers.mailbox.messages[mark:]
    assert delivered and not any(at_smtp(delivered, outcome, before, "after_email").values())
    assert not any(at_stripe(servers, output, outcome).values())

    assert at_smtp([], outcome, before, "after_email")["smtp_emails_not_delivered"] == \
        len(delivered)
    twice = [*delivered, delivered[0]]
    assert at_smtp(twice, outcome, before, "after_email")[
        "smtp_duplicates_outside_the_window"] == 1
    assert at_smtp(twice, outcome, before, "after_smtp_send")[
        "smtp_duplicates_outside_the_window"] == 0          # the documented window
    assert at_smtp([*twice, delivered[0]], outcome, before, "after_smtp_send")[
        "smtp_duplicates_outside_the_window"] == 1          # ...holds one duplicate, not two
    stranger = email.message_from_bytes(delivered[0].as_bytes(), policy=email.policy.default)
    stranger.replace_header("To", "someone.else@example.com")
    assert at_smtp([stranger], outcome, before, "after_email")["smtp_to_someone_else"] == 1
    stranger.replace_header("Message-ID", "<other-call.refund-agent@juniperpine.example>")
    assert at_smtp([*delivered, stranger], outcome, before, "after_email")[
        "smtp_messages_for_no_call"] == 1

    (approval,) = [a for a in outcome.approvals if a["status"] == "approved"]
    ref = servers.refs[output.resolve()]["A1043"]
    servers.client.v1.refunds.create(params={"charge": ref, "amount": 100,
                                             "metadata": {CALL_ID: approval["id"]}})
    broken = at_stripe(servers, output, outcome)
    assert broken["stripe_refunds_not_once"] == 1 and broken["stripe_amount_mismatch"] == 1
    assert broken["stripe_refund_not_the_ledgers"] == 1
    servers.client.v1.refunds.create(params={"charge": ref, "amount": 100})
    assert at_stripe(servers, output, outcome)["stripe_refunds_without_approval"] == 1


# -- a resume a day later ------------------------------------------------------------------------

def test_killed_after_the_refund_request_and_resumed_a_day_later(outside_baselines: Baselines,
                                                                servers: Servers,
                                                                tmp_path: Path):
    """Killed right after Stripe made the refund (after_provider_refund), and the run's lease
    left a day old, held in the name of a process id that is alive again (reused after a
    reboot): the lease is taken over as stale, not because its holder died, and the resume finds
    the refund at Stripe by its call id. localstripe ignores Idempotency-Key, as Stripe itself
    does once a key is a day old, so only the look-up keeps it to one refund."""
    base = outside_baselines.get("approve")
    output = outside_baselines.copy(base.before[1], tmp_path / "output")
    crashed = outside_baselines.cli(output, "approve", "--as", APPROVER,
                                    REFUND_AGENT_CRASH_AT="after_provider_refund")
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    backend = outside_baselines.backend
    store = DeskStore(backend.target(output))
    (run,) = store.runs()
    assert run.lease_pid is not None   # the killed process never let go of it
    # A live process (init) holds it, as the killed one's pid would be reused after a reboot.
    store.execute("UPDATE runs SET lease_pid = 1 WHERE id = ?", (run.id,))
    store.close()
    assert "Nothing to resume" in outside_baselines.cli(output, "resume").stdout  # fresh: kept
    store = DeskStore(backend.target(output))
    store.execute("UPDATE runs SET lease_at = lease_at - ? WHERE id = ?",
                  (DAY + LEASE_STALE_SECONDS, run.id))
    store.close()
    resumed = outside_baselines.cli(output, "resume")
    expect_ok(resumed, "resume a day later")
    assert "already made; reused, not repeated" in resumed.stdout, resumed.stdout
    outcome = read_outcome(output, backend)
    metrics = measure(outcome, base.outcome) | at_stripe(servers, output, outcome)
    assert [e["event"] for e in outcome.audit if e["event"] in ("issued", "reused")] == \
        ["reused"]
    verified = outside_baselines.cli(output, "audit", "--verify")
    assert verified.returncode == 0, verified.stdout
    record("crash_matrix", scenario="approve (Stripe + SMTP)", command="approve, resume",
           point="after_provider_refund + a day-old lease", killed=True, kills=1,
           backend=backend.name, **metrics)
    assert_held(metrics, "resumed a day later")


class _Holding(StripeProxy):
    """Keeps the answer to POST /v1/refunds: Stripe made the refund, and the client waits for
    an answer that does not come."""

    release = threading.Event()

    def on_refund(self, body: bytes) -> None:
        self.forward("POST", body)
        self.release.wait(60)
        self.hang_up()


def test_killed_while_waiting_for_stripes_answer(outside_baselines: Baselines,
                                                 servers: Servers, tmp_path: Path):
    """Not a named crash point: the process is SIGKILLed while its refund request is at Stripe,
    after Stripe made the refund and before any answer reached it. The resume (days later, as
    far as Stripe's keys go: localstripe ignores them) finds the refund by its call id: one
    refund, audited reused, and the rest as in the crash-free run."""
    _Holding.release.clear()
    with proxy(_Holding, servers.stripe_url) as held:
        try:
            base = outside_baselines.get("approve")
            before = email_keys_before(outside_baselines, "approve", 1)
            output = outside_baselines.copy(base.before[1], tmp_path / "output")
            backend = outside_baselines.backend
            env = {**backend.env(output), "STRIPE_API_BASE": held}
            ref = servers.refs[output.resolve()]["A1043"]
            mark = len(servers.mailbox.messages)
            proc = subprocess.Popen([sys.executable, "-m", "refund_agent", "approve", "--as",
                                     APPROVER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=cli_env(output, **env))
            deadline = time.monotonic() + 60
            while not refunds_of(servers.client, ref):   # Stripe has it; the answer is held
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=10) == -signal.SIGKILL
            proc.communicate()
        finally:
            _Holding.release.set()
    finish_chain(output, "approve", 1, backend)
    outcome = read_outcome(output, backend)
    metrics = measure(outcome, base.outcome) | at_stripe(servers, output, outcome)
    metrics |= at_smtp(servers.mailbox.messages[mark:], outcome, before, "after_email")
    assert [e["event"] for e in outcome.audit if e["event"] in ("issued", "reused")] == \
        ["reused"]
    record("crash_matrix", scenario="approve (Stripe + SMTP)", command="approve",
           point="while waiting for Stripe's answer", killed=True, kills=1,
           backend=backend.name, **metrics)
    assert_held(metrics, "killed while waiting for Stripe's answer")


# -- two approvers at once -----------------------------------------------------------------------

def test_approvers_at_once_make_one_stripe_refund_on_postgresql(pg_cluster, servers: Servers,
                                                                tmp_path: Path):
    """Three `approve` commands at once on one PostgreSQL store (SQLite's is
    test_stripe.py::test_two_approvers_at_once_make_one_refund): one decision lands, the others
    exit 3 saying who won, and localstripe holds one refund, for the approved amount."""
    backend = OutsideBackend(Backend("postgresql", pg_cluster), servers)
    output = tmp_path / "output"
    env = backend.prepare(output)
    expect_ok(subprocess.run([sys.executable, "-m", "refund_agent", "sample", "damaged"],
                             capture_output=True, text=True, timeout=60,
                             env=cli_env(output, **env)), "sample damaged")
    store = DeskStore(backend.target(output))
    (approval,) = store.approvals("pending")
    store.close()
    names = ["Dana Kim", "Sam Ortiz", "Lee Park"]
    procs = [subprocess.Popen([sys.executable, "-m", "refund_agent", "approve", "--id",
                               approval.id, "--as", name], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=cli_env(output, **env))
             for name in names]
    done = [(p.wait(timeout=90), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = [code for code, _o, _e in done]
    assert sorted(codes) == [0, 3, 3], done
    assert all("Traceback" not in err for _c, _o, err in done)
    winner = names[codes.index(0)]
    for code, _o, err in done:
        if code == 3:
            assert f"already approved by {winner} at " in err, err
    outcome = read_outcome(output, backend)
    metrics = measure(outcome) | at_stripe(servers, output, outcome)
    made = refunds_of(servers.client, servers.refs[output.resolve()]["A1043"])
    assert len(made) == 1 and made[0]["metadata"][CALL_ID] == approval.id
    assert made[0]["amount"] == approval.amount_cents == 4800
    record("races", case="approve commands at once (Stripe)", rounds=1, racers=3,
           decisions_per_round=1, lost_decisions=0, double_decisions=0,
           duplicate_refunds=len(made) - 1, backend=backend.name)
    assert_held(metrics, "approvers at once, Stripe on PostgreSQL")
