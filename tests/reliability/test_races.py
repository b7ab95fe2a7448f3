"""Races between processes: deciding one approval at once, advancing one run at once.

The racers are real processes with their own database connections, on each backend (SQLite,
and a database per output folder on the throwaway PostgreSQL server, see tests/helpers/pg.py). To
make them start together without sleeping, each is a long-lived worker that blocks reading its
stdin; a round begins when the test writes one command line to every worker's pipe in a tight
loop, so they all wake within microseconds of each other and race for the same row.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import DATA, cli_env, run_cli
from helpers.crash import read_outcome, record
from helpers.pg import Backend

from refund_agent import Settings
from refund_agent.desk import Agent, Shop
from refund_agent.desk.records import DeskStore
from refund_agent.desk.tools import IssueRefund, ShopTools
from refund_agent.errors import AlreadyDecided, RunBusy
from refund_agent.models import RunStatus
from refund_agent.providers.client import open_model
from refund_agent.store import LEASE_STALE_SECONDS

_WORKER = r"""
import json, os, sys, uuid
from pathlib import Path
from refund_agent.config import load_settings
from refund_agent.desk import Agent
from refund_agent.errors import RefundAgentError

agents = {}
def agent_for(output, db):
    if output not in agents:
        agents[output] = Agent(load_settings().with_(output_dir=Path(output), database_url=db))
    return agents[output]

print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    result = {"pid": os.getpid(), "by": cmd.get("by")}
    try:
        agent = agent_for(cmd["output"], cmd.get("db", ""))
        if cmd["op"] == "warm":
            agent.model
            agent.shop.orders
            result.update(ok=True)
        elif cmd["op"] == "decide":
            decided = agent.decide(cmd["id"], cmd["approve"], cmd["by"], cmd.get("note"),
                                   fingerprint=agent.store.approval(cmd["id"]).fingerprint)
            result.update(ok=True, status=decided.status)
        elif cmd["op"] == "advance":
            before = len(agent.model.server.requests)
            run = agent.advance(cmd["run"])
            result.update(ok=True, status=run.status.value,
                          requests=len(agent.model.server.requests) - before)
        elif cmd["op"] == "acquire":
            agent.store.acquire(cmd["run"], uuid.uuid4().hex)
            result.update(ok=True)
    except RefundAgentError as exc:
        result.update(ok=False, kind=type(exc).__name__, error=str(exc))
    except Exception as exc:
        import traceback
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result.update(ok=False, kind=type(exc).__name__,
                      error=f"{exc!r} at {where.filename}:{where.lineno}")
    print(json.dumps(result), flush=True)
"""


class Workers:
    """N worker processes that each run one command per line written to them."""

    def __init__(self, n: int, output: Path, backend: Backend) -> None:
        self.backend = backend
        self.procs = [subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env=cli_env(output))
                      for _ in range(n)]
        self.pids = [json.loads(p.stdout.readline())["ready"] for p in self.procs]

    def _db(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """The command with the database of its output folder (PostgreSQL), if any."""
        db = self.backend.url(Path(cmd["output"])) if self.backend.postgres else ""
        return {**cmd, "db": db}

    def all_at_once(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for proc, cmd in zip(self.procs, commands, strict=True):
            proc.stdin.write(json.dumps(self._db(cmd)) + "\n")
        for proc in self.procs:   # the start signal: every flush within microseconds
            proc.stdin.flush()
        return [json.loads(proc.stdout.readline()) for proc in self.procs]

    def one(self, i: int, cmd: dict[str, Any]) -> dict[str, Any]:
        self.procs[i].stdin.write(json.dumps(self._db(cmd)) + "\n")
        self.procs[i].stdin.flush()
        return json.loads(self.procs[i].stdout.readline())

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.stdin.close()
                proc.wait(timeout=30)


@pytest.fixture
def workers(tmp_path: Path, backend: Backend):
    made: list[Workers] = []

    def make(n: int, output: Path | None = None) -> Workers:
        w = Workers(n, output or tmp_path / "output", backend)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def _queue_refund(output: Path, backend: Backend) -> tuple[str, str]:
    """A run waiting on Maya's $48 refund, written the way the agent writes it (no model)."""
    store = DeskStore(backend.target(output))
    run = store.create_run(sender="maya.chen@example.com", sender_name="Maya Chen",
                           subject="Coffee maker arrived cracked", kind="damaged",
                           email="My order A1043 arrived with the coffee maker cracked.")
    call_id, response_id = f"call_{uuid.uuid4().hex}", f"resp_{uuid.uuid4().hex}"
    args = {"order_id": "A1043", "lines": [{"line": "POUR-GLS-01", "reason": "damaged"}],
            "amount": None, "summary": "Cracked coffee maker, in full."}
    lease = store.acquire(run.id, uuid.uuid4().hex)
    store.record_response(lease, response_id=response_id,
                          calls=[(call_id, "issue_refund", json.dumps(args))], steps=[],
                          usage={}, replies_sent=[])
    tools = ShopTools(Shop(DATA), run.sender, store.held_lines)
    approval = store.queue_approval(
        lease, response_id=response_id, call_id=call_id, subject="A1043",
        title=args["summary"], customer=run.sender,
        price=lambda held: tools.quote(IssueRefund.model_validate(args), held))
    store.release(lease, RunStatus.WAITING)
    assert approval.amount_cents == 4800, approval
    store.close()
    return run.id, approval.id


