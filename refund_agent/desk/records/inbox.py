"""The desk's status kept on each run (schema 12), recomputed where it goes stale.

The inbox counts and pages tickets by what happened to them (desk/status.py). Working that out
reads each run's latest approval, its declined lines and its open escalations: cheap for one
run, seconds for 100,000 on every draw of the page. So each run's row keeps its desk status
and its open escalations (``desk_status``, ``desk_escalations``). Triggers in the schema mark a
row stale (``desk_dirty``) whenever its inputs change: the run's status, one of its approvals
or their lines' decisions, an escalation raised or taken. Every write transaction recomputes
the stale rows, with the same pure function the page used before, just before it commits, so
no reader ever sees a stale row and the rule lives in one place.

The loop's store runs none of this: the desk's store registers the refresh
(:meth:`DeskStore._before_commit`), and hands out the run a release leaves with its desk
status (:meth:`DeskStore._released_run`).
"""

from __future__ import annotations

from typing import Any

from ..status import ApprovalFacts, desk_status

_LATEST = ("(SELECT {col} FROM approvals a WHERE a.run_id = runs.id"
           " ORDER BY a.requested_at DESC, a.id DESC LIMIT 1)")
# The facts desk_status() turns on, read per run (only for the rows a query selects).
DESK_COLUMNS = (
    f"{_LATEST.format(col='status')} AS latest_status,"
    f" {_LATEST.format(col='amount_cents')} AS latest_amount,"
    f" {_LATEST.format(col='proposed_cents')} AS latest_proposed,"
    " (SELECT COUNT(*) FROM approval_lines l WHERE l.approval_id ="
    f" {_LATEST.format(col='id')} AND l.decision = 'declined') AS latest_declined,"
    " (SELECT COUNT(*) FROM escalations e WHERE e.run_id = runs.id AND e.taken_by IS NULL)"
    " AS open_escalations")


def desk_of(row: dict[str, Any]) -> tuple[Any, int]:
    """(DeskStatus, open escalations) from a row with the DESK_COLUMNS and the run's status."""
    latest = None if row["latest_status"] is None else ApprovalFacts(
        row["latest_status"], row["latest_amount"], row["latest_proposed"],
        row["latest_declined"] or 0)
    return desk_status(row["status"], latest), int(row["open_escalations"] or 0)


def refresh_stale_desk(db: Any) -> int:
    """Recompute the desk status of every stale run, inside the caller's transaction; returns
    how many. Usually none or one: the runs this transaction changed.

    One statement marks them fresh and reads their facts back (``RETURNING``); a second writes
    the desk status only where it changed (a pause after a proposal leaves it 'waiting', a
    takeover of a working run leaves it 'working'). No reader sees the rows in between: both
    are in the caller's transaction."""
    rows = db.execute("UPDATE runs SET desk_dirty = 0 WHERE desk_dirty = 1 RETURNING runs.id,"
                      f" runs.status, runs.desk_status AS kept_status, runs.desk_escalations"
                      f" AS kept_escalations, {DESK_COLUMNS}").fetchall()
    for row in rows:
        status, open_ = desk_of(dict(row))
        if (str(status), open_) != (row["kept_status"], row["kept_escalations"]):
            db.execute("UPDATE runs SET desk_status = ?, desk_escalations = ? WHERE id = ?",
                       (str(status), open_, row["id"]))
    return len(rows)
