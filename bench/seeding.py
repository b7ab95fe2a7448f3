"""Fill a store with N finished tickets quickly, copied from one real run.

One real ticket (Maya's cracked coffee maker, approved, refunded, emailed) is run through the
agent first. Its rows (the run, every timeline step, the calls and their outputs, the approval,
the audit lines, the refund in ``refunds.log`` and the email in ``outbox.log``) are the template;
each seeded ticket is a copy with its own run, response, call, order, refund and message ids and
older timestamps. 90% are approved and refunded, 10% rejected (no refund).

The SQLite store is filled with bulk inserts in one transaction, the JSON-file store (for the
comparison) by writing its state file once; the audit chain is computed as the store would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refund_agent.store import GENESIS_HASH, Store, audit_hash

SEP = "\x1e"
REJECT_EVERY = 10  # every 10th seeded ticket was rejected
HISTORY_DAYS = 90


@dataclass
class Template:
    run: dict[str, Any]
    steps: list[dict[str, Any]]      # at, pid, kind, data (JSON text)
    calls: list[dict[str, Any]]
    approval: dict[str, Any]
    audit: list[dict[str, Any]]      # without id / hashes
    refund_line: str
    message_line: str
    ids: list[str]                   # ids to replace in every text field, longest first


def read_template(store: Store, run_id: str, output_dir: Path) -> Template:
    run = store.run(run_id).model_dump(mode="json")
    run["lease_token"] = run.get("lease_token")
    run["lease_at"] = None
    steps = [{"at": s.at, "pid": s.pid, "kind": s.kind, "data": json.dumps(s.data)}
             for s in store.steps(run_id)]
    response_ids = [json.loads(s["data"])["response_id"] for s in steps if s["kind"] == "response"]
    calls = []
    for rid in response_ids:
        for seq, call in enumerate(store.calls(rid)):
            calls.append({**call.model_dump(), "seq": seq})
    [approval] = [a for a in store.approvals(status=None) if a.run_id == run_id]
    approval = approval.model_dump()
    audit = [{k: v for k, v in e.model_dump().items() if k not in ("id", "prev_hash", "hash")}
             for e in store.audit() if e.run_id == run_id]
    refund_line = next(line for line in (output_dir / "refunds.log").read_text().splitlines()
                       if approval["id"] in line)
    refund = json.loads(refund_line)
    message_line = (output_dir / "outbox.log").read_text().splitlines()[-1]
    message = json.loads(message_line)
    ids = [run_id, approval["order_id"], refund["refund_id"], message["message_id"],
           *response_ids, *(c["call_id"] for c in calls)]
    return Template(run, steps, calls, approval, audit, refund_line, message_line,
                    sorted(set(ids), key=len, reverse=True))


@dataclass
class Seeded:
    run: dict[str, Any]
    steps: list[tuple[float, int, str, str]]
    calls: list[dict[str, Any]]
    approval: dict[str, Any]
    audit: list[dict[str, Any]]
    refund_line: str | None
    message_line: str


def history(t: Template, n: int, now: float | None = None) -> Iterator[Seeded]:
    """``n`` copies of the template ticket, oldest first, spread over the last 90 days."""
    now = now or time.time()
    base = t.run["created_at"]
    texts = [t.run["email"], *(s["data"] for s in t.steps),
             *(c[k] or "" for c in t.calls for k in ("arguments", "output")),
             t.approval["reason"], *(a.get("note") or "" for a in t.audit),
             t.refund_line, t.message_line]
    blob = SEP.join(texts)
    n_steps, n_calls = len(t.steps), len(t.calls)
    for i in range(n):
        tag = f"{i:08d}"
        new_ids = {old: _new_id(old, tag) for old in t.ids}
        text = blob
        for old, new in new_ids.items():
            text = text.replace(old, new)
        parts = text.split(SEP)
        email, step_data = parts[0], parts[1:1 + n_steps]
        k = 1 + n_steps
        call_texts = parts[k:k + 2 * n_calls]
        k += 2 * n_calls
        reason = parts[k]
        notes = parts[k + 1:k + 1 + len(t.audit)]
        refund_line, message_line = parts[-2], parts[-1]
        shift = (now - HISTORY_DAYS * 86400 * (n - i) / max(n, 1)) - base
        rejected = i % REJECT_EVERY == REJECT_EVERY - 1
        run = {**t.run, "id": new_ids[t.run["id"]], "email": email,
               "last_response_id": new_ids.get(t.run["last_response_id"]),
               "created_at": t.run["created_at"] + shift, "updated_at": t.run["updated_at"] + shift}
        steps = [(s["at"] + shift, s["pid"], s["kind"], d)
                 for s, d in zip(t.steps, step_data, strict=True)]
        calls = [{**c, "call_id": new_ids[c["call_id"]], "run_id": run["id"],
                  "response_id": new_ids[c["response_id"]], "arguments": call_texts[2 * j],
                  "output": call_texts[2 * j + 1] or None} for j, c in enumerate(t.calls)]
        approval = {**t.approval, "id": new_ids[t.approval["id"]], "run_id": run["id"],
                    "response_id": new_ids[t.approval["response_id"]],
                    "call_id": new_ids[t.approval["call_id"]],
                    "order_id": new_ids[t.approval["order_id"]], "reason": reason,
                    "requested_at": t.approval["requested_at"] + shift,
                    "decided_at": (t.approval["decided_at"] or base) + shift}
        audit = []
        for entry, note in zip(t.audit, notes, strict=True):
            entry = {**entry, "at": entry["at"] + shift, "run_id": run["id"],
                     "approval_id": approval["id"], "order_id": approval["order_id"],
                     "note": note or None}
            if rejected and entry["event"] == "approved":
                entry.update(event="rejected", note="Outside what the policy allows.")
            if rejected and entry["event"] in ("issued", "reused"):
                continue
            audit.append(entry)
        if rejected:
            approval.update(status="rejected", note="Outside what the policy allows.")
        yield Seeded(run, steps, calls, approval, audit, None if rejected else refund_line,
                     message_line)


def _new_id(old: str, tag: str) -> str:
    """A new id shaped like the old one: same prefix, the ticket number, the rest kept."""
    if "_" in old:
        prefix, rest = old.split("_", 1)
        return f"{prefix}_h{tag}{rest[len(tag) + 1:]}"
    return f"H{tag}"  # an order id


def seed_sqlite(store: Store, output_dir: Path, t: Template, n: int) -> None:
    """Bulk-insert ``n`` template tickets in one transaction, plus their log lines."""
    db = store._db()  # noqa: SLF001 - bulk seeding needs the raw connection
    prev = db.execute("SELECT hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
    prev = prev[0] if prev else GENESIS_HASH
    run_cols = list(t.run)
    run_sql = f"INSERT INTO runs({','.join(run_cols)}) VALUES ({','.join('?' * len(run_cols))})"
    refunds, messages = [], []
    db.execute("BEGIN IMMEDIATE")
    try:
        batch_runs, batch_steps, batch_calls, batch_appr, batch_audit = [], [], [], [], []
        for s in history(t, n):
            batch_runs.append(tuple(s.run[c] for c in run_cols))
            batch_steps += [(s.run["id"], at, pid, kind, data) for at, pid, kind, data in s.steps]
            batch_calls += [(c["call_id"], c["run_id"], c["response_id"], c["seq"], c["name"],
                             c["arguments"], c["output"]) for c in s.calls]
            a = s.approval
            batch_appr.append((a["id"], a["run_id"], a["response_id"], a["call_id"], a["order_id"],
                               a["amount"], a["reason"], a["customer"], a["status"],
                               a["requested_at"], a["requested_pid"], a["decided_by"],
                               a["decided_at"], a["decided_pid"], a["note"]))
            for e in s.audit:
                h = audit_hash(prev, e)
                batch_audit.append((e["at"], e["event"], e["actor"], e["pid"], e["run_id"],
                                    e["approval_id"], e["order_id"], e["amount"], e["note"],
                                    prev, h))
                prev = h
            if s.refund_line:
                refunds.append(s.refund_line)
            messages.append(s.message_line)
            if len(batch_runs) >= 2000:
                _flush(db, run_sql, batch_runs, batch_steps, batch_calls, batch_appr, batch_audit)
        _flush(db, run_sql, batch_runs, batch_steps, batch_calls, batch_appr, batch_audit)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    # One huge transaction leaves the whole history in the write-ahead log; a store that grew
    # over months would long since have been checkpointed into the database file, so do that.
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _prepend_lines(output_dir / "refunds.log", refunds)
    _prepend_lines(output_dir / "outbox.log", messages)


def _flush(db, run_sql, runs, steps, calls, approvals, audit) -> None:  # noqa: ANN001
    db.executemany(run_sql, runs)
    db.executemany("INSERT INTO steps(run_id, at, pid, kind, data) VALUES (?,?,?,?,?)", steps)
    db.executemany("INSERT INTO calls(call_id, run_id, response_id, seq, name, arguments, output)"
                   " VALUES (?,?,?,?,?,?,?)", calls)
    db.executemany("INSERT INTO approvals(id, run_id, response_id, call_id, order_id, amount,"
                   " reason, customer, status, requested_at, requested_pid, decided_by,"
                   " decided_at, decided_pid, note) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   approvals)
    db.executemany("INSERT INTO audit(at, event, actor, pid, run_id, approval_id, order_id,"
                   " amount, note, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?,?,?)", audit)
    for batch in (runs, steps, calls, approvals, audit):
        batch.clear()


def seed_json(state_path: Path, output_dir: Path, t: Template, n: int) -> None:
    """Write the JSON design's state file with ``n`` template tickets (and the same logs)."""
    from jsonstate import empty_state

    state = empty_state()
    refunds, messages, audit_lines = [], [], []
    step_id = 1
    for s in history(t, n):
        run = {**s.run, "steps": [], "calls": [], "replies": []}
        for at, pid, kind, data in s.steps:
            run["steps"].append({"id": step_id, "run_id": run["id"], "at": at, "pid": pid,
                                 "kind": kind, "data": json.loads(data)})
            step_id += 1
        run["calls"] = s.calls
        state["runs"][run["id"]] = run
        state["approvals"][s.approval["id"]] = s.approval
        audit_lines += [json.dumps(e) for e in s.audit]
        if s.refund_line:
            refunds.append(s.refund_line)
        messages.append(s.message_line)
    state["next_step_id"] = step_id
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps(state), encoding="utf-8")
    _prepend_lines(output_dir / "audit.log", audit_lines)
    _prepend_lines(output_dir / "refunds.log", refunds)
    _prepend_lines(output_dir / "outbox.log", messages)


def _prepend_lines(path: Path, lines: list[str]) -> None:
    """Older lines go before whatever the file already holds (history comes first)."""
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines) + existing, encoding="utf-8")
