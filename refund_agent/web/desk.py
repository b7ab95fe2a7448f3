"""The approver's side: who is signed in, the queue of proposed refunds, and the review.

No money moves from a card. Each of its three buttons opens the review, which shows the
customer, the order, every line with its amount and the policy's bound, and asks for a
confirmation: approve (with lines unticked, if need be), ask the customer a question, or
reject with a note the customer will read.
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from ..accounts import Accounts
from ..errors import AlreadyDecided, NotFound, RefundAgentError
from ..models import Approval
from ..policy import Quote
from . import views
from .session import (
    approver,
    client,
    keep_key,
    lowered_units,
    notify,
    select,
    show_notice,
    sign_in_as,
    sign_out,
    signed_in,
    signer,
    ticked,
    units_key,
)
from .views import md, money
from .worker import Worker

# The three ways to decide, as the review names them.
MODES = {"approve": "Approve", "ask": "Ask the customer", "reject": "Reject"}
QUEUE_PAGE = 10   # refund cards drawn at a time, oldest first
NOTE_LABELS = {
    "approve": "Note (optional; say why a line is unticked; the agent passes it on)",
    "ask": "Question for the customer (required; sent to them as written)",
    "reject": "Why it is rejected (required; the customer reads it)",
}


# -- who decides ---------------------------------------------------------------------------


def on_save_name() -> None:
    name = " ".join(st.session_state.get("approver_input", "").split())
    if not name:
        notify("queue", "error", "Enter your name first: every approval and rejection is "
                                 "signed with it in the audit log.")
        return
    notify("queue")
    notify("review")   # "enter your name" is answered
    st.session_state["approver"] = name


def on_change_name() -> None:
    st.session_state["approver"] = ""
    st.session_state["approver_input"] = ""


def on_sign_in(worker: Worker) -> None:
    state = st.session_state
    password, state["signin_password"] = state.get("signin_password", ""), ""
    try:
        account = Accounts(worker.agent.store).sign_in(state.get("signin_name", ""), password,
                                                       client())
    except RefundAgentError as exc:
        notify("queue", "error", str(exc))
        return
    notify("queue")
    notify("review")   # "sign in before deciding" is answered
    sign_in_as(account)


def on_sign_out() -> None:
    sign_out()
    close_review()
    notify("queue")


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
                         f"approver, up to {money(account.limit)}"))
        out.button("Sign out", key="sign_out", on_click=on_sign_out, type="tertiary")
        return
    # A form, so the password travels once, on submit, and is cleared from the session after.
    with st.form("sign_in_form", border=True):
        st.caption(":material/lock: Sign in to decide refunds")
        name, password = st.columns(2)   # side by side: the queue stays on screen
        name.text_input("Name", key="signin_name", placeholder="Dana Kim")
        password.text_input("Password", key="signin_password", type="password")
        st.form_submit_button("Sign in", key="sign_in", on_click=on_sign_in, args=(worker,),
                              icon=":material/login:")


# -- the queue -----------------------------------------------------------------------------


def open_review(approval_id: str, mode: str) -> None:
    st.session_state["review"] = {"id": approval_id, "mode": mode}
    st.session_state[f"mode_{approval_id}"] = mode
    notify("review")


def close_review() -> None:
    st.session_state["review"] = None


def render_queue(worker: Worker) -> None:
    """The oldest refunds waiting, QUEUE_PAGE at a time: the page costs the same to draw (and
    to keep fresh) with 5 or 500 waiting."""
    store = worker.agent.store
    total = store.pending_count()
    shown = st.session_state.get("queue_shown", QUEUE_PAGE)
    pending = store.approvals("pending", limit=shown)
    st.markdown(f"#### :material/pending_actions: Waiting for approval ({total})")
    show_notice("queue")
    if not pending:
        st.caption("Nothing waiting. Refunds the agent proposes show up here.")
    for approval in pending:
        render_card(worker, approval)
    if total > len(pending):
        st.button(f"Show {min(QUEUE_PAGE, total - len(pending))} more "
                  f"({total - len(pending)} not shown)", key="queue_more", type="tertiary",
                  icon=":material/expand_more:", on_click=_show_more, args=(len(pending),))


def _show_more(shown: int) -> None:
    st.session_state["queue_shown"] = shown + QUEUE_PAGE


def render_card(worker: Worker, approval: Approval) -> None:
    """A compact card: enough to pick it up, the decision itself is made in the review."""
    card = views.approval_card(approval, {}, None)
    with st.container(border=True, key=f"card_{card.approval_id}"):
        st.markdown(f"**{md(card.title)}** · :gray[{views.ago(approval.requested_at)}]  \n"
                    f":material/person: {md(card.customer)}")
        st.markdown("\n".join(f"- {md(line.summary)}" for line in card.lines))
        with st.container(horizontal=True, gap="small"):
            st.button("Approve…", key=f"approve_{card.approval_id}", type="primary",
                      icon=":material/check:", on_click=open_review,
                      args=(card.approval_id, "approve"))
            st.button("Ask…", key=f"ask_{card.approval_id}", icon=":material/help:",
                      on_click=open_review, args=(card.approval_id, "ask"),
                      help="Ask the customer a question before deciding; nothing is paid")
            st.button("Reject…", key=f"reject_{card.approval_id}", icon=":material/close:",
                      on_click=open_review, args=(card.approval_id, "reject"))
            st.button("Ticket", key=f"open_{card.approval_id}", type="tertiary",
                      icon=":material/open_in_new:", on_click=select, args=(card.run_id,),
                      help="Open this refund's ticket in the middle column")


# -- the review ----------------------------------------------------------------------------


@st.dialog("Review the refund", width="medium", on_dismiss=close_review)
def review(worker: Worker, approval_id: str) -> None:
    """The confirmation before a decision: everything the policy says, then one button."""
    agent = worker.agent
    try:
        approval = agent.store.approval(approval_id)
    except NotFound:
        close_review()
        st.rerun()
    if approval.status != "pending":
        me = signed_in(Accounts(agent.store)) if Accounts(agent.store).exist() else None
        mine = approval.decided_by == (me.name if me else approver())
        st.info(f"You {approval.status} this refund at {views.clock(approval.decided_at)}; "
                "nothing more to do." if mine else
                f"This refund is no longer waiting: it was {approval.status} by "
                f"{md(approval.decided_by or '')}.", icon=":material/info:")
        if st.button("Close", key="review_close"):
            close_review()
            st.rerun()
        return
    card = views.approval_card(approval, agent.policy_facts(approval),
                               agent.approval_problem(approval))
    account = signed_in(Accounts(agent.store))
    st.markdown(f"**{md(card.customer)}** · order **{md(card.order_id)}** · "
                f"{md(card.requested)}")
    st.markdown(f":material/format_quote: *{md(card.summary)}*")
    mode = st.segmented_control("Decision", list(MODES), format_func=MODES.__getitem__,
                                key=f"mode_{approval_id}", required=True,
                                label_visibility="collapsed") or "approve"
    items = [line.line for line in card.item_lines]
    pays = card.amount
    if mode == "approve":
        # One box per item line: unticked lines are declined. A line of several units also
        # gets a count, which the approver may lower (never raise) to approve fewer.
        for line in card.item_lines:
            count = f" · {md(line.units_label)}" if line.counted else ""
            st.checkbox(f"**{md(line.name)}**{count} · {md(line.reason_label)} · "
                        f"**{md(money(line.amount))}** :gray[· {md(line.basis)}]",
                        value=True, key=keep_key(approval_id, line.line))
            if line.counted:
                st.number_input(f"Units of {line.name} to refund", min_value=1,
                                max_value=line.units, value=line.units, step=1,
                                key=units_key(approval_id, line.line))
        for line in card.shipping_lines:
            st.markdown(f":material/local_shipping: **{md(line.name)}** · "
                        f"**{md(money(line.amount))}** :gray[· {md(line.basis)}]")
        keep = ticked(approval_id, items)
        lowered = {sku: n for sku, n in lowered_units(approval_id, counted(card)).items()
                   if sku in keep}
        quote = (agent.quote_kept(approval, keep, lowered)
                 if 0 < len(keep) and (len(keep) < len(items) or lowered) else None)
        pays = quote.amount if isinstance(quote, Quote) else card.amount
        kept = views.kept_notice(card, keep, quote, lowered)
        if kept:
            (st.warning if kept[0] == "warning" else st.info)(md(kept[1]), icon=":material/rule:")
    else:
        st.markdown("\n".join(f"- {md(line.summary)}" for line in card.lines))
    st.markdown("**What the policy allows**  \n"
                + "\n".join(f"- **{md(label)}:** {md(value)}" for label, value in card.facts))
    over = views.limit_notice(pays, account.limit if account else None)
    if mode == "approve" and over:  # the decision refuses it too (Store.decide); this says so
        st.warning(md(over), icon=":material/supervisor_account:")
    if mode == "approve" and card.problem:
        st.error(f"The policy no longer allows this refund: {md(card.problem)}",
                 icon=":material/block:")
    st.text_input(NOTE_LABELS[mode], key=f"note_{approval_id}",
                  placeholder="In a sentence the customer can read")
    confirm = {"approve": f"Approve {money(pays)}", "ask": "Send the question",
               "reject": "Reject the refund"}[mode]
    go, cancel = st.columns(2)
    if go.button(confirm, key=f"confirm_{approval_id}", type="primary", width="stretch",
                 icon=":material/gavel:",
                 disabled=mode == "approve" and card.problem is not None):
        if decide(worker, approval_id, mode, items, counted(card)):
            close_review()
            st.rerun()
    if cancel.button("Cancel", key=f"cancel_{approval_id}", width="stretch"):
        close_review()
        st.rerun()
    show_notice("review")   # after the buttons, so a refusal shows on the click that caused it


def counted(card: views.Card) -> list[tuple[str, int]]:
    """(sku, units proposed) of the card's lines of several units."""
    return [(line.line, line.units) for line in card.item_lines if line.counted]


