"""The refund agent as a support helpdesk: inbox, ticket timeline, approval queue, audit log.

    streamlit run app.py

Without XAI_API_KEY the page runs on the offline stand-in model, slowed to about a second per
request so the streaming is visible (set REFUND_AGENT_OFFLINE_LATENCY=0 to turn that off).

The page only reads the store and calls the worker. Runs belong to the server process's
:class:`~refund_agent.worker.Worker`, so closing a tab never stops one, and every tab (and the
terminal) sees the same store, which one fragment below re-reads every half second while a
run streams here, and every second otherwise.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import wraps
from typing import Any

import streamlit as st

from refund_agent import (
    Agent,
    AlreadyDecided,
    NotFound,
    Quote,
    RefundAgentError,
    RunStatus,
    Settings,
    views,
)
from refund_agent.accounts import Account, Accounts, host_allowed
from refund_agent.config import load_settings
from refund_agent.reconcile import reconcile
from refund_agent.views import md
from refund_agent.worker import Worker

DEMO_LATENCY = 1.0   # seconds per offline request when REFUND_AGENT_OFFLINE_LATENCY is unset
LIVE_EVERY = 0.5     # seconds between re-reads while this server advances a run (streaming)
IDLE_EVERY = 0.5     # otherwise: other tabs' and the terminal's changes show within a second
AUDIT_ROWS = 200     # newest entries in the table; the CSV download has them all
NOTICE_SECONDS = 12  # how long a success message stays (refusals stay until the next action)

# Streamlit's default top margin is made for documents; a desk wants its tools on screen.
PAGE_CSS = """
<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.6rem; padding-bottom: 2rem; }
[data-testid="stExpander"] details summary p { font-size: 0.9rem; }
[data-testid="stChatMessage"] { padding: 0.6rem 0.8rem; }
</style>
"""

log = logging.getLogger("refund_agent.app")


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
    worker = Worker(Agent(_settings))
    worker.start()
    return worker


def get_worker() -> Worker:
    settings = page_settings()
    key = "|".join(str(v) for v in (settings.output_dir, settings.data_dir, settings.model,
                                    settings.offline, settings.offline_latency,
                                    sorted(settings.crash_at)))
    return shared_worker(key, settings)


# -- small helpers ------------------------------------------------------------------------


def guarded(render: Callable[..., None]) -> Callable[..., None]:
    """Show a failure inside a part of the page as a message, never as a traceback."""

    @wraps(render)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            render(*args, **kwargs)
        except RefundAgentError as exc:
            st.error(str(exc), icon=":material/error:")
        except Exception as exc:  # noqa: BLE001 - the page must stay usable
            log.exception("Page section %s failed", render.__name__)
            st.error(f"Something went wrong: {type(exc).__name__}: {exc}", icon=":material/error:")

    return wrapper


def notify(area: str, kind: str = "", text: str = "") -> None:
    """Leave a message for one area of the page (or clear it, with no text)."""
    st.session_state[f"notice_{area}"] = (kind, text, time.time()) if text else None


def show_notice(area: str) -> None:
    """Show the area's message: a refusal until the next action there, a success briefly."""
    notice = st.session_state.get(f"notice_{area}")
    if not notice:
        return
    kind, text, at = notice
    if kind == "success" and time.time() - at > NOTICE_SECONDS:
        st.session_state[f"notice_{area}"] = None
        return
    show = {"success": st.success, "warning": st.warning, "error": st.error}.get(kind, st.info)
    show(text, icon={"success": ":material/check_circle:", "warning": ":material/info:",
                     "error": ":material/error:"}.get(kind))


def select(run_id: str | None) -> None:
    st.session_state["selected"] = run_id
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


def ticked(approval_id: str, lines: Sequence[str]) -> list[str]:
    """The lines of a card whose box is ticked (every box starts ticked)."""
    return [line for line in lines if st.session_state.get(keep_key(approval_id, line), True)]


def approver() -> str:
    """The demo mode's typed name (kept in the session only: a shared URL never carries it)."""
    return st.session_state.get("approver", "")


def signed_in(accounts: Accounts) -> Account | None:
    """The account signed in in this browser session, as it is now in the store."""
    name = st.session_state.get("account")
    account = accounts.get(name) if name else None
    if name and account is None:  # removed since: the session signs out
        st.session_state["account"] = None
    return account


