"""The helpdesk page: the layout, the shared worker, and when to draw it again.

The page is drawn from the store in one script run. A small fragment then asks, twice a
second, whether anything it shows has changed: the store's change counter (any commit, from
any process) and the worker's (a streamed delta, a run starting or ending here). Only then is
the page drawn again. An open tab on a desk where nothing happens costs almost nothing, and a
change made anywhere shows within about half a second.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import wraps
from typing import Any

import streamlit as st

from ..config import Settings, load_settings
from ..desk.accounts import Accounts, host_allowed
from ..desk.agent import Agent
from ..errors import RefundAgentError
from .approvals import render_escalations, render_queue, review
from .audit import render_audit
from .inbox import render_new_tickets, render_tickets
from .session import show_notice, signed_in
from .signer import render_approver, render_sign_in
from .ticket import render_ticket
from .views import md
from .worker import Worker

DEMO_LATENCY = 1.0   # seconds per offline request when REFUND_AGENT_OFFLINE_LATENCY is unset
WATCH_EVERY = 0.5    # seconds between checks for a change (the freshness target is 1 s)

# Streamlit's default top margin is made for documents; a desk wants its tools on screen.
PAGE_CSS = """
<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.2rem; padding-bottom: 2rem; }
[data-testid="stExpander"] details summary p { font-size: 0.9rem; }
[data-testid="stChatMessage"] { padding: 0.6rem 0.8rem; }
</style>
"""

log = logging.getLogger("refund_agent.web")


# -- the worker: one per server process, shared by every browser session -----------------------


def page_settings() -> Settings:
    """Settings from the environment, with a visible demo latency on the offline model."""
    settings = load_settings()
    if settings.offline and not os.environ.get("REFUND_AGENT_OFFLINE_LATENCY", "").strip():
        settings = settings.with_(offline_latency=DEMO_LATENCY)
    return settings


@st.cache_resource(show_spinner="Starting the background worker…",
                   on_release=lambda worker: worker.shutdown())
def shared_worker(key: str, _settings: Settings) -> Worker:
    """The process's worker for these settings (``key`` names them; the key is never in it)."""
    agent = Agent(_settings)
    agent.store.front = "page"   # a run this server takes is marked as the page's (restarts)
    worker = Worker(agent)
    worker.start()
    return worker


def get_worker() -> Worker:
    settings = page_settings()
    key = "|".join(str(v) for v in (settings.output_dir, settings.data_dir, settings.model,
                                    settings.offline, settings.offline_latency,
                                    settings.approval_days, sorted(settings.crash_at)))
    return shared_worker(key, settings)


def guarded(render: Callable[..., None]) -> Callable[..., None]:
    """Show a failure inside a part of the page as a message, never as a traceback."""

    @wraps(render)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            render(*args, **kwargs)
        except RefundAgentError as exc:
            st.error(md(str(exc)), icon=":material/error:")
        except Exception as exc:  # noqa: BLE001 - the page must stay usable
            log.exception("Page section %s failed", render.__name__)
            st.error(md(f"Something went wrong: {type(exc).__name__}: {exc}"),
                     icon=":material/error:")

    return wrapper


# -- drawing only when something changed ------------------------------------------------------


def fingerprint(worker: Worker) -> tuple[int, int]:
    """What the page shows is the same as long as this is: the store and the live runs."""
    return worker.agent.store.change_counter(), worker.version


def watch(worker: Worker) -> None:
    """Runs every WATCH_EVERY seconds (a fragment); draws the page again only on a change."""
    try:
        now = fingerprint(worker)
    except RefundAgentError:
        return   # the store is unreadable this instant; the full page says why on next draw
    if now != st.session_state.get("drawn"):
        st.rerun()


# -- the page -------------------------------------------------------------------------------


