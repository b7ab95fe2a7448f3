"""The page's pure formatting helpers, tested with hand-made rows (no model, no Streamlit)."""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
from helpers.cli import DATA

from refund_agent.desk.policy import Held, quote_refund
from refund_agent.desk.shop import Shop
from refund_agent.models import Approval, ApprovalLine, AuditEntry, InboxRow, Run, RunStatus, Step
from refund_agent.text import plural
from refund_agent.web import views

NOW = 1_800_000_000.0
MAYA_LINES = [{"line": "POUR-GLS-01", "reason": "damaged", "amount_cents": 4800},
              {"line": "MUG-STN-2", "reason": "changed_mind", "amount_cents": 1850}]


def step(i: int, kind: str, by_pid: int = 100, **data) -> Step:
    return Step(id=i, run_id="run_1", at=NOW + i, pid=by_pid, kind=kind, data=data)


def make_run(**changes) -> Run:
    fields = dict(id="run_1", created_at=NOW - 120, kind="damaged", sender="maya@example.com",
                  sender_name="Maya Chen", subject="Coffee maker arrived cracked", email="Hi",
                  status=RunStatus.WAITING, last_response_id="resp_3", requests=3,
                  cost_ticks=100_000_000, input_tokens=2856, cached_tokens=1659,
                  output_tokens=300, simulated_replies=0, error=None, lease_pid=None,
                  last_pid=100, updated_at=NOW)
    fields.update(changes)
    return Run(**fields)


def audit_entry(i: int, event: str, pid: int, actor: str = "agent",
                lines: list[dict] | None = None) -> AuditEntry:
    return AuditEntry(id=i, at=NOW + i, event=event, actor=actor, pid=pid, run_id="run_1",
                      approval_id="call_9", order_id="A1043", amount=48.0, note=None,
                      lines=lines, prev_hash="0" * 64, hash=f"{i:064d}")


def line(sku: str, name: str, reason: str, cents: int, allowed: int, fee: int = 0,
         decision: str | None = None) -> ApprovalLine:
    return ApprovalLine(line=sku, name=name, reason=reason, amount_cents=cents,
                        allowed_cents=allowed, fee_cents=fee, decision=decision)


def make_approval(lines: list[ApprovalLine], order_id: str = "A1043", **changes) -> Approval:
    total = sum(x.amount_cents for x in lines)
    fields = dict(id="call_9", run_id="run_1", response_id="r3", call_id="call_9",
                  order_id=order_id, amount_cents=total, proposed_cents=total,
                  summary="Carafe damaged; mugs returned", customer="maya.chen@example.com",
                  status="pending", requested_at=NOW - 60, requested_pid=100, decided_by=None,
                  decided_at=None, decided_pid=None, note=None, lines=lines)
    fields.update(changes)
    return Approval(**fields)


CARAFE = line("POUR-GLS-01", "Glass pour-over coffee maker", "damaged", 4800, 4800)
MUGS = line("MUG-STN-2", "Stoneware mugs, set of 2", "changed_mind", 1850, 2600, 750)
SHIPPING = line("SHIPPING", "Shipping", "shipping", 695, 695)


def test_md_keeps_customer_text_literal():
    text = "I paid $94.95 and *want* it all back :angry: [now](http://x)\n\nPriya"
    out = views.md(text)
    # Every character that Streamlit Markdown would act on is escaped...
    assert "\\$94\\.95" in out and "\\*want\\*" in out and "\\:angry\\:" in out
    # (A URL gets a WORD JOINER after its scheme: escapes alone do not stop an autolink.)
    assert "\\[now\\]\\(http\u2060\\:" in out
    # ...and the email keeps its lines (hard breaks) and its paragraph break.
    assert out.splitlines() == ["I paid \\$94\\.95 and \\*want\\* it all back \\:angry\\: "
                                "\\[now\\]\\(http\u2060\\:\\/\\/x\\)  ", "", "Priya"]


def test_money_and_ago():
    assert views.money(48) == "$48.00"
    assert views.money(1234.5) == "$1,234.50"
    assert views.money(None) == ""
    assert views.ago(NOW - 10, NOW) == "just now"
    assert views.ago(NOW - 300, NOW) == "5 min ago"
    assert views.ago(NOW - 7200, NOW) == "2 h ago"