def signer(worker: Worker) -> tuple[str, int | None] | None:
    """Who signs a decision from this session and their limit in cents, or None (told why)."""
    accounts = Accounts(worker.agent.store)
    if accounts.exist():
        account = signed_in(accounts)
        if account is None:
            notify("queue", "error", "Sign in above before deciding: every decision is signed "
                                     "by your account in the audit log.")
            return None
        return account.name, account.limit_cents
    if not approver():
        notify("queue", "error", "Enter your name above before deciding: it goes into the "
                                 "audit log next to the decision.")
        return None
    return approver(), None


# -- callbacks (run before the page re-renders, so a click is never lost) ---------------------


def on_sample(worker: Worker, key: str) -> None:
    notify("inbox")
    try:
        run = worker.submit_sample(key)
    except RefundAgentError as exc:
        notify("inbox", "error", str(exc))
        return
    select(run.id)


def on_send_email(worker: Worker) -> None:
    state = st.session_state
    notify("inbox")
    try:
        run = worker.submit_email(state.get("mail_from", ""), state.get("mail_body", ""),
                                  subject=state.get("mail_subject", ""),
                                  sender_name=state.get("mail_name", ""))
    except RefundAgentError as exc:
        notify("inbox", "error", str(exc))
        return
    state["mail_body"] = ""
    notify("inbox", "success", f"Sent. The agent is working on ticket {run.id}.")
    select(run.id)


def on_select(run_id: str) -> None:
    select(run_id)
    st.rerun()  # the whole page, so the ticket follows the inbox at once


def on_stop(worker: Worker, run_id: str) -> None:
    if worker.stop(run_id):
        notify("ticket")
    else:
        notify("ticket", "warning", "This run is not being advanced by this server; nothing "
                                    "to stop here.")


def on_resume(worker: Worker, run_id: str) -> None:
    notify("ticket")
    try:
        worker.resume(run_id)
    except RefundAgentError as exc:
        notify("ticket", "error", str(exc))


def on_reply(worker: Worker, run_id: str) -> None:
    key = f"reply_{run_id}"
    notify("ticket")
    try:
        worker.reply(run_id, st.session_state.get(key, ""))
    except RefundAgentError as exc:
        notify("ticket", "error", str(exc))
        return
    st.session_state[key] = ""


def on_save_name() -> None:
    name = " ".join(st.session_state.get("approver_input", "").split())
    if not name:
        notify("queue", "error", "Enter your name first: every approval and rejection is "
                                 "signed with it in the audit log.")
        return
    notify("queue")
    st.session_state["approver"] = name


def on_change_name() -> None:
    st.session_state["approver"] = ""
    st.session_state["approver_input"] = ""


def on_sign_in(worker: Worker) -> None:
    state = st.session_state
    password, state["signin_password"] = state.get("signin_password", ""), ""
    try:
        account = Accounts(worker.agent.store).sign_in(state.get("signin_name", ""), password)
    except RefundAgentError as exc:
        notify("queue", "error", str(exc))
        return
    notify("queue")
    state["account"] = account.name


def on_sign_out() -> None:
    st.session_state["account"] = None
    notify("queue")


def on_decide(worker: Worker, approval_id: str, approve: bool, lines: Sequence[str] = ()
              ) -> None:
    """Approve (the ticked ``lines`` only) or reject a proposed refund."""
    who = signer(worker)
    if who is None:
        return
    by, limit_cents = who
    note = st.session_state.get(f"note_{approval_id}", "")
    keep = ticked(approval_id, lines) if approve and lines else None
    try:
        decided = worker.decide(approval_id, approve, by, note, keep=keep,
                                limit_cents=limit_cents)
    except AlreadyDecided as exc:
        notify("queue", "warning", str(exc))
        return
    except RefundAgentError as exc:  # DecisionRefused: no line kept, over the limit, ...
        notify("queue", "error", str(exc))
        return
    verb = "Approved" if approve else "Rejected"
    declined = (f" (declined: {', '.join(line.name for line in decided.declined)})"
                if decided.declined else "")
    notify("queue", "success", f"{verb} {views.money(decided.amount)} for order "
                               f"{decided.order_id} as {by}{declined}. The agent carries on "
                               "with the ticket.")
    select(decided.run_id)
    st.rerun()