def header(worker: Worker) -> None:
    left, right = st.columns([3, 2], vertical_alignment="center")
    left.markdown(f"### :material/support_agent: {md(worker.agent.shop.info.name)}")
    left.caption("Refund desk · the agent proposes a refund, a person reviews it, the agent "
                 "finishes the ticket")
    settings = worker.agent.settings
    model = md(settings.model_label)
    if settings.offline and settings.offline_latency:
        model += f" · {settings.offline_latency:g} s per request"
    active = len(worker.active_runs())
    busy = f"{active} run{'s' if active != 1 else ''} in progress" if active else "idle"
    state = (f":green-badge[:material/play_circle: Worker running · {busy}]"
             if worker.running else ":red-badge[:material/stop_circle: Worker stopped]")
    mode = ("" if Accounts(worker.agent.store).exist() else
            "  \n:orange-badge[:material/person: Single-user demo: no accounts, decisions signed "
            "with a typed name]")
    right.markdown(f":material/smart_toy: **Model:** {model}  \n"
                   f":material/dns: **Server pid {worker.pid}** · {state}{mode}",
                   text_alignment="right")


def refuse_foreign_host() -> None:
    """Stop here unless the page was asked for under one of this desk's own host names.

    Any name that resolves to this machine (a rebinding DNS name, a stray hosts entry) would
    otherwise serve the desk, decisions included. AppTest has no HTTP request, so no headers.
    """
    headers = st.context.headers
    if not headers:
        return
    try:
        extra = load_settings().allowed_hosts
    except RefundAgentError:
        extra = frozenset()
    if not host_allowed(headers.get("Host"), extra):
        # The name is not echoed back: it is whatever the requester chose.
        st.error("This desk does not answer under this host name. Open it at localhost, or "
                 "add the name to REFUND_AGENT_ALLOWED_HOSTS.", icon=":material/block:")
        st.stop()


def visitor(worker: Worker) -> bool:
    """Whether accounts exist and this browser session has not signed in (or its account was
    removed or changed since). A visitor sees the sign-in form and nothing else: no ticket,
    email, address, audit entry or button that acts."""
    accounts = Accounts(worker.agent.store)
    return accounts.exist() and signed_in(accounts) is None


def sign_in_page(worker: Worker) -> None:
    st.markdown(f"### :material/support_agent: {md(worker.agent.shop.info.name)}")
    st.caption("Refund desk · sign in to see the tickets and decide refunds")
    _, middle, _ = st.columns([1, 2, 1])
    with middle:
        render_sign_in(worker, Accounts(worker.agent.store))
        show_notice("queue")


def main() -> None:
    st.set_page_config(page_title="Refund desk", page_icon="🧾", layout="wide")
    refuse_foreign_host()  # before anything else renders or starts
    try:
        worker = get_worker()
        # Read before drawing: a change made while drawing is noticed at the next check.
        st.session_state["drawn"] = fingerprint(worker)
    except RefundAgentError as exc:
        st.error(md(f"The helpdesk cannot start: {exc}"), icon=":material/error:")
        st.stop()
    st.html(PAGE_CSS)
    try:
        gated = visitor(worker)
    except RefundAgentError as exc:
        st.error(md(f"The helpdesk cannot start: {exc}"), icon=":material/error:")
        st.stop()
    if gated:
        guarded(sign_in_page)(worker)
        st.stop()
    moved = worker.agent.store.moved_message()
    if moved:   # `migrate` moved the store: it can be read here, decided only there
        st.error(moved, icon=":material/error:")
    guarded(header)(worker)
    inbox_col, ticket_col, queue_col = st.columns([1.2, 2.2, 1.6], gap="medium")
    # The queue is drawn first (columns fill in any order): a decision made elsewhere shows
    # there, and the browser updates each part as it arrives, so it changes before the rest.
    with queue_col:
        guarded(render_approver)(worker)
        guarded(render_escalations)(worker)
        guarded(render_queue)(worker)
    with inbox_col:
        guarded(render_new_tickets)(worker)
        guarded(render_tickets)(worker)
    with ticket_col:
        guarded(render_ticket)(worker)
    st.divider()
    guarded(render_audit)(worker)
    reviewing = st.session_state.get("review")
    if reviewing:
        guarded(review)(worker, reviewing["id"])
    # Twice a second on either engine. PostgreSQL's counter is pushed (LISTEN/NOTIFY) and free
    # to read, and its pages once checked ten times a second; but an idle tab's cost is the
    # check itself (a fragment run, a round trip to the browser, its redraw of the fragment),
    # not the read: 3.6 % of a core in the server and 18 % in the browser, with no statement
    # reaching the database (issue #37; bench/page_freshness.py, bench_idle).
    st.fragment(run_every=WATCH_EVERY)(watch)(worker)
