"""Each front end maps step kinds and approval statuses through one table, complete by test.

A kind or status added to refund_agent/models.py without a row in every table fails here,
instead of rendering nothing on one front end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refund_agent import cli
from refund_agent.models import ApprovalStatus, RunStatus, Step, StepKind
from refund_agent.web import views

AGENT = Path(__file__).resolve().parents[2] / "refund_agent" / "loop.py"


@pytest.mark.parametrize("table, enum", [
    (cli.STEP_LINES, StepKind), (cli.DECISION_WORDS, ApprovalStatus),
    (views.STEP_BLOCKS, StepKind), (views.DECISIONS, ApprovalStatus),
    (views.STATUS, RunStatus),
], ids=["cli-steps", "cli-decisions", "web-steps", "web-decisions", "web-run-status"])
def test_every_table_covers_its_enum(table, enum):
    assert set(table) == set(enum)


def test_stored_values_do_not_change():
    # The enums are str-valued: the store and JSON keep the words they kept before.
    assert json.dumps([StepKind.EMAIL, ApprovalStatus.ASKED]) == '["email", "asked"]'
    assert Step(id=1, run_id="r", at=0, pid=1, kind="customer_done", data={}).kind \
        is StepKind.CUSTOMER_DONE


@pytest.mark.parametrize("status, tone", [("approved", "success"), ("asked", "info"),
                                          ("rejected", "error"), ("expired", "error")])
def test_the_page_picks_a_decisions_colour_from_its_status(status, tone):
    step = Step(id=1, run_id="r", at=0, pid=1, kind=StepKind.DECISION,
                data={"decision": status, "by": "Dana Kim", "note": "n"})
    (block,) = views.timeline([step])
    assert block.tone == tone and block.title.endswith("by Dana Kim")


def test_the_loop_dispatches_by_declaration_not_by_name():
    source = AGENT.read_text()
    assert "call.name ==" not in source and "getattr(" not in source
    assert len(source.splitlines()) < 500  # the loop, the desk on it, the API: one sitting
