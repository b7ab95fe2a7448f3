"""Rate limits, as the providers send them, met by many runs at once.

Desk runs in threads against the stand-in in its rate-limit mode, through the real openai SDK
over loopback: every run finishes, no call is answered twice, the stand-in counts what it
accepted and refused, and the pace the process keeps is the provider's. Counts and ratios
are asserted; times only within generous bounds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.cli import DATA

from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.models import RunStatus
from refund_agent.providers.client import open_model
from refund_agent.providers.limiter import Halted, Limiter

RATE, PERIOD = 10, 1.0   # the stand-in's pace: "10/s"
RUNS = 24


def _drive(agent: Agent, sample: str, finished: dict[str, float], statuses: list[str]) -> None:
    """One ticket to its end: advanced, approved whenever it waits, advanced again."""
    run = agent.start_sample(sample)
    for _ in range(8):
        status = agent.advance(run.id).status
        if status == RunStatus.WAITING:
            for approval in agent.store.approvals("pending"):
                if approval.run_id == run.id:
                    agent.decide(approval.id, True, "Dana Kim",
                                 fingerprint=agent.store.approval(approval.id).fingerprint)
            continue
        break
    statuses.append(status.value)
    finished[run.id] = time.monotonic()


@pytest.mark.parametrize("dialect", ["openai", "xai"])
def test_many_runs_under_a_rate_limit_finish_at_the_providers_pace(tmp_path: Path, dialect):
    settings = Settings(api_key="", provider=dialect, data_dir=DATA,
                        output_dir=tmp_path / "output", max_retries=2, timeout=60.0,
                        offline_rate_limit=f"{RATE}/s")
    model = open_model(settings)
    pace = model.server.pace
    samples = list(Agent(settings, model=model).shop.samples)
    finished: dict[str, float] = {}
    statuses: list[str] = []
    threads = [threading.Thread(target=_drive, args=(Agent(settings, model=model),
                                                     samples[i % len(samples)], finished,
                                                     statuses))
               for i in range(RUNS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    elapsed = time.monotonic() - started
    model.server.close()

    # Every run finished, none failed, though the stand-in refused requests.
    assert len(statuses) == RUNS and "failed" not in statuses, Counter(statuses)
    assert pace.refused, "the burst never met the stand-in's limit"
    # No call repeated: a refused request was not processed, and every call's output reached
    # the model once.
    assert len(model.server.requests) == len(pace.accepted)
    outputs = Counter(item["call_id"] for body in model.server.requests
                      for item in body.get("input") or []
                      if isinstance(item, dict) and item.get("type") == "function_call_output")
    assert outputs and max(outputs.values()) == 1

    # After the first 429s, what the process sends (accepted or refused) stays within the
    # limit in any period, give or take one or two sent as a count refilled.
    learned = min(t for t in pace.accepted if t > pace.refused[0]) + PERIOD
    attempts = sorted(t for t in pace.accepted + pace.refused if t >= learned)
    busiest = max(sum(1 for u in attempts if t <= u < t + PERIOD) for t in attempts)
    assert busiest <= RATE + 2, busiest
    late_refusals = sum(1 for t in pace.refused if t >= learned)
    assert late_refusals <= 0.1 * len(pace.accepted), (late_refusals, len(pace.accepted))

    # While most runs still have work (until half have finished), the allowed requests are
    # used: whole periods from when the first 429s were answered.
    start = min(t for t in pace.accepted if t > pace.refused[0])
    half = sorted(finished.values())[RUNS // 2]
    periods = int((half - start) // PERIOD)
    assert periods >= 2, "the runs finished too soon to measure the pace"
    used = sum(1 for t in pace.accepted if start <= t < start + periods * PERIOD)
    assert used >= 0.9 * RATE * periods, (used, RATE * periods)
    # Generous: the ideal is accepted / RATE seconds.
    assert elapsed < 3 * len(pace.accepted) / RATE + 20


def test_a_rate_limit_past_the_retries_is_waited_out_by_default(settings, model, agent):
    """More 429s than REFUND_AGENT_MAX_RETRIES (2 here): the run waits and goes on."""
    model.server.inject("429", "429", "429", "429", "429")
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING and run.requests == 3
    assert len(model.server.requests) == 8   # five refused, then three turns


class _Answer(SimpleNamespace):
    def close(self) -> None:
        pass


def _answer(status: int, **headers: str) -> _Answer:
    return _Answer(status_code=status, headers=headers)


def test_one_runs_429_slows_every_run_of_the_process():
    limiter = Limiter()
    sent: dict[str, list[float]] = {"a": [], "b": []}
    first = threading.Event()

    def run_a() -> None:
        answers = iter([_answer(429, **{"retry-after-ms": "400"}), _answer(200)])
        with limiter.slot("a"):
            def attempt():
                sent["a"].append(time.monotonic())
                first.set()
                return next(answers)
            limiter.send(attempt, 100, lambda r: True, 0, 60.0)

    def run_b() -> None:
        first.wait(5)
        time.sleep(0.05)   # after a's 429 came back
        with limiter.slot("b"):
            limiter.send(lambda: sent["b"].append(time.monotonic()) or _answer(200), 100,
                         lambda r: True, 0, 60.0)

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    (refused, again), (other,) = sent["a"], sent["b"]
    assert again - refused >= 0.4      # Retry-After honoured
    assert other - refused >= 0.4      # and the other run waited too
    assert limiter.limited == 1 and limiter.stats()["in_flight"] == 0


def test_a_budget_spreads_requests_over_the_minute():
    """120 a minute: never more than the second's share (2) in any second, as xAI's rule."""
    limiter = Limiter(rpm=120)
    times = []
    for _ in range(6):
        limiter.send(lambda: times.append(time.monotonic()) or _answer(200), 100,
                     lambda r: True, 0, 0.0)
    assert all(sum(1 for u in times if t <= u < t + 1.0) <= 2 for t in times)
    assert times[-1] - times[0] >= 1.9


def test_a_stop_ends_the_wait_for_a_place():
    limiter = Limiter()
    limiter.observe(429, {"retry-after": "30"}, 0, True)
    started = time.monotonic()
    with pytest.raises(Halted), limiter.slot("a", stop=lambda: time.monotonic() > started + 0.2):
        pass
    assert time.monotonic() - started < 5