def test_every_status_has_a_label_and_badge():
    for status in RunStatus:
        view = views.status_view(status)
        assert view.label and view.badge.startswith(f":{view.color}-badge[")
    assert views.status_view("waiting").label == "Waiting for approval"


def test_run_label_and_cost_line():
    run = make_run()
    label = views.run_label(InboxRow(run=run, order_id="A1043", amount_cents=4800), now=NOW)
    # Waiting: the amount is what was proposed, not money paid (issue 36).
    assert label.startswith("**Maya Chen** · A1043 · \\$48\\.00 \\(proposed\\)  \n")
    assert "Waiting for approval" in label and "2 min ago" in label
    assert label.endswith("Coffee maker arrived cracked")
    # Nothing proposed yet: no order or amount to show, and none made up.
    bare = views.run_label(InboxRow(run=run, order_id=None, amount_cents=None), now=NOW)
    assert bare.startswith("**Maya Chen**  \n")
    assert views.cost_line(run) == ("3 model requests · $0.0100 · 1,659 of 2,856 input tokens "
                                    "cached")
    assert views.cost_line(make_run(requests=1, input_tokens=0)).startswith("1 model request ·")


def test_the_transcript_size_sits_next_to_the_cost():
    run = make_run(transcript_items=28, transcript_bytes=14_166)
    assert views.cost_line(run) == ("3 model requests · $0.0100 · 1,659 of 2,856 input tokens "
                                    "cached · transcript 28 items, 14.2 kB")
    assert views.cost_line(make_run(transcript_items=1, transcript_bytes=812)).endswith(
        "transcript 1 item, 812 B")


def test_a_resend_from_the_transcript_is_on_the_timeline():
    [block] = views.timeline([step(1, "resent", missing="resp_old", items=19, bytes=9_513,
                                   response_id="resp_new")])
    assert block.kind == "resent"
    assert block.title.startswith("The stored response resp_old was gone")
    assert "19 items, 9.5 kB" in block.title


def test_timeline_pairs_a_lookup_with_its_result():
    blocks = views.timeline([
        step(1, "email", **{"from": "maya@example.com", "name": "Maya Chen",
                            "subject": "Cracked", "body": "It broke"}),
        step(2, "reasoning", text="Look up the order."),
        step(3, "call", call_id="c1", name="lookup_order", arguments='{"order_id": "A1043"}'),
        step(4, "response", response_id="r1", seconds=1.25, input_tokens=596, cached_tokens=0,
             output_tokens=98, cost_ticks=33_000_000),
        step(5, "result", call_id="c1", name="lookup_order",
             output={"order_id": "A1043", "items": [{}, {}], "total": 80.95}),
    ])
    assert [b.kind for b in blocks] == ["email", "reasoning", "tool", "response"]
    email, _, tool, response = blocks
    assert email.title == "Maya Chen <maya@example.com>" and email.subtitle == "Cracked"
    assert tool.title == "lookup_order(order_id=A1043) → order A1043, 2 items, total $80.95"
    assert tool.arguments == {"order_id": "A1043"} and tool.result["total"] == 80.95
    assert response.title == ("Model request 1 · 1.2 s · 596 in (0 cached) / 98 out tokens · "
                              "$0.0033")


