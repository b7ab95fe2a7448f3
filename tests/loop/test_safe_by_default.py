"""Safe by default, on a small agent that is not the refund desk (tests/helpers/credit.py).

Each test is a slip a learner makes writing an agent of their own, and shows the loop does
what they forgot: an effect function that never looks at the decision issues nothing on a
rejection, a question or an expiry; an effect that forgets ``ctx.fence()`` does nothing in a
process that lost the run; a decision without the fingerprint of what was shown is refused;
an agent without a name, run as a script, is resumed by the same class imported as a module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.credit import ANA, EMAIL, CreditDesk, InstantCredit
from helpers.process import process_env as cli_env

from refund_agent import AlreadyDecided, ApprovalStatus, DecisionRefused, LeaseLost, RunStatus
from refund_agent.config import PROJECT_ROOT
from refund_agent.tools import toolset

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def credit(settings, model) -> CreditDesk:
    return CreditDesk(settings, model=model)


def _waiting(desk: CreditDesk):
    run = desk.start(ANA, EMAIL, sender_name="Ana Ruiz")
    assert desk.advance(run.id).status == RunStatus.WAITING
    (pending,) = desk.store.approvals("pending")
    return run.id, pending


def _output(desk: CreditDesk) -> dict:
    (call,) = desk.store.calls_named("issue_credit")
    return json.loads(call.output)


def _env(settings, *first: Path, **extra: str) -> dict[str, str]:
    """A new process's environment: this test's output folder, ``first`` and tests/
    importable."""
    path = os.pathsep.join(filter(None, [*map(str, first), str(TESTS), str(PROJECT_ROOT),
                                         os.environ.get("PYTHONPATH", "")]))
    return cli_env(settings.output_dir, PYTHONPATH=path, **extra)


# -- the decision: an effect function never sees one that is not an approval --------------------

@pytest.mark.parametrize("decision", ["reject", "ask", "expire"])
def test_an_effect_that_ignores_the_decision_issues_nothing(credit, decision):
    """Before: the rejected credit was issued (1 credit, run done)."""
    run_id, pending = _waiting(credit)
    if decision == "reject":
        credit.reject(pending.id, pending.fingerprint, by="Dana Kim", note="Credited by phone.")
    elif decision == "ask":
        credit.ask(pending.id, "Dana Kim", "Which order was late?",
                   fingerprint=pending.fingerprint)
    else:
        credit.store.execute("UPDATE approvals SET requested_at = requested_at - 100 * 86400")
        assert [a.id for a in credit.expire()] == [pending.id]
    run = credit.advance(run_id)
    assert credit.credits() == []
    decided = credit.store.approval(pending.id)
    assert _output(credit) == {"status": str(decided.status), "decided_by": decided.decided_by,
                               "note": decided.note or ""}
    assert run.status in (RunStatus.DONE, RunStatus.ASKED)


def test_a_tool_declares_what_the_model_reads_when_it_was_not_approved(settings, model):
    def declined(args, approval):   # pure: no context, so it cannot act
        return {"status": "not_credited", "account": args.account_id, "why": approval.note}

    class Declared(CreditDesk):
        tools = toolset(CreditDesk.tools["lookup_account"],
                        replace(CreditDesk.tools["issue_credit"], declined=declined))

    desk = Declared(settings, model=model)
    run_id, pending = _waiting(desk)
    desk.reject(pending.id, pending.fingerprint, by="Dana Kim", note="Not late.")
    desk.advance(run_id)
    assert desk.credits() == []
    assert _output(desk) == {"status": "not_credited", "account": "CR-1001", "why": "Not late."}


def test_an_approved_credit_is_issued_once(credit):
    run_id, pending = _waiting(credit)
    credit.approve(pending.id, pending.fingerprint, by="Dana Kim")
    assert credit.advance(run_id).status == RunStatus.DONE
    (issued,) = credit.credits()
    assert issued["idempotency_key"] == pending.id            # the call's key
    assert _output(credit)["status"] == "credited"


# -- the lease: checked before any effect function, whether it fences or not ---------------------

def _taken_over_before_the_tool(desk: CreditDesk) -> None:
    """Another process takes the run over just before its effect call runs (its fencing
    token moves on), as a worker does to a process paused past its lease."""
    crash_at = desk._crash_at

    def at(name: str) -> None:
        if name == "before_tool":
            desk.store.execute("UPDATE runs SET lease_token = 'another', "
                               "lease_epoch = lease_epoch + 1")
        crash_at(name)
    desk._crash_at = at   # type: ignore[method-assign]


def test_an_effect_without_a_fence_does_nothing_after_a_takeover(settings, model):
    """Before: the credit was issued, then the output's write was refused."""
    desk = InstantCredit(settings, model=model)
    run = desk.start(ANA, EMAIL)
    _taken_over_before_the_tool(desk)
    with pytest.raises(LeaseLost):
        desk.advance(run.id)
    assert desk.credits() == []


def test_an_approved_effect_without_a_fence_does_nothing_after_a_takeover(credit):
    run_id, pending = _waiting(credit)
    credit.approve(pending.id, pending.fingerprint, by="Dana Kim")
    _taken_over_before_the_tool(credit)
    with pytest.raises(LeaseLost):
        credit.advance(run_id)
    assert credit.credits() == []


