"""The page's pure formatting helpers, tested with hand-made rows (no model, no Streamlit)."""

from __future__ import annotations

import io

import pandas as pd

from refund_agent import views
from refund_agent.models import Approval, AuditEntry, Run, RunStatus, Step

NOW = 1_800_000_000.0


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


def audit_entry(i: int, event: str, pid: int, actor: str = "agent") -> AuditEntry:
    return AuditEntry(id=i, at=NOW + i, event=event, actor=actor, pid=pid, run_id="run_1",
                      approval_id="call_9", order_id="A1043", amount=48.0, note=None,
                      prev_hash="0" * 64, hash=f"{i:064d}")


def test_md_keeps_customer_text_literal():
    text = "I paid $94.95 and *want* it all back :angry: [now](http://x)\n\nPriya"
    out = views.md(text)
    # Every character that Streamlit Markdown would act on is escaped...
    assert "\\$94\\.95" in out and "\\*want\\*" in out and "\\:angry\\:" in out
    assert "\\[now\\]\\(http\\:" in out
    # ...and the email keeps its lines (hard breaks) and its paragraph break.
    assert out.splitlines() == ["I paid \\$94\\.95 and \\*want\\* it all back \\:angry\\: "
                                "\\[now\\]\\(http\\:\\/\\/x\\)  ", "", "Priya"]


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
    label = views.run_label(run, now=NOW)
    assert label.startswith("**Maya Chen** · Coffee maker arrived cracked")
    assert "Waiting for approval" in label and "2 min ago" in label
    assert views.cost_line(run) == ("3 model requests · $0.0100 · 1,659 of 2,856 input tokens "
                                    "cached")
    assert views.cost_line(make_run(requests=1, input_tokens=0)).startswith("1 model request ·")


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
    steps = [
        step(1, "call", call_id="r", name="issue_refund",
             arguments='{"order_id": "A1043", "amount": 48.0, "reason": "Cracked carafe"}'),
        step(2, "response", response_id="r3"),
        step(3, "approval", approval_id="r", order_id="A1043", amount=48.0,
             reason="Cracked carafe"),
        step(4, "decision", by_pid=200, approval_id="r", decision="approved", by="Dana",
             note=None),
        step(5, "restart", by_pid=200, pid=200, previous_pid=100),
        step(6, "result", by_pid=200, call_id="r", name="issue_refund",
             output={"status": "refunded", "refund_id": "re_1", "amount": 48.0}),
        step(7, "refund", by_pid=200, status="refunded", refund_id="re_1", amount=48.0,
             reused=True),
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
    assert by_kind["decision"].title == "Approved by Dana"
    assert by_kind["restart"].title.startswith("Server restarted: process 200 picked up")
    assert by_kind["restart"].pid == 200
    assert "reused, not repeated" in by_kind["refund"].title
    assert by_kind["message"].title == "Email to maya@example.com"


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
    assert blocks[0].simulated and "written by the model" in blocks[0].title
    assert not blocks[1].simulated and blocks[1].title == "Customer replied"
    assert blocks[2].kind == "customer_done"
    assert blocks[3].title == "Rejected by Dana" and blocks[3].body == "Used"


def test_result_summary_for_errors_and_unknown_tools():
    assert views.result_summary("lookup_order", {"error": "No order X1"}) == "error: No order X1"
    assert views.result_summary("check_refund_policy", {"facts": {"max_refund": 31.5}}) == \
        "policy allows at most $31.50"
    assert views.result_summary("issue_refund", {"status": "rejected", "rejected_by": "Dana"}) \
        == "rejected by Dana"
    assert views.call_summary("x", "not json") == "x(not json)"


def test_live_titles():
    assert views.live_title(views.LiveSegment("reasoning", "hm")) == "Thinking…"
    assert views.live_title(views.LiveSegment("text", "Dear")) == "Writing…"
    assert views.live_title(views.LiveSegment("call", "{", "issue_refund")) == \
        "Calling issue_refund…"


def test_approval_card_shows_facts_and_the_policy_limit():
    approval = Approval(id="call_9", run_id="run_1", response_id="r3", call_id="call_9",
                        order_id="A1066", amount=31.5, reason="Skillet, less the return fee",
                        customer="priya@example.com", status="pending", requested_at=NOW - 60,
                        requested_pid=100, decided_by=None, decided_at=None, decided_pid=None,
                        note=None)
    facts = {"days_since_delivery": 6, "window_days": 30, "within_window": True,
             "items": [{"name": "Gift card", "price": 50.0, "final_sale": True},
                       {"name": "Skillet", "price": 39.0, "final_sale": False}],
             "paid": 94.95, "refunded_so_far": 0.0, "left_to_refund": 94.95, "max_refund": 39.0}
    card = views.approval_card(approval, facts, None, now=NOW)
    assert card.title == "$31.50 for order A1066" and card.within_policy
    assert dict(card.facts) == {
        "Delivered": "6 days ago, inside the 30-day window",
        "Items": "Gift card $50.00 (final sale); Skillet $39.00",
        "Paid": "$94.95, refunded so far $0.00, left $94.95",
    }
    assert card.requested == "requested 1 min ago by process 100"
    late = views.approval_card(approval, {**facts, "max_refund": 0.0}, "Order A1066 cannot be "
                               "refunded", now=NOW)
    assert not late.within_policy and late.problem
    assert dict(views.fact_rows({"days_since_delivery": None}))["Delivered"] == "not yet"


def test_audit_frame_and_csv_are_newest_first():
    entries = [audit_entry(1, "requested", 100), audit_entry(2, "approved", 200, "Dana"),
               audit_entry(3, "issued", 200, "payments")]
    frame = views.audit_frame(entries)
    assert list(frame.columns) == views.AUDIT_COLUMNS
    assert list(frame["Event"]) == ["issued", "approved", "requested"]
    assert list(frame["PID"]) == [200, 200, 100]
    assert frame["Amount"][0] == "$48.00"
    csv = pd.read_csv(io.BytesIO(views.audit_csv(entries)))
    assert list(csv["event"]) == ["issued", "approved", "requested"]
    assert {"prev_hash", "hash", "pid"} <= set(csv.columns)
    assert views.audit_frame([]).empty