def test_timeline_of_a_refund_across_a_restart():
    paid = [{"line": "POUR-GLS-01", "item": "Glass pour-over coffee maker", "reason": "damaged",
             "amount": 48.0}]
    steps = [
        step(1, "call", call_id="r", name="issue_refund",
             arguments='{"order_id": "A1043", "lines": [{"line": "POUR-GLS-01", "reason": '
                       '"damaged"}], "summary": "Cracked carafe"}'),
        step(2, "response", response_id="r3"),
        step(3, "approval", approval_id="r", order_id="A1043", amount=48.0,
             summary="Cracked carafe", lines=MAYA_LINES[:1]),
        step(4, "decision", by_pid=200, approval_id="r", decision="approved", by="Dana",
             note=None, amount=48.0, declined=[]),
        step(5, "restart", by_pid=200, pid=200, previous_pid=100),
        step(6, "result", by_pid=200, call_id="r", name="issue_refund",
             output={"status": "refunded", "refund_id": "re_1", "amount": 48.0, "lines": paid}),
        step(7, "refund", by_pid=200, status="refunded", refund_id="re_1", amount=48.0,
             approved_by="Dana", lines=paid, reused=True),
        step(8, "message", by_pid=200, to="maya@example.com", body="Refunded.\n\nWarmly"),
        step(9, "note", by_pid=200, text="Refunded $48.00."),
        step(10, "error", message="boom"),
        step(11, "stopped"),
    ]
    blocks = views.timeline(steps)
    kinds = [b.kind for b in blocks]
    assert kinds == ["tool", "response", "proposal", "decision", "restart", "result", "refund",
                     "message", "note", "error", "stopped"]
    by_kind = {b.kind: b for b in blocks}
    # The refund call waits for a person, so its result is shown where it happened.
    assert by_kind["tool"].result is None and by_kind["tool"].result_below
    assert by_kind["result"].title == "issue_refund → refunded $48.00 (re_1)"
    assert by_kind["proposal"].title.startswith("Proposed refund $48.00 on order A1043")
    assert by_kind["proposal"].body == "Cracked carafe"
    assert by_kind["proposal"].lines == ("POUR-GLS-01 damaged $48.00",)
    assert by_kind["decision"].title == "Approved by Dana"
    assert by_kind["decision"].lines == ("Pays $48.00",)
    assert by_kind["refund"].lines == ("POUR-GLS-01 damaged $48.00 (Glass pour-over coffee "
                                       "maker)",)
    assert by_kind["restart"].title.startswith("Server restarted: process 200 picked up")
    assert by_kind["restart"].pid == 200
    assert "reused, not repeated" in by_kind["refund"].title
    assert by_kind["message"].title == "Email to maya@example.com"


def test_timeline_of_a_partial_approval_shows_what_was_declined():
    blocks = views.timeline([
        step(1, "approval", approval_id="r", order_id="A1043", amount=66.5,
             summary="Carafe damaged; mugs returned", lines=MAYA_LINES),
        step(2, "decision", approval_id="r", decision="approved", by="Dana",
             note="Mugs were used", amount=48.0, declined=["MUG-STN-2"]),
        step(3, "refund", status="refunded", refund_id="re_1", amount=48.0, approved_by="Dana",
             lines=[{"line": "POUR-GLS-01", "item": "Glass pour-over coffee maker",
                     "reason": "damaged", "amount": 48.0}],
             declined=[{"line": "MUG-STN-2", "item": "Stoneware mugs, set of 2"}],
             note="Mugs were used", reused=False),
    ])
    proposal, decision, refund = blocks
    assert proposal.title.startswith("Proposed refund $66.50 on order A1043")
    assert proposal.lines == ("POUR-GLS-01 damaged $48.00", "MUG-STN-2 changed_mind $18.50")
    assert decision.title == "Approved by Dana" and decision.body == "Mugs were used"
    assert decision.lines == ("Pays $48.00", "Declined: MUG-STN-2")
    assert refund.title == "Refund re_1 issued: $48.00" and "reused" not in refund.title
    assert refund.lines == ("POUR-GLS-01 damaged $48.00 (Glass pour-over coffee maker)",
                            "Declined: MUG-STN-2 (Stoneware mugs, set of 2)")
    assert refund.body == "Mugs were used"


def test_timeline_reads_steps_from_before_itemized_refunds():
    blocks = views.timeline([
        step(1, "approval", approval_id="r", order_id="A1043", amount=48.0,
             reason="Cracked carafe"),
        step(2, "decision", approval_id="r", decision="approved", by="Dana", note=None),
        step(3, "refund", status="refunded", refund_id="re_1", amount=48.0, reused=False),
    ])
    assert [b.body for b in blocks] == ["Cracked carafe", "", ""]
    assert [b.lines for b in blocks] == [(), (), ()]
    assert blocks[2].title == "Refund re_1 issued: $48.00"


def test_commentary_next_to_a_call_does_not_split_it_from_its_result():
    blocks = views.timeline([
        step(1, "call", call_id="c1", name="lookup_order", arguments='{"order_id": "A1"}'),
        step(2, "text", text="Let me check that order."),
        step(3, "response", response_id="r1"),
        step(4, "result", call_id="c1", name="lookup_order", output={"error": "No order A1"}),
    ])
    assert [b.kind for b in blocks] == ["tool", "text", "response"]
    assert blocks[0].title.endswith("→ error: No order A1") and not blocks[0].result_below


