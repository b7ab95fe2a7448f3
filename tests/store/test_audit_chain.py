"""Tamper evidence: `refund-agent audit --verify` names the first edited, reordered or missing
entry. The tests edit, delete and reorder rows with sqlite3 directly, as someone with access to
the file would, and run the real command on the result.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from helpers.cli import DATA
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)
from helpers.crash import record

from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.errors import AlreadyDecided
from refund_agent.providers.client import open_model
from refund_agent.store import GENESIS_HASH, audit_hash


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> Path:
    """An output folder whose audit log has every kind of entry the agent writes."""
    output = tmp_path_factory.mktemp("audited") / "output"
    settings = Settings(api_key="", data_dir=DATA, output_dir=output, max_retries=2, timeout=30)
    model = open_model(settings)
    agent = Agent(settings, model=model)
    first = agent.advance(agent.start_sample("damaged").id)
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, True, "Dana Kim",                 # approved
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    agent.advance(first.id)                                     # issued
    with pytest.raises(AlreadyDecided):
        agent.decide(approval.id, False, "Sam", "Too late",
                     fingerprint=agent.store.approval(approval.id).fingerprint)     # ignored
    second = agent.advance(agent.start_sample("angry").id)      # requested
    (approval,) = agent.store.approvals("pending")
    agent.decide(approval.id, False, "Sam", "The skillet was used.",
                 fingerprint=agent.store.approval(approval.id).fingerprint)  # rejected
    agent.advance(second.id)
    model.server.close()
    events = [e.event for e in agent.store.audit()]
    assert events == ["requested", "approved", "issued", "ignored", "requested", "rejected"]
    return output


@pytest.fixture
def output(audited: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(audited, tmp_path / "output"))


def _sql(output: Path, *statements: tuple) -> None:
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    for statement in statements:
        db.execute(*statement)
    db.commit()
    db.close()


def _rehash_all(db: sqlite3.Connection) -> None:
    """Recompute every hash as someone who knows the hashing would (lines are stored as JSON,
    hashed as the list they are), and move the chain's anchor to the new head."""
    prev = GENESIS_HASH
    for row in db.execute("SELECT * FROM audit ORDER BY id").fetchall():
        entry = dict(row)
        entry["lines"] = json.loads(entry["lines"]) if entry["lines"] else None
        new = audit_hash(prev, entry)
        db.execute("UPDATE audit SET prev_hash = ?, hash = ? WHERE id = ?",
                   (prev, new, entry["id"]))
        prev = new
    _reanchor(db)


def _reanchor(db: sqlite3.Connection) -> None:
    """Point the anchor at the log as it now is: what someone who knows the anchor would do."""
    db.execute("UPDATE audit_anchor SET entries = (SELECT COUNT(*) FROM audit), head = COALESCE("
               "(SELECT hash FROM audit ORDER BY id DESC LIMIT 1), ?)", (GENESIS_HASH,))


def _verify(output: Path) -> tuple[int, str]:
    result = run_cli(output, "audit", "--verify")
    assert "Traceback" not in result.stderr
    return result.returncode, result.stdout.strip()


def _caught(case: str, output: Path, expected: str) -> None:
    code, text = _verify(output)
    record("audit", case=case, caught=int(code == 1 and expected in text))
    assert code == 1, text
    assert expected in text, text


def test_an_intact_log_verifies(output: Path):
    assert _verify(output) == (0, "Audit log intact: 6 entries, chain and anchor ok; refunds.log "
                                  "and outbox.log agree with the approvals and the audit.")