# -- the page -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Boxes:
    """The places on the page that show the store, refreshed together by :func:`desk`."""

    status: Any
    runs: Any
    ticket: Any
    queue: Any
    audit: Any


def desk(worker: Worker, boxes: Boxes) -> None:
    """Re-read the store and redraw everything that depends on it (a fragment, see main).

    One fragment for the whole desk rather than one per panel: each rerun has a fixed cost in
    the server, so one refresh that draws five panels costs a fifth of five refreshes.
    """
    if bool(worker.active_runs()) != st.session_state.get("desk_live"):
        st.rerun()  # a run started or ended here: a full run sets the refresh to the new pace
    with boxes.status:
        guarded(header_status)(worker)
    with boxes.runs:
        guarded(run_list)(worker)
    with boxes.ticket:
        guarded(ticket)(worker)
    with boxes.queue:
        guarded(queue)(worker)
    with boxes.audit:
        guarded(audit)(worker)


def render_header(worker: Worker) -> Any:
    left, right = st.columns([3, 2], vertical_alignment="center")
    left.markdown(f"### :material/support_agent: {md(worker.agent.shop.info.name)}")
    left.caption("Refund desk · the agent proposes a refund, a person approves it, the agent "
                 "finishes the ticket")
    return right.container()


def header_status(worker: Worker) -> None:
    settings = worker.agent.settings
    model = md(settings.model_label)
    if settings.offline and settings.offline_latency:
        model += f" · {settings.offline_latency:g} s per request"
    active = len(worker.active_runs())
    busy = f"{active} run{'s' if active != 1 else ''} in progress" if active else "idle"
    state = (f":green-badge[:material/play_circle: Worker running · {busy}]"
             if worker.running else ":red-badge[:material/stop_circle: Worker stopped]")
    mode = ("" if Accounts(worker.agent.store).exist() else
            "  \n:orange-badge[:material/person: Single-user demo mode: no accounts, decisions "
            "are signed with a typed name]")
    st.markdown(f":material/smart_toy: **Model:** {model}  \n"
                f":material/dns: **Server pid {worker.pid}** · {state}{mode}",
                text_alignment="right")


def render_inbox(worker: Worker) -> None:
    st.markdown("#### :material/inbox: Inbox")
    st.caption("Try a sample ticket")
    for sample in worker.agent.shop.samples.values():
        st.button(sample.label, key=f"sample_{sample.key}", on_click=on_sample,
                  args=(worker, sample.key), width="stretch", help=md(sample.subject),
                  icon=":material/mail:")
    with st.expander("Write your own email", icon=":material/edit:"):
        with st.form("new_email", border=False):
            st.text_input("From (the customer's address)", key="mail_from",
                          placeholder="leo.martins@example.com")
            st.text_input("Name", key="mail_name", placeholder="Leo Martins")
            st.text_input("Subject", key="mail_subject", value="Refund request")
            st.text_area("Email", key="mail_body", height=120,
                         placeholder="My order A1058 arrived broken...")
            st.form_submit_button("Send to the agent", key="mail_send", on_click=on_send_email,
                                  args=(worker,),
                                  type="primary", icon=":material/send:")
    show_notice("inbox")


def run_list(worker: Worker) -> None:
    runs = worker.agent.store.runs(limit=50)
    st.caption(f"Tickets, newest first ({len(runs)})")
    if not runs:
        st.caption("No tickets yet. Send a sample to start one.")
    selected = selected_run_id()
    for run in runs:
        st.button(views.run_label(run), key=f"run_{run.id}", on_click=on_select,
                  args=(run.id,), width="stretch",
                  type="primary" if run.id == selected else "secondary")


