"""Each front end maps step kinds and approval statuses through one table, complete by test.

A kind or status added to refund_agent/models.py without a row in every table fails here,
instead of rendering nothing on one front end. (The words themselves, and how the loop
dispatches, are the loop's: tests/loop/test_stored_words.py.)
"""

from __future__ import annotations

import pytest

from refund_agent import cli
from refund_agent.models import ApprovalStatus, RunStatus, Step, StepKind
from refund_agent.web import views
from refund_agent.web.views import timeline_marks


@pytest.mark.parametrize("table, enum", [
    (cli.STEP_LINES, StepKind), (cli.DECISION_WORDS, ApprovalStatus),
    (views.STEP_BLOCKS, StepKind), (views.DECISIONS, ApprovalStatus),
    (views.STATUS, RunStatus), (timeline_marks.TIMELINE_MARKS, StepKind),
], ids=["cli-steps", "cli-decisions", "web-steps", "web-decisions", "web-run-status",
        "web-timeline-marks"])
def test_every_table_covers_its_enum(table, enum):
    assert set(table) == set(enum)


@pytest.mark.parametrize("status, tone", [("approved", "success"), ("asked", "info"),
                                          ("rejected", "error"), ("expired", "error")])
def test_the_page_picks_a_decisions_colour_from_its_status(status, tone):
    step = Step(id=1, run_id="r", at=0, pid=1, kind=StepKind.DECISION,
                data={"decision": status, "by": "Dana Kim", "note": "n"})
    (block,) = views.timeline([step])
    assert block.tone == tone and block.title.endswith("by Dana Kim")
