"""The terminal commands, each a real new process sharing one output folder."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

from helpers.cli import cli_env
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from refund_agent.config import PROJECT_ROOT


def refunds(out) -> list[dict]:
    path = out / "refunds.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_the_guide_flow_across_processes(tmp_path):
    out = tmp_path / "out"
    first = run_cli(out)
    assert first.returncode == 0, first.stderr
    assert "offline stand-in" in first.stdout
    assert "Proposed refund $48.00 on A1043" in first.stdout
    assert "3 model requests" in first.stdout
    assert "1 waiting for approval" in run_cli(out, "queue").stdout

    approved = run_cli(out, "approve", "--as", "Dana Kim")
    assert approved.returncode == 0, approved.stderr
    assert "picked up by a new process" in approved.stdout
    assert "Email to maya.chen@example.com" in approved.stdout
    assert "5 model requests" in approved.stdout
    nothing = run_cli(out, "approve")
    assert nothing.returncode == 4 and "Nothing is waiting for approval." in nothing.stderr
    assert "was approved by" in nothing.stderr      # and who decided the last one, when

    header, *audit = run_cli(out, "audit").stdout.splitlines()
    assert header.split()[:4] == ["TIME", "EVENT", "BY", "PID"]   # issue 36: no header before
    assert [line.split()[2] for line in audit] == ["requested", "approved", "issued"]
    assert "$48.00 (proposed)" in audit[0] and "(proposed)" not in audit[2]
    pids = [re.search(r"pid (\d+)", line).group(1) for line in audit]
    assert pids[0] != pids[1] == pids[2]  # requested by the old process, approved by the new
    assert run_cli(out, "audit", "--verify").returncode == 0
    assert len(refunds(out)) == 1


def test_crash_after_refund_then_resume_reuses_the_refund(tmp_path):
    out = tmp_path / "out"
    run_cli(out)
    crashed = run_cli(out, "approve", "--as", "Dana Kim", CRASH_AFTER_REFUND="1")
    assert crashed.returncode == -signal.SIGKILL
    assert len(refunds(out)) == 1
    resumed = run_cli(out, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "reused, not repeated" in resumed.stdout and "done" in resumed.stdout
    assert len(refunds(out)) == 1
    events = [line.split()[2] for line in run_cli(out, "audit").stdout.splitlines()[1:]]
    assert events == ["requested", "approved", "reused"]


def test_two_processes_approving_at_once_make_one_decision(tmp_path):
    out = tmp_path / "out"
    run_cli(out)
    approval_id = run_cli(out, "queue").stdout.split()[0]
    procs = [subprocess.Popen([sys.executable, "-m", "refund_agent", "approve", "--as", who,
                               "--id", approval_id],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=cli_env(out), cwd=PROJECT_ROOT) for who in ("Ana", "Ben")]
    results = [(p.wait(timeout=60), p.stdout.read() + p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 3], results                 # 3: someone else decided it first
    loser = next(text for code, text in results if code == 3)
    assert "already approved by" in loser or "being advanced by process" in loser
    assert len(refunds(out)) == 1


def _sigint_default() -> None:
    """In the child, before exec: Ctrl+C as in a terminal, however the suite was started.

    A suite started in the background (``./dev test &``, nohup) runs with SIGINT ignored,
    the children inherit that, and Python then never turns SIGINT into KeyboardInterrupt.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_and_resume_continues(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "refund_agent"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT,
                            env=cli_env(out, REFUND_AGENT_OFFLINE_LATENCY="3"),
                            preexec_fn=_sigint_default)
    deadline = time.monotonic() + 30
    seen = ""
    while "thinking:" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.read(1)
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=20) == 130
    assert "resume" in proc.stdout.read()
    runs = run_cli(out, "runs").stdout
    assert "stopped" in runs
    resumed = run_cli(out, "resume")
    assert resumed.returncode == 0 and "waiting for approval" in resumed.stdout


def test_the_ctrl_c_child_gets_ctrl_c_even_when_the_suite_ignores_it():
    """What a background start does to the suite, done here: the child still gets Ctrl+C."""
    probe = [sys.executable, "-c", "import signal; h = signal.getsignal(signal.SIGINT); "
             "print('ignored' if h == signal.SIG_IGN else 'Ctrl+C' if h is "
             "signal.default_int_handler else h)"]
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        inherited = subprocess.run(probe, capture_output=True, text=True, timeout=30).stdout
        restored = subprocess.run(probe, capture_output=True, text=True, timeout=30,
                                  preexec_fn=_sigint_default).stdout
    finally:
        signal.signal(signal.SIGINT, before)
    assert inherited.strip() == "ignored"       # the trap the Ctrl+C test used to fall into
    assert restored.strip() == "Ctrl+C"