def test_timeline_marks_simulated_replies():
    blocks = views.timeline([step(1, "reply", text="Not enough!", simulated=True),
                             step(2, "reply", text="Fine.", simulated=False),
                             step(3, "customer_done"),
                             step(4, "decision", decision="rejected", by="Dana", note="Used")])
    # Who wrote it is a flag the page shows once, as a badge, not also in the title.
    assert blocks[0].simulated and blocks[0].title == "Customer replied"
    assert not blocks[1].simulated and blocks[1].title == "Customer replied"
    assert blocks[2].kind == "customer_done"
    assert blocks[3].title == "Rejected by Dana" and blocks[3].body == "Used"


def test_inbox_filters_counts_pages_and_plurals():
    counts = dict.fromkeys(RunStatus, 0) | {RunStatus.WAITING: 12, RunStatus.DONE: 100,
                                            RunStatus.FAILED: 3, RunStatus.STOPPED: 2}
    labels = {f.key: views.filter_label(f, counts) for f in views.INBOX_FILTERS}
    assert labels == {"all": "All 117", "waiting": "Waiting for approval 12",
                      "asked": "Waiting on customer 0", "working": "Working 0",
                      "done": "Done 100", "failed": "Failed or stopped 5"}
    # Every status is in exactly one filter besides "All": none is unreachable.
    grouped = [s for f in views.INBOX_FILTERS for s in f.statuses]
    assert sorted(grouped) == sorted(RunStatus)
    assert views.page_range(50, 50, 120) == "51–100 of 120"
    assert views.page_range(0, 0, 0) == "No tickets"
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(2, "entry", "entries") == "2 entries"


def test_an_email_without_a_name_shows_the_address_once():
    (block,) = views.timeline([step(1, "email", **{"from": "x@example.com",
                                                   "name": "x@example.com",
                                                   "subject": "Hi", "body": "It broke"})])
    assert block.title == "x@example.com"


def test_result_summary_for_errors_and_unknown_tools():
    assert views.result_summary("lookup_order", {"error": "No order X1"}) == "error: No order X1"
    facts = {"lines": [{"line": "GIFT-50", "status": "final sale"},
                       {"line": "SKL-CI-10", "status": "refundable"}], "left_to_refund": 94.95}
    assert views.result_summary("check_refund_policy", {"facts": facts}) == \
        "1 of 2 lines refundable, $94.95 left to refund"
    # A result recorded before refunds were itemized still reads.
    assert views.result_summary("check_refund_policy", {"facts": {"max_refund": 31.5}}) == \
        "policy allows at most $31.50"
    assert views.result_summary("issue_refund", {"status": "rejected", "rejected_by": "Dana"}) \
        == "rejected by Dana"
    assert views.call_summary("x", "not json") == "x(not json)"


def test_live_titles():
    assert views.live_title(views.LiveSegment("reasoning", "hm")) == "Thinking…"
    assert views.live_title(views.LiveSegment("text", "Dear")) == "Writing…"
    assert views.live_title(views.LiveSegment("call", "{", "issue_refund")) == \
        "Calling issue\\_refund…"   # the name is the model's: escaped like any outside text


def test_approval_card_shows_each_line_and_what_the_policy_allows():
    approval = make_approval([CARAFE, MUGS])
    facts = {"days_since_delivery": 1, "window_days": 30, "within_window": True,
             "lines": [{"line": "POUR-GLS-01", "name": "Glass pour-over coffee maker",
                        "line_total": 48.0, "status": "refundable"},
                       {"line": "MUG-STN-2", "name": "Stoneware mugs, set of 2",
                        "line_total": 26.0, "status": "refundable"}],
             "return_fee": 7.5, "return_fee_per": "refund",
             "paid": 80.95, "refunded_so_far": 0.0, "left_to_refund": 80.95}
    card = views.approval_card(approval, facts, None, now=NOW)
    assert card.title == "$66.50 for order A1043" and card.within_policy
    assert card.summary == "Carafe damaged; mugs returned"
    assert [(x.summary, x.basis) for x in card.lines] == [
        ("Glass pour-over coffee maker · damaged · $48.00", "POUR-GLS-01 · full value $48.00"),
        ("Stoneware mugs, set of 2 · changed mind · $18.50",
         "MUG-STN-2 · $26.00 less a $7.50 return fee"),
    ]
    assert [x.line for x in card.item_lines] == ["POUR-GLS-01", "MUG-STN-2"]
    assert card.shipping_lines == []
    # The order has no lines outside this refund, so no "Other lines" row; no max_refund.
    assert dict(card.facts) == {
        "Delivered": "1 day ago, inside the 30-day window",
        "Return fee": "$7.50 per refund, shared by its changed-mind lines",
        "Paid": "$80.95, refunded so far $0.00, left $80.95",
    }
    assert card.requested == "requested 1 min ago by process 100"
    late = views.approval_card(approval, facts, "Order A1043 was delivered 40 days ago",
                               now=NOW)
    assert not late.within_policy and late.problem
    assert dict(views.fact_rows({"days_since_delivery": None}))["Delivered"] == "not yet"


