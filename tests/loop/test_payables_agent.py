"""The third agent (refund_agent/examples/payables.py), built only on ``refund_agent.__all__``:
its crash matrix, a double approval raced from two processes, and the fingerprint rule.

Each crash case kills a real process (SIGKILL at one of the agent's declared crash points),
then a new process finishes the same run; the invoice must be paid exactly once, for its
balance, with one approval and the run done.
"""

from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.process import DATA
from helpers.process import process_env as cli_env

import refund_agent
from refund_agent import ConfigError, DecisionRefused, RunStatus, Settings
from refund_agent.examples import payables
from refund_agent.examples.payables import PayablesAgent

SUPPLIER = "billing@acme-tools.example"
EMAIL = "Hello,\n\nPlease pay invoice INV2041, it is due on Friday.\n\nAcme Tools"

# One process's share of the work: start the ticket if there is none, then advance it and
# approve what is pending (what it shows, by its fingerprint) until the run is done.
_FLOW = r"""
import json, sys
from refund_agent import AlreadyDecided
from refund_agent.examples import PayablesAgent
agent = PayablesAgent()
runs = agent.store.runs()
run = runs[0] if runs else agent.start(sys.argv[1], sys.argv[2])
for _ in range(8):
    run = agent.store.run(run.id)
    if run.status == "done":
        break
    pending = [a for a in agent.store.approvals("pending") if a.run_id == run.id]
    if pending:
        agent.approve(pending[0].id, pending[0].fingerprint, by="Dana Kim")
    else:
        agent.advance(run.id)
print(json.dumps({"run_id": run.id, "status": run.status}))
"""

# Reads the pending approval, says it is ready, and approves it when told to go, so that two
# processes decide together: exit 3 for the one that finds it already decided.
_APPROVE_ON_GO = r"""
import pathlib, sys, time
from refund_agent import AlreadyDecided
from refund_agent.examples import PayablesAgent
agent = PayablesAgent()
(pending,) = agent.store.approvals("pending")
ready, go = pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.005)
try:
    agent.approve(pending.id, pending.fingerprint, by=sys.argv[1])
except AlreadyDecided as exc:
    print(exc)
    sys.exit(3)
"""


def _run(script: str, output: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=90, env=cli_env(output, **env))


def _agent(output: Path) -> PayablesAgent:
    """The agent on ``output``, as the subprocesses see it (the stand-in, no key)."""
    return PayablesAgent(Settings(api_key="", data_dir=DATA, output_dir=output, max_retries=2,
                                  timeout=30.0))


def _paid_once(output: Path) -> None:
    agent = _agent(output)
    (run,) = agent.store.runs()
    assert run.status == RunStatus.DONE, run.error
    (transfer,) = agent.transfers_sent()                     # one transfer, whatever died
    (approval,) = agent.store.approvals(None)
    assert transfer["idempotency_key"] == approval.id
    assert transfer["request"]["amount_cents"] == 125_000     # the invoice's balance
    outputs = [json.loads(c.output) for c in agent.store.calls_named("pay_invoice")]
    assert [o["status"] for o in outputs] == ["paid"]
    assert agent.store.verify_audit() is None


def test_the_example_uses_only_the_public_api():
    tree = ast.parse(Path(payables.__file__).read_text())
    imported = {(node.module, alias.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module
                and node.module.startswith("refund_agent") for alias in node.names}
    assert imported and {module for module, _ in imported} == {"refund_agent"}
    assert {name for _, name in imported} <= set(refund_agent.__all__)


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(PayablesAgent.crash_points))
def test_a_kill_at_any_declared_point_pays_once(point, tmp_path):
    output = tmp_path / "output"
    crashed = _run(_FLOW, output, SUPPLIER, EMAIL, REFUND_AGENT_CRASH_AT=point)
    assert crashed.returncode == -signal.SIGKILL, (point, crashed.stdout, crashed.stderr)
    assert f"[crash point {point}:" in crashed.stderr
    finished = _run(_FLOW, output, SUPPLIER, EMAIL)
    assert finished.returncode == 0, finished.stderr
    _paid_once(output)


