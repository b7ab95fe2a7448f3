"""The page's worker advances at most REFUND_AGENT_CONCURRENCY runs at once (issue #46): the
others wait in line, shown as working; Stop works on a run in line too. Before, every active
run got a thread of its own, with no bound."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from benchlib import clone_id, make_bench_shop, start_ticket

from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.models import RunStatus
from refund_agent.web.views import DrainMeter, drain_text
from refund_agent.web.worker import Worker

TIMEOUT = 120.0


def _until(check, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_page_worker_advances_at_most_its_bound(settings: Settings, tmp_path: Path):
    data = make_bench_shop(tmp_path / "data", 5)
    agent = Agent(settings.with_(output_dir=tmp_path / "out", data_dir=data, concurrency=2,
                                 offline_latency=0.5))
    worker = Worker(agent)
    worker.start()
    most, watching = [0], threading.Event()

    def watch() -> None:   # the most runs advancing at any moment
        while not watching.is_set():
            most[0] = max(most[0], worker.load()[0])
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        runs = [start_ticket(agent, clone_id(i + 1)) for i in range(5)]
        for run in runs:
            assert worker._launch(run.id)
        advancing, waiting = worker.load()
        assert (advancing, waiting) == (2, 3)
        assert set(worker.active_runs()) == {r.id for r in runs}   # in line counts as active
        # Stop on a run still in line: it stops before its first request.
        last = runs[-1]
        # (It gets a thread of its own at once, past the bound: it only marks the run.)
        assert worker.stop(last.id, "Dana Kim")
        _until(lambda: agent.store.run(last.id).status == RunStatus.STOPPED, "the stop")
        assert agent.store.run(last.id).requests == 0
        _until(lambda: worker.load()[0] <= 2, "the stopped run's thread to end")
        watcher.start()
        for run in runs[:-1]:
            _until(lambda r=run: agent.store.run(r.id).status == RunStatus.WAITING,
                   f"{run.id} to wait for approval")
        _until(lambda: worker.load() == (0, 0), "the worker to go idle")
    finally:
        watching.set()
        worker.shutdown()
    assert most[0] <= 2


def test_runs_in_line_at_shutdown_are_left_for_the_next_process(settings: Settings,
                                                                 tmp_path: Path):
    data = make_bench_shop(tmp_path / "data", 3)
    agent = Agent(settings.with_(output_dir=tmp_path / "out", data_dir=data, concurrency=1,
                                 offline_latency=1.0))
    worker = Worker(agent)
    worker.start()
    runs = [start_ticket(agent, clone_id(i + 1)) for i in range(3)]
    for run in runs:
        worker._launch(run.id)
    assert worker.load() == (1, 2)
    worker.shutdown()
    # Never started here: still working, unleased, so the next worker (any) takes them.
    for run in runs[1:]:
        after = agent.store.run(run.id)
        assert after.status == RunStatus.WORKING and after.lease_pid is None
    assert {r.id for r in agent.store.orphaned_runs()} >= {r.id for r in runs[1:]}


def test_the_inbox_says_how_many_tickets_wait_and_how_fast_they_drain():
    now = [0.0]
    meter = DrainMeter(window=600, clock=lambda: now[0])
    counts = dict.fromkeys(RunStatus, 0)
    assert meter.note({**counts, RunStatus.WORKING: 40}) == (40, None)   # nothing known yet
    now[0] = 60
    waiting, pace = meter.note({**counts, RunStatus.WORKING: 28, RunStatus.WAITING: 12})
    assert (waiting, pace) == (28, 12.0)
    assert drain_text(waiting, pace) == ("28 tickets wait for the agent · 12.0 done a minute, "
                                         "about 2 min to go.")
    assert drain_text(1, None) == "1 ticket waits for the agent."
    assert drain_text(0, 3.0) == "No ticket waits for the agent."
    # Looks older than the window are forgotten: the pace is the last ten minutes'.
    now[0] = 650
    assert meter.note({**counts, RunStatus.WAITING: 40}) == (0, (40 - 12) * 60 / 590)
