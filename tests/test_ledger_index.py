"""The payments and outbox logs are read incrementally and indexed; they must agree with the file.

These cover the caching added for speed (bench/run.py, store scale): whatever another process
appends, replaces or tears, the answers equal a fresh read of the file.
"""

from __future__ import annotations

import json
import os

from refund_agent.ledger import IdempotentLog
from refund_agent.payments import Payments
from refund_agent.policy import cents, dollars


def refunded_by_order(refunds: list[dict], except_key: str | None = None) -> dict[str, float]:
    """The reference answer: refunds per order from a fresh read, leaving out one key."""
    totals: dict[str, int] = {}
    for r in refunds:
        if r.get("idempotency_key") == except_key:
            continue
        order_id = r["request"]["order_id"]
        totals[order_id] = totals.get(order_id, 0) + cents(r["request"]["amount"])
    return {k: dollars(v) for k, v in totals.items()}


def fresh(path) -> list[dict]:
    """What a reader with no cache sees: every line that parses."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def test_appends_by_another_writer_are_seen(tmp_path):
    mine, theirs = Payments(tmp_path), Payments(tmp_path)  # two processes, two caches
    mine.refund("k1", "A1", 10.0, "r")
    assert mine.refunded("A1") == 10.0
    theirs.refund("k2", "A1", 5.5, "r")
    theirs.refund("k3", "B2", 7.0, "r")
    assert mine.refunded("A1") == 15.5 and mine.refunded("B2") == 7.0
    assert mine.refunded("A1", except_key="k2") == 10.0
    assert mine.refunded("A1", except_key="k3") == 15.5  # a key on another order changes nothing
    assert mine.refunds() == fresh(tmp_path / "refunds.log")
    record, reused = mine.refund("k2", "A1", 5.5, "r")
    assert reused and record["idempotency_key"] == "k2"


def test_view_matches_the_unindexed_sum(tmp_path):
    payments = Payments(tmp_path)
    for i in range(30):
        payments.refund(f"k{i}", f"O{i % 4}", 1.25 * (i + 1), "r")
    for except_key in (None, "k3", "k29", "missing"):
        expected = refunded_by_order(fresh(tmp_path / "refunds.log"), except_key)
        view = payments.refunded_by_order(except_key)
        assert dict(view) == expected
        assert view.get("nope", 0.0) == 0.0


def test_replaced_or_truncated_file_starts_over(tmp_path):
    payments = Payments(tmp_path)
    payments.refund("k1", "A1", 10.0, "r")
    payments.refund("k2", "A1", 20.0, "r")
    assert payments.refunded("A1") == 30.0
    path = tmp_path / "refunds.log"
    first = path.read_text().splitlines()[0]
    replacement = tmp_path / "new.log"
    replacement.write_text(first + "\n")
    os.replace(replacement, path)  # a new file (new inode) with less in it
    assert payments.refunded("A1") == 10.0
    path.write_text("")  # same file, truncated
    assert payments.refunded("A1") == 0.0 and payments.refunds() == []
    assert payments.find("k1") is None


def test_torn_last_line_is_skipped_and_not_glued_to_the_next(tmp_path):
    log = IdempotentLog(tmp_path / "outbox.log")
    log.once("k1", {"to": "a"}, lambda: {"message_id": "m1"})
    with open(log.path, "a") as fh:  # a crash mid-write: half a record, no newline
        fh.write('{"idempotency_key": "k2", "requ')
    assert [r["idempotency_key"] for r in log.records()] == ["k1"]
    record, reused = log.once("k3", {"to": "c"}, lambda: {"message_id": "m3"})
    assert not reused
    assert [r["idempotency_key"] for r in log.records()] == ["k1", "k3"]
    assert log.records() == fresh(log.path)
    assert log.find("k3") == record


def test_last_line_without_newline_that_parses_counts(tmp_path):
    log = IdempotentLog(tmp_path / "refunds.log")
    whole = {"idempotency_key": "k1", "request": {"order_id": "A1", "amount": 3.0}}
    log.path.write_text(json.dumps(whole))  # complete JSON, newline lost
    assert log.records() == [whole] and log.find("k1") == whole
    log.once("k2", {"order_id": "A1", "amount": 4.0}, lambda: {})
    assert [r["idempotency_key"] for r in log.records()] == ["k1", "k2"]
    assert Payments(tmp_path).refunded("A1") == 7.0
