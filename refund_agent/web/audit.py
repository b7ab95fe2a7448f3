"""The audit log across the bottom of the desk, with its integrity check and a CSV download."""

from __future__ import annotations

import streamlit as st

from ..text import plural
from . import views
from .worker import Worker

AUDIT_ROWS = 200     # newest entries in the table; the CSV download has them all


def render_audit(worker: Worker) -> None:
    store = worker.agent.store
    entries = store.audit(limit=AUDIT_ROWS)
    title, check = st.columns([1, 3], vertical_alignment="center")
    title.markdown("#### :material/receipt_long: Audit log")
    verdict = worker.integrity.latest()
    if verdict is None:
        check.caption(":material/hourglass_top: Checking the hash chain and reconciling payments "
                      "and emails…")
    elif verdict.problem:
        # A problem stays on screen until a later check finds none.
        check.error(f"Audit check failed: {views.md(verdict.problem)}",
                    icon=":material/gpp_bad:")
    else:
        newer = store.audit_head()[0] - verdict.entries
        since = f" · {newer} newer not checked yet" if newer > 0 else ""
        check.caption(f":material/verified: Hash chain intact, payments and emails reconciled "
                      f"· {plural(verdict.entries, 'entry', 'entries')} · checked at "
                      f"{views.clock(verdict.at)}{since}")
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
    # Built only when clicked (Streamlit runs the callable then, off the script's thread).
    st.download_button("Download CSV", lambda: views.audit_csv(store.audit()),
                       "refund-audit.csv", "text/csv", on_click="ignore",
                       icon=":material/download:")
