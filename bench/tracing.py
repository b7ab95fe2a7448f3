"""What telemetry costs a ticket: CPU per ticket with it off, and on (issue #47).

    python bench/tracing.py                  # 5 rounds x 8 tickets per mode, medians, ratios
    python bench/tracing.py --without DIR    # and off here against the code before telemetry
    python bench/tracing.py --rounds 3 --tickets 5 --json out.json

Maya's sample ticket end to end (email, three model requests, the pause, the approval, two more
requests, done) through the real desk on the offline model, in one process, the modes taking
turns ticket by ticket (in a rotated order) so a machine shared with other work slows them
alike; besides the medians, each on-ticket's CPU over the off-ticket's of the same turn
(paired):

- ``off``: telemetry off, as by default (no variable set: the loop's points return at once,
  OpenTelemetry is not imported; the same code path as with the extra absent);
- ``memory``: spans to the SDK's in-memory exporter (SimpleSpanProcessor, in the ticket's own
  thread) and metrics to an in-memory reader: the cost of making the spans and counting;
- ``console``: what ``OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=console`` sets up
  (BatchSpanProcessor, JSON written to /dev/null here instead of stderr).

CPU is this thread's (``time.thread_time``: the offline model answers from other threads, so
its CPU is not counted, the openai SDK's is) and the whole process's (``time.process_time``:
the batch exporter's thread too, and the offline model's). Then the start-up: a new
interpreter importing the loop, off and with ``OTEL_TRACES_EXPORTER=console`` (the SDK's
imports), medians of interleaved runs. With ``--without DIR`` (a checkout of the code before
telemetry, e.g. a ``git worktree`` of the commit before it), telemetry off here against that
code: is off free?
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from benchlib import (  # noqa: E402
    OrderPool,
    TimedAgent,
    bench_settings,
    full_ticket,
    make_bench_shop,
)

from refund_agent import telemetry  # noqa: E402

MODES = ("off", "memory", "console")


_PROVIDERS: list[Any] = []


def switch(mode: str, devnull: Any) -> None:
    """Turn telemetry to ``mode`` for the tickets that follow (the last mode's providers shut
    down: nothing of theirs runs during the next mode's tickets)."""
    telemetry.reset()
    while _PROVIDERS:
        _PROVIDERS.pop().shutdown()
    if mode == "off":
        return
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        InMemoryMetricReader,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    if mode == "memory":
        tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        reader: Any = InMemoryMetricReader()
    else:
        tracer_provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=devnull)))
        reader = PeriodicExportingMetricReader(ConsoleMetricExporter(out=devnull))
    meter_provider = MeterProvider(metric_readers=[reader])
    _PROVIDERS.extend([tracer_provider, meter_provider])
    telemetry.use(tracer_provider, meter_provider, capture=False)


def tickets_cpu(rounds: int, tickets: int, root: Path) -> dict[str, dict[str, float]]:
    """Each round runs ``tickets`` tickets per mode, the modes taking turns ticket by ticket
    (in a rotated order), so the machine's load changes alike for all three."""
    orders = rounds * len(MODES) * (tickets + 1) + 5   # one order per ticket, warm-ups too
    data = make_bench_shop(root / "shop", orders)
    pool = OrderPool(1, orders)
    agent = TimedAgent(bench_settings(root / "output", data))
    thread: dict[str, list[float]] = {m: [] for m in MODES}
    process: dict[str, list[float]] = {m: [] for m in MODES}
    with open(os.devnull, "w") as devnull:
        for mode in MODES:   # warm: the offline model, the store, each mode's imports
            switch(mode, devnull)
            full_ticket(agent, pool.take())
        for n in range(rounds * tickets):
            order = MODES[n % len(MODES):] + MODES[:n % len(MODES)]
            for mode in order:
                switch(mode, devnull)
                t0, p0 = time.thread_time(), time.process_time()
                full_ticket(agent, pool.take())
                thread[mode].append(time.thread_time() - t0)
                process[mode].append(time.process_time() - p0)
                telemetry.flush()
        switch("off", devnull)
    out = {}
    for mode in MODES:
        out[mode] = {"thread_cpu_ms": round(1000 * statistics.median(thread[mode]), 2),
                     "process_cpu_ms": round(1000 * statistics.median(process[mode]), 2),
                     "tickets": len(thread[mode])}
    for mode in MODES[1:]:
        for key in ("thread_cpu_ms", "process_cpu_ms"):
            out[mode][key.replace("_ms", "_ratio")] = round(
                out[mode][key] / out["off"][key], 3)
        # Paired: each ticket against the off ticket of the same turn (the same moment).
        pairs = [on / off for on, off in zip(thread[mode], thread["off"], strict=True)]
        out[mode]["paired_thread_ratio"] = round(statistics.median(pairs), 3)
    return out