def decide(worker: Worker, approval_id: str, mode: str, items: list[str],
           proposed_units: Sequence[tuple[str, int]] = ()) -> bool:
    """Carry out the review's decision; False (with a message in the review) if refused."""
    who = signer(worker, "review")
    if who is None:
        return False
    by, limit_cents = who
    note = st.session_state.get(f"note_{approval_id}", "")
    try:
        if mode == "ask":
            decided = worker.ask(approval_id, by, note)
        else:
            keep = ticked(approval_id, items) if mode == "approve" and items else None
            units = lowered_units(approval_id, proposed_units) if keep else {}
            decided = worker.decide(approval_id, mode == "approve", by, note, keep=keep,
                                    limit_cents=limit_cents,
                                    units={k: v for k, v in units.items() if k in keep}
                                    if keep else None)
    except AlreadyDecided as exc:
        notify("queue", "warning", str(exc))
        return True    # nothing left to review
    except RefundAgentError as exc:  # no note, no line kept, over the limit, ...
        notify("review", "error", str(exc))
        return False
    done = {"approved": f"Approved {money(decided.amount)}", "rejected": "Rejected the refund",
            "asked": "Sent your question to the customer"}[decided.status]
    declined = (f" (declined: {', '.join(line.name for line in decided.declined)})"
                if decided.declined else "")
    notify("queue", "success", f"{done} for order {decided.order_id} as {by}{declined}. "
                               "The agent carries on with the ticket.")
    select(decided.run_id)
    return True