def ticket(worker: Worker) -> None:
    run_id = selected_run_id()
    if not run_id:
        st.markdown("#### :material/confirmation_number: Ticket")
        st.info("Pick a ticket in the inbox, or start one with a sample email.",
                icon=":material/arrow_back:")
        return
    store = worker.agent.store
    try:
        run = store.run(run_id)
    except NotFound:  # a bookmarked ticket from an output folder that was cleared since
        select(None)
        st.info(f"Ticket {run_id} is not in this desk's store. Pick one in the inbox.",
                icon=":material/search_off:")
        return
    active = worker.is_active(run.id)
    status = views.status_view(run.status)

    st.markdown(f"#### {md(run.subject)}")
    line, buttons = st.columns([3, 2], vertical_alignment="center")
    line.markdown(f"{status.badge} · {md(run.sender_name)} · `{run.id}`")
    with buttons.container(horizontal=True, horizontal_alignment="right"):
        st.button("Stop", key="stop", icon=":material/stop:", on_click=on_stop,
                  args=(worker, run.id), disabled=not active)
        resumable = run.status in (RunStatus.STOPPED, RunStatus.FAILED) or (
            run.status == RunStatus.WORKING and not active)
        st.button("Resume", key="resume", icon=":material/play_arrow:", on_click=on_resume,
                  args=(worker, run.id), disabled=not resumable)
    st.caption(f":material/payments: {views.cost_line(run)}")
    show_notice("ticket")
    problem = worker.problem(run.id)
    if problem:
        st.warning(problem, icon=":material/warning:")

    for block in views.timeline(store.steps(run.id)):
        render_block(block)

    if active:
        with st.status("The agent is working…", state="running", expanded=True):
            segments = worker.live(run.id)
            if not segments:
                st.caption("Waiting for the model…")
            for segment in segments:
                st.markdown(f"**{views.live_title(segment)}**  \n{md(segment.text)}")
    elif run.status == RunStatus.WORKING:
        st.info("Another process is working on this run (or it was cut off; Resume continues "
                "it).", icon=":material/hourglass_top:")
    elif run.status == RunStatus.WAITING:
        st.info("Waiting for a person to approve or reject the refund (queue on the right).",
                icon=":material/pan_tool:")
    elif run.status == RunStatus.DONE:
        with st.form(f"reply_form_{run.id}", border=True):
            st.text_area("Reply as the customer", key=f"reply_{run.id}", height=90,
                         placeholder="That's not enough, I want the whole order refunded.")
            st.form_submit_button("Send reply", key=f"reply_send_{run.id}", on_click=on_reply,
                                  args=(worker, run.id),
                                  icon=":material/reply:")


def render_block(block: views.Block) -> None:
    """One timeline entry; customer text always goes through md() so it stays plain text."""
    kind, title, body = block.kind, md(block.title), md(block.body)
    when = views.clock(block.at)
    if kind == "email":
        with st.chat_message("customer", avatar=":material/person:"):
            st.markdown(f"**{title}** · {when}  \n*{md(block.subtitle)}*")
            st.markdown(body)
    elif kind == "reply":
        with st.chat_message("customer", avatar=":material/person:"):
            badge = (" :violet-badge[:material/smart_toy: written by the model]"
                     if block.simulated else "")
            st.markdown(f"**{title}**{badge} · {when}")
            st.markdown(body)
    elif kind == "message":
        with st.chat_message("support", avatar=":material/support_agent:"):
            st.markdown(f"**{title}** · {when}")
            st.markdown(body)
    elif kind == "reasoning":
        with st.expander(f"Reasoning: {md(views.shorten(block.body, 90))}",
                         icon=":material/psychology:"):
            st.markdown(body)
    elif kind in ("tool", "result"):
        with st.expander(title, icon=":material/build:"):
            if block.arguments is not None:
                st.caption("Arguments")
                st.json(block.arguments, expanded=True)
            st.caption("Result")
            if block.result is not None:
                st.json(block.result, expanded=1)
            elif block.result_below:
                st.caption("Further down: it ran once a person had decided.")
            else:
                st.caption("Not run yet.")
    elif kind == "response":
        st.caption(f":material/bolt: {title}")
    elif kind == "proposal":
        st.warning(f"**{title}**  \n{body}{bullets(block.lines)}", icon=":material/pan_tool:")
    elif kind == "decision":
        note = f"  \n{body}" if body else ""
        show = st.success if block.title.startswith("Approved") else st.error
        show(f"**{title}** · {when}{note}{bullets(block.lines)}", icon=":material/gavel:")
    elif kind == "refund":
        note = f"  \n{body}" if body else ""
        st.success(f"**{title}**{note}{bullets(block.lines)}", icon=":material/payments:")
    elif kind == "note":
        st.info(f"**{title}**  \n{body}", icon=":material/sticky_note_2:")
    elif kind == "text":
        st.caption(body)
    elif kind in ("restart", "resent"):
        st.info(f"**{title}** · {when}", icon=":material/restart_alt:")
    elif kind == "error":
        st.error(title, icon=":material/error:")
    elif kind == "stopped":
        st.warning(title, icon=":material/pause_circle:")
    elif kind == "customer_done":
        st.caption(f":material/done_all: {title}")


