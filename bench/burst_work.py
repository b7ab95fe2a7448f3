"""A burst of mail through ``refund-agent work`` at concurrency 1 and N (issue #46's Done-when).

Two output folders get the same 32 emails (28 damaged-item tickets, each on an order of its
own, and 4 past the return window), saved with Agent.start as ``receive --no-work`` saves them.
In each, ``refund-agent work --concurrency C --idle-exit 0`` drains them (the proposals wait
for a person, the late ones are declined and answered); a person then decides every proposal
(two approved, one rejected, in the tickets' order), and a second ``work`` drains the
decisions (refunds, emails). The stand-in answers each reply after ``--latency`` seconds
(REFUND_AGENT_OFFLINE_LATENCY: the in-process stand-in's setting).

The time is the worker's own, from its first line to its last run's line (the interpreter's
start, paid once by both, is left out, and shown apart). Prints each drain, the ratio, and
both outcomes: run statuses, refunds (order, cents, lines) and emails (to, body), which must
be the same.

    python bench/burst_work.py                 # 32 emails, 0.5 s a reply, 1 and 16
    python bench/burst_work.py --emails 64 --concurrency 32 --latency 1 --model-apart
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchlib import bench_settings, clone_id, make_bench_shop, start_ticket

from offline_model import OfflineServer
from refund_agent.config import PROJECT_ROOT
from refund_agent.desk import Agent

LATE_EVERY = 8   # every 8th email is past the return window (declined, answered, no person)


def seed(output: Path, data: Path, emails: int) -> None:
    """The burst, saved without any model request (as ``receive --no-work`` does)."""
    agent = Agent(bench_settings(output, data))
    late = agent.shop.sample("past-window")
    for i in range(emails):
        if i % LATE_EVERY == LATE_EVERY - 1:
            agent.start(late.sender, late.body, subject=f"{late.subject} #{i}",
                        sender_name=late.from_name, kind="bench")
        else:
            start_ticket(agent, clone_id(i + 1))
    agent.store.close()


def work(output: Path, data: Path, concurrency: int, latency: float, model_url: str = ""
         ) -> dict[str, float]:
    """One ``refund-agent work`` until idle; its drain time (first line to last run's line),
    the process's whole time, and how many runs it reported. ``model_url``: a stand-in
    served from this process instead of the worker's own (REFUND_AGENT_OFFLINE_URL)."""
    env = {**os.environ, "REFUND_AGENT_OUTPUT": str(output), "REFUND_AGENT_DATA": str(data),
           "REFUND_AGENT_OFFLINE_LATENCY": str(latency), "REFUND_AGENT_OFFLINE_URL": model_url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "refund_agent", "work", "--concurrency",
                             str(concurrency), "--idle-exit", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=output.parent)
    first = last = None
    runs = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.monotonic()
        if line.startswith("Worker "):
            first = now
        elif line.startswith("run_") and ": " in line:
            last, runs = now, runs + 1
    err = proc.stderr.read() if proc.stderr else ""
    # wait4, not wait: the child's own peak memory and CPU seconds come with its exit.
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or first is None:
        raise SystemExit(f"work exited {proc.returncode}:\n{err}")
    return {"drain": (last or first) - first, "process": time.monotonic() - started,
            "runs": runs, "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def decide_all(output: Path, data: Path) -> Counter:
    """Every proposal decided, in the tickets' order: two approved, then one rejected."""
    agent = Agent(bench_settings(output, data))
    order = {run.id: i for i, run in enumerate(reversed(agent.store.runs(limit=-1)))}
    pending = sorted(agent.store.approvals("pending", limit=-1), key=lambda a: order[a.run_id])
    made: Counter = Counter()
    for i, approval in enumerate(pending):
        approve = i % 3 != 2
        agent.decide(approval.id, approve, "Dana Kim", None if approve else "Not covered.",
                     fingerprint=agent.store.approval(approval.id).fingerprint)
        made["approved" if approve else "rejected"] += 1
    agent.store.close()
    return made


def outcome(output: Path, data: Path) -> dict[str, object]:
    """What the burst came to, independent of the order runs finished in."""
    agent = Agent(bench_settings(output, data))
    runs = list(reversed(agent.store.runs(limit=-1)))
    read = lambda name: [json.loads(x) for x in (output / name).read_text().splitlines()]  # noqa: E731
    refunds = read("refunds.log") if (output / "refunds.log").exists() else []
    emails = read("outbox.log") if (output / "outbox.log").exists() else []
    result = {
        "statuses": [r.desk_status or r.status.value for r in runs],
        "requests": [r.requests for r in runs],
        "refunds": sorted((r["request"]["order_id"], r["request"]["amount_cents"])
                          for r in refunds),
        "emails": sorted((e["request"]["to"], e["request"]["body"]) for e in emails),
    }
    agent.store.close()
    return result


def burst(root: Path, data: Path, emails: int, concurrency: int, latency: float,
          apart: bool = False) -> tuple[dict[str, float], dict[str, object]]:
    output = root / f"c{concurrency}" / "output"
    output.mkdir(parents=True)
    seed(output, data, emails)
    model = OfflineServer(output / "offline-model.sqlite3", latency=latency).start() \
        if apart else None
    url = model.base_url if model else ""
    try:
        first = work(output, data, concurrency, latency, url)
        decided = decide_all(output, data)
        second = work(output, data, concurrency, latency, url)
    finally:
        if model:
            model.close()
    times = {"drain": first["drain"] + second["drain"],
             "process": first["process"] + second["process"],
             "cpu": first["cpu"] + second["cpu"],
             "peak_mb": max(first["peak_mb"], second["peak_mb"]),
             "proposals": first["drain"], "decisions": second["drain"],
             "runs": first["runs"] + second["runs"], **decided}
    return times, outcome(output, data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--emails", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds a reply")
    parser.add_argument("--model-apart", action="store_true",
                        help="serve the stand-in from this process (REFUND_AGENT_OFFLINE_URL), "
                             "not inside the worker, so its CPU is not the worker's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="burst-work-") as scratch:
        root = Path(scratch)
        data = make_bench_shop(root / "data", args.emails)
        results = {c: burst(root, data, args.emails, c, args.latency, args.model_apart)
                   for c in (1, args.concurrency)}
    (one, one_out), (many, many_out) = results[1], results[args.concurrency]
    where = "apart, in the bench's process" if args.model_apart else "inside the worker"
    print(f"{args.emails} emails, the stand-in ({where}) at {args.latency:g} s a reply; "
          "drain = the worker's first line to its last run's line (two drains: the emails, "
          "then the decisions)")
    print(f"{'concurrency':>11}  {'drain s':>8}  {'emails':>7}  {'decisions':>9}  "
          f"{'process s':>9}  {'runs':>5}  {'tickets/min':>11}  {'CPU s':>6}  {'peak MB':>7}  "
          f"{'ideal s':>7}")
    for c, (t, o) in results.items():
        # The ideal: every request's latency, spread over the runs in flight.
        ideal = sum(o["requests"]) * args.latency / c  # type: ignore[arg-type]
        print(f"{c:>11}  {t['drain']:8.2f}  {t['proposals']:7.2f}  {t['decisions']:9.2f}  "
              f"{t['process']:9.2f}  {t['runs']:5.0f}  {args.emails / t['drain'] * 60:11.1f}  "
              f"{t['cpu']:6.1f}  {t['peak_mb']:7.1f}  {ideal:7.2f}")
    extra = (many["peak_mb"] - one["peak_mb"]) / (args.concurrency - 1)
    print(f"memory per run in flight: {extra * 1024:.0f} kB (peak at {args.concurrency} less "
          f"peak at 1, over {args.concurrency - 1}); CPU per ticket: "
          f"{one['cpu'] / args.emails * 1000:.0f} ms at 1, "
          f"{many['cpu'] / args.emails * 1000:.0f} ms at {args.concurrency} (the worker "
          "processes' whole CPU, their start included"
          + (")" if args.model_apart else ", and the stand-in's inside them)"))
    print(f"ratio (drain, 1 / {args.concurrency}): {one['drain'] / many['drain']:.1f}x; "
          f"whole processes: {one['process'] / many['process']:.1f}x")
    for c, (_t, o) in results.items():
        statuses = Counter(o["statuses"])  # type: ignore[arg-type]
        print(f"concurrency {c}: statuses {dict(sorted(statuses.items()))}; "
              f"{len(o['refunds'])} refunds, {len(o['emails'])} emails, "  # type: ignore[arg-type]
              f"{sum(o['requests'])} model requests")  # type: ignore[arg-type]
    same = one_out == many_out
    print("same outcomes (each run's status and requests, refunds, emails): "
          + ("yes" if same else "NO: " + ", ".join(k for k in one_out
                                                   if one_out[k] != many_out[k])))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
