"""The desk status each run's row keeps (schema 12) against what desk_status.py says now."""

from __future__ import annotations

from typing import Any

from refund_agent.desk.records.inbox import DESK_COLUMNS, desk_of


def desk_drift(store: Any) -> list[str]:
    """Every run whose kept desk status or open escalations differ from a fresh computation,
    or that is still marked stale outside a transaction; one line each (empty: all fresh)."""
    kept = {r[0]: (r[1], int(r[2]), int(r[3])) for r in store.query(
        "SELECT id, desk_status, desk_escalations, desk_dirty FROM runs")}
    drift = []
    for row in store.query(f"SELECT runs.id, runs.status, {DESK_COLUMNS} FROM runs"):
        status, open_ = desk_of(dict(row))
        want = (str(status), open_, 0)
        if kept[row[0]] != want:
            drift.append(f"{row[0]}: kept {kept[row[0]]}, computed {want}")
    return drift
