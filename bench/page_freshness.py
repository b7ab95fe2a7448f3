"""Page freshness: a decision made in another process, to the helpdesk page showing it.

``streamlit run app.py`` runs as its own process on a bench store that already holds refunds
waiting for approval; headless Debian Chromium (never a downloaded browser) shows the page.
This process then approves the waiting refunds one by one through the agent, as the terminal
or a second server would, and the page reports when each approved card leaves its queue.

The browser timestamps the change itself: a MutationObserver notes ``Date.now()`` the moment a
card's element is gone, which is compared with ``time.time()`` right after the decision's
commit here (one machine, one clock). The pauses between decisions are random, so the page's
polling phase is sampled evenly.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from benchlib import (
    APPROVER,
    OrderPool,
    TimedAgent,
    bench_settings,
    make_bench_shop,
    ms,
    pct,
    pending_approval_id,
    start_ticket,
)

from refund_agent import RunStatus
from refund_agent.config import PROJECT_ROOT

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

WATCH = """
(ids) => {
  window.__gone = {};
  const check = () => {
    const now = Date.now();
    for (const id of ids) {
      if (!(id in window.__gone) && !document.querySelector('.st-key-card_' + id)) {
        window.__gone[id] = now;
      }
    }
  };
  new MutationObserver(check).observe(document.body, {childList: true, subtree: true});
}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_streamlit(out: Path, data: Path, log: Path, app: Path, database_url: str = ""
                     ) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("REFUND_AGENT_") and k != "CRASH_AFTER_REFUND"}
    env.update(REFUND_AGENT_OUTPUT=str(out), REFUND_AGENT_DATA=str(data), XAI_API_KEY="",
               REFUND_AGENT_OFFLINE_LATENCY="0", PYTHONUNBUFFERED="1")
    if database_url:
        env["REFUND_AGENT_DATABASE_URL"] = database_url
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],
            cwd=PROJECT_ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "_stcore/health", timeout=1) as reply:
                if reply.status == 200:
                    return proc, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"streamlit did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def bench_page(root: Path, reps: int = 20, seed: int = 7, stored: int = 0,
               app: Path = PROJECT_ROOT / "app.py", database_url: str = "") -> dict:
    """Decision-to-page delays; ``stored`` finished tickets are seeded into the store first.

    ``app`` may name a modified copy of app.py, to try a change before proposing it.
    ``database_url``: an empty PostgreSQL database to keep the store in (the page and this
    process both use it, and the page learns of the decisions through LISTEN/NOTIFY).
    """
    if not CHROMIUM.exists():
        return {"skipped": "no Debian Chromium at /usr/bin/chromium"}
    if not app.exists():
        return {"skipped": f"{app.name} does not exist yet"}
    from playwright.sync_api import sync_playwright

    root.mkdir(parents=True, exist_ok=True)
    data = make_bench_shop(root / "data", reps + 5)
    out = root / "output"
    agent = TimedAgent(bench_settings(out, data, database_url=database_url))
    pool = OrderPool(1, reps + 5)
    if stored:
        from seeding import read_template, seed_postgres, seed_sqlite

        tmpl = TimedAgent(bench_settings(root / "template", data))
        run = tmpl.advance(start_ticket(tmpl, pool.take()).id)
        tmpl.decide(pending_approval_id(tmpl, run.id), True, APPROVER,
                    fingerprint=tmpl.store.approval(pending_approval_id(tmpl, run.id)).fingerprint)
        tmpl.advance(run.id)
        template = read_template(tmpl.store, run.id, root / "template")
        if database_url:
            seed_postgres(agent.store, template, stored)
        else:
            seed_sqlite(agent.store, out, template, stored)
    waiting = []
    for _ in range(reps):
        run = agent.advance(start_ticket(agent, pool.take()).id)
        assert run.status == RunStatus.WAITING, (run.status, run.error)
        waiting.append(pending_approval_id(agent, run.id))

    proc, url = _start_streamlit(out, data, root / "streamlit.log", app, database_url)
    rng = random.Random(seed)
    delays: list[float] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(url)
            page.locator(f".st-key-card_{waiting[0]}").wait_for()
            page.evaluate(WATCH, waiting)
            time.sleep(2.0)  # let the first fragment runs settle
            for approval_id in waiting:
                # The queue draws the oldest cards a page at a time: this one came on screen
                # when an older one left. Time it from now on.
                page.locator(f".st-key-card_{approval_id}").wait_for()
                page.evaluate(f"delete window.__gone['{approval_id}']")
                time.sleep(rng.uniform(0.2, 1.2))
                agent.decide(approval_id, True, APPROVER,
                             fingerprint=agent.store.approval(approval_id).fingerprint)
                decided_ms = time.time() * 1000
                deadline = time.monotonic() + 20
                while True:
                    gone = page.evaluate(f"window.__gone['{approval_id}']")
                    if gone is not None:
                        delays.append((gone - decided_ms) / 1000)
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the page never dropped card {approval_id}")
                    time.sleep(0.02)
            browser.close()
    finally:
        proc.kill()
        proc.wait(10)
    return {"stored_runs": stored, "samples": len(delays), "p50_ms": ms(pct(delays, 50)),
            "p95_ms": ms(pct(delays, 95)),
            "max_ms": ms(max(delays)), "min_ms": ms(min(delays)),
            "delays_ms": [ms(d) for d in delays]}


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by these processes (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])   # utime, stime in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def _family(pid: int) -> list[int]:
    """``pid`` and all its descendants (Chromium's renderer and GPU processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def bench_idle(root: Path, seconds: float = 20.0, tickets: int = 12,
               app: Path = PROJECT_ROOT / "app.py", database_url: str = "") -> dict:
    """What one open, idle tab costs: server and browser CPU while nothing changes.

    A store with finished tickets and refunds waiting (what a desk looks like mid-day); the
    tab is opened, left to settle, then both processes' CPU time is read over ``seconds``.
    ``database_url``: an empty PostgreSQL database to keep the store in.
    """
    if not CHROMIUM.exists():
        return {"skipped": "no Debian Chromium at /usr/bin/chromium"}
    from playwright.sync_api import sync_playwright

    root.mkdir(parents=True, exist_ok=True)
    data = make_bench_shop(root / "data", tickets + 5)
    out = root / "output"
    agent = TimedAgent(bench_settings(out, data, database_url=database_url))
    pool = OrderPool(1, tickets + 5)
    for n in range(tickets):
        run = agent.advance(start_ticket(agent, pool.take()).id)
        if n % 3:   # two in three decided and finished; the rest wait in the queue
            pending = agent.store.approval(pending_approval_id(agent, run.id))
            agent.decide(pending.id, True, APPROVER, fingerprint=pending.fingerprint)
            agent.advance(run.id)
    proc, url = _start_streamlit(out, data, root / "streamlit.log", app, database_url)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            page.get_by_text("Audit log").first.wait_for(timeout=60_000)
            time.sleep(5.0)   # first renders, caches and the worker's start-up settle
            browser_pids = [p for p in _family(os.getpid()) if p not in (os.getpid(), proc.pid)]
            server0, browser0 = _cpu_seconds([proc.pid]), _cpu_seconds(browser_pids)
            time.sleep(seconds)
            server = _cpu_seconds([proc.pid]) - server0
            browser_cpu = _cpu_seconds(browser_pids) - browser0
            browser.close()
    finally:
        proc.kill()
        proc.wait(10)
    return {"seconds": seconds, "tickets": tickets,
            "server_core_pct": round(100 * server / seconds, 1),
            "browser_core_pct": round(100 * browser_cpu / seconds, 1)}


def main() -> None:
    """Page freshness and the idle tab's cost, on SQLite and (given a URL) on PostgreSQL.

    ``--app`` names a modified copy of app.py, to try a change before proposing it (a copy can
    patch ``refund_agent.web.page`` before calling its ``main``).
    """
    import argparse
    import json
    import shutil
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--app", type=Path, default=PROJECT_ROOT / "app.py")
    p.add_argument("--reps", type=int, default=20, help="decisions timed")
    p.add_argument("--stored", type=int, default=0, help="finished tickets seeded first")
    p.add_argument("--database-url", default="", help="an empty PostgreSQL database")
    p.add_argument("--idle", type=float, metavar="SECONDS",
                   help="only the idle tab, this long, on SQLite and then on a throwaway "
                        "PostgreSQL cluster (Debian's postgresql)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="refund-agent-page-"))
    if args.idle:
        try:
            _idle_on_both(root, args.idle, args.app)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    try:
        fresh = bench_page(root / "fresh", reps=args.reps, stored=args.stored, app=args.app,
                           database_url=args.database_url)
        print(json.dumps({k: v for k, v in fresh.items() if k != "delays_ms"}), flush=True)
        if not args.database_url:   # a second empty database would be needed for the idle tab
            print(json.dumps(bench_idle(root / "idle", app=args.app)), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _idle_on_both(root: Path, seconds: float, app: Path) -> None:
    import json

    from postgres import _load_pg, missing
    print(json.dumps({"engine": "sqlite", **bench_idle(root / "sqlite", seconds, app=app)}),
          flush=True)
    if problem := missing():
        print(json.dumps({"engine": "postgresql", "skipped": problem}), flush=True)
        return
    pg = _load_pg()
    cluster = pg.Cluster(pg.find_bin(), durable=True).start()
    try:
        print(json.dumps({"engine": "postgresql", **bench_idle(
            root / "pg", seconds, app=app, database_url=cluster.create("idle"))}), flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