RACERS = 4


# -- opening ------------------------------------------------------------------------------------

def test_many_processes_open_a_new_store_at_once(workers, tmp_path: Path):
    """The first use of an output folder, by several processes at the same moment (the web app
    and a terminal, say). Switching a new SQLite file to WAL answers "locked" at once instead
    of waiting, so without a retry one of them would fail."""
    rounds, w = 25, workers(RACERS)
    for i in range(rounds):
        output = tmp_path / f"fresh-{i}"
        w.backend.prepare(output)  # on PostgreSQL an empty database: the schema is made at once
        results = w.all_at_once([{"op": "warm", "output": str(output)}] * RACERS)
        assert all(r["ok"] for r in results), (i, [r.get("error") for r in results])
        assert DeskStore(w.backend.target(output)).integrity_ok()
    record("races", case="open a new store at once", rounds=rounds, racers=RACERS,
           failed_opens=0, backend=w.backend.name)


# -- deciding ------------------------------------------------------------------------------------

DECIDE_ROUNDS = 30


def test_many_processes_decide_one_approval_at_once(workers, tmp_path: Path):
    """Each round: four processes decide one approval at once, approve vs approve (even rounds)
    or two approvals vs two rejections (odd rounds). Exactly one decision lands; the others
    are told who won and are audited as ignored."""
    w = workers(RACERS)
    winners: Counter[str] = Counter()
    for i in range(DECIDE_ROUNDS):
        # A fresh folder per round: approved refunds on one order would otherwise (rightly)
        # use up what the policy allows for it, and later rounds would be refused instead.
        output = tmp_path / f"round-{i}"
        output.mkdir()
        w.backend.prepare(output)
        w.all_at_once([{"op": "warm", "output": str(output)}] * RACERS)
        run_id, approval_id = _queue_refund(output, w.backend)
        approve = [True] * RACERS if i % 2 == 0 else [True, False] * (RACERS // 2)
        results = w.all_at_once([
            {"op": "decide", "output": str(output), "id": approval_id, "approve": a,
             "by": f"person-{k}", "note": None if a else "Not covered."}
            for k, a in enumerate(approve)])

        won = [r for r in results if r["ok"]]
        assert len(won) == 1, (i, results)
        store = DeskStore(w.backend.target(output))
        approval = store.approval(approval_id)
        assert approval.decided_by == won[0]["by"] and approval.status == won[0]["status"]
        told = str(AlreadyDecided(approval_id, approval.status, approval.decided_by,
                                  approval.decided_at, noun="refund"))
        assert told.startswith(f"This refund was already {approval.status} by "
                               f"{approval.decided_by} at ")
        for r in results:
            if not r["ok"]:
                assert r["kind"] == "AlreadyDecided", r
                assert r["error"] == told, r
        events = Counter(e.event for e in store.audit() if e.approval_id == approval_id)
        assert events == Counter({"requested": 1, approval.status: 1, "ignored": RACERS - 1})
        ignored = [e for e in store.audit() if e.event == "ignored"]
        assert {e.actor for e in ignored} == {r["by"] for r in results if not r["ok"]}
        assert all(f"already {approval.status} by {approval.decided_by}" in e.note
                   for e in ignored)
        assert sum(1 for s in store.steps(run_id) if s.kind == "decision") == 1
        assert store.verify_audit() is None and store.integrity_ok()
        store.close()
        winners[won[0]["by"]] += 1
    record("races", case="decide one approval at once", rounds=DECIDE_ROUNDS,
           racers=RACERS, decisions_per_round=1, lost_decisions=0, double_decisions=0,
           winners=dict(winners), backend=w.backend.name)


def test_approve_commands_race_from_the_terminal(tmp_path: Path, backend: Backend):
    """The real command, three at once per round, with two refunds waiting: one decision lands on
    the refund named; the others exit 3 with "already approved by X at ..." and no traceback,
    and the other waiting refund is untouched."""
    rounds = 4
    for i in range(rounds):
        output = tmp_path / f"round-{i}"
        env = backend.prepare(output)
        assert run_cli(output, "sample", "damaged", **env).returncode == 0
        approval_id = DeskStore(backend.target(output)).approvals("pending")[0].id
        assert run_cli(output, "sample", "angry", **env).returncode == 0  # a second one waits
        (other,) = [a for a in DeskStore(backend.target(output)).approvals("pending")
                    if a.id != approval_id]
        names = ["Dana", "Sam", "Lee"]
        argv = [[sys.executable, "-m", "refund_agent", "approve", "--id", approval_id,
                 "--as", n] for n in names]
        argv[2][3] = "reject"
        argv[2] += ["--note", "Not covered."]
        procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=cli_env(output, **env)) for a in argv]
        done = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
        codes = [c for c, _o, _e in done]
        assert sorted(codes) == [0, 3, 3], done
        assert all("Traceback" not in e for _c, _o, e in done)
        out = read_outcome(output, backend)
        (approval,) = [a for a in out.approvals if a["id"] == approval_id]
        winner = names[codes.index(0)]
        assert approval["decided_by"] == winner
        for code, _o, err in done:
            if code == 3:
                assert f"already {approval['status']} by {winner} at " in err, err
        untouched = DeskStore(backend.target(output)).approval(other.id)
        assert untouched.status == "pending" and untouched.decided_by is None
        out.runs = [r for r in out.runs if r["id"] == approval["run_id"]]
        out.emails = [e for e in out.emails if e["request"]["to"] == "maya.chen@example.com"]
        assert [r["status"] for r in out.runs] == ["done"]
        assert len(out.refunds) == (1 if approval["status"] == "approved" else 0)
        assert [r["request"]["amount_cents"] for r in out.refunds] == [
            4800] * len(out.refunds)
        assert len(out.emails) == 1
        assert Counter(e["event"] for e in out.audit)["ignored"] == 2
        assert out.audit_problem is None and out.integrity == "ok"
    record("races", case="approve/reject commands at once (terminal)", rounds=rounds, racers=3,
           decisions_per_round=1, lost_decisions=0, double_decisions=0, duplicate_refunds=0,
           backend=backend.name)


