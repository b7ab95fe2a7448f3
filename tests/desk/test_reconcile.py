"""Reconciliation: the payment and email logs against the store, both ways.

Every test builds a real history with the offline model, then tampers with one thing as
someone with access to the files would (an editor on the logs, sqlite3 on the store), and checks
that ``reconcile`` names that thing. A crash mid-write and a crash between paying and recording
it are not tampering, and must not be reported.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from refund_agent.desk import Agent
from refund_agent.desk.reconcile import _made_refunds_have_records, reconcile
from refund_agent.desk.records import DeskStore
from refund_agent.errors import AlreadyDecided


def _approve_sample(agent: Agent, key: str) -> str:
    """Run a sample up to its approval, approve it as Dana, finish it; the approval id."""
    run = agent.advance(agent.start_sample(key).id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(run.id).status == "done"
    return approval.id


@pytest.fixture
def history(agent: Agent) -> Agent:
    """Maya's cracked coffee maker ($48.00, A1043) and Priya's skillet ($31.50), both paid."""
    _approve_sample(agent, "damaged")
    _approve_sample(agent, "angry")
    assert len(_lines(agent, "refunds.log")) == 2 and len(_lines(agent, "outbox.log")) == 2
    return agent


def _check(agent: Agent) -> str | None:
    return reconcile(agent.store, agent.settings.output_dir)


def _path(agent: Agent, name: str) -> Path:
    return agent.settings.output_dir / name


def _lines(agent: Agent, name: str) -> list[str]:
    return _path(agent, name).read_text().splitlines()


def _write(agent: Agent, name: str, lines: list[str]) -> None:
    _path(agent, name).write_text("".join(line + "\n" for line in lines))


def _sql(agent: Agent, sql: str, args: tuple = ()) -> None:
    db = sqlite3.connect(agent.settings.db_path)
    db.execute(sql, args)
    db.commit()
    db.close()


def _edit(agent: Agent, name: str, index: int, change) -> dict:
    """Rewrite one record of a log through ``change(record)``; returns the edited record."""
    lines = _lines(agent, name)
    record = json.loads(lines[index])
    change(record)
    lines[index] = json.dumps(record)
    _write(agent, name, lines)
    return record


# -- agreement ------------------------------------------------------------------------------------

def test_a_real_history_agrees(history):
    assert _check(history) is None


def test_a_store_with_nothing_paid_agrees(agent):
    agent.advance(agent.start_sample("damaged").id)   # waits for a person: no logs yet
    assert not _path(agent, "refunds.log").exists()
    assert _check(agent) is None


def test_a_rejection_and_a_late_decision_agree(agent):
    run = agent.advance(agent.start_sample("damaged").id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, False, "Sam", "Photos show no damage.",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.advance(run.id)
    with pytest.raises(AlreadyDecided):
        agent.decide(approval.id, True, "Dana",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
    assert not _path(agent, "refunds.log").exists()
    assert _check(agent) is None


# -- refunds.log ----------------------------------------------------------------------------------

def test_an_edited_amount_is_named(history):
    (approval,) = [a for a in history.store.approvals(None, -1) if a.order_id == "A1043"]
    _edit(history, "refunds.log", 0, lambda r: r["request"].update(amount_cents=480000))
    problem = _check(history)
    assert problem == (f"refunds.log line 1 pays $4,800.00 on order A1043, but approval "
                       f"{approval.id} approved $48.00: the record was edited.")


def test_an_edited_line_is_named(history):
    _edit(history, "refunds.log", 0, lambda r: r["request"]["lines"][0].update(line="MUG-STN-2"))
    problem = _check(history)
    assert "refunds.log line 1" in problem and "MUG-STN-2 $48.00" in problem
    assert "the record was edited" in problem


def test_a_deleted_refund_is_named(history):
    lines = _lines(history, "refunds.log")
    removed = json.loads(lines.pop(0))
    _write(history, "refunds.log", lines)
    problem = _check(history)
    assert f"refund {removed['refund_id']} of $48.00 on order A1043 was issued" in problem
    assert "refunds.log has no record of it: the record was removed" in problem


def test_a_forged_refund_is_named(history):
    forged = json.loads(_lines(history, "refunds.log")[0])
    forged.update(idempotency_key="call_forged", refund_id="re_forged")
    forged["request"]["order_id"] = "A1058"
    _write(history, "refunds.log", _lines(history, "refunds.log") + [json.dumps(forged)])
    problem = _check(history)
    assert problem == ("refunds.log line 3 pays $48.00 on order A1058 under key call_forged, "
                       "but no approval has that id: the record was forged.")


def test_a_copied_refund_is_named(history):
    lines = _lines(history, "refunds.log")
    _write(history, "refunds.log", lines + [lines[0]])
    problem = _check(history)
    assert problem.startswith("refunds.log line 3 repeats idempotency key")
    assert "forged" in problem


def test_an_empty_object_line_is_named(history):
    lines = _lines(history, "refunds.log")
    _write(history, "refunds.log", [lines[0], "{}", lines[1]])
    problem = _check(history)
    assert problem.startswith("refunds.log line 2 has no idempotency_key")
    assert "forged or edited by hand" in problem


def test_garbage_in_the_middle_is_named(history):
    lines = _lines(history, "refunds.log")
    _write(history, "refunds.log", [lines[0], "refund everything", lines[1]])
    assert _check(history).startswith("refunds.log line 2 is not JSON ('refund everything')")


def test_a_record_that_is_not_an_object_is_named(history):
    lines = _lines(history, "outbox.log")
    _write(history, "outbox.log", [lines[0], "[1, 2]", lines[1]])
    assert _check(history).startswith("outbox.log line 2 is '[1, 2]', not an email record")


# -- crashes are not tampering --------------------------------------------------------------------

@pytest.mark.parametrize("name", ["refunds.log", "outbox.log"])
def test_a_torn_last_line_is_tolerated(history, name):
    whole = _lines(history, name)[-1]
    with open(_path(history, name), "a") as fh:   # a crash mid-write: no newline
        fh.write(whole[: len(whole) // 2])
    assert _check(history) is None


def test_garbage_as_the_last_line_is_not_a_torn_write(history):
    with open(_path(history, "refunds.log"), "a") as fh:
        fh.write("{}")
    assert _check(history).startswith(
        "refunds.log line 3 (its last line, without a newline) has no idempotency_key")


def test_a_torn_line_continued_by_the_ledger_is_tolerated(agent):
    """ledger.py starts a fresh line after a torn one, leaving the torn part in the middle."""
    _approve_sample(agent, "damaged")
    with open(_path(agent, "refunds.log"), "a") as fh:
        fh.write('{"idempotency_key": "call_torn", "request": {"order_id": "A10')
    _approve_sample(agent, "angry")
    assert len(_lines(agent, "refunds.log")) == 3
    assert _check(agent) is None


@pytest.mark.parametrize("point", ["after_refund", "after_email"])
def test_a_crash_between_paying_and_recording_is_not_tampering(tmp_path, point):
    output = tmp_path / "output"
    assert run_cli(output, "sample").returncode == 0
    crashed = run_cli(output, "approve", "--as", "Dana", REFUND_AGENT_CRASH_AT=point)
    assert crashed.returncode != 0 and f"crash point {point}" in crashed.stderr
    store = DeskStore(output / "refund-agent.sqlite3")
    assert _path_lines(output / ("refunds.log" if point == "after_refund" else "outbox.log"))
    assert reconcile(store, output) is None        # paid or sent, not yet recorded
    assert run_cli(output, "resume").returncode == 0
    assert reconcile(store, output) is None
    assert [e.event for e in store.audit()][-1:] == ["reused" if point == "after_refund"
                                                     else "issued"]


def _path_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# -- the store ------------------------------------------------------------------------------------

def test_a_deleted_last_audit_entry_is_caught_by_the_anchor(history):
    (approval, *_) = history.store.approvals("approved")
    with pytest.raises(AlreadyDecided):
        history.decide(approval.id, False, "Sam", "Too late",
                       fingerprint=history.store.approval(approval.id).fingerprint)
    assert history.store.audit()[-1].event == "ignored"
    assert _check(history) is None
    _sql(history, "DELETE FROM audit WHERE id = (SELECT MAX(id) FROM audit)")
    problem = _check(history)
    assert "but its anchor says" in problem and "the newest entries were removed" in problem


def test_an_edited_approval_amount_is_named(history):
    (approval,) = [a for a in history.store.approvals(None, -1) if a.order_id == "A1043"]
    _sql(history, "UPDATE approvals SET amount_cents = 480000 WHERE id = ?", (approval.id,))
    problem = _check(history)
    assert problem.startswith(f"Approval {approval.id} says $4,800.00 on order A1043, but its "
                              "'approved' audit entry")
    assert "says $48.00 on order A1043: the approval was edited in the store." in problem


def test_an_edited_approval_line_is_named(history):
    (approval,) = [a for a in history.store.approvals(None, -1) if a.order_id == "A1043"]
    _sql(history, "UPDATE approval_lines SET amount_cents = 1 WHERE approval_id = ?",
         (approval.id,))
    problem = _check(history)
    assert f"Approval {approval.id} approved POUR-GLS-01 $0.01" in problem
    assert "lines were edited in the store" in problem


def test_a_refund_made_but_missing_from_the_log_is_named_by_its_call(history):
    """Audit entries cannot be removed unnoticed, but the call output still says it was paid."""
    (approval,) = [a for a in history.store.approvals(None, -1) if a.order_id == "A1043"]
    calls = {c.key: c for c in history.store.calls_named("issue_refund")}
    problems = list(_made_refunds_have_records({approval.id: approval}, [], calls))
    assert problems and "issue_refund call says refund re_" in problems[0]
    assert "the record was removed" in problems[0]


# -- outbox.log -----------------------------------------------------------------------------------

def test_an_edited_recipient_is_named(history):
    _edit(history, "outbox.log", 0, lambda r: r["request"].update(to="mallory@example.com"))
    problem = _check(history)
    assert problem.startswith("outbox.log line 1 (message msg_")
    assert "is addressed to mallory@example.com" in problem
    assert "whose customer is maya.chen@example.com: the record was edited." in problem


def test_a_deleted_email_is_named(history):
    lines = _lines(history, "outbox.log")
    removed = json.loads(lines.pop(0))
    _write(history, "outbox.log", lines)
    problem = _check(history)
    assert f"says message {removed['message_id']} was sent to maya.chen@example.com" in problem
    assert "outbox.log has no record of it: the record was removed." in problem


def test_a_forged_email_is_named(history):
    forged = json.loads(_lines(history, "outbox.log")[0])
    forged.update(idempotency_key="call_forged", message_id="msg_forged")
    _write(history, "outbox.log", _lines(history, "outbox.log") + [json.dumps(forged)])
    problem = _check(history)
    assert problem.startswith("outbox.log line 3 (message msg_forged to maya.chen@example.com)")
    assert "no send_customer_message call has that key: the record was forged." in problem


def test_an_edited_message_id_is_named(history):
    _edit(history, "outbox.log", 1, lambda r: r.update(message_id="msg_other"))
    problem = _check(history)
    assert problem.startswith("outbox.log line 2 (message msg_other")
    assert "says it sent msg_" in problem and "the record was edited" in problem
