"""What a model or a person writes is capped: over-long tool arguments are tool errors the
model recovers from, the model's own notes are cut with a marker, a person's note is refused
with a clear message. A 2 MB summary once froze the review for two minutes and grew the store
by 12.8 MB. Through the real SDK, with a scripted model.
"""
from __future__ import annotations

import json

import pytest
from helpers import page

from offline_model.brain import Reply
from refund_agent import DecisionRefused, RunStatus
from refund_agent.desk.tools import MAX_MESSAGE_CHARS, MAX_SUMMARY_CHARS, tool_schemas
from refund_agent.intake import MAX_NOTE_CHARS
from refund_agent.turns import MAX_MODEL_TEXT_CHARS

output, store = page.output, page.store  # the page's fixtures (tests/helpers/page.py)

COFFEE_MAKER = [{"line": "POUR-GLS-01", "reason": "damaged"}]


def _refund(summary: str, lines=COFFEE_MAKER) -> Reply:
    return Reply("propose", calls=[("issue_refund", {"order_id": "A1043", "lines": lines,
                                                     "amount": None, "summary": summary})])


def _outputs(brain) -> list[dict]:
    seen = {item["call_id"]: json.loads(item["output"]) for conv in brain.seen
            for item in conv if item.get("type") == "function_call_output"}
    return list(seen.values())


def test_an_over_long_summary_is_a_tool_error_and_a_short_one_is_proposed(scripted):
    huge = "Refund it. " * 200_000      # 2.2 MB
    agent, brain, _server = scripted(_refund(huge), _refund("The carafe arrived cracked."))
    run = agent.advance(agent.start_sample("damaged").id)
    # The model was told why, and its second, short proposal waits for a person.
    assert run.status == RunStatus.WAITING
    [error] = [o["error"] for o in _outputs(brain) if "error" in o]
    assert error.startswith("Invalid arguments for issue_refund: summary:")
    assert f"{len(huge):,} characters long; write at most {MAX_SUMMARY_CHARS:,}" in error
    [approval] = agent.store.approvals("pending")
    assert approval.summary == "The carafe arrived cracked."
    # The timeline shows the refused call's arguments cut short, not 2 MB of them.
    shown = [s.data["arguments"] for s in agent.store.steps(run.id) if s.kind == "call"][0]
    assert len(shown) < MAX_MODEL_TEXT_CHARS + 100 and shown.endswith("more characters not kept]")


def test_a_summary_at_the_cap_is_accepted(scripted):
    agent, _brain, _server = scripted(_refund("x" * MAX_SUMMARY_CHARS))
    assert agent.advance(agent.start_sample("damaged").id).status == RunStatus.WAITING


def test_an_over_long_sku_is_a_tool_error(scripted):
    agent, brain, _server = scripted(_refund("ok", [{"line": "S" * 5000, "reason": "damaged"}]))
    assert agent.advance(agent.start_sample("damaged").id).status == RunStatus.DONE
    [error] = [o["error"] for o in _outputs(brain)]
    assert "lines.0.line" in error and "sku is 5,000 characters long" in error


def test_an_over_long_customer_message_is_never_sent(scripted):
    agent, brain, _server = scripted(
        Reply("mail", calls=[("send_customer_message", {"message": "a" * (MAX_MESSAGE_CHARS
                                                                          + 1)})]),
        Reply("mail", calls=[("send_customer_message", {"message": "Your refund is on its "
                                                                   "way."})]))
    assert agent.advance(agent.start_sample("damaged").id).status == RunStatus.DONE
    errors = [o["error"] for o in _outputs(brain) if "error" in o]
    assert len(errors) == 1 and "message is 10,001 characters long" in errors[0]
    [sent] = agent.outbox.messages()
    assert sent["request"]["body"].startswith("Your refund is on its way.")


def test_the_model_note_is_cut_with_a_marker(scripted):
    agent, _brain, _server = scripted(Reply("x" * 50_000, "n" * 3_000_000))
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.DONE
    steps = {s.kind: s.data for s in agent.store.steps(run.id)}
    note, reasoning = steps["note"]["text"], steps["reasoning"]["text"]
    assert note.startswith("n" * MAX_MODEL_TEXT_CHARS)
    assert note.endswith("[... 2,990,000 more characters not kept]")
    assert reasoning.endswith("[... 40,000 more characters not kept]")


def test_the_tool_schemas_do_not_change():
    """The caps are validators: the schemas the model is sent (and their size) stay put."""
    text = json.dumps(tool_schemas())
    assert "maxLength" not in text and "1000" not in text


@pytest.mark.parametrize("what", ["note", "question"])
def test_a_persons_over_long_note_is_refused_and_loses_nothing(agent, what):
    agent.advance(agent.start_sample("damaged").id)
    [approval] = agent.store.approvals("pending")
    long = "w" * (MAX_NOTE_CHARS + 1)
    with pytest.raises(DecisionRefused, match=f"The {what} is 2,001 characters long; keep it "
                                              f"to 2,000 or fewer."):
        if what == "note":
            agent.decide(approval.id, False, "Lee Park", long,
                         fingerprint=agent.store.approval(approval.id).fingerprint)
        else:
            agent.ask(approval.id, "Lee Park", long,
                      fingerprint=agent.store.approval(approval.id).fingerprint)
    # Still pending: a shorter note decides it.
    assert [a.id for a in agent.store.approvals("pending")] == [approval.id]
    agent.decide(approval.id, False, "Lee Park", "w" * MAX_NOTE_CHARS,
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.store.approvals("pending") == []


def test_the_page_refuses_an_over_long_note_and_keeps_it(output, store):
    from helpers.page import confirm, decide, open_page, save_name, shows, start_damaged

    at = open_page()
    approval = start_damaged(at, store)
    save_name(at, "Dana Kim")
    long = "The carafe is covered by the courier claim. " * 50     # 2,250 characters
    decide(at, approval.id, "reject", long)
    assert shows(at, f"The note is {len(long.strip()):,} characters long; keep it to 2,000 or "
                     "fewer.", "error")
    assert store.approval(approval.id).status == "pending" and not at.exception
    assert at.session_state[f"note_{approval.id}"] == long          # nothing typed is lost
    confirm(at, approval.id, long[:1_000])
    assert store.approval(approval.id).status == "rejected"
