"""Issue 43, 17: wherever a cost shows, it says what it is: the stand-in's figure is simulated
(it costs nothing, as `doctor` says), a provider that reports no cost gets an estimate; and the
stand-in's own server keeps its state in ./output like everything else, not the temp folder."""

from __future__ import annotations

import re
from pathlib import Path

from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from offline_model import __main__ as offline_main
from refund_agent import Settings
from refund_agent.models import Run, RunStatus, Step, StepKind
from refund_agent.web import views
from refund_agent.web.views.format import ESTIMATE, REPORTED, STAND_IN, cost_basis, cost_text

FREE = "simulated; the stand-in costs nothing"


def a_run(cost_ticks: int) -> Run:
    return Run(id="r1", created_at=0.0, kind="custom", sender="a@example.com", sender_name="A",
               subject="s", email="e", status=RunStatus.DONE, last_response_id=None, requests=2,
               cost_ticks=cost_ticks, input_tokens=10, cached_tokens=0, output_tokens=5,
               simulated_replies=0, error=None, lease_pid=None, last_pid=None, updated_at=0.0)


def test_a_cost_says_whether_it_was_reported_estimated_or_simulated():
    assert cost_text(0.0117, REPORTED) == "$0.0117"
    assert cost_text(0.0117, ESTIMATE) == "$0.0117 (estimate)"
    assert cost_text(0.0117, STAND_IN) == f"$0.0117 ({FREE})"
    assert cost_basis(Settings(api_key="")) == STAND_IN
    assert cost_basis(Settings(api_key="xai-" + "k" * 40, provider="xai")) == REPORTED
    assert cost_basis(Settings(api_key="sk-" + "k" * 40, provider="openai",
                               model="gpt-5-mini")) == ESTIMATE


def test_the_page_labels_the_ticket_cost_and_each_request():
    """Old code: the ticket said "$0.0117" on the stand-in, unlabelled."""
    run = a_run(117_000_000)
    assert f"$0.0117 ({FREE})" in views.cost_line(run, STAND_IN)
    assert "$0.0117 ·" in views.cost_line(run, REPORTED) + " ·"
    response = Step(id=1, run_id="r1", at=0.0, pid=1, kind=StepKind.RESPONSE,
                    data={"response_id": "x", "cost_ticks": 10_000_000, "input_tokens": 3})
    (block,) = views.timeline([response], STAND_IN)
    assert block.title.endswith(f"$0.0010 ({FREE})")
    estimated = Step(id=1, run_id="r1", at=0.0, pid=1, kind=StepKind.RESPONSE,
                     data={"response_id": "x", "cost_ticks": 10_000_000, "cost_estimated": 1})
    (block,) = views.timeline([estimated])
    assert block.title.endswith("$0.0010 (estimate)")


def test_the_terminal_labels_the_stand_ins_cost(tmp_path):
    """Old code: `show` ended "2 model requests, $0.0117, ..." while doctor said it costs
    nothing, and `runs` listed the same figure."""
    out = tmp_path / "out"
    first = run_cli(out)
    assert first.returncode == 0, first.stderr
    assert FREE in first.stdout
    (run_id,) = re.findall(r"^Run (\w+):", first.stdout, re.M)
    assert FREE in run_cli(out, "show", run_id).stdout
    listed = run_cli(out, "runs").stdout
    assert FREE in listed.splitlines()[-1], listed


def test_the_stand_ins_server_keeps_its_state_in_the_output_folder(monkeypatch, tmp_path):
    """Old code: the default was <temp folder>/refund_agent_offline/responses.sqlite3."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REFUND_AGENT_OUTPUT", raising=False)
    assert offline_main.parse_args([]).state == tmp_path / "output" / "offline-model.sqlite3"
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(tmp_path / "elsewhere"))
    assert offline_main.parse_args([]).state == (tmp_path / "elsewhere"
                                                 / "offline-model.sqlite3")
    assert offline_main.parse_args(["--state", "s.db"]).state == Path("s.db")
