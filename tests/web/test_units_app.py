"""The review lowers units (issue 24): a line of four glasses, approved for fewer of them.

Through the Streamlit page (AppTest), the real agent and SDK, and the offline stand-in, on the
corpus shop, which has a line of four tumblers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.page import confirm, open_page, plain, rerun_until, review, save_name, shows
from streamlit.testing.v1 import AppTest

from refund_agent.desk.records import DeskStore

SHOP = Path(__file__).parents[1] / "corpus" / "shop"
TUMBLERS = "GT-DW-350"
EMAIL = ("Hi, two of the four tumblers in RT20602 arrived with cracks in the outer wall. The "
         "tray is fine.\nDaniel")


@pytest.fixture
def output(tmp_path: Path, monkeypatch) -> Path:
    out = tmp_path / "output"
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(out))
    monkeypatch.setenv("REFUND_AGENT_DATA", str(SHOP))
    monkeypatch.setenv("REFUND_AGENT_OFFLINE_LATENCY", "0")
    monkeypatch.setenv("REFUND_AGENT_MAX_RETRIES", "2")
    monkeypatch.delenv("XAI_API_KEY", raising=False)
    return out


def test_the_review_shows_units_and_lowering_them_reprices(output: Path):
    at: AppTest = open_page()
    store = DeskStore(output / "refund-agent.sqlite3")
    at.text_input(key="mail_from").input("d.ferreira@example.org")
    at.text_input(key="mail_name").input("Daniel Ferreira")
    at.text_area(key="mail_body").input(EMAIL)
    at.button(key="mail_send").click().run()
    rerun_until(at, "$29.00 for order RT20602", "markdown")
    (approval,) = store.approvals("pending")
    assert [(x.line, x.units, x.quantity) for x in approval.lines] == [(TUMBLERS, 2, 4)]
    save_name(at, "Dana Kim")
    review(at, approval.id)
    box = at.checkbox(key=f"keep_{approval.id}_{TUMBLERS}")
    assert "2 of 4 units" in plain(box.label)
    units = at.number_input(key=f"units_{approval.id}_{TUMBLERS}")
    assert units.value == 2 and units.max == 2   # lowered, never raised
    units.set_value(1).run()
    assert shows(at, "Approving pays $14.50 for the ticked lines instead of $29.00", "info")
    assert at.button(key=f"confirm_{approval.id}").label == "Approve $14.50"
    confirm(at, approval.id, "Only one cup is cracked in the photo.")
    decided = store.approval(approval.id)
    assert decided.status == "approved" and decided.amount_cents == 1450
    assert [(x.units, x.amount_cents) for x in decided.kept] == [(1, 1450)]