def test_user_mistakes_get_messages_not_tracebacks(tmp_path):
    out = tmp_path / "out"
    cases = [
        (("reject", "--id", "nope", "--note", "x"), "No approval with id 'nope'"),
        (("send", "hi", "--from", "not-an-address"), "is not an email address"),
        (("sample", "missing"), "No sample email called 'missing'"),
        (("reply", "hello"), "No finished run to reply to"),
        (("show", "run_x"), "No run with id 'run_x'"),
    ]
    for args, message in cases:
        result = run_cli(out, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr
    for args in (("runs", "--limit", "-1"), ("audit", "--limit", "0")):   # usage mistakes
        result = run_cli(out, *args)
        assert result.returncode == 2 and "must be a whole number from 1" in result.stderr


def test_help_explains_replies_and_the_angry_customer(tmp_path):
    text = run_cli(tmp_path, "--help").stdout
    assert "angry" in text and "reply" in text and "offline stand-in" in text


def test_corrupt_database_is_reported_and_left_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    db = out / "refund-agent.sqlite3"
    db.write_bytes(b"this is not sqlite" * 100)
    result = run_cli(out, "runs")
    assert result.returncode == 1 and "not a readable refund-agent database" in result.stderr
    assert db.read_bytes() == b"this is not sqlite" * 100


def _queue(out) -> list[str]:
    """The approval ids waiting, as `queue` lists them."""
    return [line.split()[0] for line in run_cli(out, "queue").stdout.splitlines()
            if line.startswith("run_")]   # an approval id: its run, then its call


def test_a_decision_without_an_id_is_refused_when_several_refunds_wait(tmp_path):
    out = tmp_path / "out"
    assert run_cli(out).returncode == 0                     # Maya's coffee maker, $48.00
    assert run_cli(out, "angry").returncode == 0            # Priya's skillet, $31.50
    waiting = _queue(out)
    assert len(waiting) == 2
    for args in (("approve", "--as", "Dana"), ("reject", "--as", "Dana", "--note", "No."),
                 ("approve", "--as", "Dana", "--only", "POUR-GLS-01")):
        result = run_cli(out, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert "2 refunds are waiting; name one with --id:" in result.stderr
        assert all(approval_id in result.stderr for approval_id in waiting)
        assert "order A1043  $48.00  (POUR-GLS-01)" in result.stderr
        assert "order A1066  $31.50  (SKL-CI-10)" in result.stderr
        assert "Traceback" not in result.stderr
    # Nothing was decided by the refused commands.
    assert _queue(out) == waiting and refunds(out) == []
    events = [line.split()[2] for line in run_cli(out, "audit").stdout.splitlines()[1:]]
    assert events == ["requested", "requested"]

    # Named, it is decided; with exactly one left, a decision without an id takes that one.
    (maya,) = [line.split()[0] for line in run_cli(out, "queue").stdout.splitlines()
               if line.startswith("run_") and "order A1043" in line]
    assert run_cli(out, "approve", "--id", maya, "--as", "Dana").returncode == 0
    assert run_cli(out, "approve", "--as", "Dana").returncode == 0
    assert [(r["request"]["order_id"], r["request"]["amount_cents"]) for r in refunds(out)] == [
        ("A1043", 4800), ("A1066", 3150)]
    assert _queue(out) == []


def test_approve_only_some_lines_with_a_note(tmp_path):
    out = tmp_path / "out"
    sent = run_cli(out, "send", "Order A1043: the coffee maker arrived shattered, and honestly "
                   "I also don't want the mugs anymore.", "--from", "maya.chen@example.com")
    assert sent.returncode == 0, sent.stderr
    assert "Proposed refund $66.50 on A1043" in sent.stdout
    assert "POUR-GLS-01  damaged       $48.00" in sent.stdout
    assert "MUG-STN-2    changed_mind  $18.50" in sent.stdout

    approved = run_cli(out, "approve", "--as", "Dana", "--only", "POUR-GLS-01",
                       "--note", "The mugs were used.")
    assert approved.returncode == 0, approved.stderr
    assert "Approved $48.00 for A1043" in approved.stdout
    assert "POUR-GLS-01 approved, MUG-STN-2 declined" in approved.stdout
    assert "Our team could not refund the stoneware mugs" in approved.stdout
    run_id = run_cli(out, "runs").stdout.splitlines()[1].split()[0]
    shown = run_cli(out, "show", run_id).stdout
    assert "** Approved by Dana (declined MUG-STN-2): The mugs were used." in shown
    (refund,) = refunds(out)
    assert refund["request"]["amount_cents"] == 4800
    assert refund["request"]["lines"] == [
        {"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 4800}]
    audit = run_cli(out, "audit").stdout
    assert "declined MUG-STN-2 (Stoneware mugs, set of 2). The mugs were used." in audit
    assert run_cli(out, "audit", "--verify").returncode == 0
