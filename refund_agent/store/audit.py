"""The audit chain: how an entry is hashed, and how a log is judged, as pure functions.

Each entry's hash covers the one before it, so editing, removing or reordering an entry breaks
the chain from there on; the anchor (the chain's length and head, written with every entry)
catches the newest entries removed. What the log records is then checked against the facts the
other tables hold (approvals, their decisions, refunds in the timelines). The store reads; these
functions decide (``Store.verify_audit``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from ..models import Approval, AuditEntry

GENESIS_HASH = "0" * 64

_AUDIT_FIELDS = ("at", "event", "actor", "pid", "run_id", "approval_id", "order_id", "amount",
                 "note")


def audit_hash(prev_hash: str, entry: dict[str, Any]) -> str:
    """The chained hash of one audit entry: editing, removing or reordering breaks the chain.

    ``lines`` joins the hashed fields only when an entry has them, so entries written before
    refunds were itemized keep verifying.
    """
    fields = {k: entry.get(k) for k in _AUDIT_FIELDS}
    if entry.get("lines") is not None:
        fields["lines"] = entry["lines"]
    body = json.dumps(fields, sort_keys=True)
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()


def chain_problem(entries: list[AuditEntry], anchor: tuple[int, str] | None) -> str | None:
    """None if the entries chain from the genesis hash and end where ``anchor`` (entries,
    head) says; else a sentence naming the first bad entry. ``anchor`` None: a store without
    one (older than schema 3), judged by its chain alone."""
    prev = GENESIS_HASH
    for entry in entries:
        if entry.prev_hash != prev:
            return (f"Audit entry {entry.id} does not follow the entry before it: an entry "
                    "was removed or reordered just before it.")
        if audit_hash(prev, entry.model_dump()) != entry.hash:
            return f"Audit entry {entry.id} ({entry.event}) was edited after it was written."
        prev = entry.hash
    if anchor is not None and anchor != (len(entries), prev):
        return (f"The audit log has {len(entries)} entries ending in {prev[:12]}, but its "
                f"anchor says {anchor[0]} ending in {anchor[1][:12]}: "
                "the newest entries were removed or edited.")
    return None


def facts_problem(entries: list[AuditEntry], approvals: Iterable[Approval],
                  refunds: Iterable[tuple[str, str | None]]) -> str | None:
    """None if the log records every fact the other tables hold; else what it misses.

    Every approval needs its 'requested' entry and, once decided, an entry of its decision
    by the person who made it; every refund in a timeline (``refunds``: (run id, refund id))
    needs its 'issued' or 'reused' entry. This catches a removed last entry, or an edit whose
    hashes were recomputed, as long as the other tables were left alone.
    """
    lines = {(e.event, e.approval_id, e.actor) for e in entries}
    requested = {e.approval_id for e in entries if e.event == "requested"}
    for a in approvals:
        if a.id not in requested:
            return (f"Approval {a.id} ({a.order_id}, ${a.amount:.2f}) has no 'requested' "
                    "entry in the audit log: an entry was removed.")
        if a.status != "pending" and (a.status, a.id, a.decided_by) not in lines:
            return (f"Approval {a.id} was {a.status} by {a.decided_by}, but the audit log has "
                    f"no '{a.status}' entry by {a.decided_by}: an entry was removed or edited.")
    paid = {e.note for e in entries if e.event in ("issued", "reused")}
    for run_id, refund_id in refunds:
        if refund_id not in paid:
            return (f"Refund {refund_id} is in run {run_id}'s timeline, but the audit "
                    "log has no 'issued' or 'reused' entry for it: an entry was removed or "
                    "edited.")
    return None


def audit_lines(lines: Any) -> list[dict[str, Any]]:
    """A refund's lines as the audit records them: line, reason, cents."""
    out = []
    for line in lines:
        data = line if isinstance(line, dict) else line.model_dump()
        entry = {"line": data["line"], "reason": data["reason"],
                 "amount_cents": data["amount_cents"]}
        # Units of a line that has several (from schema 8 on); a line of one is all or none.
        if data.get("units") is not None and (data.get("quantity") or 2) > 1:
            entry["units"] = data["units"]
            if data.get("quantity"):
                entry["of_units"] = data["quantity"]
        out.append(entry)
    return out