def bullets(lines: Sequence[str]) -> str:
    """Plain-text rows as a Markdown list to append to a message (empty for none)."""
    return "\n" + "".join(f"\n- {md(line)}" for line in lines) if lines else ""


def render_approver(worker: Worker) -> None:
    """Who decides: the sign-in when accounts exist, else the demo's typed name."""
    accounts = Accounts(worker.agent.store)
    if accounts.exist():
        render_sign_in(worker, accounts)
        return
    name = approver()
    if name:
        line, change = st.columns([3, 1], vertical_alignment="center")
        line.markdown(f":material/badge: Deciding as **{md(name)}**")
        change.button("Change", key="change_name", on_click=on_change_name, type="tertiary")
    else:
        with st.form("approver_form", border=True):
            st.text_input("Your name (signs every decision in the audit log)",
                          key="approver_input", placeholder="Dana Kim")
            st.form_submit_button("Save name", key="save_name", on_click=on_save_name,
                                  icon=":material/badge:")


def render_sign_in(worker: Worker, accounts: Accounts) -> None:
    account = signed_in(accounts)
    if account:
        line, out = st.columns([3, 1], vertical_alignment="center")
        line.markdown(f":material/badge: Signed in as **{md(account.name)}** · "
                      + ("lead, no limit" if account.limit is None else
                         f"approver, up to {views.money(account.limit)}"))
        out.button("Sign out", key="sign_out", on_click=on_sign_out, type="tertiary")
        return
    # A form, so the password travels once, on submit, and is cleared from the session after.
    with st.form("sign_in_form", border=True):
        st.caption(":material/lock: Sign in to decide refunds")
        st.text_input("Name", key="signin_name", placeholder="Dana Kim")
        st.text_input("Password", key="signin_password", type="password")
        st.form_submit_button("Sign in", key="sign_in", on_click=on_sign_in, args=(worker,),
                              icon=":material/login:")


def queue(worker: Worker) -> None:
    pending = worker.agent.store.approvals("pending")
    account = signed_in(Accounts(worker.agent.store)) if pending else None
    st.markdown(f"#### :material/pending_actions: Waiting for approval ({len(pending)})")
    show_notice("queue")
    if not pending:
        st.caption("Nothing waiting. Refunds the agent proposes show up here.")
    for approval in pending:
        card = views.approval_card(approval, worker.agent.policy_facts(approval),
                                   worker.agent.approval_problem(approval))
        lines = [line.line for line in card.item_lines]
        keep = ticked(card.approval_id, lines)
        quote = (worker.agent.quote_kept(approval, keep) if 0 < len(keep) < len(lines)
                 else None)
        pays = quote.amount if isinstance(quote, Quote) else card.amount
        render_card(worker, card, views.kept_notice(card, keep, quote),
                    views.limit_notice(pays, account.limit if account else None))


def render_card(worker: Worker, card: views.Card, kept: tuple[str, str] | None,
                over_limit: str | None = None) -> None:
    with st.container(border=True, key=f"card_{card.approval_id}"):
        st.markdown(f"**{md(card.title)}**  \n:material/person: {md(card.customer)}")
        st.markdown(f":material/format_quote: *{md(card.summary)}*")
        # One box per item line: unticked lines are declined when approving.
        for line in card.item_lines:
            st.checkbox(f"**{md(line.name)}** · {md(line.reason_label)} · "
                        f"**{md(views.money(line.amount))}** :gray[· {md(line.basis)}]",
                        value=True, key=keep_key(card.approval_id, line.line))
        for line in card.shipping_lines:
            st.markdown(f":material/local_shipping: **{md(line.name)}** · "
                        f"**{md(views.money(line.amount))}** :gray[· {md(line.basis)}]")
        if kept:
            kind, text = kept
            show = st.warning if kind == "warning" else st.info
            show(md(text), icon=":material/rule:")
        st.markdown("\n".join(f"- **{md(label)}:** {md(value)}" for label, value in card.facts))
        if over_limit:  # the decision refuses it too (Store.decide); this says so first
            st.warning(md(over_limit), icon=":material/supervisor_account:")
        if card.problem:
            st.error(f"The policy no longer allows this refund: {card.problem}",
                     icon=":material/block:")
        st.caption(md(card.requested))
        lines = tuple(line.line for line in card.item_lines)
        with st.form(f"decide_{card.approval_id}", border=False):
            st.text_input("Note (needed to reject, or to say why a line is unticked; the agent "
                          "passes it on)", key=f"note_{card.approval_id}",
                          placeholder="Why, in a sentence the customer can read")
            approve, reject = st.columns(2)
            approve.form_submit_button("Approve", key=f"approve_{card.approval_id}",
                                       type="primary", icon=":material/check:",
                                       on_click=on_decide,
                                       args=(worker, card.approval_id, True, lines),
                                       disabled=card.problem is not None, width="stretch")
            reject.form_submit_button("Reject", key=f"reject_{card.approval_id}",
                                      icon=":material/close:", on_click=on_decide,
                                      args=(worker, card.approval_id, False), width="stretch")