# -- advancing -----------------------------------------------------------------------------------

ADVANCE_ROUNDS = 10


def test_many_processes_advance_one_run_at_once(workers, tmp_path: Path):
    """Three processes resume the same crashed run at once; exactly one advances it (makes the
    model requests and writes the timeline), the others are told which process holds it."""
    output = tmp_path / "output"
    w = workers(3, output)
    w.backend.prepare(output)
    settings = Settings(api_key="", data_dir=DATA, output_dir=output, max_retries=2, timeout=30,
                        database_url=w.backend.url(output) if w.backend.postgres else "")
    agent = Agent(settings, model=open_model(settings))
    w.all_at_once([{"op": "warm", "output": str(output)}] * 3)
    busy = 0
    for i in range(ADVANCE_ROUNDS):
        run = agent.start_sample("damaged")   # as if the process that started it had died
        results = w.all_at_once([{"op": "advance", "output": str(output), "run": run.id}] * 3)
        advanced = [r for r in results if r["ok"] and r["requests"]]
        assert len(advanced) == 1, (i, results)
        assert advanced[0]["requests"] == 3 and advanced[0]["status"] == "waiting"
        for r in results:
            if not r["ok"]:
                assert r["kind"] == "RunBusy", r
                assert f"being advanced by process {advanced[0]['pid']}" in r["error"], r
                busy += 1
            elif not r["requests"]:
                assert r["status"] == "waiting"   # came after the winner: nothing left to do
        final = agent.store.run(run.id)
        assert final.status == RunStatus.WAITING and final.requests == 3
        kinds = [s.kind for s in agent.store.steps(run.id) if s.kind != "restart"]
        assert kinds.count("call") == 3 and kinds.count("result") == 2
        assert kinds.count("approval") == 1
        (approval,) = [a for a in agent.store.approvals("pending") if a.run_id == run.id]
        # The pending proposal holds the coffee maker's line; free it for the next round's
        # ticket (which would otherwise, rightly, be declined) as a person would: reject it.
        agent.decide(approval.id, False, "reset", f"Round {i} is over.",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    assert busy >= ADVANCE_ROUNDS, "the racers never actually overlapped"
    record("races", case="advance one run at once", rounds=ADVANCE_ROUNDS, racers=3,
           advanced_per_round=1, told_busy=busy, duplicate_requests=0, backend=w.backend.name)


def test_a_lease_held_by_a_live_process_blocks_and_a_dead_one_is_taken_over(workers,
                                                                             tmp_path: Path):
    output = tmp_path / "output"
    holder, other = workers(1, output), workers(1, output)
    env = holder.backend.prepare(output)
    assert run_cli(output, "sample", "damaged", **env,
                   REFUND_AGENT_CRASH_AT="after_run_created").returncode == -9
    run_id = DeskStore(holder.backend.target(output)).runs()[0].id
    assert holder.one(0, {"op": "acquire", "output": str(output), "run": run_id})["ok"]
    holder_pid = holder.pids[0]

    blocked = other.one(0, {"op": "advance", "output": str(output), "run": run_id})
    assert blocked["kind"] == "RunBusy"
    assert f"being advanced by process {holder_pid}" in blocked["error"]
    assert "Nothing to resume" in run_cli(output, "resume", **env).stdout  # its owner lives
    cli = run_cli(output, "resume", "--run", run_id, **env)
    assert cli.returncode == 1 and "Traceback" not in cli.stderr
    assert f"being advanced by process {holder_pid}" in cli.stderr

    holder.procs[0].send_signal(signal.SIGKILL)
    assert holder.procs[0].wait(timeout=10) == -signal.SIGKILL
    taken = other.one(0, {"op": "advance", "output": str(output), "run": run_id})
    assert taken["ok"] and taken["status"] == "waiting" and taken["requests"] == 3
    store = DeskStore(holder.backend.target(output))
    restarts = [s.data for s in store.steps(run_id) if s.kind == "restart"]
    # Schema 15: what kind of process took it over, from what, and that the holder died
    # holding it (cut off), so the ticket words it as a takeover, not a server restart.
    assert restarts[-1] == {"previous_pid": holder_pid, "pid": other.pids[0],
                            "front": "terminal", "previous_front": "terminal", "cut_off": True}
    record("races", case="live lease blocks, dead holder taken over", rounds=1, racers=2,
           advanced_per_round=1, duplicate_requests=0, backend=holder.backend.name)


def test_a_stale_lease_of_a_live_pid_is_taken_over(agent: Agent):
    """A pid can be reused after a reboot; a lease nobody renewed for long enough is abandoned."""
    run = agent.start_sample("damaged")
    other = DeskStore(agent.settings.db_path)
    other.pid = 1                                # alive (init), but not us
    other.acquire(run.id, "someone-else")
    with pytest.raises(RunBusy):
        agent.advance(run.id)
    other.execute("UPDATE runs SET lease_at = lease_at - ? WHERE id = ?",
                  (LEASE_STALE_SECONDS + 1, run.id))
    assert agent.advance(run.id).status == RunStatus.WAITING
