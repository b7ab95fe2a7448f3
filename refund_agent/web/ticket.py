"""The open ticket: its timeline, what the agent is streaming now, and the customer's reply box."""

from __future__ import annotations

import time
from collections.abc import Sequence

import streamlit as st

from ..desk.accounts import Accounts
from ..desk.status import run_desk_status
from ..errors import NotFound, RefundAgentError
from ..models import Approval, RunStatus, Step
from . import views
from .session import (
    acting_as,
    notify,
    permitted,
    select,
    selected_run_id,
    show_notice,
    signed_in,
    signer,
)
from .views import md, timeline_chart, timeline_marks
from .views.format import cost_basis
from .worker import Worker


def on_stop(worker: Worker, run_id: str) -> None:
    if not permitted(worker, "ticket"):
        return
    if worker.stop(run_id, acting_as(worker)):
        notify("ticket")
    else:
        notify("ticket", "warning", "This run is not being advanced by this server; nothing "
                                    "to stop here.")


def on_owner(worker: Worker, run_id: str, action: str) -> None:
    """Claim, release or assign (to the account picked beside the button) the ticket, as
    the account signed in here; the store checks the rule against the owner as it is now."""
    signed = signer(worker, "owner")
    if signed is None:
        return
    notify("owner")
    to = st.session_state.get("owner_assign_to") if action == "assign" else None
    try:
        changed = Accounts(worker.agent.store).change_owner(run_id, action, signed[0], to)
    except RefundAgentError as exc:
        notify("owner", "error", str(exc))
        return
    if not changed:
        notify("owner", "info", "Nothing changed: it already was so.")


def render_owner(worker: Worker, run_id: str) -> None:
    """Who owns the ticket, and the buttons to change it (only with accounts: an owner is
    someone who signs in). A lead may assign it to anyone and release anyone's."""
    accounts = Accounts(worker.agent.store)
    if not accounts.exist():
        return
    me = signed_in(accounts)
    owner = worker.agent.store.owner(run_id)
    lead = me is not None and me.limit is None
    mine = me is not None and owner == me.name
    who, actions = st.columns([2, 3], vertical_alignment="center")
    who.markdown(f":material/person: Owner: **{md(owner)}**" if owner else
                 ":material/person_off: Nobody owns this ticket")
    with actions.container(horizontal=True, horizontal_alignment="right"):
        st.button("Claim", key="owner_claim", icon=":material/front_hand:", on_click=on_owner,
                  args=(worker, run_id, "claim"),
                  disabled=me is None or mine or (owner is not None and not lead))
        st.button("Release", key="owner_release", icon=":material/logout:", on_click=on_owner,
                  args=(worker, run_id, "release"),
                  disabled=owner is None or not (mine or lead))
        if lead:
            names = [a.name for a in accounts.all()]
            st.selectbox("Assign to", names, key="owner_assign_to",
                         label_visibility="collapsed", width=180)
            st.button("Assign", key="owner_assign", icon=":material/assignment_ind:",
                      on_click=on_owner, args=(worker, run_id, "assign"))
    show_notice("owner")


def on_resume(worker: Worker, run_id: str) -> None:
    if not permitted(worker, "ticket"):
        return
    notify("ticket")
    try:
        worker.resume(run_id)
    except RefundAgentError as exc:
        notify("ticket", "error", str(exc))


def on_reply(worker: Worker, run_id: str) -> None:
    key = f"reply_{run_id}"
    if not permitted(worker, "ticket"):
        return
    notify("ticket")
    try:
        worker.reply(run_id, st.session_state.get(key, ""))
    except RefundAgentError as exc:
        notify("ticket", "error", str(exc))
        return
    st.session_state[key] = ""


def render_ticket(worker: Worker) -> None:
    run_id = selected_run_id()
    if run_id:
        try:
            run = worker.agent.store.run(run_id)
        except NotFound:  # a bookmarked ticket from an output folder that was cleared since
            select(None, missing=run_id)
            run_id = None
    if not run_id:
        st.markdown("#### :material/confirmation_number: Ticket")
        if missing := st.session_state.get("missing"):
            # The id comes from the URL (?run=): whoever wrote the link chose it.
            st.info(f"Ticket {md(missing)} is not in this desk's store. Pick one in the inbox.",
                    icon=":material/search_off:")
        else:
            st.info("Pick a ticket in the inbox, or start one with a sample email.",
                    icon=":material/arrow_back:")
        return
    store = worker.agent.store
    active = worker.is_active(run.id)
    status = views.desk_view(run_desk_status(run, store.run_approvals(run.id)))
    open_escalations = [e for e in store.escalations(run_id=run.id) if e.open]

    st.markdown(f"#### {md(run.subject)}")
    line, buttons = st.columns([3, 2], vertical_alignment="center")
    escalated = f" {views.ESCALATED.badge}" if open_escalations else ""
    line.markdown(f"{status.badge}{escalated} · "
                  f"{md(store.run_customers([run.id]).get(run.id, run.sender))} · `{run.id}`")
    with buttons.container(horizontal=True, horizontal_alignment="right"):
        st.button("Stop", key="stop", icon=":material/stop:", on_click=on_stop,
                  args=(worker, run.id), disabled=not active)
        resumable = run.status in (RunStatus.STOPPED, RunStatus.FAILED) or (
            run.status == RunStatus.WORKING and not active)
        st.button("Resume", key="resume", icon=":material/play_arrow:", on_click=on_resume,
                  args=(worker, run.id), disabled=not resumable)
    render_owner(worker, run.id)
    basis = cost_basis(worker.agent.settings)
    st.caption(f":material/payments: {views.cost_line(run, basis)}")
    show_notice("ticket")
    problem = worker.problem(run.id)
    if problem:
        st.warning(md(problem), icon=":material/warning:")

    steps = store.steps(run.id)
    render_run_chart(steps, store.run_approvals(run.id))
    blocks = views.timeline(steps, basis)
    if st.toggle("Every step in order", key="every_step",
                 help="The agent's steps as they happened, unfolded (the thread folds them "
                      "under each email)"):
        for block in blocks:
            render_block(block)
    else:
        render_thread(blocks)

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
        st.info("Waiting for a person to approve, reject or ask the customer (queue on the "
                "right).", icon=":material/pan_tool:")
    elif run.status in (RunStatus.DONE, RunStatus.ASKED):
        if run.status == RunStatus.ASKED:
            st.info("Waiting on the customer: the team asked them a question. Their reply "
                    "continues this ticket.", icon=":material/contact_support:")
        with st.form(f"reply_form_{run.id}", border=True):
            st.text_area("Reply as the customer", key=f"reply_{run.id}", height=90,
                         placeholder="That's not enough, I want the whole order refunded.")
            st.form_submit_button("Send reply", key=f"reply_send_{run.id}", on_click=on_reply,
                                  args=(worker, run.id), icon=":material/reply:")