def test_approval_card_lists_shipping_and_the_order_s_other_lines():
    skillet = line("SKL-CI-10", "Cast iron skillet, 10 inch", "damaged", 3900, 3900)
    approval = make_approval([skillet, SHIPPING], order_id="A1066")
    facts = {"days_since_delivery": 6, "window_days": 30, "within_window": True,
             "lines": [{"line": "GIFT-50", "name": "Gift card, $50", "line_total": 50.0,
                        "status": "final sale"},
                       {"line": "SKL-CI-10", "name": "Cast iron skillet, 10 inch",
                        "line_total": 39.0, "status": "refundable"}],
             "return_fee": 7.5, "return_fee_per": "refund", "paid": 94.95,
             "refunded_so_far": 0.0, "left_to_refund": 94.95}
    card = views.approval_card(approval, facts, None, now=NOW)
    assert [x.line for x in card.item_lines] == ["SKL-CI-10"]
    (ship,) = card.shipping_lines
    assert not ship.tickable and ship.summary == "Shipping · $6.95"
    assert ship.basis.startswith("refunded because every item arrived damaged")
    rows = dict(card.facts)
    assert rows["Other lines"] == "Gift card, $50 $50.00 (final sale)"
    assert "Return fee" not in rows  # nothing in this refund is returned for a change of mind


def test_kept_lines_are_priced_by_the_policy():
    shop = Shop(DATA)
    order = shop.order("A1043")
    approval = make_approval([CARAFE, MUGS])
    card = views.approval_card(approval, {}, None, now=NOW)

    def notice(keep, held=None):
        # Priced as Agent.quote_kept prices it: the proposal's reasons, the kept lines.
        reasons = {x.line: x.reason for x in approval.item_lines}
        quote = quote_refund(order, shop.terms, [(k, reasons[k]) for k in keep], held or {},
                             shop.today, shipping=False)
        return quote, views.kept_notice(card, keep, quote)

    assert views.kept_notice(card, ["POUR-GLS-01", "MUG-STN-2"], None) is None
    quote, (kind, text) = notice(["POUR-GLS-01"])
    assert quote.amount == 48.0 and quote.line_ids() == ["POUR-GLS-01"]
    assert kind == "info" and text == ("Approving pays $48.00 for the ticked lines instead of "
                                       "$66.50. Declined: Stoneware mugs, set of 2.")
    # Alone, the mugs carry the whole per-refund return fee.
    quote, (kind, text) = notice(["MUG-STN-2"])
    assert quote.amount == 18.5 and "pays $18.50" in text
    assert views.kept_notice(card, [], None) == (
        "warning", "No line is ticked. To refund nothing, reject with a note instead.")
    # A line another refund has taken since: the page says why before anyone clicks.
    taken = {"POUR-GLS-01": Held("damaged", "refunded", "approval call_1", 4800)}
    _, (kind, text) = notice(["POUR-GLS-01"], taken)
    assert kind == "warning" and text.startswith("The ticked lines cannot be approved: ")
    assert "already been refunded" in text
    # Without a quote the sum of the ticked lines is shown, and called an estimate.
    kind, text = views.kept_notice(card, ["MUG-STN-2"], None)
    assert kind == "info" and "about $18.50" in text and "estimate" in text


