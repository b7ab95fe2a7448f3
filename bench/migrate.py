"""``refund-agent migrate`` at scale: N finished tickets in SQLite moved into PostgreSQL.

    python bench/migrate.py                  # 10,000 runs
    python bench/migrate.py --runs 1000

The SQLite store is seeded with copies of one real ticket (bench/seeding.py: Maya's cracked
coffee maker, approved, refunded, emailed; every tenth rejected), each given the template run's
transcript too, so the bytes are those of real runs. The target is a throwaway PostgreSQL server
with its durability defaults (tests/helpers/pg.py's ``Cluster``, fsync on). Prints how long each
stage of ``migrate`` took. Needs Debian's ``postgresql`` binaries and psycopg 3 (exit 2 without).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from benchlib import OrderPool, TimedAgent, bench_settings, full_ticket, make_bench_shop  # noqa: E402

from refund_agent.desk.migrate import migrate  # noqa: E402
from refund_agent.desk.records import DeskStore  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    args = parser.parse_args()
    import importlib.util

    from seeding import read_template, seed_sqlite

    # tests/helpers/pg.py (the tests' throwaway cluster), by its path: tests/ is not on sys.path.
    spec = importlib.util.spec_from_file_location(
        "refund_agent_tests_pg", HERE.parent / "tests" / "helpers" / "pg.py")
    pg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pg)
    Cluster, find_bin = pg.Cluster, pg.find_bin

    bin_dir = find_bin()
    if bin_dir is None:
        print("PostgreSQL's initdb and pg_ctl were not found; install Debian's postgresql.")
        return 2
    root = Path(tempfile.mkdtemp(prefix="bench-migrate-"))
    cluster = Cluster(bin_dir, durable=True).start()
    try:
        data = make_bench_shop(root / "data", 2)
        template_agent = TimedAgent(bench_settings(root / "template", data))
        full_ticket(template_agent, OrderPool(1, 3).take())
        run_id = template_agent.store.runs(1)[0].id
        template = read_template(template_agent.store, run_id, root / "template")
        transcript = template_agent.store._read(  # noqa: SLF001
            "SELECT seq, response_id, origin, item FROM transcript WHERE run_id = ?", (run_id,))
        out = root / "output"
        started = time.monotonic()
        store = DeskStore(out / "refund-agent.sqlite3")
        seed_sqlite(store, out, template, args.runs)
        db = store._db()  # noqa: SLF001 - bulk seeding needs the raw connection
        db.execute("BEGIN IMMEDIATE")
        runs = [r[0] for r in db.execute("SELECT id FROM runs")]
        db.executemany("INSERT INTO transcript VALUES (?,?,?,?,?)",
                       ((run, *row) for run in runs for row in map(tuple, transcript)))
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = (out / "refund-agent.sqlite3").stat().st_size
        print(f"Seeded {args.runs:,} runs ({size / 1e6:.0f} MB) in "
              f"{time.monotonic() - started:.1f} s", flush=True)
        url = cluster.create("migrated")
        clock = time.monotonic()

        def progress(line: str) -> None:
            print(f"{time.monotonic() - clock:6.1f} s  {line}", flush=True)

        report = migrate(DeskStore(out / "refund-agent.sqlite3"), out, url, progress=progress)
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in report.timings.items())
        print(f"Migrated {report.runs:,} runs in {report.seconds:.1f} s ({stages}); rows: "
              f"{sum(report.rows.values()):,}, ledger: {report.ledger}")
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