@pytest.mark.slow
def test_two_people_approving_at_once_pay_once(tmp_path):
    output = tmp_path / "output"
    agent = _agent(output)
    run = agent.start(SUPPLIER, EMAIL)
    assert agent.advance(run.id).status == RunStatus.WAITING
    go = tmp_path / "go"
    racers = [subprocess.Popen([sys.executable, "-c", _APPROVE_ON_GO, name,
                                str(tmp_path / name), str(go)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=cli_env(output))
              for name in ("Dana Kim", "Lee Park")]
    # No deadline of its own (a busy machine is slow, not wrong): pytest-timeout ends a hang.
    while not all((tmp_path / name).exists() for name in ("Dana Kim", "Lee Park")):
        assert all(p.poll() is None for p in racers), [p.stderr.read() for p in racers]
        time.sleep(0.01)
    go.touch()   # both read the same pending approval; now both decide
    codes = sorted(p.wait(timeout=90) for p in racers)
    assert codes == [0, 3], [p.stderr.read() for p in racers]
    (approval,) = agent.store.approvals(None)
    events = [e.event for e in agent.store.audit() if e.approval_id == approval.id]
    assert events.count("approved") == 1 and events.count("ignored") == 1
    assert agent.advance(run.id).status == RunStatus.DONE
    _paid_once(output)


def test_a_stale_fingerprint_is_refused_and_nothing_is_paid(tmp_path):
    output = tmp_path / "output"
    agent = _agent(output)
    run = agent.start(SUPPLIER, EMAIL)
    assert agent.advance(run.id).status == RunStatus.WAITING
    (pending,) = agent.store.approvals("pending")
    # What the reviewer saw, then the proposal as stored changes under them.
    shown = pending.fingerprint
    agent.store.execute("UPDATE approvals SET proposed_cents = proposed_cents * 10, "
                        "amount_cents = amount_cents * 10 WHERE id = ?", (pending.id,))
    with pytest.raises(DecisionRefused, match="changed since it was shown"):
        agent.approve(pending.id, shown, by="Dana Kim")
    assert agent.store.approval(pending.id).status == "pending"
    refused = [e for e in agent.store.audit() if e.event == "refused"]
    assert refused and "changed since it was shown" in refused[-1].note
    assert agent.transfers_sent() == []


def test_the_amount_is_the_invoices_whatever_the_model_writes(tmp_path):
    agent = _agent(tmp_path / "output")
    run = agent.start(SUPPLIER, EMAIL)
    assert agent.advance(run.id).status == RunStatus.WAITING
    (pending,) = agent.store.approvals("pending")
    assert (pending.amount_cents, pending.has_amount) == (125_000, True)
    ctx_args = payables.PayInvoice(invoice_id="INV-2041", amount_cents=999_999)
    ctx = agent.context(agent.store.run(run.id), None, None)  # type: ignore[arg-type]
    assert "only its balance can be paid" in payables._payable(ctx, ctx_args)


def test_someone_elses_invoice_is_never_proposed(tmp_path):
    agent = _agent(tmp_path / "output")
    run = agent.start("accounts@north-freight.example", EMAIL)   # INV-2041 is Acme's
    assert agent.advance(run.id).status == RunStatus.DONE
    assert agent.store.approvals(None) == [] and agent.transfers_sent() == []


def test_an_undeclared_crash_point_is_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("REFUND_AGENT_CRASH_AT", "after_closure")   # the closure agent's
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(tmp_path / "output"))
    from refund_agent import load_settings
    with pytest.raises(ConfigError, match="after_closure, which this agent does not declare"):
        PayablesAgent(load_settings())
    assert not (tmp_path / "output" / "payables.sqlite3").exists()


def test_its_runs_live_in_its_own_store(tmp_path):
    agent = _agent(tmp_path / "output")
    agent.start(SUPPLIER, EMAIL)
    assert (tmp_path / "output" / "payables.sqlite3").exists()
    assert not (tmp_path / "output" / "refund-agent.sqlite3").exists()