def test_over_the_limit_with_what_was_approved_before_the_review_offers_a_lead():
    """Issue 33.2: Ana ($50.00 per order) approved $48.00 on the order; the $32.95 refund is
    within her limit alone, above it with the $48.00. The page's buttons must offer the
    hand-off that works, not a green Approve the decision then refuses."""
    assert views.limit_notice(32.95, 50.0) is None                 # alone: within the limit
    over = views.limit_notice(32.95, 50.0, before=48.0)
    assert over == ("Needs a lead: $32.95 would bring what you approved on this order to "
                    "$80.95 ($48.00 before), above your approval limit of $50.00 per order. "
                    "Send it to a lead (you can still reject it, or untick lines to bring it "
                    "within your limit).")
    assert views.limit_notice(2.0, 50.0, before=48.0) is None      # up to the limit, inclusive

    stuck = views.review_action("approve", 32.95, 50.0, before=48.0)
    assert stuck == views.ReviewAction("Send to a lead", hand_off=True, disabled=False)
    # Even when the policy also objects: the hand-off stays clickable.
    assert views.review_action("approve", 32.95, 50.0, 48.0, problem="x").hand_off
    assert views.card_approve_label(32.95, 50.0, before=48.0) == "Send to a lead…"
    # Within the limit, or with no limit (a lead, the demo): Approve as before.
    assert views.card_approve_label(32.95, 50.0) == "Approve…"
    assert views.card_approve_label(32.95, None, before=48.0) == "Approve…"
    assert views.review_action("approve", 32.95, None, 48.0) == views.ReviewAction(
        "Approve $32.95", hand_off=False, disabled=False)
    assert views.review_action("approve", 32.95, 50.0, problem="gone").disabled
    # Two people for the order's total, before and after the first sign-off.
    assert views.review_action("approve", 32.95, None, two=True).label == \
        "Sign off $32.95 (first of two)"
    assert views.review_action("approve", 32.95, None, two=True, signed_off=True).label == \
        "Approve $32.95"
    # The other modes never hand off.
    assert views.review_action("reject", 32.95, 50.0, 48.0) == views.ReviewAction(
        "Reject the refund", hand_off=False, disabled=False)
    assert views.review_action("ask", 32.95, 50.0, 48.0).label == "Send the question"


def test_audit_frame_and_csv_are_newest_first():
    entries = [audit_entry(1, "requested", 100, lines=MAYA_LINES),
               audit_entry(2, "approved", 200, "Dana", lines=MAYA_LINES[:1]),
               audit_entry(3, "issued", 200, "payments", lines=MAYA_LINES[:1]),
               audit_entry(4, "ignored", 300, "Sam")]
    frame = views.audit_frame(entries)
    assert list(frame.columns) == views.AUDIT_COLUMNS
    assert list(frame["Event"]) == ["ignored", "issued", "approved", "requested"]
    assert list(frame["PID"]) == [300, 200, 200, 100]
    assert frame["Amount"][1] == "$48.00"
    assert list(frame["Lines"]) == ["", "POUR-GLS-01 damaged $48.00",
                                    "POUR-GLS-01 damaged $48.00",
                                    "POUR-GLS-01 damaged $48.00; MUG-STN-2 changed_mind $18.50"]
    csv = pd.read_csv(io.BytesIO(views.audit_csv(entries)), keep_default_na=False)
    assert list(csv["event"]) == ["ignored", "issued", "approved", "requested"]
    assert list(csv.columns)[:len(views.CSV_FIRST)] == views.CSV_FIRST
    assert set(AuditEntry.model_fields) <= set(csv.columns)  # every field, hashes included
    assert json.loads(csv["lines"][3]) == MAYA_LINES and csv["lines"][0] == ""
    assert views.audit_frame([]).empty


def test_lines_text_reads_every_shape_the_log_records():
    # A refused request names lines without amounts; a refund step has dollars.
    assert views.lines_text([{"line": "GIFT-50", "reason": "damaged"}]) == "GIFT-50 damaged"
    assert views.line_text({"line": "SKL-CI-10", "reason": "changed_mind", "amount": 31.5}) == \
        "SKL-CI-10 changed_mind $31.50"
    assert views.lines_text(None) == ""


def test_the_terminal_names_a_sender_once_too(capsys):
    from refund_agent.cli import Printer
    Printer().step(step(1, "email", **{"from": "x@example.com", "name": "x@example.com",
                                       "subject": "Hi", "body": "It broke"}))
    out = capsys.readouterr().out
    assert "Email from x@example.com: Hi" in out and "<x@example.com>" not in out


def test_the_views_stay_pure_and_the_package_names_what_it_exports():
    """One module per page area, none importing Streamlit or the store (they format rows the
    caller hands them); the package's __all__ is what the page and the tests call."""
    import ast
    from pathlib import Path

    folder = Path(views.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.startswith(("streamlit", "store"))
                        or ".store" in n], (path.name, names)
    assert {name for name in views.__all__ if not hasattr(views, name)} == set()


