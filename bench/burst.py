"""A burst of mail (issue #46): emails received over SMTP, then drained by ``refund-agent work``.

    python bench/burst.py --quick     # 100 emails, a few minutes
    python bench/burst.py             # 1,000 emails at concurrency 8, 32, 64 (40 at 1)
    python bench/burst.py --json bench/burst.json --markdown - --plot docs

What it does, in order:

1. **Project.** The emails (Maya's cracked coffee maker, each on an order of its own) are sent
   with smtplib over loopback to ``refund-agent receive --smtp 127.0.0.1:PORT --no-work``, which
   records each one as a ticket and stops there. Each concurrency gets a copy of that output
   folder, and ``refund-agent work --concurrency C --idle-exit 0`` drains it: every ticket to
   its pause (the refund proposal, waiting for a person). The stand-in (offline_model) answers
   each reply after ``--latency`` seconds (1 s), served from this process so the worker's CPU
   is the harness's own. Drain = the worker's first line (it claims its first runs right
   after) to its last run's line; CPU = the worker's CPU from its first line to its exit (its
   start-up left out); peak memory = the worker's peak RSS (wait4). Concurrency 1 at 1 s a
   reply takes about 3 s a ticket, so it runs a smaller sample (``--emails-at-1``) and the
   table scales it per ticket, saying so.
2. **Rate limit.** The stand-in refuses (429) past ``--rate`` requests a minute and the
   worker's budget (REFUND_AGENT_RATE_RPM) is set to the same; the share of the limit used in
   each whole window of the drain, the 429s, and whether any run failed.
3. **Peers.** The same tickets through the Agents SDK's ``Runner.run`` and LangGraph's
   ``graph.ainvoke`` (AsyncSqliteSaver), each ticket to its pause, ``asyncio.Semaphore(C)``
   over async runs (bench/burst_peers.py, run by ``--peers-python``, a venv with the peers).
4. **Several hosts on PostgreSQL.** A throwaway cluster (tests/helpers/pg.py), the burst
   received into one database; one worker, then three workers (each its own working directory,
   output folder and REFUND_AGENT_HOST_ID) on a copy of it, each at ``--pg-concurrency``.

The ideal beside each drain: every model request's latency spread over the runs in flight
(requests x latency / C), or under a rate limit the requests over the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import clone_id, email_for, load_avg, machine, make_bench_shop  # noqa: E402

from refund_agent.config import PROJECT_ROOT  # noqa: E402

CONCURRENCIES = (1, 8, 32, 64)
DESK = "help@juniperpine.example"
SENDER = "Maya Chen <maya.chen@example.com>"
SUBJECT = "Coffee maker arrived cracked"
PER_CONNECTION = 100   # messages sent on one SMTP connection before the next
HOSTS = ("host-a", "host-b", "host-c")


# -- pure helpers (tests/bench/test_burst.py) ---------------------------------------------------

def ideal_seconds(requests: int, latency: float, concurrency: int) -> float:
    """The fastest a drain can be when every request takes ``latency`` and at most
    ``concurrency`` are in flight: the requests' waiting, spread over the slots."""
    return requests * latency / concurrency


def rate_bound_seconds(requests: int, limit: int, period: float) -> float:
    """The fastest ``requests`` can go at ``limit`` per ``period`` in the long run."""
    return requests / limit * period


def memory_per_run(peak_mb_at_c: float, peak_mb_at_1: float, concurrency: int) -> float:
    """Extra peak memory (MB) for each run in flight beyond the first."""
    if concurrency <= 1:
        raise ValueError("memory per run needs a concurrency above 1")
    return (peak_mb_at_c - peak_mb_at_1) / (concurrency - 1)


