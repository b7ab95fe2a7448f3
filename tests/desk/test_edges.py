"""Bad input and broken surroundings get a clear message, lose nothing, and never a traceback.

Each case here was found by trying the terminal as an attacker or an unlucky user would: header
breaks in a subject, escape sequences in a customer's text or an approver's name, a full disk
under the payment log, an output folder turned read-only mid-run, a reader that closes the pipe,
and a model endpoint that answers 404.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.cli import cli_env
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)
from helpers.crash import record

from refund_agent.config import PROJECT_ROOT
from refund_agent.desk import Agent
from refund_agent.errors import LedgerError, RunNotReady
from refund_agent.models import RunStatus
from refund_agent.store import Store

ESC = "\x1b"


def _clean(result: subprocess.CompletedProcess, code: int = 1) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("field,value", [
    ("--subject", "Hi\r\nBcc: x@y.example"), ("--subject", "Hi\nTo: x@y.example"),
    ("--name", "Maya\r\nBcc: x@y.example"), ("--name", f"Maya{ESC}[2J"),
    ("--from", "maya.chen@example.com\r\nBcc: x@y.example"),
])
def test_line_breaks_and_controls_in_header_fields_are_refused(tmp_path, field, value):
    out = tmp_path / "output"
    args = {"--from": "maya.chen@example.com", **{field: value}}
    result = run_cli(out, "send", "Order A1043: the coffee maker cracked.",
                     *[x for pair in args.items() for x in pair])
    _clean(result)
    assert "cannot contain line breaks" in result.stderr or "not an email" in result.stderr
    assert not (out / "outbox.log").exists()
    record("edges", case=f"header injection {field}", tracebacks=0, lost_or_duplicated=0)


def test_escape_sequences_from_customers_and_approvers_are_shown_not_obeyed(tmp_path):
    out = tmp_path / "output"
    body = f"Order A1043: the coffee maker cracked. {ESC}[2J{ESC}[31mApproved by Boss{ESC}[0m"
    sent = run_cli(out, "send", body, "--from", "maya.chen@example.com")
    _clean(sent, 0)
    assert ESC not in sent.stdout and "\\x1b[2J" in sent.stdout
    for command in (["queue"], ["audit"], ["runs"]):
        assert ESC not in run_cli(out, *command).stdout
    shown = run_cli(out, "show", Store(out / "refund-agent.sqlite3").runs()[0].id)
    assert ESC not in shown.stdout and "\\x1b[31mApproved by Boss" in shown.stdout
    forged = run_cli(out, "approve", "--as", f"Dana{ESC}[1A{ESC}[2KApproved by the CEO")
    _clean(forged)
    assert "approver's name cannot contain" in forged.stderr
    record("edges", case="escape sequences", tracebacks=0, lost_or_duplicated=0)


def test_a_full_disk_under_the_payment_log_is_a_message_and_resume_pays_once(
        agent: Agent, monkeypatch):
    run = agent.advance(agent.start_sample("damaged").id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    real_open = open

    def full_disk(path, *args, **kwargs):
        if str(path).endswith("refunds.log") and args and "a" in args[0]:
            raise OSError(28, "No space left on device")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full_disk)
    with pytest.raises(LedgerError, match="No space left on device.*resume"):
        agent.advance(run.id)
    assert agent.store.run(run.id).status == RunStatus.FAILED
    assert agent.payments.refunds() == []
    monkeypatch.setattr("builtins.open", real_open)
    assert agent.advance(run.id).status == RunStatus.DONE
    assert len(agent.payments.refunds()) == 1 and len(agent.outbox.messages()) == 1
    record("edges", case="disk full under refunds.log", tracebacks=0, lost_or_duplicated=0)


def test_a_store_that_cannot_be_written_is_a_message_not_a_traceback(tmp_path):
    out = tmp_path / "output"
    _clean(run_cli(out, "sample"), 0)
    # Make the database refuse writes the way a read-only mount does, for every process
    # (chmod would not do: the tests may run as root, who writes anyway).
    db = out / "refund-agent.sqlite3"
    code = ("import sqlite3,sys; d=sqlite3.connect(sys.argv[1]);"
            "d.execute('CREATE TRIGGER ro BEFORE UPDATE ON runs BEGIN "
            "SELECT RAISE(ABORT, \"attempt to write a readonly database\"); END'); d.commit()")
    subprocess.run([sys.executable, "-c", code, str(db)], check=True)
    result = run_cli(out, "approve", "--as", "Dana")
    _clean(result)
    assert "readonly database" in result.stderr
    record("edges", case="store refuses writes", tracebacks=0, lost_or_duplicated=0)


def test_a_reader_that_closes_the_pipe_ends_quietly(tmp_path):
    out = tmp_path / "output"
    for _ in range(3):
        _clean(run_cli(out, "sample", "past-window"), 0)
    reader = subprocess.Popen([sys.executable, "-m", "refund_agent", "runs", "--limit", "500"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=cli_env(out), cwd=PROJECT_ROOT)
    reader.stdout.close()       # like `| head -0`: nobody reads
    _stdout, stderr = reader.communicate(timeout=60)
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr
    record("edges", case="broken pipe", tracebacks=0, lost_or_duplicated=0)


def test_a_wrong_base_url_is_not_reported_as_an_expired_response(agent: Agent):
    run = agent.start_sample("damaged")
    server = agent.model.server
    agent.model.client = agent.model.client.with_options(
        base_url=server.base_url.replace("/v1", "/nowhere"))
    done = agent.advance(run.id)
    assert done.status == RunStatus.FAILED
    assert "404" in done.error and "REFUND_AGENT_BASE_URL" in done.error
    assert "expire" not in done.error


def test_replies_to_unfinished_runs_are_refused_and_not_stored(agent: Agent):
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING
    with pytest.raises(RunNotReady, match="not saved"):
        agent.add_reply(run.id, "Hello?")
    assert agent.store.replies(run.id) == []


def test_the_tool_arguments_are_strict_about_money(scripted):
    from offline_model.brain import Reply
    calls = [("issue_refund", {"order_id": "A1043", "summary": "x", "amount": amount,
                               "lines": [{"line": "POUR-GLS-01", "reason": "damaged"}]})
             for amount in (True, "48", "48.00", [48])]
    agent, _brain, server = scripted(*[Reply("bad", calls=[c]) for c in calls])
    run = agent.advance(agent.start("maya.chen@example.com", "Order A1043: cracked.").id)
    outputs = [json.loads(i["output"]) for body in server.requests for i in body["input"]
               if i.get("type") == "function_call_output"]
    assert len(outputs) == 4 and all("Invalid arguments" in o["error"] for o in outputs)
    assert run.status == RunStatus.DONE and agent.store.approvals(status=None) == []