def render_run_chart(steps: Sequence[Step], approvals: Sequence[Approval]) -> None:
    """The run on one time axis, a lane per process, long waits drawn as breaks; the same in
    words below it (the chart's alt text too), and mark by mark in a fold."""
    marks = timeline_marks.events(steps, approvals, now=time.time())
    if not marks:
        return
    axis = timeline_marks.axis_for(marks)
    lanes = timeline_marks.lane_names(steps)
    said = timeline_chart.summary(marks, axis, lanes)
    with st.container(key="timeline_chart"):
        st.vega_lite_chart(spec=timeline_chart.chart_spec(marks, axis, lanes), width="stretch",
                           alt=f"Timeline of the run: {said}")
        st.caption(f":material/timeline: {md(said)}")
        with st.expander("The timeline as text", icon=":material/list:"):
            st.markdown("\n".join(f"- {md(row)}"
                                   for row in timeline_chart.rows_text(marks, lanes)))


def render_thread(blocks: Sequence[views.Block]) -> None:
    """The ticket as a thread: each email in, the agent's steps folded under it, then the
    emails out and what a person decided, in order (views.thread)."""
    for turn in views.thread(blocks):
        if turn.opening is not None:
            render_block(turn.opening)
        if turn.steps:
            # Streamlit draws no expander inside another: the steps' own folds open flat here.
            with st.expander(md(turn.summary()), icon=":material/account_tree:"):
                for block in turn.steps:
                    render_block(block, flat=True)
        for block in turn.shown:
            render_block(block)


def render_block(block: views.Block, flat: bool = False) -> None:
    """One timeline entry; customer text always goes through md() so it stays plain text."""
    kind, title, body = block.kind, md(block.title), md(block.body)
    when = views.clock(block.at)
    if kind == "email":
        with st.chat_message("customer", avatar=":material/person:"):
            st.markdown(f"**{title}** · {when}  \n*{md(block.subtitle)}*")
            st.markdown(body + bullets(block.lines))
    elif kind == "reply":
        with st.chat_message("customer", avatar=":material/person:"):
            badge = (" :violet-badge[:material/smart_toy: written by the model]"
                     if block.simulated else "")
            st.markdown(f"**{title}**{badge} · {when}")
            st.markdown(body + bullets(block.lines))
    elif kind == "message":
        with st.chat_message("support", avatar=":material/support_agent:"):
            st.markdown(f"**{title}** · {when}")
            st.markdown(body)
    elif kind == "reasoning":
        with (st.container() if flat else
              st.expander(f"Reasoning: {md(views.shorten(block.body, 90))}",
                          icon=":material/psychology:")):
            if flat:
                st.caption(":material/psychology: Reasoning")
            st.markdown(body)
    elif kind in ("tool", "result"):
        if flat:
            st.markdown(f":material/build: **{title}**")
        with st.container() if flat else st.expander(title, icon=":material/build:"):
            if block.arguments is not None:
                st.caption("Arguments")
                show_json(block.arguments, expanded=True)
            st.caption("Result")
            if block.result is not None:
                show_json(block.result, expanded=1)
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
        show = {"success": st.success, "info": st.info, "warning": st.warning}.get(
            block.tone, st.error)   # the tone comes from views.DECISIONS
        show(f"**{title}** · {when}{note}{bullets(block.lines)}", icon=":material/gavel:")
    elif kind == "refund":
        note = f"  \n{body}" if body else ""
        st.success(f"**{title}**{note}{bullets(block.lines)}", icon=":material/payments:")
    elif kind == "note":
        st.info(f"**{title}**  \n{body}", icon=":material/sticky_note_2:")
    elif kind == "escalation":
        st.error(f"**{title}** · {when}  \n{body}", icon=":material/priority_high:")
    elif kind == "text":
        st.caption(body)
    elif kind == "owner":
        st.caption(f":material/person: {md(title)} · {when}")
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


# Text that did not parse (see views.ticket._parse) is shown as text, this much of it: st.json would
# parse it again, in the browser, without the bounds the store keeps.
SHOWN_TEXT = 4000


def show_json(value: object, expanded: bool | int) -> None:
    """Parsed JSON as a tree; text (invalid, huge or too deeply nested JSON) as text."""
    if isinstance(value, str):
        st.code(value if len(value) <= SHOWN_TEXT else
                value[:SHOWN_TEXT] + f"\n… ({len(value) - SHOWN_TEXT:,} more characters)",
                language=None, wrap_lines=True)
    else:
        st.json(value, expanded=expanded)
