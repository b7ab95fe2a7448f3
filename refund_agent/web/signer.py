"""Who decides on the page: with accounts, a sign-in (a form, a password that travels once);
without any, the demo's typed name, remembered by a cookie across server restarts.

No URL parameter or free text signs a decision: the name comes from the signed-in account,
or in the demo from this form, and the store audits it with every decision.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

import streamlit as st

from ..desk.accounts import Accounts
from ..desk.owners import AWAY_DAYS_MAX
from ..errors import RefundAgentError
from . import views
from .session import (
    approver,
    client,
    notify,
    show_notice,
    sign_in_as,
    sign_out,
    signed_in,
)
from .views import md, money
from .worker import Worker

# The three ways to decide, as the review names them.


def on_save_name(field: str = "approver_input", area: str = "queue") -> None:
    name = " ".join(st.session_state.get(field, "").split())
    if not name:
        notify(area, "error", "Enter your name first: every approval and rejection is "
                              "signed with it in the audit log.")
        return
    notify("queue")
    notify("review")   # "enter your name" is answered
    notify("review_name")
    st.session_state["approver"] = name
    remember_name(name)


def on_change_name() -> None:
    st.session_state["approver"] = ""
    st.session_state["approver_input"] = ""
    remember_name("")


def on_sign_in(worker: Worker) -> None:
    state = st.session_state
    password, state["signin_password"] = state.get("signin_password", ""), ""
    try:
        account = Accounts(worker.agent.store).sign_in(state.get("signin_name", ""), password,
                                                       client())
    except RefundAgentError as exc:
        notify("signin", "error", str(exc))
        return
    notify("signin")
    notify("queue")
    notify("review")   # "sign in before deciding" is answered
    sign_in_as(account)


def on_sign_out() -> None:
    sign_out()
    st.session_state["review"] = None   # as approvals.close_review: nothing to decide now
    notify("queue")


def render_approver(worker: Worker) -> None:
    """Who decides: the sign-in when accounts exist, else the demo's typed name."""
    accounts = Accounts(worker.agent.store)
    if accounts.exist():
        render_sign_in(worker, accounts)
        return
    name = approver() or remembered_name()
    if name and not approver():   # a name this browser saved before the server restarted
        st.session_state["approver"] = name
    write_name_cookie()
    if name:
        line, change = st.columns([3, 1], vertical_alignment="center")
        line.markdown(f":material/badge: Deciding as **{md(name)}**")
        change.button("Change", key="change_name", on_click=on_change_name, type="tertiary")
    else:
        with st.form("approver_form", border=True):
            st.text_input("Your name (signs every decision in the audit log)",
                          key="approver_input", placeholder="Your full name")
            st.form_submit_button("Save name", key="save_name", on_click=on_save_name,
                                  icon=":material/badge:")


NAME_COOKIE = "refund_desk_name"


def remembered_name() -> str:
    """The demo name this browser saved (a cookie), so a server restart does not lose it."""
    if st.session_state.get("name_cookie") is not None:
        return st.session_state["name_cookie"]   # saved or cleared in this session since
    try:
        raw = st.context.cookies.get(NAME_COOKIE, "")
    except Exception:  # noqa: BLE001 - no request (AppTest)
        return ""
    from urllib.parse import unquote
    return " ".join(unquote(raw).split())[:200]


def remember_name(name: str) -> None:
    st.session_state["name_cookie"] = name


def write_name_cookie() -> None:
    """Write the demo name into the browser's cookie (only the demo's typed name: an account's
    sign-in is never kept this way)."""
    name = st.session_state.get("name_cookie")
    if name is None:
        return
    import json
    from urllib.parse import quote
    age = 365 * 86400 if name else 0
    st.html(f"<script>document.cookie = '{NAME_COOKIE}=' + {json.dumps(quote(name))} + "
            f"'; path=/; max-age={age}; samesite=strict';</script>",
            unsafe_allow_javascript=True, width="content")


def on_away(worker: Worker, name: str) -> None:
    """Out of office until the end of the chosen day; the delegate takes the work."""
    if signed_in(Accounts(worker.agent.store)) is None:
        return
    day = st.session_state.get("away_until")
    until = datetime.combine(day, datetime.min.time()) + timedelta(days=1) if day else None
    try:
        delegate = Accounts(worker.agent.store).go_away(
            name, st.session_state.get("away_to") or "", until.timestamp() if until else 0.0)
    except RefundAgentError as exc:
        notify("away", "error", str(exc))
        return
    notify("away", "success", f"Away until {day}: your tickets and approvals go to "
                              f"{delegate}.")


def on_back(worker: Worker, name: str) -> None:
    if signed_in(Accounts(worker.agent.store)) is not None:
        worker.agent.store.set_back(name)
        notify("away", "success", "Welcome back: your work is yours again.")


def render_away(worker: Worker, accounts: Accounts, name: str) -> None:
    """Out of office: who takes this account's tickets and approvals, until when."""
    away = worker.agent.store.away_until(name)
    if away:
        line, back = st.columns([3, 1], vertical_alignment="center")
        line.caption(f":material/flight_takeoff: Away until "
                     f"{views.clock_day(away[1])}: your work goes to {md(away[0])}")
        back.button("I'm back", key="away_back", on_click=on_back, args=(worker, name),
                    type="tertiary")
    else:
        with st.popover("Out of office", icon=":material/flight_takeoff:"):
            others = [a.name for a in accounts.all() if a.name != name]
            st.selectbox("Delegate", others, key="away_to")
            # Bounded as the rule is (desk/owners.py), so the picker offers no day it refuses.
            st.date_input("Away until (the end of that day)", key="away_until",
                          min_value=date.today(),
                          max_value=date.today() + timedelta(days=AWAY_DAYS_MAX - 1))
            st.button("Hand over my work", key="away_go", on_click=on_away,
                      args=(worker, name), type="primary")
    show_notice("away")


def render_sign_in(worker: Worker, accounts: Accounts) -> None:
    account = signed_in(accounts)
    if account:
        line, out = st.columns([3, 1], vertical_alignment="center")
        line.markdown(f":material/badge: Signed in as **{md(account.name)}** · "
                      + ("lead, no limit" if account.limit is None else
                         f"approver, up to {money(account.limit)}"))
        out.button("Sign out", key="sign_out", on_click=on_sign_out, type="tertiary")
        render_away(worker, accounts, account.name)
        return
    # A form, so the password travels once, on submit, and is cleared from the session after.
    with st.form("sign_in_form", border=True):
        st.caption(":material/lock: Sign in to decide refunds")
        name, password = st.columns(2)   # side by side: the queue stays on screen
        name.text_input("Name", key="signin_name", placeholder="Your account name",
                        autocomplete="username")
        # current-password: a password manager fills the saved one instead of offering a new.
        password.text_input("Password", key="signin_password", type="password",
                            autocomplete="current-password")
        show_notice("signin")   # a refusal is drawn in the form, next to what to fix
        st.form_submit_button("Sign in", key="sign_in", on_click=on_sign_in, args=(worker,),
                              icon=":material/login:")
