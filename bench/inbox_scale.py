"""The desk's inbox at 10,000 to 1,000,000 tickets, on SQLite and on PostgreSQL (issue #37).

    python bench/inbox_scale.py --sizes 10000 100000 1000000 --json bench/inbox_scale.json \\
        --plot docs
    python bench/inbox_scale.py --quick          # 2,000 tickets on each engine, a smoke run

For each engine and size, one store is seeded in bulk with copies of one real ticket
(bench/seeding.py: SQLite in one transaction, PostgreSQL by COPY in batches), then each of what
a page draw asks is read ``--reps`` times and its median kept:

- first page, middle page, last page of every ticket, newest first (keyset pages: the middle
  one starts after the key of the ticket half way down, the last one from the other end), as
  the page draws them (the ids, then their rows);
- a search that matches nothing, one that matches one ticket (its order number), and one that
  matches every ticket (the customer's name: the worst case, reported but not a target);
- the desk's counts without a search (the kept desk_counts) and with the one-ticket search.

Each figure is the CPU time of that read: this process's (SQLite runs in it; psycopg's client
side on PostgreSQL) plus, on PostgreSQL, the server backend's (from /proc, its utime and
stime). CPU, not wall: the machine may be shared, and another process's load lengthens wall
time but not the CPU a read costs; the clock's tick (10 ms) is why each read is repeated and
the total divided. Wall medians are kept too. Seeding time is reported as wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "tests")]

from benchlib import (  # noqa: E402
    OrderPool,
    TimedAgent,
    bench_settings,
    full_ticket,
    machine,
    make_bench_shop,
)

TARGET_MS = 50.0
READS = ("first_page", "middle_page", "last_page", "search_none", "search_one", "counts",
         "counts_search_one", "search_all")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _backend_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(store: Any, backend_pid: int | None, read: Callable[[], Any], reps: int) -> dict:
    """CPU (client + server backend) per read over ``reps`` reads, and the wall median."""
    read()   # warm: the pages a first read brings in are not what a desk pays every draw
    walls = []
    c0, s0 = time.process_time(), _backend_cpu(backend_pid)
    for _ in range(reps):
        t0 = time.perf_counter()
        read()
        walls.append(time.perf_counter() - t0)
    client = (time.process_time() - c0) / reps
    server = (_backend_cpu(backend_pid) - s0) / reps
    walls.sort()
    return {"cpu_ms": round((client + server) * 1000, 2), "client_ms": round(client * 1000, 2),
            "server_ms": round(server * 1000, 2),
            "wall_ms": round(walls[len(walls) // 2] * 1000, 2)}


def reads(store: Any) -> dict[str, Callable[[], Any]]:
    """What one page draw asks the store, each as a call."""
    [(n,)] = store.query("SELECT COUNT(*) FROM runs")
    [(mid_at, mid_id)] = store.query("SELECT created_at, id FROM runs"
                                     " ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET ?",
                                     (n // 2,))
    [(order,)] = store.query("SELECT order_id FROM approvals ORDER BY id LIMIT 1 OFFSET ?",
                             (n // 3,))

    def page(search: str = "", **kw: Any) -> Any:
        return store.inbox_rows(store.desk_page(search, None, False, 50, **kw))

    return {
        "first_page": lambda: page(),
        "middle_page": lambda: page(after=(mid_at, mid_id)),
        "last_page": lambda: page(oldest_first=True),
        "search_none": lambda: page("qzxv-nothing"),
        "search_one": lambda: page(order),
        "counts": lambda: store.desk_groups(""),
        "counts_search_one": lambda: store.desk_groups(order),
        "search_all": lambda: page("maya"),
    }


def seeded(engine: str, n: int, root: Path, template: Any, data: Path, cluster: Any) -> Any:
    from seeding import seed_postgres, seed_sqlite

    folder = root / f"{engine}-{n}"
    url = cluster.create(f"inbox_{n}") if engine == "postgresql" else None
    agent = TimedAgent(bench_settings(folder, data, **({"database_url": url} if url else {})))
    t0 = time.perf_counter()
    if engine == "postgresql":
        seed_postgres(agent.store, template, n)
    else:
        seed_sqlite(agent.store, folder, template, n)
    return agent, time.perf_counter() - t0


def bench(engines: list[str], sizes: list[int], reps: int, root: Path) -> dict:
    from helpers.pg import Cluster, find_bin
    from seeding import read_template

    data = make_bench_shop(root / "data", 2)
    template_agent = TimedAgent(bench_settings(root / "template", data))
    full_ticket(template_agent, OrderPool(1, 2).take())
    template = read_template(template_agent.store, template_agent.store.runs(1)[0].id,
                             root / "template")
    cluster = Cluster(find_bin(), durable=True).start() if "postgresql" in engines else None
    rows = []
    try:
        for n in sizes:
            for engine in engines:
                log(f"{engine}: seeding {n:,} tickets")
                agent, seed_s = seeded(engine, n, root, template, data, cluster)
                store = agent.store
                pid = None
                if engine == "postgresql":
                    [(pid,)] = store.query("SELECT pg_backend_pid()")
                row: dict[str, Any] = {"engine": engine, "tickets": n,
                                       "seed_s": round(seed_s, 1)}
                for name, read in reads(store).items():
                    row[name] = measure(store, pid, read, reps)
                    log(f"  {name}: {row[name]}")
                rows.append(row)
                store.close()
                if engine == "postgresql":
                    cluster.admin(f'DROP DATABASE "inbox_{n}"')
    finally:
        if cluster:
            cluster.stop()
    return {"machine": machine(), "load_avg": [round(x, 2) for x in os.getloadavg()],
            "reps": reps, "rows": rows}


def table(results: dict) -> str:
    lines = ["| engine | tickets | seed (s) | " + " | ".join(READS) + " |",
             "|---|---:|---:|" + "---:|" * len(READS)]
    for r in results["rows"]:
        cells = []
        for name in READS:
            v = r[name]["cpu_ms"]
            mark = "" if name == "search_all" or v <= TARGET_MS else " ✗"
            cells.append(f"{v:g}{mark}")
        lines.append(f"| {r['engine']} | {r['tickets']:,} | {r['seed_s']:g} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict, folder: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from plots import SQLITE, _caption

    colors = {"sqlite": SQLITE, "postgresql": "#2ca02c"}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), dpi=100, sharey=True)
    for ax, engine in zip(axes, ("sqlite", "postgresql"), strict=True):
        rows = sorted((r for r in results["rows"] if r["engine"] == engine),
                      key=lambda r: r["tickets"])
        if not rows:
            continue
        x = [r["tickets"] for r in rows]
        for name, style in zip(READS[:-1], ("o-", "s-", "^-", "v--", "D--", "x:", "+:"),
                               strict=True):
            ax.plot(x, [max(r[name]["cpu_ms"], 0.01) for r in rows], style, label=name,
                    color=colors[engine], alpha=0.35 + 0.65 * READS.index(name) / len(READS))
        ax.axhline(TARGET_MS, color="#d62728", lw=1, ls="--", label="target (50 ms)")
        ax.set_title(f"{'SQLite' if engine == 'sqlite' else 'PostgreSQL'}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tickets stored")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("CPU ms per read (client + server)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7.5, frameon=False,
               bbox_to_anchor=(0.5, 0.03))
    fig.suptitle("The desk's inbox against tickets stored (keyset pages, trigram search, "
                 "kept counts)", fontsize=11)
    fig.text(0.5, 0.005, _caption({**results, "command": "python bench/inbox_scale.py"}),
             ha="center", fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    path = folder / "inbox-scale.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2,000 tickets per engine, a smoke run")
    p.add_argument("--sizes", nargs="*", type=int, default=[10_000, 100_000, 1_000_000])
    p.add_argument("--engines", nargs="*", default=["sqlite", "postgresql"])
    p.add_argument("--reps", type=int, default=20, help="reads per figure")
    p.add_argument("--json", type=Path, help="save the results here")
    p.add_argument("--from-json", type=Path, help="measure nothing: report saved results")
    p.add_argument("--plot", type=Path, help="draw inbox-scale.png into this folder")
    args = p.parse_args(argv)
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        sizes = [2_000] if args.quick else args.sizes
        with tempfile.TemporaryDirectory(prefix="refund-agent-inbox-") as tmp:
            results = bench(args.engines, sizes, args.reps, Path(tmp))
        results["command"] = "python bench/inbox_scale.py " + " ".join(argv or sys.argv[1:])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot:
        log(f"plot: {plot(results, args.plot)}")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
