"""The payments interface speaks its own plain request (outside/payments.py), which the desk
builds from its quote (desk/actions.py:payment_request): the ledger's records stay what they
were, so a refund recorded before this change is reused by the same approval, never refused."""

from __future__ import annotations

import pytest

from refund_agent.desk.actions import payment_request
from refund_agent.desk.policy import Quote, QuotedLine
from refund_agent.errors import IdempotencyConflict
from refund_agent.outside.ledger import IdempotentLog
from refund_agent.outside.payments import RefundRequest, StandInPayments

MUG = QuotedLine(line="MUG-STN-2", name="Stoneware mug, set of 2", reason="damaged",
                 amount_cents=1800, allowed_cents=3600, units=1, quantity=2)
SHIPPING = QuotedLine(line="shipping", name="Shipping", reason="shipping", amount_cents=595,
                      allowed_cents=595)
QUOTE = Quote(order_id="A1043", lines=[MUG, SHIPPING])
# What a refund record's request held before the interface had a type of its own (the
# desk's quote written by outside/payments.py:refund_request), word for word.
RECORDED = {"order_id": "A1043", "amount_cents": 2395,
            "lines": [{"line": "MUG-STN-2", "reason": "damaged", "amount_cents": 1800,
                       "units": 1, "of_units": 2},
                      {"line": "shipping", "reason": "shipping", "amount_cents": 595}],
            "reason": "Refund on order A1043"}


def test_the_desks_request_is_the_record_it_always_was(tmp_path):
    """A refund recorded before the change (the ledger's old request) is found again by the
    same approval: reused, not a conflict, not a second refund."""
    IdempotentLog(tmp_path / "refunds.log").once("run_a-call_1", RECORDED,
                                                 lambda: {"refund_id": "re_before"})
    request = payment_request("run_a-call_1", QUOTE, "Refund on order A1043")
    assert request.record() == RECORDED
    record, reused = StandInPayments(tmp_path).refund(request)
    assert reused and record["refund_id"] == "re_before"
    assert len(StandInPayments(tmp_path).refunds()) == 1


def test_the_same_key_with_another_request_is_refused_by_the_stand_in(tmp_path):
    payments = StandInPayments(tmp_path)
    payments.refund(payment_request("run_b-call_1", QUOTE, "x"))
    fewer = Quote(order_id="A1043", lines=[MUG])
    with pytest.raises(IdempotencyConflict):
        payments.refund(payment_request("run_b-call_1", fewer, "x"))
    assert len(payments.refunds()) == 1


def test_a_request_pays_the_sum_of_its_lines():
    """Itemized refunds: a total that is not its lines' sum is the caller's mistake."""
    with pytest.raises(ValueError, match="not the sum of its lines"):
        RefundRequest(key="k", order_id="A1043", amount_cents=100,
                      lines=({"line": "MUG-STN-2", "reason": "damaged", "amount_cents": 99},))
    assert RefundRequest(key="k", order_id="A1043", amount_cents=100).record()["lines"] == []
