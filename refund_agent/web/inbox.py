"""The inbox: sample tickets, a form for your own email, and every ticket, searchable."""

from __future__ import annotations

import streamlit as st

from ..desk.accounts import Accounts
from ..errors import RefundAgentError
from .session import notify, permitted, select, selected_run_id, show_notice
from .views import (
    DESK_FILTERS,
    OWNER_FILTERS,
    desk_counts,
    drain_text,
    md,
    page_range,
    run_label,
)
from .worker import Worker

PAGE_SIZE = 50   # tickets per inbox page; older ones are a click on "Older" away


def on_sample(worker: Worker, key: str) -> None:
    if not permitted(worker, "inbox"):
        return
    notify("inbox")
    try:
        run = worker.submit_sample(key)
    except RefundAgentError as exc:
        notify("inbox", "error", str(exc))
        return
    select(run.id)


def on_send_email(worker: Worker) -> None:
    state = st.session_state
    if not permitted(worker, "inbox"):
        return
    notify("inbox")
    notify("mail_from")
    if not state.get("mail_from", "").strip():
        # Said next to the field, not below the fold under the form.
        notify("mail_from", "error", "Enter the customer's address: the agent answers only "
                                     "the person who wrote in.")
        return
    try:
        run = worker.submit_email(state.get("mail_from", ""), state.get("mail_body", ""),
                                  subject=state.get("mail_subject", ""),
                                  sender_name=state.get("mail_name", ""),
                                  raised_by=_typed_in_by(worker))
    except RefundAgentError as exc:
        notify("inbox", "error", str(exc))
        return
    state["mail_body"] = ""
    notify("inbox", "success", f"Sent. The agent is working on ticket {run.id}.")
    select(run.id)


def _typed_in_by(worker: Worker) -> str | None:
    """The signed-in account that types a ticket in: it may not approve that ticket's refund."""
    from .session import signed_in
    accounts = Accounts(worker.agent.store)
    account = signed_in(accounts) if accounts.exist() else None
    return account.name if account else None


def on_select(run_id: str) -> None:
    select(run_id)


def on_filter_change() -> None:
    st.session_state["inbox_offset"] = 0   # a new search starts at the newest match
    st.session_state["inbox_after"] = None


def on_page(step: int, key: tuple[float, str]) -> None:
    """Older (``step`` > 0) or newer tickets: the page after ``key``, the last (or first) row
    shown, a keyset page (store/search.py); the offset only numbers the rows in the caption."""
    offset = max(0, st.session_state.get("inbox_offset", 0) + step)
    st.session_state["inbox_offset"] = offset
    st.session_state["inbox_after"] = None if offset == 0 else (step < 0, key)


def render_new_tickets(worker: Worker) -> None:
    st.markdown("#### :material/inbox: Inbox")
    with st.expander("New ticket: a sample, or your own email", icon=":material/add:",
                     expanded=not worker.agent.store.runs(limit=1)):
        for sample in worker.agent.shop.samples.values():
            st.button(sample.label, key=f"sample_{sample.key}", on_click=on_sample,
                      args=(worker, sample.key), width="stretch", help=md(sample.subject),
                      icon=":material/mail:")
        with st.form("new_email", border=False):
            # Placeholders say what goes in a field; a name or an order number there reads
            # like a value already filled in.
            st.text_input("From (the customer's address)", key="mail_from",
                          placeholder="The address the customer wrote from")
            show_notice("mail_from")
            st.text_input("Name", key="mail_name", placeholder="Optional: the customer's name")
            st.text_input("Subject", key="mail_subject", value="Refund request")
            st.text_area("Email", key="mail_body", height=100,
                         placeholder="Paste or type the customer's email, with the order "
                                     "number")
            st.form_submit_button("Send to the agent", key="mail_send", on_click=on_send_email,
                                  args=(worker,), type="primary", icon=":material/send:")
    show_notice("inbox")


def lead_session(worker: Worker) -> bool:
    """Whether a lead (an account without a limit) is signed in in this session."""
    from .session import signed_in
    accounts = Accounts(worker.agent.store)
    account = signed_in(accounts) if accounts.exist() else None
    return account is not None and account.limit is None


