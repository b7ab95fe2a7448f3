"""The loop's own words: the step kinds and statuses it stores keep their values, and it
dispatches a call by its tool's declaration. (The front ends' tables of those words are the
desk's: tests/desk/test_step_tables.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from refund_agent.models import ApprovalStatus, Step, StepKind

AGENT = Path(__file__).resolve().parents[2] / "refund_agent" / "loop.py"


def test_stored_values_do_not_change():
    # The enums are str-valued: the store and JSON keep the words they kept before.
    assert json.dumps([StepKind.EMAIL, ApprovalStatus.ASKED]) == '["email", "asked"]'
    assert Step(id=1, run_id="r", at=0, pid=1, kind="customer_done", data={}).kind \
        is StepKind.CUSTOMER_DONE


def test_the_loop_dispatches_by_declaration_not_by_name():
    source = AGENT.read_text()
    assert "call.name ==" not in source and "getattr(" not in source
    assert len(source.splitlines()) < 500  # the loop, the desk on it, the API: one sitting