STARTUP = ("import time; t=time.perf_counter(); import refund_agent.loop; "
           "from refund_agent import telemetry; telemetry.active(); "
           "print(time.perf_counter()-t)")


def startup_ms(reps: int) -> dict[str, float]:
    """A new interpreter importing the loop and deciding telemetry: off, and console."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(HERE.parent)
    got: dict[str, list[float]] = {"off": [], "console": []}
    for _ in range(reps):
        for mode in got:
            extra = {"OTEL_TRACES_EXPORTER": "console"} if mode == "console" else {}
            proc = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True,
                                  text=True, env={**env, **extra}, check=True)
            got[mode].append(float(proc.stdout.strip()))
    return {f"{mode}_ms": round(1000 * statistics.median(v), 1) for mode, v in got.items()}


# One process's tickets, telemetry off, on the checkout its PYTHONPATH names: the median CPU of
# the ticket's thread, in ms (for --without: the same tickets on the code before telemetry).
CHILD = r"""
import statistics, sys, tempfile, time
from pathlib import Path
from benchlib import OrderPool, TimedAgent, bench_settings, full_ticket, make_bench_shop
n = int(sys.argv[1])
root = Path(tempfile.mkdtemp())
pool = OrderPool(1, n + 3)
agent = TimedAgent(bench_settings(root / "output", make_bench_shop(root / "shop", n + 3)))
full_ticket(agent, pool.take())
cpu = []
for _ in range(n):
    t = time.thread_time()
    full_ticket(agent, pool.take())
    cpu.append(time.thread_time() - t)
print(1000 * statistics.median(cpu))
"""


def without_ms(checkout: Path, rounds: int, tickets: int) -> dict[str, float]:
    """Telemetry off on this checkout, against ``checkout`` (the code before it), each round a
    new process of each, alternating: the medians of the rounds' medians."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"   # nothing written into the other checkout
    got: dict[str, list[float]] = {"this_off_ms": [], "without_ms": []}
    for n in range(rounds):
        pair = [("this_off_ms", HERE.parent), ("without_ms", checkout)]
        for key, root in pair if n % 2 == 0 else pair[::-1]:
            path = os.pathsep.join([str(root / "bench"), str(root)])
            proc = subprocess.run([sys.executable, "-c", CHILD, str(tickets)], check=True,
                                  capture_output=True, text=True, cwd=root,
                                  env={**env, "PYTHONPATH": path})
            got[key].append(float(proc.stdout.strip().splitlines()[-1]))
    out = {key: round(statistics.median(v), 2) for key, v in got.items()}
    out["ratio"] = round(out["this_off_ms"] / out["without_ms"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tickets", type=int, default=8, help="measured tickets per mode "
                        "and round")
    parser.add_argument("--startups", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--without", type=Path, help="a checkout of the code before telemetry:"
                        " compare telemetry off here with it (new processes, alternating)")
    args = parser.parse_args(argv)
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        del os.environ[name]   # off means off: nothing from this shell turns it on
    with tempfile.TemporaryDirectory() as folder:
        results = {"per_ticket": tickets_cpu(args.rounds, args.tickets, Path(folder)),
                   "startup": startup_ms(args.startups),
                   "rounds": args.rounds, "tickets_per_round": args.tickets}
        if args.without:
            results["off_vs_without"] = without_ms(args.without, args.rounds, args.tickets * 2)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