@st.cache_data(max_entries=8, show_spinner=False)
def chain_check(db_path: str, changes: tuple, _worker: Worker) -> str | None:
    """The audit chain and the payment and email logs reconciled, redone only when one of them
    changes (``changes``), not on every refresh.

    Re-reading everything twice a second would make the page slower as the log grows;
    ``refund-agent audit --verify`` always checks from scratch.
    """
    return reconcile(_worker.agent.store, _worker.agent.settings.output_dir)


def _log_sizes(worker: Worker) -> tuple[int, ...]:
    out = worker.agent.settings.output_dir
    return tuple((out / name).stat().st_size if (out / name).exists() else -1
                 for name in ("refunds.log", "outbox.log"))


@st.cache_data(max_entries=8, show_spinner=False)
def audit_csv(db_path: str, head: tuple[int, int], _store: Any) -> bytes:
    """The whole log as CSV, rebuilt only when the log changes (a deferred download would race
    the page's twice-a-second refresh, which replaces the button under the click)."""
    return views.audit_csv(_store.audit())


def audit(worker: Worker) -> None:
    store = worker.agent.store
    head = store.audit_head()
    entries = store.audit(limit=AUDIT_ROWS)
    st.markdown("#### :material/receipt_long: Audit log")
    problem = chain_check(str(store.path), (head, _log_sizes(worker)), worker)
    if problem:
        st.error(f"Audit check failed: {problem}", icon=":material/gpp_bad:")
    else:
        st.caption(f":material/verified: Hash chain intact, payments and emails reconciled · "
                   f"{head[0]} entries")
    if entries:
        # Tall enough for ten rows without blank ones; a longer log scrolls inside the table.
        st.dataframe(views.audit_frame(entries), hide_index=True,
                     height=38 + 35 * min(len(entries), 10),
                     column_order=["Time", "Event", "By", "PID", "Order", "Amount", "Lines",
                                   "Note"])
        st.download_button("Download CSV", audit_csv(str(store.path), head, store),
                           "refund-audit.csv",
                           "text/csv", on_click="ignore", icon=":material/download:")
    else:
        st.caption("No entries yet.")


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


def main() -> None:
    st.set_page_config(page_title="Refund desk", page_icon="🧾",
                       layout="wide")
    refuse_foreign_host()  # before anything else renders or starts
    try:
        worker = get_worker()
    except RefundAgentError as exc:
        st.error(f"The helpdesk cannot start: {exc}", icon=":material/error:")
        st.stop()
    st.html(PAGE_CSS)
    status = render_header(worker)
    inbox_col, ticket_col, queue_col = st.columns([1.1, 2.3, 1.6], gap="medium")
    with inbox_col:
        guarded(render_inbox)(worker)
        runs = st.container()
    with queue_col:
        guarded(render_approver)(worker)
        queue_box, audit_box = st.container(), st.container()
    # The refresh pace is set each full run: fast while a run streams here, calm otherwise.
    live = st.session_state["desk_live"] = bool(worker.active_runs())
    st.fragment(run_every=LIVE_EVERY if live else IDLE_EVERY)(desk)(
        worker, Boxes(status=status, runs=runs, ticket=ticket_col.container(), queue=queue_box,
                      audit=audit_box))


main()
