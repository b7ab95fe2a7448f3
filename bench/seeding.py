"""Fill a store with N finished tickets quickly, copied from one real run.

One real ticket (Maya's cracked coffee maker, approved, refunded, emailed) is run through the
agent first. Its rows (the run, every timeline step, the calls and their outputs, the approval,
the audit lines, the refund in ``refunds.log`` and the email in ``outbox.log``) are the template;
each seeded ticket is a copy with its own run, response, call, order, refund and message ids and
older timestamps. 90% are approved and refunded, 10% rejected (no refund: the approval and its
lines are marked rejected and free, the audit has no payment, and the timeline has no refund
step, so ``Store.verify_audit`` passes on a seeded store).

Refunds are itemized: each approval has its order lines (``approval_lines`` in SQLite, a
``lines`` list in the JSON state), and audit entries for money events carry the lines too. Every
seeded ticket has its own order id, so no two tickets hold the same line.

The SQLite store is filled with bulk inserts in one transaction, a PostgreSQL store with ``COPY``
in transactions of a thousand tickets (the refunds and emails going into its ``ledger`` table,
where that backend keeps them), the JSON-file store (for the comparison) by writing its state
file once; the audit chain is computed as the store would, and the store's chain anchor
(``audit_anchor``) moved to the new head in the same transaction (each batch's, on
PostgreSQL), so the seeded store verifies and accepts new audit entries. Seeded runs are
finished and released: no lease, and the fencing epoch the template run ended with.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refund_agent.desk.records.inbox import desk_of, refresh_stale_desk
from refund_agent.errors import StoreError
from refund_agent.models import call_key, order_id_in
from refund_agent.store import GENESIS_HASH, Store, audit_hash

SEP = "\x1e"
REJECT_EVERY = 10  # every 10th seeded ticket was rejected
HISTORY_DAYS = 90
REJECT_NOTE = "Outside what the policy allows."


@dataclass
class Template:
    run: dict[str, Any]
    steps: list[dict[str, Any]]      # at, pid, kind, data (JSON text)
    calls: list[dict[str, Any]]
    approval: dict[str, Any]         # Approval.model_dump(), its "lines" included
    audit: list[dict[str, Any]]      # without id / hashes; "lines" on money events
    refund_line: str
    message_line: str
    ids: list[str]                   # ids to replace in every text field, longest first


def read_template(store: Store, run_id: str, output_dir: Path) -> Template:
    run = store.run(run_id).model_dump(mode="json")
    # Released: no lease. The epoch is not on Run; a finished run keeps the one it ended with.
    [(epoch,)] = store._read("SELECT lease_epoch FROM runs WHERE id = ?", (run_id,))  # noqa: SLF001
    run.update(lease_pid=None, lease_token=None, lease_at=None, lease_epoch=epoch)
    for column in DESK_COLS:   # written per seeded ticket (seeded_desk), not copied
        run.pop(column, None)
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
             t.approval["summary"], *(a.get("note") or "" for a in t.audit),
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
        summary = parts[k]
        notes = parts[k + 1:k + 1 + len(t.audit)]
        refund_line, message_line = parts[-2], parts[-1]
        shift = (now - HISTORY_DAYS * 86400 * (n - i) / max(n, 1)) - base
        rejected = i % REJECT_EVERY == REJECT_EVERY - 1
        run = {**t.run, "id": new_ids[t.run["id"]], "email": email,
               "last_response_id": new_ids.get(t.run["last_response_id"]),
               "created_at": t.run["created_at"] + shift, "updated_at": t.run["updated_at"] + shift}
        steps = [(s["at"] + shift, s["pid"], s["kind"], d)
                 for s, d in zip(t.steps, step_data, strict=True)]
        if rejected:
            steps = [_rejected_step(step) for step in steps if step[2] != "refund"]
        calls = [{**c, "call_id": new_ids[c["call_id"]], "run_id": run["id"],
                  "response_id": new_ids[c["response_id"]], "arguments": call_texts[2 * j],
                  "output": call_texts[2 * j + 1] or None,
                  # The key names the run and the call (see callrecords.py), as the text
                  # fields do once both ids are replaced.
                  "key": call_key(run["id"], new_ids[c["call_id"]]) if c["key"] else None,
                  "order_id": order_id_in(call_texts[2 * j])}
                 for j, c in enumerate(t.calls)]
        approval = {**t.approval, "id": call_key(run["id"], new_ids[t.approval["call_id"]]),
                    "run_id": run["id"],
                    "response_id": new_ids[t.approval["response_id"]],
                    "call_id": new_ids[t.approval["call_id"]],
                    "order_id": new_ids[t.approval["order_id"]], "summary": summary,
                    "requested_at": t.approval["requested_at"] + shift,
                    "decided_at": (t.approval["decided_at"] or base) + shift,
                    # A finished refund's lines: approved ones stay held (the ledger's "each
                    # line at most once"), rejected ones are free again.
                    "lines": [{**line, "decision": "rejected" if rejected else "approved",
                               "held": not rejected} for line in t.approval["lines"]]}
        audit = []
        for entry, note in zip(t.audit, notes, strict=True):
            entry = {**entry, "at": entry["at"] + shift, "run_id": run["id"],
                     "approval_id": approval["id"], "order_id": approval["order_id"],
                     "note": note or None}
            if rejected and entry["event"] == "approved":
                entry.update(event="rejected", note=REJECT_NOTE)
            if rejected and entry["event"] in ("issued", "reused"):
                continue
            audit.append(entry)
        if rejected:
            approval.update(status="rejected", note=REJECT_NOTE,
                            amount_cents=t.approval["proposed_cents"])
        yield Seeded(run, steps, calls, approval, audit, None if rejected else refund_line,
                     message_line)


DESK_COLS = ["desk_status", "desk_escalations", "desk_dirty"]


def seeded_desk(s: Seeded) -> tuple[str, int, int]:
    """The desk columns of a seeded run, as ``refresh_stale_desk`` would compute them (the same
    pure function): written with the run, so no run is left stale for a row-by-row refresh."""
    a = s.approval
    status, open_ = desk_of({
        "status": s.run["status"], "latest_status": a["status"],
        "latest_amount": a["amount_cents"], "latest_proposed": a["proposed_cents"],
        "latest_declined": sum(line["decision"] == "declined" for line in a["lines"]),
        "open_escalations": 0})
    return str(status), open_, 0


def _rejected_step(step: tuple[float, int, str, str]) -> tuple[float, int, str, str]:
    """The template's decision step, turned into a rejection (other steps unchanged)."""
    at, pid, kind, data = step
    if kind != "decision":
        return step
    fields = json.loads(data)
    fields.update(decision="rejected", note=REJECT_NOTE)
    fields.pop("amount", None)
    fields.pop("declined", None)
    return at, pid, kind, json.dumps(fields)


