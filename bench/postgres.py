"""The store on PostgreSQL (issue #15): throughput with several workers, scale, page freshness.

    python bench/postgres.py                 # everything (about 10 minutes), bench/postgres.json
    python bench/postgres.py --quick         # small sizes, a smoke run (< ~90 s); saves nothing
    python bench/postgres.py --json out.json --only scale --sizes 10 1000 10000

It starts its own throwaway PostgreSQL server (tests/helpers/pg.py's ``Cluster``: initdb and
pg_ctl in a temporary folder, a free port on 127.0.0.1, run as the ``postgres`` user when
started as root), with the server's own durability defaults (fsync and full-page writes on,
unlike the tests), and removes it afterwards. Everything runs on the offline stand-in model at
zero latency, as bench/run.py does for SQLite. It needs Debian's ``postgresql`` binaries and
psycopg 3; without them it says so and exits with status 2. It is not part of ``bench/run.py
--quick`` (CI).

1. throughput  tickets resolved end to end per second with 1, 2 and 4 worker processes, each in
               its own working directory (standing for a host) with its own offline model,
               sharing one database; CPU time per ticket in the workers and in the server, and
               the cores busy (the machine has what ``nproc`` says). The configurations take
               turns, so the ratios come from one run on one (shared) machine; an SQLite
               worker in the same turns gives the reference. What the machine gave is measured
               alongside: before each turn 1, then 2 pure-CPU spinner processes (the cores
               they got, and 2 against 1), and over each counted window the machine's idle
               cores and those busy with anything else (/proc/stat).
2. scale       approve + resume (and ``refund-agent approve`` as a new process) with 10, 1,000
               and 100,000 finished tickets stored, one database each, seeded by COPY of one
               real ticket's rows (bench/seeding.py); the sizes are measured in turns.
3. page        a decision made in another process, to the helpdesk page in headless Chromium,
               which learns of it through LISTEN/NOTIFY (bench/page_freshness.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# This checkout's refund_agent, even where the environment's editable install points at
# another checkout of it (a second git worktree sharing one virtualenv); the worker processes
# get the same through PYTHONPATH.
sys.path[:0] = [str(HERE), str(HERE.parent)]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])])

from benchlib import (  # noqa: E402
    OrderPool,
    TimedAgent,
    bench_settings,
    full_ticket,
    load_avg,
    machine,
    make_bench_shop,
    median,
    offline_env,
    pending_approval_id,
    tickets_per_second,
)

from refund_agent.config import PROJECT_ROOT  # noqa: E402

RESULTS = HERE / "postgres.json"
PAGE_TARGET_P95_MS = 300


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load_pg():
    """tests/helpers/pg.py (the tests' throwaway cluster), imported by its path."""
    spec = importlib.util.spec_from_file_location(
        "refund_agent_tests_pg", PROJECT_ROOT / "tests" / "helpers" / "pg.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def missing() -> str | None:
    """Why this benchmark cannot run here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return ("psycopg (3) is not installed: pip install -e '.[postgres]' "
                "(or '.[dev]'), then run this again.")
    if _load_pg().find_bin() is None:
        return ("PostgreSQL's initdb and pg_ctl were not found (/usr/lib/postgresql/*/bin or "
                "PATH): install Debian's postgresql package (apt-get install postgresql), "
                "then run this again.")
    if os.geteuid() == 0:
        import pwd
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return ("Running as root, the server must run as the 'postgres' user, which does "
                    "not exist: install Debian's postgresql package, or run as another user.")
        if shutil.which("runuser") is None:
            return "Running as root needs runuser (util-linux) to start the server as postgres."
    return None


# -- the server's CPU ---------------------------------------------------------------------------

def postmaster_pid(cluster: Any) -> int:
    return int((cluster.data / "postmaster.pid").read_text().splitlines()[0])


def server_cpu(pid: int) -> float:
    """CPU seconds the server has used: the postmaster and every process under it (backends,
    WAL writer, checkpointer, autovacuum), and the backends that already exited (reaped by the
    postmaster, so counted in its children's times)."""
    from page_freshness import _family

    total = 0
    for p in _family(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


# -- what the shared machine gives ----------------------------------------------------------------

_SPINNER = """
import sys, time
start, seconds = float(sys.argv[1]), float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
n, c0, end = 0, time.process_time(), start + seconds
while time.time() < end:
    n += 1
print(n, time.process_time() - c0)
"""


def _spin(processes: int, seconds: float) -> tuple[int, float]:
    """``processes`` pure-CPU Python loops started together for ``seconds``: their summed
    iterations and CPU seconds."""
    start = time.time() + 0.3  # past the interpreters' start-up
    procs = [subprocess.Popen([sys.executable, "-c", _SPINNER, str(start), str(seconds)],
                              stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    iterations, cpu = 0, 0.0
    for p in procs:
        n, c = p.communicate(timeout=seconds + 60)[0].split()
        iterations, cpu = iterations + int(n), cpu + float(c)
    return iterations, cpu


def spinner_calibration(seconds: float) -> dict:
    """How much of its 2 (or ``nproc``) cores the shared machine gives right now.

    One spinner (a pure-CPU Python loop in its own process), then two at once, ``seconds``
    each. ``cores``: the CPU seconds the two got per second of wall time, the most that 2
    workers could have had at that moment; ``ratio``: the two's iterations over the one's, 2.0
    when a second core is there for the taking; ``speed``: the two's iterations per CPU second
    over the one's (below 1.0: a CPU second buys less work while both cores are busy). It is a
    snapshot: the machine_split of a turn's own window says what the turn itself got.
    """
    one, one_cpu = _spin(1, seconds)
    two, two_cpu = _spin(2, seconds)
    per_cpu_one, per_cpu_two = one / max(one_cpu, 1e-3), two / max(two_cpu, 1e-3)
    return {"ratio": round(two / max(one, 1), 2), "cores": round(two_cpu / seconds, 2),
            "one_core": round(one_cpu / seconds, 2),
            "speed": round(per_cpu_two / max(per_cpu_one, 1e-3), 2)}


def machine_jiffies() -> list[int]:
    """The whole machine's CPU time so far (/proc/stat's first line): user, nice, system,
    idle, iowait, irq, softirq, steal, in clock ticks summed over every core."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:9]
    return [int(f) for f in fields]


def machine_split(before: list[int], after: list[int], seconds: float) -> dict:
    """Cores busy (anyone's) and idle over a window, from two machine_jiffies readings."""
    d = [b - a for a, b in zip(before, after, strict=True)]
    per_s = os.sysconf("SC_CLK_TCK") * seconds
    idle = d[3] + d[4]
    return {"busy": round((sum(d) - idle) / per_s, 2), "idle": round(idle / per_s, 2),
            "steal": round(d[7] / per_s, 2)}


# -- 1. throughput --------------------------------------------------------------------------------

def bench_throughput(cluster: Any, root: Path, data: Path, first_order: int,
                     configs: list[tuple[str, int]], duration: float, per_worker_orders: int,
                     rounds: int, calibrate: float = 1.5) -> dict:
    """Tickets per second for each (backend, workers) configuration, taking turns.

    Each PostgreSQL configuration gets a new database; each worker its own output folder and
    working directory (its own offline model, as on its own host). The workers warm up (two
    tickets each), start together at a set time and count the tickets they finish in
    ``duration`` seconds. The server's CPU and the whole machine's (/proc/stat: busy, idle)
    are read over the same window. Just before each turn the spinner calibration (1 then 2
    pure-CPU processes, ``calibrate`` seconds each) says how many cores the shared machine
    gives at that moment. Later rounds go through the configurations in reverse order, so none
    always runs first.
    """
    from refund_agent.desk.records import DeskStore

    pid = postmaster_pid(cluster)
    samples: dict[tuple[str, int], list[dict]] = {c: [] for c in configs}
    next_order = first_order
    for rnd in range(rounds):
        for backend, workers in (configs if rnd % 2 == 0 else configs[::-1]):
            tag = f"tput_{backend}_{workers}_{rnd}"
            url = ""
            if backend == "postgresql":
                url = cluster.create(tag)
                DeskStore(url).close()  # the schema, once, before the workers start
            folders = [root / tag / f"worker-{i}" for i in range(workers)]
            if backend == "sqlite":  # SQLite's workers share one folder: its file is the store
                folders = [root / tag / "shared"] * workers
            for folder in folders:
                folder.mkdir(parents=True, exist_ok=True)
            load = os.getloadavg()[0]
            calib = spinner_calibration(calibrate)
            start_at = time.time() + 3.0 + 1.5 * workers  # start, import, warm up
            procs = []
            for folder in folders:
                cmd = [sys.executable, str(HERE / "tput_worker.py"), "--output", str(folder),
                       "--data", str(data), "--first", str(next_order),
                       "--last", str(next_order + per_worker_orders),
                       "--start-at", str(start_at), "--duration", str(duration)]
                if url:
                    cmd += ["--database-url", url]
                next_order += per_worker_orders
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True, cwd=folder,
                                              env=offline_env()))
            time.sleep(max(0.0, start_at - time.time()))
            cpu0, jiffies0 = server_cpu(pid), machine_jiffies()
            time.sleep(duration)
            server = server_cpu(pid) - cpu0
            box = machine_split(jiffies0, machine_jiffies(), duration)
            done, cpu, late, reports = 0, 0.0, [], []
            for p in procs:
                stdout, stderr = p.communicate(timeout=duration + 180)
                if p.returncode != 0:
                    raise RuntimeError(f"throughput worker failed:\n{stderr}")
                report = json.loads(stdout.strip().splitlines()[-1])
                reports.append(report)
                done += report["done"]
                cpu += report["cpu_s"]
                late.append(report.get("late_s", 0.0))
            if backend == "sqlite":
                server = 0.0  # no server: the store is a file the workers open
            if max(late) > 0:
                log(f"  throughput: a worker started {max(late):.1f} s late (fewer counted)")
            samples[(backend, workers)].append({
                "tickets": done, "tickets_per_s": tickets_per_second(reports),
                "worker_cpu_ms_per_ticket": 1000 * cpu / max(done, 1),
                "server_cpu_ms_per_ticket": 1000 * server / max(done, 1),
                "cores_busy": (cpu + server) / duration, "load": load,
                "latest_start_s": max(late), "spinner_ratio": calib["ratio"],
                "spinner_cores": calib["cores"], "spinner_speed": calib["speed"],
                "machine_busy_cores": box["busy"],
                "idle_cores": box["idle"], "steal_cores": box["steal"],
                # everything else the machine ran meanwhile: other sessions, and the kernel's
                # loopback networking (softirq), which no process is charged for
                "other_cores": max(0.0, box["busy"] - (cpu + server) / duration)})
            log(f"  throughput: {backend}, {workers} worker(s), round {rnd + 1}: "
                f"{samples[(backend, workers)][-1]}")
            shutil.rmtree(root / tag, ignore_errors=True)
            if url:
                cluster.admin(f'DROP DATABASE "{tag}"')
    rows = []
    for (backend, workers), rs in samples.items():
        rows.append({
            "backend": backend, "workers": workers, "seconds": duration, "rounds": len(rs),
            "tickets_counted": sum(r["tickets"] for r in rs),
            "tickets_per_s": round(median([r["tickets_per_s"] for r in rs]), 2),
            "tickets_per_s_each_round": [round(r["tickets_per_s"], 2) for r in rs],
            "worker_cpu_ms_per_ticket": round(median([r["worker_cpu_ms_per_ticket"]
                                                     for r in rs]), 1),
            "server_cpu_ms_per_ticket": round(median([r["server_cpu_ms_per_ticket"]
                                                     for r in rs]), 1),
            "cpu_ms_per_ticket": round(median([r["worker_cpu_ms_per_ticket"]
                                               + r["server_cpu_ms_per_ticket"] for r in rs]), 1),
            # CPU seconds per second of workers and server: 2 cores fully busy would show 2.
            "cores_busy": round(median([r["cores_busy"] for r in rs]), 2),
            "latest_worker_start_s": round(max(r["latest_start_s"] for r in rs), 2),
            "load_avg_1min_before": [round(r["load"], 2) for r in rs],
            # What the machine gave: 2 spinners against 1 just before each round (2.0: a free
            # second core), and over each counted window the cores idle and those busy with
            # anything but these workers and this server.
            "spinner_ratio_each_round": [r["spinner_ratio"] for r in rs],
            "spinner_cores_each_round": [r["spinner_cores"] for r in rs],
            "idle_cores_each_round": [r["idle_cores"] for r in rs],
            "other_cores_each_round": [round(r["other_cores"], 2) for r in rs],
            "steal_cores_each_round": [r["steal_cores"] for r in rs],
            "cores_busy_each_round": [round(r["cores_busy"], 2) for r in rs]})
    one = next((r for r in rows if r["backend"] == "postgresql" and r["workers"] == 1), None)
    for r in rows:
        if one and r["backend"] == "postgresql":
            r["vs_1_worker"] = round(r["tickets_per_s"] / one["tickets_per_s"], 2)
    every = [r for rs in samples.values() for r in rs]
    return {"cores_available": len(os.sched_getaffinity(0)), "rows": rows,
            "calibration": {
                "seconds_each": calibrate, "turns": len(every),
                "spinner_ratio_median": round(median([r["spinner_ratio"] for r in every]), 2),
                "spinner_ratio_range": [min(r["spinner_ratio"] for r in every),
                                        max(r["spinner_ratio"] for r in every)],
                "spinner_cores_median": round(median([r["spinner_cores"] for r in every]), 2),
                "spinner_speed_median": round(median([r["spinner_speed"] for r in every]), 2),
                "note": "before each turn: 1 pure-CPU process, then 2 at once; ratio = the two's "
                        "iterations over the one's (2.0 = a free second core), cores = CPU "
                        "seconds the two got per second, speed = the two's iterations per CPU "
                        "second over the one's"}}


# -- 2. store scale -------------------------------------------------------------------------------

def _scale_case_class():
    from run import ScaleCase

    from refund_agent import RunStatus
    from refund_agent.desk.records import DeskStore

    class PgScaleCase(ScaleCase):
        """bench/run.py's ScaleCase, its store in a database of its own on the cluster."""

        def __init__(self, cluster: Any, n: int, root: Path, data: Path, template: Any,
                     pool: OrderPool, pending: int) -> None:
            from seeding import seed_postgres

            self.design, self.n = "postgresql", n
            self.out = root / f"scale-pg-{n}"
            self.db_name = f"scale_{n}"
            self.url = cluster.create(self.db_name)
            self.cluster = cluster
            settings = bench_settings(self.out, data, database_url=self.url)
            store = DeskStore(self.url)
            t0 = time.perf_counter()
            seed_postgres(store, template, n)
            self.seed_seconds = time.perf_counter() - t0
            if n <= 1_000:  # a check of the seeding itself, not timed: the store accepts it
                problem = store.verify_audit()
                assert problem is None, problem
            store.close()
            t0 = time.perf_counter()
            self.agent = TimedAgent(settings)
            self._open(t0, pool, pending)

        def measure_cli_approve(self, data: Path) -> None:
            """``refund-agent approve`` as a new process, on this case's database."""
            from benchlib import APPROVER
            run_id = self.waiting.pop(0)
            approval_id = pending_approval_id(self.agent, run_id)
            env = offline_env(REFUND_AGENT_OUTPUT=str(self.out), REFUND_AGENT_DATA=str(data),
                               REFUND_AGENT_DATABASE_URL=self.url)
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "refund_agent", "approve", "--id",
                                   approval_id, "--as", APPROVER], env=env,
                                  capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
            self.cli.append(time.perf_counter() - t0)
            if done.returncode != 0 or self.agent.store.run(run_id).status != RunStatus.DONE:
                raise RuntimeError(f"CLI approve failed:\n{done.stdout}\n{done.stderr}")

        def result(self, warmup: int) -> dict:
            out = super().result(warmup)
            [(size,)] = self.agent.store._read(  # noqa: SLF001 - one figure for the report
                "SELECT pg_database_size(current_database())")
            out.update(bytes_on_disk=size, seed_s=round(self.seed_seconds, 2))
            out.pop("file_rewrites_per_approve", None)
            return out

    return PgScaleCase


def bench_scale(cluster: Any, root: Path, data: Path, pool: OrderPool, sizes: list[int],
                reps: int, warmup: int, cli_reps: int) -> dict:
    """Approve + resume, list the queue and ``refund-agent approve`` at each store size.

    As in bench/run.py: every size open together, measured in turns (10, 1,000, 100,000, then
    again starting one size later), so the shared machine's slow minutes fall on all sizes.
    """
    from seeding import read_template

    PgScaleCase = _scale_case_class()
    # The template: one real ticket run to the end by the agent (on SQLite: the rows are the
    # same, and read_template reads its refund and email from the JSONL logs).
    tmpl_agent = TimedAgent(bench_settings(root / "template", data))
    full_ticket(tmpl_agent, pool.take())
    run_id = tmpl_agent.store.runs(1)[0].id
    template = read_template(tmpl_agent.store, run_id, root / "template")
    cases = []
    for n in sizes:
        log(f"  scale: seeding a database with {n:,} runs")
        cases.append(PgScaleCase(cluster, n, root, data, template, pool,
                                 pending=reps + warmup + cli_reps + 1))
        log(f"  scale: seeded {n:,} runs in {cases[-1].seed_seconds:.1f} s (VACUUM ANALYZE "
            "included)")
    for i in range(reps + warmup):
        for case in cases[i % len(cases):] + cases[:i % len(cases)]:
            case.measure_queue()
            case.measure_approve()
    for i in range(cli_reps):
        for case in cases[i % len(cases):] + cases[:i % len(cases)]:
            case.measure_cli_approve(data)
    results = []
    for case in cases:
        results.append(case.result(warmup))
        log(f"  scale: postgresql {case.n:,}: {results[-1]}")
        if case.n <= 1_000:  # not timed: the seeded store took the new entries on its chain
            problem = case.agent.store.verify_audit()
            assert problem is None, problem
        case.agent.store.close()
        if case.agent.model.server is not None:
            case.agent.model.server.close()
        shutil.rmtree(case.out, ignore_errors=True)
    out: dict[str, Any] = {"cases": results, "reps": reps, "warmup": warmup,
                           "cli_reps": cli_reps}
    if len(results) >= 2:
        lo, hi = results[0], results[-1]
        out["ratio"] = {
            "from": lo["runs"], "to": hi["runs"],
            "approve_resume": round(hi["approve_resume_ms"] / lo["approve_resume_ms"], 2),
            "approve_resume_outside_model": round(
                hi["approve_resume_outside_model_ms"] / lo["approve_resume_outside_model_ms"],
                2),
            "list_queue": round(hi["list_queue_ms"] / lo["list_queue_ms"], 2)}
        if lo.get("cli_approve_ms") and hi.get("cli_approve_ms"):
            out["ratio"]["cli_approve"] = round(hi["cli_approve_ms"] / lo["cli_approve_ms"], 2)
    return out


# -- 3. page freshness ---------------------------------------------------------------------------

def bench_pages(cluster: Any, root: Path, plan: list[tuple[int, int]]) -> list[dict]:
    from page_freshness import bench_page

    rows = []
    for stored, reps in plan:
        name = f"page_{stored}"
        url = cluster.create(name)
        log(f"  page: {stored:,} runs stored, {reps} decisions")
        r = bench_page(root / name, reps=reps, stored=stored, database_url=url)
        r.setdefault("stored_runs", stored)
        rows.append({"backend": "postgresql", **r})
        log(f"  page: {({k: v for k, v in r.items() if k != 'delays_ms'})}")
    return rows


# -- reporting ------------------------------------------------------------------------------------

def _machine_note(r: dict) -> str:
    """What else the machine did during a throughput row's windows (medians), if recorded."""
    if "idle_cores_each_round" not in r:
        return ""  # saved before the calibration was measured
    return (f" (meanwhile {median(r['idle_cores_each_round']):.2f} idle, "
            f"{median(r['other_cores_each_round']):.2f} busy with other work; "
            f"2 spinners got {median(r['spinner_cores_each_round']):.2f} cores just before)")


def table(results: dict, markdown: bool = False) -> str:
    rows: list[tuple[str, str, str, str]] = []
    t = results.get("throughput")
    if t:
        for r in t["rows"]:
            name = "PostgreSQL" if r["backend"] == "postgresql" else "SQLite (reference)"
            vs = f", {r['vs_1_worker']:.2f}x of 1 worker" if "vs_1_worker" in r else ""
            rows.append((
                "throughput", f"{name}, {r['workers']} worker process(es), "
                f"{r['rounds']} x {r['seconds']:g} s",
                f"{r['tickets_per_s']:.1f} tickets/s{vs}; CPU/ticket {r['cpu_ms_per_ticket']:.0f}"
                f" ms ({r['worker_cpu_ms_per_ticket']:.0f} workers + "
                f"{r['server_cpu_ms_per_ticket']:.0f} server); "
                f"{r['cores_busy']:.2f} of {t['cores_available']} cores busy"
                + _machine_note(r), ""))
        c = t.get("calibration")
        if c:
            rows.append((
                "throughput", f"the machine: 1, then 2 pure-CPU spinner processes, before each "
                f"of the {c['turns']} turns ({c['seconds_each']:g} s each)",
                f"the two got {c['spinner_cores_median']:.2f} cores; did "
                f"{c['spinner_ratio_median']:.2f}x the work of one (range "
                f"{c['spinner_ratio_range'][0]:.2f}-{c['spinner_ratio_range'][1]:.2f})",
                "2 cores, 2.00x"))
    s = results.get("scale")
    if s:
        for c in s["cases"]:
            rows.append(("scale", f"PostgreSQL, {c['runs']:,} runs: approve+resume / outside "
                         "model / list queue",
                         f"{c['approve_resume_ms']:.1f} / "
                         f"{c['approve_resume_outside_model_ms']:.1f} / "
                         f"{c['list_queue_ms']:.2f} ms ({c['samples']} samples)", ""))
        cli = [c for c in s["cases"] if c.get("cli_approve_ms")]
        if cli:
            rows.append(("scale", "PostgreSQL, "
                         + " / ".join(f"{c['runs']:,}" for c in cli)
                         + " runs: `refund-agent approve` (new process)",
                         " / ".join(f"{c['cli_approve_ms']:.0f}" for c in cli)
                         + f" ms ({s['cli_reps']} samples each)", ""))
        rows.append(("scale", "PostgreSQL seeding (COPY + VACUUM ANALYZE): runs, s, database",
                     "; ".join(f"{c['runs']:,}: {c['seed_s']:.1f} s, "
                               f"{c['bytes_on_disk'] / 1e6:,.0f} MB" for c in s["cases"]), ""))
        r = s.get("ratio")
        if r:
            rows.append(("scale", f"PostgreSQL {r['to']:,} vs {r['from']:,} runs: approve+resume"
                         " / outside model / queue",
                         f"{r['approve_resume']:.2f}x / {r['approve_resume_outside_model']:.2f}x"
                         f" / {r['list_queue']:.2f}x", "<= 1.5x"))
            if r.get("cli_approve"):
                rows.append(("scale", f"PostgreSQL {r['to']:,} vs {r['from']:,} runs: "
                             "`refund-agent approve` (new process)", f"{r['cli_approve']:.2f}x",
                             ""))
    for p in results.get("page", []):
        if p.get("skipped"):
            rows.append(("page", "decision to browser (NOTIFY)", p["skipped"],
                         f"p95 <= {PAGE_TARGET_P95_MS} ms"))
        else:
            rows.append(("page", f"decision in another process to browser via NOTIFY, "
                         f"{p['stored_runs']:,} runs stored (p50 / p95 / max, "
                         f"{p['samples']} samples)",
                         f"{p['p50_ms']:.0f} / {p['p95_ms']:.0f} / {p['max_ms']:.0f} ms",
                         f"p95 <= {PAGE_TARGET_P95_MS} ms"))
    if markdown:
        out = ["| item | measure | result | target |", "|---|---|---|---|"]
        out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
        return "\n".join(out)
    w = [max((len(r[i]) for r in rows), default=0) for i in range(4)]
    lines = [f"{'item':<{w[0]}}  {'measure':<{w[1]}}  {'result':<{w[2]}}  target",
             "-" * (sum(w) + 12)]
    lines += [f"{a:<{w[0]}}  {b:<{w[1]}}  {c:<{w[2]}}  {d}" for a, b, c, d in rows]
    return "\n".join(lines)


def report(results: dict, markdown: Path | None = None) -> None:
    print(table(results))
    m = results["machine"]
    print(f"\n{m['nproc']} cores, {m['cpu']}, Python {m['python']}, "
          f"PostgreSQL {results.get('server_version', '?')} "
          f"(fsync {results.get('server_settings', {}).get('fsync', '?')}); "
          f"{results['seconds']} s")
    loads = results.get("load_avg") or {}
    if loads:
        print("load average (1 min, 5 min) when each item started: "
              + ", ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in loads.items()))
    if markdown:
        markdown.write_text(table(results, markdown=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="small sizes, a smoke run (< ~90 s); saves nothing unless --json")
    p.add_argument("--json", type=Path, help=f"save the results here (full runs: {RESULTS})")
    p.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    p.add_argument("--from-json", type=Path, help="measure nothing: print the saved results")
    p.add_argument("--only", nargs="*", choices=["throughput", "scale", "page"],
                   help="run only these items")
    p.add_argument("--sizes", nargs="*", type=int,
                   help="store sizes for the scale item (default 10 1000 100000)")
    p.add_argument("--reps", type=int, default=15, help="approvals measured per store size")
    p.add_argument("--cli-reps", type=int, default=5,
                   help="approvals through `refund-agent approve` (new process) per size")
    p.add_argument("--rounds", type=int, default=2, help="throughput rounds (full runs)")
    p.add_argument("--duration", type=float, default=10.0,
                   help="seconds each throughput configuration is counted (full runs)")
    p.add_argument("--calibrate", type=float, default=1.5,
                   help="seconds of each spinner run (1, then 2 processes) before each "
                   "throughput turn (full runs)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--no-fsync", action="store_true",
                   help="diagnostic: the server with fsync off (as the tests run it), to see "
                   "how much of a figure is waiting for the disk; never the reported figures")
    args = p.parse_args(argv)
    if args.from_json:
        report(json.loads(args.from_json.read_text()), args.markdown)
        return 0
    why = missing()
    if why:
        print(f"bench/postgres.py cannot run: {why}", file=sys.stderr)
        return 2
    quick = args.quick
    items = args.only or ["throughput", "scale", "page"]
    sizes = args.sizes or ([10, 300] if quick else [10, 1_000, 100_000])
    reps, warmup, cli_reps = (2, 1, 1) if quick else (args.reps, 2, args.cli_reps)
    rounds, duration = (1, 2.0) if quick else (args.rounds, args.duration)
    calibrate = 0.5 if quick else args.calibrate
    configs = ([("postgresql", 1), ("postgresql", 2), ("postgresql", 4)] if quick else
               [("postgresql", 1), ("postgresql", 2), ("postgresql", 4), ("sqlite", 1)])
    per_worker = 40 if quick else 400
    needed_orders = 400 + rounds * per_worker * sum(w for _, w in configs)

    pg = _load_pg()
    root = Path(tempfile.mkdtemp(prefix="refund-agent-pgbench-"))
    log(f"bench folder: {root}")
    data = make_bench_shop(root / "data", needed_orders)
    pool = OrderPool(1, 400)  # the rest is for the throughput workers
    command = "python bench/postgres.py" + (" --quick" if quick else "")
    if args.no_fsync:
        command += " --no-fsync"
    if args.only:
        command += " --only " + " ".join(args.only)
    if args.sizes:
        command += " --sizes " + " ".join(map(str, args.sizes))
    if not quick and args.rounds != p.get_default("rounds"):
        command += f" --rounds {args.rounds}"
    if not quick and args.duration != p.get_default("duration"):
        command += f" --duration {args.duration:g}"
    results: dict[str, Any] = {"machine": machine(), "quick": quick, "load_avg": {},
                               "command": command}
    started = time.time()
    cluster = pg.Cluster(pg.find_bin(), durable=not args.no_fsync)
    try:
        cluster.start()
        import psycopg
        with psycopg.connect(cluster.url()) as conn:
            results["server_version"] = conn.execute("SHOW server_version").fetchone()[0]
            results["server_settings"] = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]
                for name in ("fsync", "synchronous_commit", "full_page_writes",
                             "shared_buffers", "max_wal_size")}
        if "throughput" in items:
            results["load_avg"]["throughput"] = load_avg()
            log("1. throughput")
            results["throughput"] = bench_throughput(
                cluster, root, data, first_order=401, configs=configs, duration=duration,
                per_worker_orders=per_worker, rounds=rounds, calibrate=calibrate)
        if "scale" in items:
            results["load_avg"]["scale"] = load_avg()
            log("2. store scale")
            results["scale"] = bench_scale(cluster, root, data, pool, sizes, reps, warmup,
                                           cli_reps)
        if "page" in items:
            results["load_avg"]["page"] = load_avg()
            log("3. page freshness through NOTIFY")
            plan = [(0, 6)] if quick else [(0, 30), (10_000, 10)]
            results["page"] = bench_pages(cluster, root, plan)
    finally:
        results["seconds"] = round(time.time() - started, 1)
        cluster.stop()
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    target = args.json or (None if quick or args.no_fsync else RESULTS)
    if target:
        target.write_text(json.dumps(results, indent=2) + "\n")
        log(f"wrote {target}")
    report(results, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