def test_an_amount_that_moved_no_money_says_proposed_in_the_inbox_table_and_csv():
    """Issue 36: the audit's `asked` row and a rejected ticket's inbox entry showed $48.00 as
    if it was paid (old code: "$48.00" in both, no word about it being only proposed)."""
    run = make_run(status="done", desk_status="rejected")
    rejected = views.run_label(InboxRow(run=run, order_id="A1043", amount_cents=4800,
                                        desk="rejected"), now=NOW)
    assert "\\$48\\.00 \\(proposed\\)" in rejected
    paid = views.run_label(InboxRow(run=run, order_id="A1043", amount_cents=4800, desk="paid"),
                           now=NOW)
    assert "\\$48\\.00  \n" in paid and "proposed" not in paid
    entries = [amount_entry(1, "requested", 48.0), amount_entry(2, "asked", 48.0),
               amount_entry(3, "approved", 48.0), amount_entry(4, "issued", 48.0),
               amount_entry(5, "account_added", None)]
    frame = views.audit_frame(entries)
    assert dict(zip(frame["Event"], frame["Amount"], strict=True)) == {
        "requested": "$48.00 (proposed)", "asked": "$48.00 (proposed)",
        "approved": "$48.00", "issued": "$48.00", "account_added": ""}
    rows = list(csv.DictReader(io.StringIO(views.audit_csv(entries).decode())))
    assert {r["event"]: (r["amount"], r["amount_is"]) for r in rows} == {
        "requested": ("48.0", "proposed"), "asked": ("48.0", "proposed"),
        "approved": ("48.0", "paid"), "issued": ("48.0", "paid"), "account_added": ("", "")}


def amount_entry(i: int, event: str, amount: float | None) -> AuditEntry:
    return AuditEntry(id=i, at=NOW, event=event, actor="Dana", pid=1, run_id="run_1",
                      approval_id="a", order_id="A1043", amount=amount, note=None,
                      prev_hash="", hash="")


def test_server_restarted_only_when_a_page_server_took_over_from_a_page_server():
    """Issue 36: a ticket only terminal commands drove said "Server restarted" (old code: the
    words for every change of process)."""
    def title(**d):
        (block,) = views.timeline([step(1, "restart", previous_pid=100, pid=200, **d)])
        return block.title
    assert title(front="page", previous_front="page").startswith("Server restarted: process 200")
    by_terminal = title(front="terminal", previous_front="terminal")
    assert "Server restarted" not in by_terminal
    assert by_terminal.startswith("Continued by a terminal command: process 200 picked up")
    assert "Server restarted" not in title(front="terminal", previous_front="page")
    assert "Server restarted" not in title(front="page", previous_front="terminal")
    assert title().startswith("Server restarted")   # a step from before schema 15


def test_the_thread_folds_the_agents_steps_under_each_email_in():
    """Issue 36, item 10: the ticket as a thread. Each email in opens a turn; the agent's
    reasoning, calls, results and model responses fold under it; the emails out, proposals,
    decisions and the latest note stay in view, in order."""
    blocks = views.timeline([
        step(1, "email", **{"from": "maya@example.com"}, name="Maya", subject="Cracked",
             body="It arrived cracked."),
        step(2, "reasoning", text="Look the order up."),
        step(3, "call", call_id="c1", name="lookup_order", arguments='{"order_id": "A1043"}'),
        step(4, "result", call_id="c1", name="lookup_order", output='{"ok": true}'),
        step(5, "response", response_id="r1", input_tokens=10, cached_tokens=0,
             output_tokens=5, cost_ticks=0, seconds=1.0),
        step(6, "message", to="maya@example.com", body="Sorry to hear that."),
        step(7, "note", text="Asked for a photo."),
        step(8, "reply", text="Here is the photo.", simulated=False),
        step(9, "reasoning", text="Refund it."),
        step(10, "note", text="Refund proposed."),
    ])
    first, second = views.thread(blocks)
    assert first.opening.kind == "email" and second.opening.kind == "reply"
    assert [b.kind for b in first.steps] == ["reasoning", "tool", "response", "note"]
    assert [b.kind for b in first.shown] == ["message"]
    assert [b.kind for b in second.steps] == ["reasoning"]
    assert [b.kind for b in second.shown] == ["note"]     # the latest note stays in view
    assert first.summary() == ("Agent's steps: 1 reasoning, 1 tool call, 1 model response, "
                               "1 note")
