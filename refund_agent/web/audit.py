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
    customers = store.run_customers([e.run_id for e in entries if e.run_id])
    # Widths in pixels sized to what the columns hold: "12-01 23:42:31" and "sign_in_failed"
    # are never cut; the note takes what is left.
    st.dataframe(views.audit_frame(entries, customers), hide_index=True,
                 height=38 + 35 * min(len(entries), 8),
                 column_order=["Time", "Event", "By", "Customer", "Order", "Amount", "Lines",
                               "Note", "PID"],
                 column_config={"Time": text(width=120), "Event": text(width=120),
                                "By": text(width=110), "Customer": text(width=150),
                                "Order": text(width=70), "Amount": text(width=130),
                                "Lines": text(width="medium"), "Note": text(width="large"),
                                "PID": text(width=65)})
    base_url = page_url()
    # Built only when clicked (Streamlit runs the callable then, off the script's thread).
    st.download_button("Download CSV",
                       lambda: views.audit_csv(store.audit(), store.run_customers(), base_url),
                       "refund-audit.csv", "text/csv", on_click="ignore",
                       icon=":material/download:")


def page_url() -> str:
    """The desk's address as this browser asked for it (for the CSV's ticket links)."""
    try:
        return st.context.url or ""
    except Exception:  # noqa: BLE001 - no request (AppTest): no links
        return ""
