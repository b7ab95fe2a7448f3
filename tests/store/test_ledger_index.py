"""The payments and outbox logs are read incrementally and indexed; they must agree with the file.

These cover the caching added for speed (bench/run.py, store scale): whatever another process
appends, replaces or tears, the answers equal a fresh read of the file.
"""

from __future__ import annotations

import json
import os

import pytest

from refund_agent.errors import IdempotencyConflict
from refund_agent.outside.ledger import IdempotentLog
from refund_agent.outside.payments import StandInPayments as Payments


def fresh(path) -> list[dict]:
    """What a reader with no cache sees: every line that parses."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def _pay(log: IdempotentLog, key: str, amount: int) -> tuple[dict, bool]:
    return log.once(key, {"order_id": "A1", "amount_cents": amount}, lambda: {"refund_id": key})


def test_appends_by_another_writer_are_seen(tmp_path):
    mine = IdempotentLog(tmp_path / "refunds.log")      # two processes, two caches
    theirs = IdempotentLog(tmp_path / "refunds.log")
    _pay(mine, "k1", 1000)
    _pay(theirs, "k2", 550)
    assert mine.find("k2")["request"]["amount_cents"] == 550
    assert mine.records() == fresh(tmp_path / "refunds.log")
    record, reused = _pay(mine, "k2", 550)
    assert reused and record["idempotency_key"] == "k2"


def test_same_key_with_other_arguments_is_refused(tmp_path):
    log = IdempotentLog(tmp_path / "refunds.log")
    _pay(log, "k1", 1000)
    with pytest.raises(IdempotencyConflict):
        _pay(log, "k1", 1001)
    assert len(log.records()) == 1


def test_replaced_or_truncated_file_starts_over(tmp_path):
    log = IdempotentLog(tmp_path / "refunds.log")
    _pay(log, "k1", 1000)
    _pay(log, "k2", 2000)
    first = log.path.read_text().splitlines()[0]
    replacement = tmp_path / "new.log"
    replacement.write_text(first + "\n")
    os.replace(replacement, log.path)  # a new file (new inode) with less in it
    assert [r["idempotency_key"] for r in log.records()] == ["k1"]
    assert log.find("k2") is None
    log.path.write_text("")  # same file, truncated
    assert log.records() == [] and log.find("k1") is None


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
    assert [r["idempotency_key"] for r in Payments(tmp_path).refunds()] == ["k1", "k2"]


# -- the key index beside the file (a new process looks a key up without reading everything) ----

def test_a_new_process_finds_keys_through_the_index_without_reading_the_file(tmp_path,
                                                                             monkeypatch):
    log = IdempotentLog(tmp_path / "refunds.log")
    for i in range(50):
        _pay(log, f"k{i}", 100 + i)
    assert (tmp_path / "refunds.log.idx").exists()

    def no_full_read(self):
        raise AssertionError("find read the whole file")
    monkeypatch.setattr(IdempotentLog, "scan", no_full_read)
    later = IdempotentLog(tmp_path / "refunds.log")   # another process, later
    assert later.find("k7")["request"]["amount_cents"] == 107
    assert later.find("nope") is None
    record, reused = _pay(later, "k49", 149)
    assert reused and record["idempotency_key"] == "k49"
    _, reused = _pay(later, "k50", 150)
    assert not reused
    with pytest.raises(IdempotencyConflict):
        _pay(IdempotentLog(tmp_path / "refunds.log"), "k3", 999)


def test_the_index_starts_over_when_the_file_is_rewritten_in_place(tmp_path):
    log = IdempotentLog(tmp_path / "outbox.log")
    log.once("k1", {"to": "a"}, lambda: {"message_id": "m1"})
    log.once("k2", {"to": "b"}, lambda: {"message_id": "m2"})
    older = json.dumps({"idempotency_key": "k0", "request": {"to": "z"}}) + "\n"
    log.path.write_text(older + log.path.read_text())   # same file, history put in front
    later = IdempotentLog(tmp_path / "outbox.log")
    assert later.find("k0")["request"] == {"to": "z"}
    assert later.find("k2")["message_id"] == "m2"
    _, reused = later.once("k1", {"to": "a"}, lambda: {"message_id": "again"})
    assert reused


def test_a_broken_index_falls_back_to_reading_the_file(tmp_path):
    log = IdempotentLog(tmp_path / "refunds.log")
    _pay(log, "k1", 1000)
    (tmp_path / "refunds.log.idx").write_bytes(b"not a database" * 100)
    for name in ("refunds.log.idx-wal", "refunds.log.idx-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    later = IdempotentLog(tmp_path / "refunds.log")
    assert later.find("k1")["request"]["amount_cents"] == 1000
    _, reused = _pay(later, "k1", 1000)
    assert reused
