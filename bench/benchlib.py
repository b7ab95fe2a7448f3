"""Shared pieces of the benchmarks: a bench shop, a timed agent, one scripted ticket, stats.

Nothing here changes how the agent works. ``TimedAgent`` only wraps ``Agent._stream`` (one model
request) with clocks, so a run's wall time can be split into model time and harness time.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refund_agent import RunStatus, Settings
from refund_agent.config import PROJECT_ROOT
from refund_agent.desk import Agent

DATA = PROJECT_ROOT / "data"
APPROVER = "Bench approver"
TEMPLATE_ORDER = "A1043"  # Maya's cracked coffee maker: 3 requests, approval, 2 requests


def bench_settings(output_dir: Path, data_dir: Path = DATA, **changes: Any) -> Settings:
    """Offline settings for a bench folder; never reads a key (the offline model always)."""
    base = Settings(api_key="", data_dir=Path(data_dir), output_dir=Path(output_dir),
                    max_retries=0, timeout=60.0, offline_latency=0.0)
    return base.with_(**changes) if changes else base


def make_bench_shop(root: Path, clones: int) -> Path:
    """A copy of the sample shop with ``clones`` extra copies of Maya's order (B00001, ...).

    A refund can be approved once per order: after that the policy (rightly) finds nothing left
    to refund. Repeating the damaged-item ticket hundreds of times therefore needs hundreds of
    orders; each clone is Maya's order under a new number, delivered yesterday.
    """
    root.mkdir(parents=True, exist_ok=True)
    for name in ("shop.json", "refund-policy.md", "sample-emails.json"):
        shutil.copy(DATA / name, root / name)
    raw = json.loads((DATA / "orders.json").read_text(encoding="utf-8"))
    template = next(o for o in raw["orders"] if o["order_id"] == TEMPLATE_ORDER)
    raw["orders"] += [{**template, "order_id": clone_id(i)} for i in range(1, clones + 1)]
    (root / "orders.json").write_text(json.dumps(raw), encoding="utf-8")
    return root


def clone_id(i: int) -> str:
    return f"B{i:05d}"


class OrderPool:
    """Hands out fresh clone order ids from a range."""

    def __init__(self, start: int, stop: int) -> None:
        self.next, self.stop = start, stop

    def left(self) -> int:
        return max(0, self.stop - self.next)

    def take(self) -> str:
        if self.next >= self.stop:
            raise RuntimeError("The bench shop ran out of cloned orders; raise the clone count.")
        self.next += 1
        return clone_id(self.next - 1)


def tickets_per_second(reports: list[dict]) -> float:
    """The workers' combined rate, each over the window it measured (shorter if it ran dry)."""
    return sum(r["done"] / r["window_s"] for r in reports if r.get("window_s", 0) > 0)


@dataclass
class Span:
    """One model request as the agent saw it: wall clock, and this thread's CPU inside it."""

    start: float
    end: float
    cpu: float  # client-side CPU (SDK: build request, HTTP, SSE parsing, pydantic events)
    cpu_start: float = 0.0  # this thread's CPU clock when the request started


class TimedAgent(Agent):
    """The real agent, with a clock around each model request.

    A request's span runs from the ``responses.create`` call until the event stream is finished
    (the ``response.completed`` event and the end of the body). That is what a real model spends:
    queueing, thinking, streaming. Everything else inside ``advance`` (preparing the input, running
    tools, committing to the store, the payments and email stand-ins) is harness time.

    The SDK's own work (serialising the request, reading and parsing server-sent events into
    pydantic objects) happens inside the span, interleaved with waiting. It is measured separately
    as this thread's CPU time during the span (``time.thread_time``): the offline model runs in
    other threads, and a thread blocked on a socket or waiting for the GIL accrues no CPU time.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spans: list[Span] = []

    def _stream(self, *args: Any, **kwargs: Any) -> Any:  # Agent._stream's arguments, as they are
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return super()._stream(*args, **kwargs)
        finally:
            self.spans.append(Span(t0, time.perf_counter(), time.thread_time() - c0, c0))


@dataclass
class Timed:
    """One timed call of ``advance``: its wall time and the model requests inside it."""

    start: float
    end: float
    spans: list[Span]
    cpu_start: float = 0.0
    cpu_end: float = 0.0

    @property
    def model(self) -> float:
        return sum(s.end - s.start for s in self.spans)

    @property
    def sdk_cpu(self) -> float:
        return sum(s.cpu for s in self.spans)

    @property
    def harness(self) -> float:
        """Wall time outside the model requests, plus the SDK's CPU inside them."""
        return (self.end - self.start) - self.model + self.sdk_cpu

    def per_turn(self) -> list[float]:
        """Harness seconds charged to each model request (turn).

        A turn's harness time is the gap before its request (the previous turn's commit, then
        the calls it made, each output committed) plus the SDK's CPU inside its request; the
        last turn also gets the tail after its request (the final commit, releasing the run).
        """
        out, prev = [], self.start
        for span in self.spans:
            out.append(span.start - prev + span.cpu)
            prev = span.end
        if out:
            out[-1] += self.end - prev
        return out

    def per_turn_cpu(self) -> list[float]:
        """Like :meth:`per_turn`, in this thread's CPU time: no waiting for the disk or for a
        core the machine gave to someone else (the noise of a shared machine)."""
        out, prev = [], self.cpu_start
        for span in self.spans:
            out.append(span.cpu_start - prev + span.cpu)
            prev = span.cpu_start + span.cpu
        if out:
            out[-1] += self.cpu_end - prev
        return out


