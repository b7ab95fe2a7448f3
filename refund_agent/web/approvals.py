"""The approver's side: who is signed in, the queue of proposed refunds, and the review.

No money moves from a card. Each of its three buttons opens the review, which shows the
customer, the order, every line with its amount and the policy's bound, and asks for a
confirmation: approve (with lines unticked, if need be), ask the customer a question, or
reject with a note the customer will read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import streamlit as st

from ..desk.accounts import Accounts
from ..desk.policy import Quote
from ..desk.rules import handoff_needed, needs_two, take_problem
from ..errors import AlreadyDecided, NotFound, RefundAgentError
from ..models import Approval, Escalation
from . import views
from .session import (
    approver,
    keep_key,
    lowered_units,
    notify,
    select,
    show_notice,
    signed_in,
    signer,
    ticked,
    units_key,
)
from .signer import on_save_name
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
    # Signed in: what this account can decide first; the rest say who can (desk/offers.py),
    # so a refund above an approver's limit reaches someone whose limit covers it.
    accounts = Accounts(store)
    account = signed_in(accounts) if accounts.exist() else None
    offered = {o.approval_id: o for o in (accounts.offers(pending, account.name)
                                          if account else [])}
    if offered:
        pending = sorted(pending, key=lambda a: not offered[a.id].mine)
    for approval in pending:
        offer = offered.get(approval.id)
        render_card(worker, approval,
                    offer.others_text(account.name) if offer and not offer.mine and account
                    else None)
    if total > len(pending):
        st.button(f"Show {min(QUEUE_PAGE, total - len(pending))} more "
                  f"({total - len(pending)} not shown)", key="queue_more", type="tertiary",
                  icon=":material/expand_more:", on_click=_show_more, args=(len(pending),))


def card_flags(worker: Worker, approval: Approval, now: float | None = None) -> list[str]:
    """The badges a card carries: needs a lead (over the signed-in approver's limit, or sent
    to a lead), a first sign-off recorded, waiting past the reminder time."""
    store, rules = worker.agent.store, worker.agent.shop.info.desk
    account = signed_in(Accounts(store)) if Accounts(store).exist() else None
    flags = []
    if approval.id in store.handed_off():
        flags.append(":red-badge[:material/supervisor_account: Sent to a lead]")
    elif account is not None and handoff_needed(approval.amount_cents, account.limit_cents,
                                                mine_before(worker, approval)):
        flags.append(":red-badge[:material/supervisor_account: Needs a lead]")
    first = store.signoff(approval.id)
    if first is not None:
        flags.append(f":violet-badge[:material/how_to_reg: Signed off by {md(first.by)}; "
                     "needs a second person]")
    elif needs_two(approval.amount_cents, rules.two_person_above_cents,
                   store.approved_on(approval.order_id)):
        flags.append(":violet-badge[:material/group: Two people]")
    waited = views.reminder(approval.requested_at, rules.remind_after_hours,
                            time.time() if now is None else now)
    if waited:
        flags.append(f":orange-badge[:material/alarm: {md(waited)}]")
    return flags


def mine_before(worker: Worker, approval: Approval) -> int:
    """What the signed-in approver approved on the approval's order before, in cents (0 in
    the demo, which has no limits): their limit covers it and this refund together."""
    store = worker.agent.store
    account = signed_in(Accounts(store)) if Accounts(store).exist() else None
    if account is None or account.limit_cents is None:
        return 0
    return store.approved_on(approval.order_id, account.name)


def on_take(worker: Worker, escalation_id: int) -> None:
    who = signer(worker, "escalations")
    if who is None:
        return
    by, limit_cents = who
    if problem := take_problem(limit_cents):   # the terminal's `take` asks the same
        notify("escalations", "error", problem)
        return
    try:
        taken = worker.take(escalation_id, by)
    except RefundAgentError as exc:
        notify("escalations", "warning", str(exc))
        return
    notify("escalations", "success", f"You took the escalation on ticket {taken.run_id}.")
    select(taken.run_id)


def render_escalations(worker: Worker) -> None:
    """Open escalations, oldest first, and the latest ones taken (who, when)."""
    store = worker.agent.store
    every = store.escalations(limit=500)
    open_ = [e for e in every if e.open]
    taken = sorted((e for e in every if not e.open), key=lambda e: e.taken_at or 0,
                   reverse=True)[:5]
    st.markdown(f"#### :material/priority_high: Escalations ({len(open_)})")
    show_notice("escalations")
    if not open_ and not taken:
        st.caption("No escalations. The agent raises one when a customer threatens, asks for "
                   "a manager or for an exception; an approver over their limit sends one; a "
                   "refund the payment provider fails later raises one too.")
    for escalation in open_:
        render_escalation(worker, escalation)
    if taken:
        st.caption("Taken: " + "; ".join(
            f"{md(e.label)} on {md(e.run_id)} by {md(e.taken_by or '')} at "
            f"{views.clock(e.taken_at)}" for e in taken))


def render_escalation(worker: Worker, e: Escalation) -> None:
    with st.container(border=True, key=f"escalation_{e.id}"):
        st.markdown(f":red-badge[:material/priority_high: {md(e.label)}] · "
                    f":gray[{views.ago(e.raised_at)} by {md(e.raised_by)}]  \n{md(e.reason)}")
        with st.container(horizontal=True, gap="small"):
            st.button("Take it", key=f"take_{e.id}", icon=":material/front_hand:",
                      on_click=on_take, args=(worker, e.id), type="primary",
                      help="Pick this escalation up: your name and the time are recorded")
            st.button("Ticket", key=f"escalation_open_{e.id}", type="tertiary",
                      icon=":material/open_in_new:", on_click=select, args=(e.run_id,))


def _show_more(shown: int) -> None:
    st.session_state["queue_shown"] = shown + QUEUE_PAGE


def render_card(worker: Worker, approval: Approval, deciders: str | None = None) -> None:
    """A compact card: enough to pick it up, the decision itself is made in the review.
    ``deciders``: who can decide it, on a card the signed-in account cannot."""
    card = views.approval_card(approval, {}, None)
    flags = card_flags(worker, approval)
    store = worker.agent.store
    account = signed_in(Accounts(store)) if Accounts(store).exist() else None
    approve_label = views.card_approve_label(card.amount, account.limit if account else None,
                                             mine_before(worker, approval) / 100)
    with st.container(border=True, key=f"card_{card.approval_id}"):
        # The ticket's age, counted from when it came in, as the inbox counts it.
        opened = worker.agent.store.run(approval.run_id).created_at
        st.markdown(f"**{md(card.title)}** · :gray[{views.ago(opened)}]"
                    + "".join(f" {flag}" for flag in flags) + "  \n"
                    f":material/person: {md(card.customer)}")
        st.markdown("\n".join(f"- {md(line.summary)}" for line in card.lines))
        if deciders:
            st.caption(f":material/group: {md(deciders)}")
        with st.container(horizontal=True, gap="small"):
            st.button(approve_label, key=f"approve_{card.approval_id}", type="primary",
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
    # What you see is what you sign: a click reruns the script, which reads the approval
    # again, so the decision names the fingerprint of the review as drawn before the click.
    # A proposal that changed in between is refused (Store.decide), never decided unseen.
    shown = st.session_state.get(f"shown_{approval_id}", approval.fingerprint)
    st.session_state[f"shown_{approval_id}"] = approval.fingerprint
    card = views.approval_card(approval, agent.policy_facts(approval),
                               agent.approval_problem(approval))
    account = signed_in(Accounts(agent.store))
    if not Accounts(agent.store).exist() and not approver():
        # The demo's name is asked for here, where the decision is made: the queue's name
        # field is behind this dialog.
        with st.container(border=True):
            st.text_input("Your name (signs this decision in the audit log)",
                          key="review_name_input", placeholder="Your full name")
            show_notice("review_name")
            st.button("Save name", key="review_save_name", on_click=on_save_name,
                      args=("review_name_input", "review_name"), icon=":material/badge:")
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
            # The checkbox's own label is what a screen reader says: plain words, no Markdown
            # (a visible label is Markdown, read out with its asterisks and backslashes).
            count = f" · {md(line.units_label)}" if line.counted else ""
            with st.container(horizontal=True, vertical_alignment="center", gap="small"):
                st.checkbox(views.plain_line(line), value=True,
                            key=keep_key(approval_id, line.line),
                            label_visibility="collapsed", width="content")
                st.markdown(f"**{md(line.name)}**{count} · {md(line.reason_label)} · "
                            f"**{md(money(line.amount))}** :gray[· {md(line.basis)}]")
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
    # What this approver approved on the order before counts against their limit, and what
    # anyone approved on it counts toward two people, as the decision counts both.
    limit, before = account.limit if account else None, mine_before(worker, approval) / 100
    over = views.limit_notice(pays, limit, before)
    if mode == "approve" and over:  # the decision refuses it too (Store.decide); this says so
        st.warning(md(over), icon=":material/supervisor_account:")
    first = agent.store.signoff(approval_id)
    two = needs_two(round(pays * 100), agent.shop.info.desk.two_person_above_cents,
                    agent.store.approved_on(approval.order_id))
    if first is not None:
        st.info(f"**First sign-off by {md(first.by)}** at {views.clock(first.at)}: "
                f"{md(money(first.amount_cents / 100))} for {md(', '.join(first.keep))}"
                + (f". Their note: {md(first.note)}" if first.note else "")
                + ". A second, different person completes the refund with the same lines.",
                icon=":material/how_to_reg:")
    elif mode == "approve" and two:
        st.info("Refunds of this size need two people: your approval is the first sign-off, "
                "and a colleague completes it.", icon=":material/group:")
    if mode == "approve" and card.problem:
        st.error(f"The policy no longer allows this refund: {md(card.problem)}",
                 icon=":material/block:")
    st.text_input(NOTE_LABELS[mode], key=f"note_{approval_id}",
                  placeholder="In a sentence the customer can read")
    # Over the limit: no dead Approve, a hand-off to a lead instead (views.review_action).
    action = views.review_action(mode, pays, limit, before, two, first is not None,
                                 card.problem)
    go, cancel = st.columns(2)
    if go.button(action.label, key=f"confirm_{approval_id}", type="primary", width="stretch",
                 icon=":material/supervisor_account:" if action.hand_off else
                 ":material/gavel:", disabled=action.disabled):
        if (hand_off(worker, approval_id) if action.hand_off else
                decide(worker, approval_id, mode, items, counted(card), shown)):
            close_review()
            st.rerun()
    if cancel.button("Cancel", key=f"cancel_{approval_id}", width="stretch"):
        close_review()
        st.rerun()
    show_notice("review")   # after the buttons, so a refusal shows on the click that caused it


def counted(card: views.Card) -> list[tuple[str, int]]:
    """(sku, units proposed) of the card's lines of several units."""
    return [(line.line, line.units) for line in card.item_lines if line.counted]