def _owner_filter(worker: Worker) -> dict:
    """Whose tickets to list (Store.desk_page's ``owner``/``unassigned``): with someone signed
    in, a choice of everyone's, theirs, or nobody's; in the demo, everyone's."""
    from .session import signed_in
    accounts = Accounts(worker.agent.store)
    account = signed_in(accounts) if accounts.exist() else None
    if account is None:
        return {}
    labels = dict(OWNER_FILTERS)
    whose = st.segmented_control("Whose tickets", list(labels), format_func=labels.__getitem__,
                                 key="inbox_owner", default="everyone",
                                 on_change=on_filter_change, label_visibility="collapsed",
                                 width="stretch") or "everyone"
    if whose == "mine":
        return {"owner": account.name}
    return {"unassigned": True} if whose == "unassigned" else {}


def render_tickets(worker: Worker) -> None:
    """Search, status filters with counts, and one page of tickets, newest first."""
    store = worker.agent.store
    search = st.text_input("Search tickets", key="inbox_search", on_change=on_filter_change,
                           placeholder="Name, email, order or words",
                           label_visibility="collapsed", icon=":material/search:")
    # Each ticket's status is what happened to it (desk/status.py), kept on its row, so every
    # filter's count is one grouped query and a page is one more, with 10 tickets or 100,000.
    whose = _owner_filter(worker)
    counts = desk_counts(store.desk_groups(search, **whose))
    labels = {f.key: f"{f.label} {counts[f.key]}" for f in DESK_FILTERS}
    if "inbox_filter" not in st.session_state:
        # A lead's first screen is what needs a person; everyone else starts with every ticket.
        st.session_state["inbox_filter"] = "needs" if lead_session(worker) else "all"
    chosen = st.pills("Status", list(labels), format_func=labels.__getitem__,
                      required=True, key="inbox_filter", on_change=on_filter_change,
                      label_visibility="collapsed", wrap=True, width="stretch") or "all"
    shown = next(f for f in DESK_FILTERS if f.key == chosen)
    total = counts[shown.key]
    offset = min(st.session_state.get("inbox_offset", 0), max(0, total - 1))
    backwards, key = st.session_state.get("inbox_after") or (False, None)
    ids = store.desk_page(search, *shown.selection(), PAGE_SIZE, after=key,
                          oldest_first=backwards, **whose)
    if key is not None and not ids:   # the tickets around the key are gone: start again
        offset, ids = 0, store.desk_page(search, *shown.selection(), PAGE_SIZE, **whose)
    rows = store.inbox_rows(ids)
    owners = store.owners([row.run.id for row in rows])
    st.caption(f"Tickets, newest first · {page_range(offset, len(rows), total)}")
    render_drain(worker)
    if not rows:
        st.caption("No tickets match." if search or chosen != "all" or whose else
                   "No tickets yet. Send a sample to start one.")
    selected = selected_run_id()
    names = store.customer_names([row.run.sender for row in rows])
    for row in rows:
        st.button(run_label(row, names=names, owner=owners.get(row.run.id)),
                  key=f"run_{row.run.id}", on_click=on_select, args=(row.run.id,),
                  width="stretch",
                  type="primary" if row.run.id == selected else "secondary")
    if total > PAGE_SIZE:
        newer, older = st.columns(2)
        first, last = ((rows[0].run.created_at, rows[0].run.id),
                       (rows[-1].run.created_at, rows[-1].run.id)) if rows else (None, None)
        newer.button("Newer", key="inbox_newer", icon=":material/chevron_left:",
                     on_click=on_page, args=(-PAGE_SIZE, first), disabled=offset == 0,
                     width="stretch")
        older.button("Older", key="inbox_older", icon=":material/chevron_right:",
                     on_click=on_page, args=(PAGE_SIZE, last),
                     disabled=offset + PAGE_SIZE >= total, width="stretch")


def render_drain(worker: Worker) -> None:
    """How many tickets wait for the agent (any worker's, on any host) and how fast they
    drain; what this server advances itself, and how many wait here for a free slot."""
    waiting, pace = worker.drain.note(worker.agent.store.inbox_counts())
    advancing, queued = worker.load()
    here = (f" This server advances {advancing} of at most {worker.slots}"
            + (f"; {queued} wait here for a slot." if queued else ".")) if advancing else ""
    st.caption(f":material/hourglass_top: {drain_text(waiting, pace)}{here}")