# -- the fingerprint, the noun, the race ---------------------------------------------------------

def test_a_decision_without_the_fingerprint_is_refused(credit):
    """Before: ``decide(id, True, "Dana")`` approved whatever the approval said by then."""
    _run_id, pending = _waiting(credit)
    for attempt in (lambda: credit.decide(pending.id, True, by="Dana", fingerprint=None),
                    lambda: credit.decide(pending.id, False, by="Dana", note="No.",
                                          fingerprint=""),
                    lambda: credit.ask(pending.id, "Dana", "Which order?", fingerprint=None)):
        with pytest.raises(DecisionRefused, match="fingerprint"):
            attempt()
    with pytest.raises(DecisionRefused, match="changed since it was shown to Dana"):
        credit.decide(pending.id, True, by="Dana", fingerprint="0" * 16)
    assert credit.store.approval(pending.id).status is ApprovalStatus.PENDING


def test_a_second_approval_speaks_of_a_store_credit(credit):
    _run_id, pending = _waiting(credit)
    credit.approve(pending.id, pending.fingerprint, by="Dana Kim")
    with pytest.raises(AlreadyDecided, match="^This store credit was already approved by "
                                             "Dana Kim at "):
        credit.approve(pending.id, pending.fingerprint, by="Lee Park")
    with pytest.raises(AlreadyDecided, match="^You already approved this store credit at "):
        credit.approve(pending.id, pending.fingerprint, by="Dana Kim")


def test_of_people_approving_at_once_one_wins(credit, settings, model):
    run_id, pending = _waiting(credit)
    people = [CreditDesk(settings, model=model) for _ in range(4)]
    start, results = threading.Barrier(len(people)), {}

    def approve(k: int, desk: CreditDesk) -> None:
        start.wait()
        try:
            results[k] = desk.approve(pending.id, pending.fingerprint, by=f"person-{k}").status
        except AlreadyDecided as exc:
            results[k] = str(exc)

    threads = [threading.Thread(target=approve, args=(k, d)) for k, d in enumerate(people)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    won = [k for k, r in results.items() if r == ApprovalStatus.APPROVED]
    assert len(won) == 1 and len(results) == len(people), results
    assert all(r.startswith(f"This store credit was already approved by person-{won[0]}")
               for k, r in results.items() if k != won[0])
    assert credit.advance(run_id).status == RunStatus.DONE and len(credit.credits()) == 1


def test_a_crash_after_the_credit_before_its_output_credits_once(credit, settings):
    run_id, pending = _waiting(credit)
    credit.approve(pending.id, pending.fingerprint, by="Dana Kim")
    child = ("import sys; from helpers.credit import CreditDesk; "
             "CreditDesk().advance(sys.argv[1])")
    crashed = subprocess.run([sys.executable, "-c", child, run_id], capture_output=True,
                             text=True, timeout=60,
                             env=_env(settings, REFUND_AGENT_CRASH_AT="after_credit"))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(credit.credits()) == 1
    (call,) = credit.store.calls_named("issue_credit")
    assert call.output is None                                  # made, never recorded
    assert [r.id for r in credit.resumable()] == [run_id]
    assert credit.advance(run_id).status == RunStatus.DONE
    assert len(credit.credits()) == 1 and _output(credit)["again"] is True


# -- an agent without a name, run as a script --------------------------------------------------

SCRIPT = '''
from helpers.credit import ANA, EMAIL, CreditDesk


class ScriptDesk(CreditDesk):
    agent_name = ""      # no name: the loop gives it one


if __name__ == "__main__":
    desk = ScriptDesk()
    print(desk.agent_name, flush=True)
    desk.advance(desk.start(ANA, EMAIL).id)
'''

IMPORTER = '''
import json
import credit_agent
desk = credit_agent.ScriptDesk()
runs = desk.resumable()
print(json.dumps({"name": desk.agent_name, "runs": [run.id for run in runs],
                  "status": desk.advance(runs[0].id).status if runs else None}))
'''


def test_a_script_s_run_is_resumed_by_the_same_class_imported(settings, model, tmp_path):
    """Before: the script's runs were "__main__.ScriptDesk"'s, which the imported class is
    not: resumable() returned nothing and the crashed run was never picked up."""
    home = tmp_path / "agent"
    home.mkdir()
    (home / "credit_agent.py").write_text(SCRIPT)
    env = _env(settings, home)
    crashed = subprocess.run([sys.executable, "credit_agent.py"], cwd=home, env={
        **env, "REFUND_AGENT_CRASH_AT": "after_response"}, capture_output=True, text=True,
        timeout=60)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert crashed.stdout.split() == ["credit_agent.ScriptDesk"]

    named = CreditDesk(settings, model=model)     # another agent on the same store
    assert named.resumable() == []
    assert named.foreign_runs() == {"credit_agent.ScriptDesk": 1}
    assert "1 of agent 'credit_agent.ScriptDesk'" in named.foreign_note(named.foreign_runs())

    resumed = subprocess.run([sys.executable, "-c", IMPORTER], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    answer = json.loads(resumed.stdout.splitlines()[-1])
    assert answer["name"] == "credit_agent.ScriptDesk" and len(answer["runs"]) == 1
    assert answer["status"] == RunStatus.WAITING
