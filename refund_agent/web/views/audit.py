"""The audit log as the page's table and as the CSV download."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pandas as pd

from ...desk.status import amount_is, amount_label
from ...models import AuditEntry
from .format import lines_text

AUDIT_COLUMNS = ["Time", "Event", "By", "Customer", "PID", "Order", "Amount", "Lines", "Note",
                 "Run", "Approval"]


def audit_frame(entries: Sequence[AuditEntry],
                customers: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The audit log as a table, newest first (``customers``: run id -> who wrote in)."""
    customers = customers or {}
    # Month and day without the year keep the column narrow; the CSV has exact timestamps.
    rows = [{"Time": datetime.fromtimestamp(e.at).strftime("%m-%d %H:%M:%S"),
             "Event": e.event, "By": e.actor,
             "Customer": customers.get(e.run_id or "", ""),
             "PID": e.pid, "Order": e.order_id or "",
             "Amount": amount_label(e.amount, amount_is(event=e.event)),
             "Lines": lines_text(e.lines), "Note": e.note or "",
             "Run": e.run_id or "",
             "Approval": e.approval_id or ""}
            for e in sorted(entries, key=lambda e: e.id, reverse=True)]
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)


# What a spreadsheet reads as the start of a formula (OWASP's list): "=HYPERLINK(...)" in an
# account name, an approver's note, the model's summary or an order id must stay text.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet will show as text: a leading formula character gets a single
    quote before it (OWASP's advice). Numbers and empty cells pass unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def iso_time(ts: float) -> str:
    """``2026-12-01T23:42:31.674+00:00``: the local time with its zone, to the millisecond."""
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="milliseconds")


def ticket_url(base_url: str, run_id: str | None) -> str:
    """The link that opens a ticket on the desk (the page's own ``?run=`` parameter)."""
    if not run_id or not base_url:
        return ""
    return f"{base_url.split('?')[0].rstrip('/')}/?run={run_id}"


# The columns a spreadsheet reader wants first; every stored field follows, ``at`` (the exact
# Unix time the chain hashes) included.
# ``amount_is`` says whether the amount moved money ("paid") or was only proposed ("proposed":
# requested, asked, rejected, expired, handed off, taken), as the table and the terminal do.
CSV_FIRST = ["time", "event", "actor", "customer", "order_id", "amount", "amount_is", "ticket",
             "ticket_url"]


def audit_csv(entries: Sequence[AuditEntry], customers: Mapping[str, str] | None = None,
              base_url: str = "") -> bytes:
    """The audit log as CSV (newest first), with every field including the chain hashes.

    ``time`` is ISO 8601 with the zone; ``customer`` (from ``customers``: run id -> who wrote
    in), ``ticket`` (the run id) and ``ticket_url`` (the desk's link to it, from ``base_url``)
    name the ticket. ``lines`` is written as JSON (as the store keeps it), empty when an
    entry has none. Text cells go through :func:`csv_cell`, so no cell opens as a formula.
    """
    customers = customers or {}
    rows = []
    for e in sorted(entries, key=lambda e: e.id, reverse=True):
        row = e.model_dump()
        row["lines"] = "" if e.lines is None else json.dumps(e.lines)
        row.update(time=iso_time(e.at),
                   amount_is=amount_is(event=e.event) if e.amount is not None else "",
                   customer=customers.get(e.run_id or "", ""),
                   ticket=e.run_id or "", ticket_url=ticket_url(base_url, e.run_id))
        rows.append({key: csv_cell(value) for key, value in row.items()})
    rest = [name for name in AuditEntry.model_fields if name not in CSV_FIRST]
    frame = pd.DataFrame(rows, columns=CSV_FIRST + rest)
    # RFC 4180's CRLF rows: the writer then quotes any cell holding a CR or an LF, so a carriage
    # return in a note cannot start a row of its own (with "\n" rows it would go unquoted).
    return frame.to_csv(index=False, lineterminator="\r\n").encode()