def timed_advance(agent: TimedAgent, run_id: str):
    n = len(agent.spans)
    t0, c0 = time.perf_counter(), time.thread_time()
    run = agent.advance(run_id)
    t1, c1 = time.perf_counter(), time.thread_time()
    return run, Timed(t0, t1, agent.spans[n:], c0, c1)


def email_for(order_id: str) -> str:
    return (f"Hi there,\n\nMy order {order_id} came yesterday and the glass carafe of the "
            "pour-over coffee maker is cracked right down the side. The mugs in the same box are "
            "fine and I'd like to keep them. Could I get a refund for the coffee maker?\n\n"
            "Thanks,\nMaya")


def start_ticket(agent: Agent, order_id: str):
    return agent.start("maya.chen@example.com", email_for(order_id),
                       subject="Coffee maker arrived cracked", sender_name="Maya Chen",
                       kind="bench")


@dataclass
class TicketTiming:
    start: float = 0.0          # create the run (boundary 1)
    decide: float = 0.0         # the approver's decision (boundary 5)
    advances: list[Timed] = field(default_factory=list)

    @property
    def turns(self) -> list[float]:
        return [t for a in self.advances for t in a.per_turn()]

    @property
    def requests(self) -> int:
        return sum(len(a.spans) for a in self.advances)

    @property
    def harness(self) -> float:
        return self.start + self.decide + sum(a.harness for a in self.advances)

    @property
    def sdk_cpu(self) -> float:
        return sum(a.sdk_cpu for a in self.advances)

    @property
    def wall(self) -> float:
        return self.start + self.decide + sum(a.end - a.start for a in self.advances)


def pending_approval_id(agent: Agent, run_id: str) -> str:
    """The approval the run waits on, read from its timeline (no scan of the whole queue)."""
    steps = [s for s in agent.store.steps(run_id) if s.kind == "approval"]
    if not steps:
        raise RuntimeError(f"Run {run_id} is not waiting for an approval.")
    return steps[-1].data["approval_id"]


def full_ticket(agent: TimedAgent, order_id: str) -> TicketTiming:
    """Maya's ticket end to end: email, 3 requests, approval by a script, 2 requests, done."""
    timing = TicketTiming()
    t0 = time.perf_counter()
    run = start_ticket(agent, order_id)
    timing.start = time.perf_counter() - t0
    run, first = timed_advance(agent, run.id)
    if run.status != RunStatus.WAITING:
        raise RuntimeError(f"Expected the run to wait for approval, got {run.status}: {run.error}")
    approval_id = pending_approval_id(agent, run.id)
    t0 = time.perf_counter()
    agent.decide(approval_id, True, APPROVER,
                 fingerprint=agent.store.approval(approval_id).fingerprint)
    timing.decide = time.perf_counter() - t0
    run, second = timed_advance(agent, run.id)
    if run.status != RunStatus.DONE:
        raise RuntimeError(f"Expected the run to finish, got {run.status}: {run.error}")
    timing.advances = [first, second]
    return timing


def fsync_ms(folder: Path, n: int = 40) -> float:
    """Median time of one small append + fsync in ``folder``: what a durable commit waits for."""
    path = Path(folder) / "fsync-probe"
    times = []
    with open(path, "ab") as fh:
        for _ in range(n):
            fh.write(b"x" * 200)
            fh.flush()
            t0 = time.perf_counter()
            os.fsync(fh.fileno())
            times.append(time.perf_counter() - t0)
    path.unlink()
    return round(statistics.median(times) * 1000, 3)


def count_commits(agent: Agent) -> list[int]:
    """Count the store's write transactions from now on: [all, durable ones] (for reading)."""
    counter = [0, 0]
    tx = agent.store._tx  # noqa: SLF001 - the bench only counts, the store is unchanged

    def counted(durable: bool = True):
        counter[0] += 1
        counter[1] += durable
        return tx(durable)

    agent.store._tx = counted  # type: ignore[method-assign]
    return counter


# -- statistics --------------------------------------------------------------------------------

def load_avg() -> list[float]:
    """The 1- and 5-minute load averages: how busy the (shared) machine was."""
    return [round(x, 2) for x in os.getloadavg()[:2]]


def offline_env(**extra: str) -> dict[str, str]:
    """The environment for a benchmark's child process: no project settings of the caller's,
    the offline model, unbuffered output; ``extra`` on top."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("REFUND_AGENT_") and k != "CRASH_AFTER_REFUND"}
    env.update({"XAI_API_KEY": "", "PYTHONUNBUFFERED": "1", **extra})
    return env


def pct(values: list[float], p: float) -> float:
    """Percentile with linear interpolation (p in 0..100)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def machine() -> dict[str, Any]:
    """nproc, CPU model and Python version, for the results table."""
    import platform

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "python": platform.python_version(),
            "platform": platform.platform()}
