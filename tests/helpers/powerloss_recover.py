"""Recover power-loss crash states, each with fresh processes: a small fork server.

Importing the openai SDK and the package costs over a second of CPU per process, and the
power-loss test recovers hundreds of states with several commands each. So this script imports
everything once, then forks a new process for every command it runs: each command still gets
a process of its own (a new pid, no connection, lease or cache inherited; the parent never
opens a store), exactly as if typed in a terminal, without paying for the imports again.

Reads one JSON task per line on stdin, writes one JSON result per line on stdout. A task:
``{"folder": ..., "recovery": "cli" | "web", "decided": bool, "approver": ...}``: recover the
folder (``refund-agent resume``, or the web worker's start-up recovery), note what the store
holds right after, then finish the scenario as a person would (approve what is still pending,
unless they were already told it was approved; resume until nothing is left), then
``refund-agent audit --verify``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import refund_agent.cli as cli
import refund_agent.web.worker as worker

TIMEOUT = 90.0


def _web_recovery() -> int:
    """What the web server does at start-up, without a page: resume what was left, wait."""
    agent = cli.Agent()
    w = worker.Worker(agent)
    recovered = w.start()
    print(f"Recovered {len(recovered)} run(s): {' '.join(recovered)}")
    deadline = time.monotonic() + TIMEOUT - 10
    while time.monotonic() < deadline:
        with w._lock:  # noqa: SLF001 - the test waits for the worker's own threads
            jobs = list(w._jobs.values())  # noqa: SLF001
        if not any(job.alive() for job in jobs):
            break
        time.sleep(0.05)
    w.shutdown()
    return 0


def _inspect(folder: str) -> int:
    """The store's runs, approvals and integrity check, read-only, as one JSON line."""
    db = sqlite3.connect(f"file:{folder}/refund-agent.sqlite3?mode=ro", uri=True)
    try:
        runs = db.execute("SELECT id, status FROM runs").fetchall()
        approvals = db.execute("SELECT id, run_id, status, decided_by FROM approvals").fetchall()
        errors = db.execute("SELECT run_id, COUNT(*) FROM steps WHERE kind = 'error'"
                            " GROUP BY run_id").fetchall()
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
    print(json.dumps({"runs": runs, "approvals": approvals, "errors": dict(errors),
                      "integrity": integrity}))
    return 0


def command(folder: str, argv: list[str], work: Path) -> dict:
    """Run one command in a new process (forked from this warm one); its rc and output."""
    out, err = work / "out", work / "err"
    pid = os.fork()
    if pid == 0:  # the child: a fresh process for one command
        try:
            os.environ["REFUND_AGENT_OUTPUT"] = folder
            fd_out = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            fd_err = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            if argv == ["<web>"]:
                rc = _web_recovery()
            elif argv == ["<inspect>"]:
                rc = _inspect(folder)
            else:
                rc = cli.main(argv)
        except BaseException:  # noqa: BLE001 - reported as the command's traceback
            import traceback
            traceback.print_exc()
            rc = 99
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    started = time.monotonic()
    deadline = started + TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = -1
            break
        time.sleep(0.01)
    rc = os.waitstatus_to_exitcode(status) if status != -1 else -1
    return {"argv": argv, "rc": rc, "seconds": round(time.monotonic() - started, 2),
            "stdout": out.read_text(errors="replace"),
            "stderr": err.read_text(errors="replace")}


def recover(task: dict, work: Path) -> dict:
    folder = task["folder"]
    steps = []

    def run(*argv: str) -> dict:
        steps.append(command(folder, list(argv), work))
        return steps[-1]

    run("<web>") if task["recovery"] == "web" else run("resume")
    after = json.loads(run("<inspect>")["stdout"] or "{}")
    pending = [a for a in after.get("approvals", []) if a[2] == "pending"]
    if pending and not task["decided"]:
        run("approve", "--as", task["approver"])
    for _ in range(4):
        if "Nothing to resume." in run("resume")["stdout"]:
            break
    run("audit", "--verify")
    return {"id": task["id"], "after": after, "steps": steps}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for line in sys.stdin:
            if line.strip():
                result = recover(json.loads(line), Path(tmp))
                sys.stdout.write(json.dumps(result) + "\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