def window_use(accepted: list[float], limit: int, period: float) -> list[float]:
    """The share of ``limit`` used in each whole ``period`` from the first accepted request
    (times in seconds, any order). The last, partial window is left out: the burst had run
    dry by then, so nothing was waiting to use it."""
    if not accepted:
        return []
    times = sorted(accepted)
    start, end = times[0], times[-1]
    whole = int((end - start) // period)
    counts = [0] * whole
    for t in times:
        k = int((t - start) // period)
        if k < whole:
            counts[k] += 1
    return [c / limit for c in counts]


def per_bucket(times: list[float], width: float) -> list[int]:
    """How many of ``times`` fall in each ``width`` seconds from the first."""
    if not times:
        return []
    start = min(times)
    counts = [0] * (int((max(times) - start) // width) + 1)
    for t in times:
        counts[int((t - start) // width)] += 1
    return counts


def message(i: int) -> EmailMessage:
    """Email number ``i`` of the burst: Maya's cracked coffee maker on clone order i+1."""
    msg = EmailMessage()
    msg["From"] = SENDER
    msg["To"] = DESK
    msg["Subject"] = SUBJECT
    msg["Message-ID"] = f"<burst-{i}@maya.example>"
    msg.set_content(email_for(clone_id(i + 1)))
    return msg


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- processes ----------------------------------------------------------------------------------

def child_env(output: Path, data: Path, **extra: str) -> dict[str, str]:
    """A child's environment: no settings of the caller's, this worktree's code, the bench
    shop, this output folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFUND_AGENT_")}
    env.update({"XAI_API_KEY": "", "PYTHONUNBUFFERED": "1",
                "REFUND_AGENT_OUTPUT": str(output), "REFUND_AGENT_DATA": str(data),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT),
                                                            os.environ.get("PYTHONPATH")])),
                **extra})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not listen on {port} within {timeout:g} s")


def receive(output: Path, data: Path, emails: int, **extra: str) -> float:
    """Send ``emails`` messages over SMTP to ``refund-agent receive --no-work``; each gets its
    250 once recorded, so when the last is accepted the burst is in the store. Seconds taken."""
    output.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with open(output.parent / "receive.log", "w") as out:
        # Ctrl+C's default restored for the child: started from a background job, this
        # process may have SIGINT ignored, which the child would inherit (and never stop).
        proc = subprocess.Popen([sys.executable, "-m", "refund_agent", "receive", "--smtp",
                                 f"127.0.0.1:{port}", "--no-work"], stdout=out,
                                stderr=subprocess.STDOUT, env=child_env(output, data, **extra),
                                cwd=output.parent,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            wait_port(port, proc, "refund-agent receive")
            started = time.monotonic()
            for first in range(0, emails, PER_CONNECTION):
                with smtplib.SMTP("127.0.0.1", port, timeout=120) as smtp:
                    for i in range(first, min(first + PER_CONNECTION, emails)):
                        smtp.send_message(message(i))
            took = time.monotonic() - started
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:   # every message had its 250: nothing is lost
                proc.kill()
                proc.wait()
    return took


def cpu_seconds(pid: int) -> float:
    """A live process's user + system CPU so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Worker:
    """One ``refund-agent work`` process, its lines read as they come."""

    proc: subprocess.Popen
    first: float | None = None
    last: float | None = None
    cpu_at_first: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)
    usage: Any = None

    @classmethod
    def start(cls, cwd: Path, env: dict[str, str], concurrency: int) -> Worker:
        proc = subprocess.Popen([sys.executable, "-m", "refund_agent", "work", "--concurrency",
                                 str(concurrency), "--idle-exit", "0"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
        worker = cls(proc)
        threading.Thread(target=worker._read, daemon=True).start()
        return worker

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            if line.startswith("Worker ") and self.first is None:
                self.first = now
                try:
                    self.cpu_at_first = cpu_seconds(self.proc.pid)
                except OSError:
                    pass
            elif line.startswith("run_") and ": " in line:
                self.last = now
                self.statuses[line.split(": ", 1)[1].strip()] += 1
            else:
                self.lines.append(line.rstrip())

    def wait(self) -> Worker:
        # wait4, not wait: the child's own peak memory and CPU come with its exit.
        _pid, status, self.usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        time.sleep(0.2)   # the reader thread takes the last lines
        if self.proc.returncode != 0 or self.first is None:
            raise SystemExit(f"work exited {self.proc.returncode}:\n" + "\n".join(self.lines))
        return self

    @property
    def cpu(self) -> float:
        return self.usage.ru_utime + self.usage.ru_stime - self.cpu_at_first

    @property
    def peak_mb(self) -> float:
        return self.usage.ru_maxrss / 1024


def drain(homes: list[tuple[Path, dict[str, str]]], concurrency: int) -> dict[str, Any]:
    """Start one worker per (working dir, environment) at once, wait for all to go idle."""
    mine = time.process_time()
    workers = [Worker.start(cwd, env, concurrency) for cwd, env in homes]
    for w in workers:
        w.wait()
    # This process serves the stand-in: its CPU over the drain is the model's side.
    model_cpu = time.process_time() - mine
    first = min(w.first for w in workers if w.first is not None)
    last = max((w.last for w in workers if w.last is not None), default=first)
    statuses: Counter = sum((w.statuses for w in workers), Counter())
    return {"drain_s": last - first, "cpu_s": sum(w.cpu for w in workers),
            "standin_cpu_s": model_cpu,
            "peak_mb": max(w.peak_mb for w in workers),
            "peak_mb_each": [round(w.peak_mb, 1) for w in workers],
            "runs": sum(statuses.values()), "statuses": dict(statuses),
            "per_worker_runs": [sum(w.statuses.values()) for w in workers]}


def model_requests(output: Path, data: Path, url: str = "") -> tuple[int, Counter]:
    """The model requests every run made, and the runs' statuses, from the store."""
    from benchlib import bench_settings

    from refund_agent.desk import Agent
    settings = bench_settings(output, data)
    if url:
        settings = settings.with_(database_url=url)
    agent = Agent(settings)
    try:
        runs = agent.store.runs(limit=-1)
        return (sum(r.requests for r in runs),
                Counter(r.desk_status or r.status.value for r in runs))
    finally:
        agent.store.close()


# -- the parts ----------------------------------------------------------------------------------

def project(root: Path, data: Path, model_url: str, plan: dict[int, int], latency: float,
            fixed: float) -> list[dict[str, Any]]:
    """The burst received once per size, drained once per concurrency on a copy."""
    received: dict[int, tuple[Path, float]] = {}
    rows = []
    for c, emails in plan.items():
        if emails not in received:
            source = root / f"received-{emails}" / "output"
            took = receive(source, data, emails)
            log(f"received {emails} emails over SMTP in {took:.1f} s")
            received[emails] = (source, took)
        source, took = received[emails]
        home = root / f"project-c{c}"
        shutil.copytree(source.parent, home)
        output = home / "output"
        env = child_env(output, data, REFUND_AGENT_OFFLINE_URL=model_url)
        log(f"project: {emails} tickets at concurrency {c} (load {load_avg()})")
        result = drain([(home, env)], c)
        requests, statuses = model_requests(output, data)
        ideal = ideal_seconds(requests, latency, c)
        rows.append({"concurrency": c, "tickets": emails, "receive_s": round(took, 2),
                     "requests": requests, "ideal_s": round(ideal, 2),
                     "vs_ideal": round(result["drain_s"] / ideal, 3),
                     "tickets_per_min": round(emails / result["drain_s"] * 60, 1),
                     "cpu_ms_per_ticket": round((result["cpu_s"] - fixed) / emails * 1000, 1),
                     "fixed_cpu_s": round(fixed, 3),
                     "store_statuses": dict(statuses), "load": load_avg(),
                     **{k: (round(v, 2) if isinstance(v, float) else v)
                        for k, v in result.items()}})
        log(f"  {rows[-1]['drain_s']:.1f} s (ideal {ideal:.1f} s), "
            f"{rows[-1]['tickets_per_min']} tickets/min, {rows[-1]['cpu_ms_per_ticket']} ms "
            f"CPU a ticket, peak {rows[-1]['peak_mb']} MB; {dict(statuses)}")
        shutil.rmtree(home)
    return rows


def idle_cpu(root: Path, data: Path, model_url: str, runs: int = 3) -> float:
    """A worker's CPU from its first line to its exit with nothing to do: opening the model
    client and the outside systems, the first sweep, winding down. Taken off the drains' CPU
    so what is left is per ticket."""
    home = root / "idle"
    (home / "output").mkdir(parents=True)
    env = child_env(home / "output", data, REFUND_AGENT_OFFLINE_URL=model_url)
    return min(drain([(home, env)], 1)["cpu_s"] for _ in range(runs))


def rate_limited(root: Path, data: Path, emails: int, concurrency: int, rate: int,
                 latency: float) -> dict[str, Any]:
    """The burst against a stand-in that refuses past ``rate`` a minute, the worker's budget
    set to the same."""
    from offline_model import OfflineServer
    home = root / "rate"
    output = home / "output"
    took = receive(output, data, emails)
    server = OfflineServer(home / "model.sqlite3", latency=latency,
                           rate_limit=f"{rate}/min").start()
    try:
        env = child_env(output, data, REFUND_AGENT_OFFLINE_URL=server.base_url,
                        REFUND_AGENT_RATE_RPM=str(rate))
        log(f"rate limit: {emails} tickets at concurrency {concurrency}, {rate}/min "
            f"(load {load_avg()})")
        result = drain([(home, env)], concurrency)
        assert server.pace is not None
        accepted, refused = list(server.pace.accepted), list(server.pace.refused)
    finally:
        server.close()
    requests, statuses = model_requests(output, data)
    use = window_use(accepted, rate, 60.0)
    out = {"tickets": emails, "concurrency": concurrency, "rate_per_min": rate,
           "budget_rpm": rate, "requests": requests, "accepted": len(accepted),
           "refused_429": len(refused), "window_use": [round(u, 3) for u in use],
           "mean_window_use": round(sum(use) / len(use), 3) if use else None,
           "drain_use": round(len(accepted) / (rate * result["drain_s"] / 60.0), 3),
           "accepted_per_10s": per_bucket(accepted, 10.0),
           "refused_at_s": [round(t - min(accepted), 2) for t in refused] if accepted else [],
           "rate_bound_s": round(rate_bound_seconds(requests, rate, 60.0), 1),
           "ideal_unlimited_s": round(ideal_seconds(requests, latency, concurrency), 1),
           "receive_s": round(took, 2), "store_statuses": dict(statuses),
           "failed": sum(n for s, n in statuses.items() if s not in ("waiting",)),
           "load": load_avg(),
           **{k: (round(v, 2) if isinstance(v, float) else v) for k, v in result.items()}}
    log(f"  {out['drain_s']} s, {out['accepted']} accepted, {out['refused_429']} refused, "
        f"window use {out['window_use']}, statuses {dict(statuses)}")
    return out


def peers(root: Path, data: Path, model_url: str, python: str, plan: dict[int, int],
          latency: float) -> list[dict[str, Any]]:
    """The same tickets through the peers' async runners, each to its pause."""
    rows = []
    for c, emails in plan.items():
        for config in ("sdk", "langgraph"):
            out = root / f"peer-{config}-c{c}"
            log(f"peer {config}: {emails} tickets at concurrency {c} (load {load_avg()})")
            done = subprocess.run(
                [python, str(HERE / "burst_peers.py"), "--config", config, "--concurrency",
                 str(c), "--tickets", str(emails), "--base-url", model_url, "--data",
                 str(data), "--out", str(out)], capture_output=True, text=True,
                env={**child_env(out, data), "PYTHONPATH": str(PROJECT_ROOT)}, timeout=3600)
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 and not lines:
                log(f"  failed ({done.returncode}):\n{done.stderr[-3000:]}")
                rows.append({"config": config, "concurrency": c, "tickets": emails,
                             "error": done.stderr.strip().splitlines()[-1:]})
                continue
            result = json.loads(lines[-1])
            if result["error_count"]:
                log(f"  {result['error_count']} runs failed, e.g. {result['errors']}")
            ideal = ideal_seconds(result["requests"], latency, c)
            result.update(concurrency=c, ideal_s=round(ideal, 2),
                          vs_ideal=round(result["drain_s"] / ideal, 3),
                          tickets_per_min=round(emails / result["drain_s"] * 60, 1),
                          cpu_ms_per_ticket=round(result["cpu_s"] / emails * 1000, 1),
                          load=load_avg())
            rows.append(result)
            log(f"  {result['drain_s']:.1f} s (ideal {ideal:.1f}), {result['paused']} paused, "
                f"{result['cpu_ms_per_ticket']} ms CPU a ticket, peak {result['peak_mb']} MB")
            shutil.rmtree(out, ignore_errors=True)
    return rows


def hosts(root: Path, data: Path, model_url: str, emails: int, concurrency: int,
          latency: float, fixed: float) -> dict[str, Any]:
    """One host, then three, on one PostgreSQL database each holding the same burst."""
    from postgres import _load_pg
    from postgres import missing as pg_missing
    if why := pg_missing():
        return {"skipped": why}
    pg = _load_pg()
    cluster = pg.Cluster(pg.find_bin(), durable=True).start()
    try:
        url = cluster.create("burst_received")
        took = receive(root / "pg-received" / "output", data, emails,
                       REFUND_AGENT_DATABASE_URL=url)
        result: dict[str, Any] = {"tickets": emails, "concurrency_per_host": concurrency,
                                  "receive_s": round(took, 2)}
        for n in (1, 3):
            db = cluster.create(f"burst_hosts_{n}", template="burst_received")
            homes = []
            for host in HOSTS[:n]:
                home = root / f"pg-{n}" / host
                (home / "output").mkdir(parents=True)
                homes.append((home, child_env(home / "output", data,
                                              REFUND_AGENT_DATABASE_URL=db,
                                              REFUND_AGENT_OFFLINE_URL=model_url,
                                              REFUND_AGENT_HOST_ID=host)))
            log(f"postgresql: {n} host(s) at concurrency {concurrency} each "
                f"(load {load_avg()})")
            got = drain(homes, concurrency)
            requests, statuses = model_requests(root / f"pg-{n}" / HOSTS[0] / "output", data, db)
            got.update(requests=requests, store_statuses=dict(statuses),
                       ideal_s=round(ideal_seconds(requests, latency, n * concurrency), 2),
                       tickets_per_min=round(emails / got["drain_s"] * 60, 1),
                       cpu_ms_per_ticket=round((got["cpu_s"] - n * fixed) / emails * 1000, 1),
                       load=load_avg())
            got = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in got.items()}
            result[f"hosts_{n}"] = got
            log(f"  {got['drain_s']} s (ideal {got['ideal_s']}), runs per worker "
                f"{got['per_worker_runs']}, {dict(statuses)}")
        result["ratio"] = round(result["hosts_1"]["drain_s"] / result["hosts_3"]["drain_s"], 2)
        return result
    finally:
        cluster.stop()


# -- output -------------------------------------------------------------------------------------

def cores_busy(row: dict[str, Any]) -> str:
    """The worker's and the stand-in's CPU over the drain, in cores (blank if not measured)."""
    if "standin_cpu_s" not in row or not row["drain_s"]:
        return ""
    return f"{(row['cpu_s'] + row['standin_cpu_s']) / row['drain_s']:.2f}"


def table(results: dict[str, Any]) -> str:
    """The markdown tables docs/PERFORMANCE.md quotes."""
    latency, full = results["latency"], max(r["tickets"] for r in results["project"])
    lines = ["| concurrency | tickets | drain | ideal | × ideal | tickets/min | CPU a ticket "
             "| peak RSS | cores busy |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["project"]:
        note = ""
        if r["tickets"] < full:
            scaled = r["drain_s"] / r["tickets"] * full
            note = f" ({full:,} at this pace: {scaled / 60:.0f} min)"
        lines.append(f"| {r['concurrency']} | {r['tickets']:,} | {r['drain_s']:.1f} s{note} | "
                     f"{r['ideal_s']:.1f} s | {r['vs_ideal']:.2f} | {r['tickets_per_min']:,.0f}"
                     f" | {r['cpu_ms_per_ticket']:.0f} ms | {r['peak_mb']:.0f} MB | "
                     f"{cores_busy(r)} |")
    text = "\n".join(lines)
    if results.get("peers"):
        project = {r["concurrency"]: r for r in results["project"]}
        rows = ["| concurrency | tickets | runner | drain | × ideal | tickets/min | CPU a ticket "
                "| peak RSS |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
        for c in sorted({p["concurrency"] for p in results["peers"]}):
            mine = project.get(c)
            if mine:
                rows.append(f"| {c} | {mine['tickets']:,} | refund-agent work | "
                            f"{mine['drain_s']:.1f} s | {mine['vs_ideal']:.2f} | "
                            f"{mine['tickets_per_min']:,.0f} | {mine['cpu_ms_per_ticket']:.0f} ms"
                            f" | {mine['peak_mb']:.0f} MB |")
            for p in (p for p in results["peers"] if p["concurrency"] == c):
                name = {"sdk": "Agents SDK, Runner.run",
                        "langgraph": "LangGraph, ainvoke + AsyncSqliteSaver"}[p["config"]]
                if "error" in p:
                    rows.append(f"| {c} | {p['tickets']:,} | {name} | failed: {p['error']} "
                                "| | | | |")
                    continue
                rows.append(f"| {c} | {p['tickets']:,} | {name} | {p['drain_s']:.1f} s | "
                            f"{p['vs_ideal']:.2f} | {p['tickets_per_min']:,.0f} | "
                            f"{p['cpu_ms_per_ticket']:.0f} ms | {p['peak_mb']:.0f} MB |")
        text += "\n\n" + "\n".join(rows)
    _ = latency
    return text


def plot(results: dict[str, Any], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from plots import SQLITE

    project = results["project"]
    cs = [r["concurrency"] for r in project]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.6), dpi=100)
    left.plot(cs, [r["tickets_per_min"] for r in project], "o-", color=SQLITE,
              label="refund-agent work --concurrency C")
    left.plot(cs, [r["tickets"] / r["ideal_s"] * 60 for r in project], "--", color="grey",
              label="ideal (requests x latency / C)")
    colors = {"sdk": "#2ca02c", "langgraph": "#ff7f0e"}
    names = {"sdk": "Agents SDK, Runner.run", "langgraph": "LangGraph, ainvoke"}
    for config in ("sdk", "langgraph"):
        rows = sorted((p for p in results.get("peers", []) if p["config"] == config
                       and "error" not in p), key=lambda p: p["concurrency"])
        if rows:
            left.plot([p["concurrency"] for p in rows], [p["tickets_per_min"] for p in rows],
                      "s:", color=colors[config], label=names[config])
            right.plot([p["concurrency"] for p in rows], [p["cpu_ms_per_ticket"] for p in rows],
                       "s:", color=colors[config], label=names[config])
    right.plot(cs, [r["cpu_ms_per_ticket"] for r in project], "o-", color=SQLITE,
               label="refund-agent work")
    left.set_title(f"Tickets drained to their proposal, per minute\n(stand-in at "
                   f"{results['latency']:g} s a reply)")
    right.set_title("Worker CPU per ticket (start-up left out)")
    left.set_ylabel("tickets / minute")
    right.set_ylabel("ms of CPU")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(cs)
        ax.set_xticklabels([str(c) for c in cs])
        ax.set_xlabel("runs in flight (concurrency)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7.5)
    left.set_yscale("log")
    right.set_ylim(bottom=0)
    m = results["machine"]
    fig.text(0.01, 0.005, f"{m['nproc']} cores, {m['cpu']}, Python {m['python']} · "
             f"{results['command']}", fontsize=6.5, color="grey")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def merged(old: list[dict[str, Any]], new: list[dict[str, Any]], keys: tuple[str, ...]
           ) -> list[dict[str, Any]]:
    """``old``'s rows with ``new``'s in place of those with the same ``keys`` (``--merge``:
    one concurrency measured again leaves the others as they were)."""
    key = lambda row: tuple(row[k] for k in keys)  # noqa: E731
    fresh = {key(r): r for r in new}
    return sorted([r for r in old if key(r) not in fresh] + new, key=key)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="100 emails (20 at concurrency 1), rate run 40, PostgreSQL 60")
    parser.add_argument("--emails", type=int, default=1000, help="emails at concurrency 8+")
    parser.add_argument("--emails-at-1", type=int, default=40,
                        help="the sample at concurrency 1 (about 3 s a ticket), scaled per "
                             "ticket in the table")
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCIES)))
    parser.add_argument("--latency", type=float, default=1.0, help="seconds a reply")
    parser.add_argument("--parts", default="project,rate,peers,hosts",
                        help="which parts to run (comma-separated)")
    parser.add_argument("--rate", type=int, default=120, help="requests a minute")
    parser.add_argument("--rate-emails", type=int, default=100)
    parser.add_argument("--rate-concurrency", type=int, default=64)
    parser.add_argument("--peers-python", default=sys.executable,
                        help="a Python with the peers installed (pip install -e '.[peers]')")
    parser.add_argument("--peer-concurrency", default="32,64")
    parser.add_argument("--pg-emails", type=int, default=300)
    parser.add_argument("--pg-concurrency", type=int, default=16)
    parser.add_argument("--idle-runs", type=int, default=3,
                        help="idle workers timed for the CPU taken off each drain (the least)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--merge", action="store_true",
                        help="keep the parts of --json this run does not redo")
    parser.add_argument("--markdown", default=None, help="a file, or - for stdout")
    parser.add_argument("--plot", type=Path, default=None, help="folder for burst.png")
    args = parser.parse_args(argv)
    if args.quick:
        args.emails, args.emails_at_1 = 100, 20
        args.rate_emails, args.pg_emails = 40, 60
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",")]
        args.peer_concurrency = [int(c) for c in args.peer_concurrency.split(",") if c]
    except ValueError:
        parser.error("--concurrency and --peer-concurrency are whole numbers, comma-separated")
    if not args.latency > 0:
        parser.error("--latency is above 0 seconds: the ideal is the time spent waiting on it")
    if any(not 1 <= c <= 256 for c in args.concurrency + args.peer_concurrency):
        parser.error("a concurrency is from 1 to 256")
    args.parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if unknown := args.parts - {"project", "rate", "peers", "hosts"}:
        parser.error(f"unknown part(s) {sorted(unknown)}: project, rate, peers, hosts")
    return args


def has_peers(python: str) -> bool:
    """Whether ``python`` can import both peers (they live in a venv of their own, mostly)."""
    try:
        return subprocess.run([python, "-c", "import agents, langgraph"],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from offline_model import OfflineServer

    results: dict[str, Any] = {}
    if args.merge and args.json and args.json.exists():
        results = json.loads(args.json.read_text())
    command = "python bench/burst.py " + " ".join(sys.argv[1:] if argv is None else argv)
    # With --merge the figures come from several runs: each run's command is kept.
    results.update(machine=machine(), latency=args.latency, load_before=load_avg(),
                   commands=[*results.get("commands", []), command])
    results["command"] = results["commands"][0] + (
        f" (+{len(results['commands']) - 1} --merge reruns)" if len(results["commands"]) > 1
        else "")
    plan = {c: (args.emails_at_1 if c == 1 else args.emails) for c in args.concurrency}
    with tempfile.TemporaryDirectory(prefix="burst-") as scratch:
        root = Path(scratch)
        data = make_bench_shop(root / "data", max(args.emails, args.emails_at_1,
                                                  args.rate_emails, args.pg_emails))
        model = OfflineServer(root / "model.sqlite3", latency=args.latency).start()
        try:
            fixed = idle_cpu(root, data, model.base_url, args.idle_runs)
            results["fixed_cpu_s"] = round(fixed, 3)
            if "project" in args.parts:
                rows = project(root, data, model.base_url, plan, args.latency, fixed)
                results["project"] = merged(results.get("project", []), rows, ("concurrency",))
            if "rate" in args.parts:
                results["rate"] = rate_limited(root, data, args.rate_emails,
                                               args.rate_concurrency, args.rate, args.latency)
            if "peers" in args.parts:
                if has_peers(args.peers_python):
                    rows = peers(root, data, model.base_url, args.peers_python,
                                 {c: plan.get(c, args.emails) for c in args.peer_concurrency},
                                 args.latency)
                    results["peers"] = merged(results.get("peers", []), rows,
                                              ("config", "concurrency"))
                else:
                    log(f"peers skipped: {args.peers_python} cannot import agents and langgraph"
                        " (pip install -e '.[peers]' there, or pass --peers-python)")
            if "hosts" in args.parts:
                results["hosts"] = hosts(root, data, model.base_url, args.pg_emails,
                                         args.pg_concurrency, args.latency, fixed)
        finally:
            model.close()
    project_rows = {r["concurrency"]: r for r in results.get("project", [])}
    if 1 in project_rows:
        results["memory_per_run_kb"] = {
            str(c): round(memory_per_run(r["peak_mb"], project_rows[1]["peak_mb"], c) * 1024)
            for c, r in project_rows.items() if c > 1}
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if results.get("project"):
        text = table(results)
        if args.markdown == "-":
            print(text)
        elif args.markdown:
            Path(args.markdown).write_text(text + "\n")
        if args.plot:
            log(f"plot: {plot(results, args.plot / 'burst.png')}")
    print(json.dumps({k: results[k] for k in ("memory_per_run_kb", "rate", "hosts")
                      if k in results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
