"""What one browser session remembers: the open ticket, messages, who signs decisions.

Everything here lives in ``st.session_state`` (one per tab), never in the URL except the open
ticket's id, so a shared link carries no name and no decision.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import streamlit as st

from ..desk.accounts import Account, Accounts
from ..desk.identity import Actor
from .views import md
from .worker import Worker

NOTICE_SECONDS = 12  # how long a success message stays (refusals stay until the next action)


def notify(area: str, kind: str = "", text: str = "") -> None:
    """Leave a message for one area of the page (or clear it, with no text).

    A success is shown once, as a toast that fades (see :func:`show_notice`), so a message
    about work that has since moved on does not sit on the page.
    """
    st.session_state[f"notice_{area}"] = (kind, text, time.time()) if text else None


def show_notice(area: str) -> None:
    """Show the area's message: a refusal until the next action there, a success briefly."""
    notice = st.session_state.get(f"notice_{area}")
    if not notice:
        return
    kind, text, at = notice
    # Messages carry outside text (an order id, a name, the store's refusal quoting a model's
    # argument): shown as written, never as Markdown (links, images, coloured text).
    text = md(text)
    if kind == "success":
        # Shown once, as a toast that fades; the page itself moves on (the ticket, the queue).
        st.session_state[f"notice_{area}"] = None
        if time.time() - at <= NOTICE_SECONDS:
            st.toast(text, icon=":material/check_circle:")
        return
    show = {"warning": st.warning, "error": st.error}.get(kind, st.info)
    show(text, icon={"warning": ":material/info:", "error": ":material/error:"}.get(kind))


def select(run_id: str | None, missing: str | None = None) -> None:
    """Open a ticket (None: none). ``missing``: the ticket asked for is not in the store, which
    the ticket panel keeps saying, through later redraws, until another one is picked."""
    st.session_state["selected"] = run_id
    st.session_state["missing"] = missing
    # The URL remembers the ticket, so a reload or a server restart reopens it.
    if run_id:
        st.query_params["run"] = run_id
    else:
        st.query_params.pop("run", None)


def selected_run_id() -> str | None:
    if "selected" not in st.session_state:
        st.session_state["selected"] = st.query_params.get("run")
    return st.session_state["selected"]


def keep_key(approval_id: str, line: str) -> str:
    return f"keep_{approval_id}_{line}"


def units_key(approval_id: str, line: str) -> str:
    return f"units_{approval_id}_{line}"


def lowered_units(approval_id: str, lines: Sequence[tuple[str, int]]) -> dict[str, int]:
    """The lines whose units the approver lowered: sku -> units, from (sku, proposed) pairs."""
    out = {}
    for line, proposed in lines:
        value = st.session_state.get(units_key(approval_id, line), proposed)
        if isinstance(value, int) and value != proposed:
            out[line] = value
    return out


def ticked(approval_id: str, lines: Sequence[str]) -> list[str]:
    """The lines of a refund whose box is ticked (every box starts ticked)."""
    return [line for line in lines if st.session_state.get(keep_key(approval_id, line), True)]


def approver() -> str:
    """The demo mode's typed name (kept in the session only: a shared URL never carries it)."""
    return st.session_state.get("approver", "")


def sign_in_as(account: Account) -> None:
    """Remember the account in this session, with the version of it that was signed in."""
    st.session_state["account"] = account.name
    st.session_state["account_version"] = account.version


def sign_out() -> None:
    st.session_state["account"] = None
    st.session_state["account_version"] = None


def client() -> str:
    """Who is trying to sign in, for the audit: the browser's address as the server sees it.
    The throttle counts by name, not by this (everyone behind one proxy shares an address)."""
    try:
        address = st.context.ip_address
    except Exception:  # noqa: BLE001 - no request (AppTest): one client for the session
        address = None
    return f"{Actor.PAGE} {address}" if address else Actor.PAGE


def signed_in(accounts: Accounts) -> Account | None:
    """The account signed in in this browser session, as it is now in the store.

    None once the account was removed, or changed in any way since this session signed in
    (removed and added again is the password reset): the session is signed out and says why.
    """
    name = st.session_state.get("account")
    account = accounts.get(name) if name else None
    if name and (account is None or account.version != st.session_state.get("account_version")):
        sign_out()
        notify("queue", "warning", "Your account was removed or changed since you signed in; "
                                   "sign in again.")
        return None
    return account


def permitted(worker: Worker, area: str) -> bool:
    """Whether this session may read or act on the desk: always in demo mode (no accounts),
    else only when signed in (told why not). Every callback that acts checks it, besides the
    page drawing only the sign-in form for a visitor."""
    accounts = Accounts(worker.agent.store)
    if not accounts.exist() or signed_in(accounts) is not None:
        return True
    notify(area, "error", "Sign in first: with accounts set up, the desk is for signed-in "
                          "people only.")
    return False


def acting_as(worker: Worker) -> str:
    """Who this session acts as, for an audit line that is not a decision (Stop): the
    signed-in account; in the demo the typed name, else the browser's address."""
    accounts = Accounts(worker.agent.store)
    account = signed_in(accounts) if accounts.exist() else None
    return account.name if account else (approver() or client())


def signer(worker: Worker, area: str = "queue") -> tuple[str, int | None] | None:
    """Who signs a decision from this session and their limit in cents, or None (told why)."""
    accounts = Accounts(worker.agent.store)
    if accounts.exist():
        account = signed_in(accounts)
        if account is None:
            notify(area, "error", "Sign in before deciding: every decision is signed by your "
                                  "account in the audit log.")
            return None
        return account.name, account.limit_cents
    if not approver():
        notify(area, "error", "Enter your name before deciding: it goes into the audit log "
                              "next to the decision.")
        return None
    return approver(), None