def hand_off(worker: Worker, approval_id: str) -> bool:
    """Send the refund to a lead; False (with a message in the review) if refused."""
    who = signer(worker, "review")
    if who is None:
        return False
    try:
        worker.hand_off(approval_id, who[0], st.session_state.get(f"note_{approval_id}", ""))
    except AlreadyDecided as exc:
        notify("queue", "warning", str(exc))
        return True
    except RefundAgentError as exc:
        notify("review", "error", str(exc))
        return False
    notify("queue", "success", "Sent to a lead: it is in the escalation queue, and the refund "
                               "keeps waiting until a lead decides it.")
    return True


def decide(worker: Worker, approval_id: str, mode: str, items: list[str],
           proposed_units: Sequence[tuple[str, int]] = (), shown: str | None = None) -> bool:
    """Carry out the review's decision; False (with a message in the review) if refused."""
    who = signer(worker, "review")
    if who is None:
        return False
    by, limit_cents = who
    note = st.session_state.get(f"note_{approval_id}", "")
    try:
        if mode == "ask":
            decided = worker.ask(approval_id, by, note, fingerprint=shown)
        else:
            keep = ticked(approval_id, items) if mode == "approve" and items else None
            units = lowered_units(approval_id, proposed_units) if keep else {}
            decided = worker.decide(approval_id, mode == "approve", by, note, keep=keep,
                                    limit_cents=limit_cents, fingerprint=shown,
                                    units={k: v for k, v in units.items() if k in keep}
                                    if keep else None)
    except AlreadyDecided as exc:
        notify("queue", "warning", str(exc))
        return True    # nothing left to review
    except RefundAgentError as exc:  # no note, no line kept, over the limit, ...
        way = ""
        if mode == "approve" and limit_cents is not None:
            # Over the limit (with what they approved on the order before), the review redraws
            # with Send to a lead in place of Approve: the refusal names it.
            store = worker.agent.store
            refund = store.approval(approval_id)
            if handoff_needed(refund.amount_cents, limit_cents,
                              store.approved_on(refund.order_id, by)):
                way = " Send it to a lead with the button below."
        notify("review", "error", f"{exc}{way}")
        return False
    if decided.status == "pending":   # the first of two approvals
        notify("queue", "success", f"Signed off {money(decided.amount)} for order "
                                   f"{decided.order_id} as {by}: a second person completes it.")
        return True
    done = {"approved": f"Approved {money(decided.amount)}", "rejected": "Rejected the refund",
            "asked": "Sent your question to the customer"}[decided.status]
    declined = (f" (declined: {', '.join(line.name for line in decided.declined)})"
                if decided.declined else "")
    notify("queue", "success", f"{done} for order {decided.order_id} as {by}{declined}. "
                               "The agent carries on with the ticket.")
    select(decided.run_id)
    return True
