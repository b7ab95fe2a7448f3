"""Pure formatting for the web page: turn runs, steps, approvals and audit lines into display data.

Nothing here imports Streamlit or touches the store, so every helper is a plain function that
the unit tests can call with hand-made rows. ``app.py`` decides *where* things go; these
modules decide *what* they say, one module per page area:

- ``format``: money, times, Markdown escaping, short text and refund lines (shared by all)
- ``status``: how a run, a ticket and a decision are named and coloured
- ``inbox``: a ticket's inbox entry, the status filters and their counts, the page range
- ``ticket``: a ticket's cost line, its timeline of steps, what is streaming now
- ``timeline_marks``, ``timeline_chart``: the run on one time axis (a lane per process, long
  waits drawn as breaks), as typed marks and as a Vega-Lite chart with its words
- ``approvals``: the approver's card, the review's notices and its confirm button
- ``audit``: the audit log as a table and as CSV

This package re-exports the names the page and the tests use, so ``views.timeline`` and
``from refund_agent.web.views import md`` work as before.
"""

from __future__ import annotations

# Re-exported because tests call it as views.customer_name; it lives with the desk's statuses.
from ...desk.status import customer_name
from .approvals import (
    Card,
    ReviewAction,
    approval_card,
    card_approve_label,
    fact_rows,
    kept_notice,
    limit_notice,
    plain_line,
    reminder,
    review_action,
)
from .audit import AUDIT_COLUMNS, CSV_FIRST, audit_csv, audit_frame, csv_cell
from .format import ago, clock, clock_day, line_text, lines_text, md, money, shorten
from .inbox import (
    DESK_FILTERS,
    INBOX_FILTERS,
    OWNER_FILTERS,
    DrainMeter,
    desk_counts,
    drain_text,
    filter_label,
    page_range,
    run_label,
)
from .status import DECISIONS, ESCALATED, STATUS, desk_view, status_view
from .ticket import (
    STEP_BLOCKS,
    THREAD_SHOWN,
    Block,
    LiveSegment,
    Turn,
    call_summary,
    cost_line,
    live_title,
    result_summary,
    thread,
    timeline,
)

__all__ = [
    "THREAD_SHOWN",
    "Turn",
    "thread",
    "AUDIT_COLUMNS",
    "CSV_FIRST",
    "DECISIONS",
    "DESK_FILTERS",
    "ESCALATED",
    "INBOX_FILTERS",
    "OWNER_FILTERS",
    "STATUS",
    "STEP_BLOCKS",
    "Block",
    "Card",
    "DrainMeter",
    "LiveSegment",
    "ReviewAction",
    "ago",
    "approval_card",
    "audit_csv",
    "audit_frame",
    "call_summary",
    "card_approve_label",
    "clock",
    "clock_day",
    "cost_line",
    "csv_cell",
    "customer_name",
    "desk_counts",
    "desk_view",
    "drain_text",
    "fact_rows",
    "filter_label",
    "kept_notice",
    "limit_notice",
    "line_text",
    "lines_text",
    "live_title",
    "md",
    "money",
    "page_range",
    "plain_line",
    "reminder",
    "result_summary",
    "review_action",
    "run_label",
    "shorten",
    "status_view",
    "timeline",
]