def test_money_entries_record_their_lines(output: Path):
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    rows = db.execute("SELECT event, lines FROM audit ORDER BY id").fetchall()
    db.close()
    lines = {event: json.loads(text) if text else None for event, text in rows}
    coffee = [{"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 4800}]
    assert lines["approved"] == lines["issued"] == coffee
    assert lines["rejected"] == [{"line": "SKL-CI-10", "reason": "changed_mind",
                                  "amount_cents": 3150}]
    assert lines["ignored"] is None


def test_rehashing_an_untouched_log_changes_nothing(output: Path):
    """The helper the tamper tests use recomputes exactly the stored hashes."""
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    db.row_factory = sqlite3.Row
    before = db.execute("SELECT hash FROM audit ORDER BY id").fetchall()
    _rehash_all(db)
    assert db.execute("SELECT hash FROM audit ORDER BY id").fetchall() == before
    db.close()


@pytest.mark.parametrize(("column", "value"), [
    ("note", "approved after a phone call"), ("actor", "Eve"), ("amount", 4800.0),
    ("event", "rejected"), ("at", 0.0), ("pid", 1), ("order_id", "A1066"),
    ("approval_id", "call_other"), ("run_id", "run_other"),
    ("lines", json.dumps([{"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 8095}])),
    ("lines", None),
])
def test_an_edited_field_is_caught_at_its_entry(output: Path, column: str, value):
    _sql(output, (f"UPDATE audit SET {column} = ? WHERE id = 2", (value,)))
    _caught(f"edited {column}", output, "Audit entry 2 (")
    assert "was edited after it was written" in _verify(output)[1]


def test_an_edited_hash_is_caught(output: Path):
    _sql(output, ("UPDATE audit SET hash = ? WHERE id = 3", ("f" * 64,)))
    _caught("edited hash", output, "Audit entry 3 (issued) was edited")


@pytest.mark.parametrize(("deleted", "reported"), [(1, 2), (3, 4), (5, 6)])
def test_a_removed_entry_is_caught_at_the_next_one(output: Path, deleted: int, reported: int):
    _sql(output, ("DELETE FROM audit WHERE id = ?", (deleted,)))
    _caught(f"removed entry {deleted} of 6", output,
            f"Audit entry {reported} does not follow the entry before it")


def test_a_removed_last_entry_is_caught_by_the_anchor(output: Path):
    """A hash chain alone cannot see its last entry go; the anchored head can."""
    _sql(output, ("DELETE FROM audit WHERE id = 6",))
    _caught("removed the last entry", output, "anchor says 6 ending in")
    # And the store refuses to write on top of it (Priya's skillet was rejected, so a new
    # request for it would write a 'requested' entry).
    result = run_cli(output, "angry")
    assert result.returncode == 1 and "does not end where its anchor says" in result.stderr


def test_a_removed_last_entry_with_the_anchor_moved_is_caught_by_the_facts(output: Path):
    """Moving the anchor too still leaves the approvals table saying who decided."""
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    db.execute("DELETE FROM audit WHERE id = 6")
    _reanchor(db)
    db.commit()
    db.close()
    _caught("removed the last entry and moved the anchor", output, "no 'rejected' entry by Sam")


def test_removing_every_entry_is_caught(output: Path):
    _sql(output, ("DELETE FROM audit",))
    _caught("emptied the log", output, "anchor says 6")
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    _reanchor(db)
    db.commit()
    db.close()
    _caught("emptied the log and moved the anchor", output, "no 'requested' entry")


def test_swapped_entries_are_caught(output: Path):
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    cols = [r[1] for r in db.execute("PRAGMA table_info(audit)") if r[1] != "id"]
    two = db.execute(f"SELECT {', '.join(cols)} FROM audit WHERE id IN (2, 3) ORDER BY id"
                     ).fetchall()
    sets = ", ".join(f"{c} = ?" for c in cols)
    db.execute(f"UPDATE audit SET {sets} WHERE id = 2", two[1])
    db.execute(f"UPDATE audit SET {sets} WHERE id = 3", two[0])
    db.commit()
    db.close()
    _caught("swapped entries 2 and 3", output, "Audit entry 2 ")


def test_an_edit_with_the_whole_chain_recomputed_is_caught_by_the_facts(output: Path):
    """Someone who knows the hashing rewrites the approver and recomputes every hash after it.
    The chain is then consistent; the approvals table still names the real approver."""
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    db.row_factory = sqlite3.Row
    db.execute("UPDATE audit SET actor = 'Eve' WHERE event = 'approved'")
    _rehash_all(db)
    db.commit()
    db.close()
    _caught("edited and re-hashed", output, "no 'approved' entry by Dana Kim")


def test_a_removed_refund_entry_is_caught(output: Path):
    """The run's timeline records the refund; its 'issued' line must be in the audit log."""
    db = sqlite3.connect(output / "refund-agent.sqlite3")
    db.row_factory = sqlite3.Row
    db.execute("DELETE FROM audit WHERE event = 'issued'")
    _rehash_all(db)       # and re-hash, so the chain itself looks fine
    db.commit()
    db.close()
    _caught("removed the refund line and re-hashed", output, "no 'issued' or 'reused' entry")
