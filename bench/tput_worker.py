"""One throughput worker process (started by ``bench/run.py`` and ``bench/postgres.py``; not
meant to be run by hand).

Resolves Maya-style tickets end to end (email, 3 requests, approval by a script, 2 requests)
against the shared store in ``--output`` for ``--duration`` seconds from ``--start-at``, and
prints a JSON line with how many finished in that window. A fast machine can use up its orders
before the window ends: the worker then stops early and reports the shorter window it measured
(``window_s``), so callers compute a rate either way and the bench never runs dry.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import OrderPool, TimedAgent, bench_settings, full_ticket  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--first", type=int, required=True, help="first clone order number to use")
    p.add_argument("--last", type=int, required=True, help="one past the last clone to use")
    p.add_argument("--start-at", type=float, required=True, help="epoch seconds")
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--database-url", default="",
                   help="a postgresql:// URL: the store there instead of SQLite in --output")
    args = p.parse_args()

    agent = TimedAgent(bench_settings(args.output, args.data, database_url=args.database_url))
    pool = OrderPool(args.first, args.last)
    for _ in range(args.warmup):  # imports, first connection, lazily loaded shop data
        full_ticket(agent, pool.take())
    late = time.time() - args.start_at  # > 0: the warm-up ran past the start (fewer counted)
    while time.time() < args.start_at:
        time.sleep(0.002)
    end = args.start_at + args.duration
    done = 0
    cpu0 = time.process_time()  # every thread of this process: agent, SDK and offline model
    began = max(time.time(), args.start_at)
    while pool.left():
        full_ticket(agent, pool.take())
        if time.time() > end:
            break
        done += 1
    window = min(time.time(), end) - began
    cpu = time.process_time() - cpu0
    print(json.dumps({"done": done, "duration": args.duration, "window_s": round(window, 3),
                      "ran_dry": not pool.left(), "cpu_s": round(cpu, 3),
                      "orders_used": pool.next - args.first, "late_s": round(late, 3)}))


if __name__ == "__main__":
    main()