def _new_id(old: str, tag: str) -> str:
    """A new id shaped like the old one: same prefix, the ticket number, the rest kept."""
    if "_" in old:
        prefix, rest = old.split("_", 1)
        return f"{prefix}_h{tag}{rest[len(tag) + 1:]}"
    if "-" in old:   # xAI's shapes: a UUID response id, a call id like call-5faadddf-0
        return f"{old}-h{tag}"
    return f"H{tag}"  # an order id


def seed_sqlite(store: Store, output_dir: Path, t: Template, n: int) -> None:
    """Bulk-insert ``n`` template tickets in one transaction, plus their log lines."""
    db = store._db()  # noqa: SLF001 - bulk seeding needs the raw connection
    run_cols = list(t.run)
    run_sql = (f"INSERT INTO runs({','.join(run_cols + DESK_COLS)})"
               f" VALUES ({','.join('?' * (len(run_cols) + len(DESK_COLS)))})")
    refunds, messages = [], []
    db.execute("BEGIN IMMEDIATE")
    try:
        # The chain continues from the newest entry, which must be where the anchor says (as
        # Store._audit checks); the anchor then moves to the new head, in this transaction.
        row = db.execute("SELECT hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
        prev = row[0] if row else GENESIS_HASH
        anchor = db.execute("SELECT entries, head FROM audit_anchor WHERE id = 1").fetchone()
        if anchor is None or anchor[1] != prev:
            raise StoreError(f"The audit log in {store.path} does not end where its anchor "
                             "says; not seeding on top of it.")
        entries = anchor[0]
        batch_runs, batch_steps, batch_calls, batch_appr, batch_lines, batch_audit = (
            [], [], [], [], [], [])
        for s in history(t, n):
            batch_runs.append((*(s.run[c] for c in run_cols), *seeded_desk(s)))
            batch_steps += [(s.run["id"], at, pid, kind, data) for at, pid, kind, data in s.steps]
            batch_calls += [(c["call_id"], c["run_id"], c["response_id"], c["seq"], c["name"],
                             c["arguments"], c["output"], c["key"], c["order_id"])
                            for c in s.calls]
            a = s.approval
            batch_appr.append((a["id"], a["run_id"], a["response_id"], a["call_id"], a["order_id"],
                               a["amount_cents"], a["proposed_cents"], a["summary"],
                               a["customer"], a["status"], a["requested_at"],
                               a["requested_pid"], a["decided_by"], a["decided_at"],
                               a["decided_pid"], a["note"]))
            batch_lines += [(a["id"], a["order_id"], seq, line["line"], line["name"],
                             line["reason"], line["amount_cents"], line["allowed_cents"],
                             line["fee_cents"], int(line["held"]), line["decision"])
                            for seq, line in enumerate(a["lines"])]
            for e in s.audit:
                h = audit_hash(prev, e)
                lines = None if e.get("lines") is None else json.dumps(e["lines"])
                batch_audit.append((e["at"], e["event"], e["actor"], e["pid"], e["run_id"],
                                    e["approval_id"], e["order_id"], e["amount"], e["note"],
                                    lines, prev, h))
                prev = h
                entries += 1
            if s.refund_line:
                refunds.append(s.refund_line)
            messages.append(s.message_line)
            if len(batch_runs) >= 2000:
                _flush(db, run_sql, batch_runs, batch_steps, batch_calls, batch_appr,
                       batch_lines, batch_audit)
        _flush(db, run_sql, batch_runs, batch_steps, batch_calls, batch_appr, batch_lines,
               batch_audit)
        db.execute("UPDATE audit_anchor SET entries = ?, head = ? WHERE id = 1", (entries, prev))
        refresh_stale_desk(db)   # as every write transaction does before it commits
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    # One huge transaction leaves the whole history in the write-ahead log; a store that grew
    # over months would long since have been checkpointed into the database file, so do that.
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _prepend_lines(output_dir / "refunds.log", refunds)
    _prepend_lines(output_dir / "outbox.log", messages)


def _flush(db, run_sql, runs, steps, calls, approvals, lines, audit) -> None:  # noqa: ANN001
    """Insert one batch; the columns follow refund_agent/store.py's schema (version 3).

    The approvals and their lines go in before their runs: the schema's triggers mark a run's
    desk row stale when an approval or line arrives, and a run not there yet has nothing to
    mark, so the desk columns written with the run stand (no refresh afterwards)."""
    db.executemany("INSERT INTO steps(run_id, at, pid, kind, data) VALUES (?,?,?,?,?)", steps)
    db.executemany("INSERT INTO calls(call_id, run_id, response_id, seq, name, arguments, output,"
                   " key, order_id) VALUES (?,?,?,?,?,?,?,?,?)", calls)
    db.executemany("INSERT INTO approvals(id, run_id, response_id, call_id, order_id,"
                   " amount_cents, proposed_cents, summary, customer, status, requested_at,"
                   " requested_pid, decided_by, decided_at, decided_pid, note)"
                   " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", approvals)
    db.executemany("INSERT INTO approval_lines(approval_id, order_id, seq, line, name, reason,"
                   " amount_cents, allowed_cents, fee_cents, held, decision)"
                   " VALUES (?,?,?,?,?,?,?,?,?,?,?)", lines)
    db.executemany(run_sql, runs)
    db.executemany("INSERT INTO audit(at, event, actor, pid, run_id, approval_id, order_id,"
                   " amount, note, lines, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                   audit)
    for batch in (runs, steps, calls, approvals, lines, audit):
        batch.clear()


def seed_postgres(store: Store, t: Template, n: int, batch: int = 1000) -> None:
    """``COPY`` ``n`` template tickets into a PostgreSQL store, ``batch`` tickets a transaction.

    The same rows as :func:`seed_sqlite`; the refund and email records go into the ``ledger``
    table (log ``refunds`` / ``outbox``, keyed by their idempotency key), where a PostgreSQL
    store keeps them. Each batch commits on its own, with the audit anchor moved to that batch's
    head, so the store verifies after every commit: the units guard (schema_postgres.py) takes an
    advisory lock per order until its transaction ends, and a stock server's lock table
    (``max_locks_per_transaction`` 64) has room for a few thousand, not for 100,000 orders in
    one transaction. Approvals and their lines are copied before their runs, which carry their
    desk columns (:func:`seeded_desk`), so nothing is left stale to refresh row by row.
    Afterwards ``VACUUM ANALYZE``: a store that grew over months would have been vacuumed and
    analyzed by autovacuum long since, as ``seed_sqlite`` checkpoints.
    """
    conn = store._db().conn  # noqa: SLF001 - bulk seeding needs the raw psycopg connection
    run_cols = list(t.run)
    copies = {
        "steps": ["run_id", "at", "pid", "kind", "data"],
        "calls": ["call_id", "run_id", "response_id", "seq", "name", "arguments", "output", "key",
                  "order_id"],
        "approvals": ["id", "run_id", "response_id", "call_id", "order_id", "amount_cents",
                      "proposed_cents", "summary", "customer", "status", "requested_at",
                      "requested_pid", "decided_by", "decided_at", "decided_pid", "note"],
        "approval_lines": ["approval_id", "order_id", "seq", "line", "name", "reason",
                           "amount_cents", "allowed_cents", "fee_cents", "held", "decision"],
        "runs": run_cols + DESK_COLS,   # after the approvals: see the docstring
        "audit": ["at", "event", "actor", "pid", "run_id", "approval_id", "order_id", "amount",
                  "note", "lines", "prev_hash", "hash"],
        "ledger": ["log", "key", "record"],
    }
    rows: dict[str, list[tuple]] = {table: [] for table in copies}
    tickets = history(t, n)
    with conn.transaction(), conn.cursor() as cur:
        # The chain continues from the newest entry, which must be where the anchor says.
        cur.execute("SELECT entries, head FROM audit_anchor WHERE id = 1 FOR UPDATE")
        anchor = cur.fetchone()
        cur.execute("SELECT hash FROM audit ORDER BY id DESC LIMIT 1")
        row = cur.fetchone()
        prev = row[0] if row else GENESIS_HASH
        if anchor is None or anchor[1] != prev:
            raise StoreError(f"The audit log in {store.path} does not end where its anchor "
                             "says; not seeding on top of it.")
        entries = anchor[0]
    done = False
    while not done:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT head FROM audit_anchor WHERE id = 1 FOR UPDATE")
            if cur.fetchone()[0] != prev:
                raise StoreError(f"The audit log in {store.path} moved while seeding.")
            for count, s in enumerate(tickets, 1):
                rows["runs"].append((*(int(v) if isinstance(v, bool) else v
                                       for v in (s.run[c] for c in run_cols)), *seeded_desk(s)))
                rows["steps"] += [(s.run["id"], at, pid, kind, data)
                                  for at, pid, kind, data in s.steps]
                rows["calls"] += [(c["call_id"], c["run_id"], c["response_id"], c["seq"],
                                   c["name"], c["arguments"], c["output"], c["key"],
                                   c["order_id"]) for c in s.calls]
                a = s.approval
                rows["approvals"].append(tuple(a[c] for c in copies["approvals"]))
                rows["approval_lines"] += [
                    (a["id"], a["order_id"], seq, line["line"], line["name"], line["reason"],
                     line["amount_cents"], line["allowed_cents"], line["fee_cents"],
                     int(line["held"]), line["decision"]) for seq, line in enumerate(a["lines"])]
                for e in s.audit:
                    h = audit_hash(prev, e)
                    lines = None if e.get("lines") is None else json.dumps(e["lines"])
                    rows["audit"].append((e["at"], e["event"], e["actor"], e["pid"],
                                          e["run_id"], e["approval_id"], e["order_id"],
                                          e["amount"], e["note"], lines, prev, h))
                    prev = h
                    entries += 1
                for log, line in (("refunds", s.refund_line), ("outbox", s.message_line)):
                    if line:
                        rows["ledger"].append((log, json.loads(line)["idempotency_key"], line))
                if count == batch:
                    break
            else:
                done = True
            for table, cols in copies.items():
                if rows[table]:
                    with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
                        for r in rows[table]:
                            copy.write_row(r)
                    rows[table].clear()
            cur.execute("UPDATE audit_anchor SET entries = %s, head = %s WHERE id = 1",
                        (entries, prev))
            # Finds nothing stale (one look through the partial index), as a check.
            refresh_stale_desk(store._db())  # noqa: SLF001 - the same connection
    conn.execute("VACUUM ANALYZE")


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
