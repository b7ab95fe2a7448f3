"""The audit log across the bottom of the desk, with its integrity check and a CSV download."""

from __future__ import annotations

from typing import Any

import streamlit as st

from ..reconcile import reconcile
from . import views
from .worker import Worker

AUDIT_ROWS = 200     # newest entries in the table; the CSV download has them all


@st.cache_data(max_entries=8, show_spinner=False)
def chain_check(db_path: str, changes: tuple, _worker: Worker) -> str | None:
    """The audit chain and the payment and email logs reconciled, redone only when one of them
    changes (``changes``), not on every render.

    Re-reading everything on every render would make the page slower as the log grows;
    ``refund-agent audit --verify`` always checks from scratch.
    """
    return reconcile(_worker.agent.store, _worker.agent.settings.output_dir)


def _log_sizes(worker: Worker) -> tuple[int, ...]:
    out = worker.agent.settings.output_dir
    return tuple((out / name).stat().st_size if (out / name).exists() else -1
                 for name in ("refunds.log", "outbox.log"))


@st.cache_data(max_entries=8, show_spinner=False)
def audit_csv(db_path: str, head: tuple[int, int], _store: Any) -> bytes:
    """The whole log as CSV, rebuilt only when the log changes."""
    return views.audit_csv(_store.audit())


def render_audit(worker: Worker) -> None:
    store = worker.agent.store
    head = store.audit_head()
    entries = store.audit(limit=AUDIT_ROWS)
    title, check = st.columns([1, 3], vertical_alignment="center")
    title.markdown("#### :material/receipt_long: Audit log")
    problem = chain_check(str(store.path), (head, _log_sizes(worker)), worker)
    if problem:
        check.error(f"Audit check failed: {problem}", icon=":material/gpp_bad:")
    else:
        check.caption(f":material/verified: Hash chain intact, payments and emails reconciled "
                      f"· {views.plural(head[0], 'entry', 'entries')}")
    if not entries:
        st.caption("No entries yet.")
        return
    # The full width of the page, with room for names and notes; longer notes show whole on
    # hover, and the CSV has every field.
    text = st.column_config.Column
    st.dataframe(views.audit_frame(entries), hide_index=True,
                 height=38 + 35 * min(len(entries), 8),
                 column_order=["Time", "Event", "By", "Order", "Amount", "Lines", "Note", "PID"],
                 column_config={"Time": text(width="small"), "Event": text(width="small"),
                                "By": text(width="medium"), "Order": text(width="small"),
                                "Amount": text(width="small"), "Lines": text(width="medium"),
                                "Note": text(width="large"), "PID": text(width="small")})
    st.download_button("Download CSV", audit_csv(str(store.path), head, store),
                       "refund-audit.csv", "text/csv", on_click="ignore",
                       icon=":material/download:")
