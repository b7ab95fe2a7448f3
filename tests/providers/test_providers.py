"""The provider as it answers: error bodies in every shape, the stored response gone in every
form, efforts only where a model takes them, and the stand-in speaking xAI's and OpenAI's
dialects (through the real openai SDK)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from offline_model import OfflineServer
from refund_agent import RunStatus, Settings
from refund_agent.desk import Agent
from refund_agent.providers.client import ModelAccess, ProviderClient
from refund_agent.providers.stored import response_gone
from refund_agent.providers.table import (
    effort_for,
    estimate_cost_ticks,
    low_effort,
    needs_include,
    read_error,
)

APPROVER = "Dana Kim"


@pytest.fixture
def desk(settings: Settings) -> Iterator:
    """make(dialect=..., **server options) -> (agent, server), torn down after the test."""
    opened: list[OfflineServer] = []

    def make(dialect: str = "xai", model: str | None = None, effort: str | None = "low",
             **options) -> tuple[Agent, OfflineServer]:
        server = OfflineServer(settings.output_dir / f"{dialect}.sqlite3", faults=[],
                               dialect=dialect, **options).start()
        opened.append(server)
        chosen = settings.with_(provider=dialect, model=model or (
            "grok-4.7" if dialect == "xai" else "gpt-5-mini"), reasoning_effort=effort)
        client = ProviderClient(base_url=server.base_url, api_key="offline-stand-in",
                                max_retries=chosen.max_retries, timeout=chosen.timeout)
        return Agent(chosen, model=ModelAccess(client, "stand-in", server)), server

    yield make
    for server in opened:
        server.close()


def _waiting(agent: Agent):
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING, run.error
    return run


def _approve(agent: Agent, run_id: str) -> None:
    [approval] = [a for a in agent.store.approvals("pending") if a.run_id == run_id]
    agent.decide(approval.id, approve=True, by=APPROVER,
                 fingerprint=agent.store.approval(approval.id).fingerprint)


# -- the stored response gone, in every form ---------------------------------------------------

@pytest.mark.parametrize("dialect, gone_as", [
    ("xai", "404"), ("xai", "400"), ("xai", "404-bare"), ("openai", "404"), ("openai", "400")])
def test_an_approval_31_days_later_pays_once_emails_once_and_ends_done(desk, dialect, gone_as):
    agent, server = desk(dialect, gone_as=gone_as)
    run = _waiting(agent)
    server.advance_clock(days=31)
    before = len(server.requests)
    _approve(agent, run.id)
    done = agent.advance(run.id)
    assert done.status == RunStatus.DONE, done.error
    assert len(agent.payments.refunds()) == 1
    assert len(agent.outbox.messages()) == 1
    bodies = server.requests[before:]
    assert bodies[0]["previous_response_id"] == run.last_response_id
    assert "previous_response_id" not in bodies[1] and bodies[1]["store"] is True
    resent = [s for s in agent.store.steps(run.id) if s.kind == "resent"]
    assert len(resent) == 1 and resent[0].data["missing"] == run.last_response_id


def test_a_customer_reply_31_days_after_the_run_finished_continues_it(desk):
    agent, server = desk("xai", gone_as="400")
    run = agent.advance(agent.start_sample("past-window").id)
    assert run.status == RunStatus.DONE, run.error
    emails = len(agent.outbox.messages())
    server.advance_clock(days=31)
    agent.add_reply(run.id, "Could you make an exception? I was travelling.")
    again = agent.advance(run.id)
    assert again.status == RunStatus.DONE, again.error
    assert [s.kind for s in agent.store.steps(run.id)].count("resent") == 1
    assert len(agent.outbox.messages()) == emails + 1


def test_a_bare_404_is_confirmed_with_a_retrieve_before_the_transcript_is_sent(desk):
    """A 404 that names nothing (xAI's flat body shows only "Error code: 404" in the SDK) is
    taken for a gone stored response only if retrieving that response also finds nothing."""
    agent, server = desk("xai", gone_as="404-bare")
    run = _waiting(agent)
    request = httpx2.Request("POST", server.base_url + "/responses")
    bare = openai.NotFoundError("Error code: 404", body="Not found.", response=httpx2.Response(
        404, json={"code": "Some requested entity was not found", "error": "Not found."},
        request=request))
    def gone() -> bool:
        return response_gone(agent.model.client, agent.settings.provider, bare,
                             run.last_response_id)
    assert not gone()   # it is still stored
    server.advance_clock(days=31)
    assert gone()


# -- errors in plain words ---------------------------------------------------------------------

XAI_FLAT = {"code": "Client specified an invalid argument",
            "error": "Argument not supported on this model: reasoning.effort"}


@pytest.mark.parametrize("status, body, kind, words", [
    (400, XAI_FLAT, "bad_parameter", "REFUND_AGENT_REASONING_EFFORT"),
    (400, {"error": {"message": "Unsupported value: 'reasoning.effort' does not support 'low' "
                                "with this model.", "type": "invalid_request_error",
                     "code": "unsupported_value", "param": "reasoning.effort"}},
     "bad_parameter", "REFUND_AGENT_REASONING_EFFORT"),
    (429, {"code": "Some resource has been exhausted",
           "error": "Your team abc has either used all available credits or reached its "
                    "monthly spending limit."}, "out_of_credits", "Not retried"),
    (429, {"error": {"message": "You exceeded your current quota, please check your plan and "
                                "billing details.", "type": "insufficient_quota",
                     "code": "insufficient_quota"}}, "out_of_credits", "Not retried"),
    (429, {"error": {"message": "Rate limit reached for requests", "code":
                     "rate_limit_exceeded"}}, "rate_limit", "Retried"),
    (400, {"code": "Client specified an invalid argument",
           "error": "Incorrect API key provided: xa***. You can obtain an API key from "
                    "https://console.x.ai."}, "bad_key", "XAI_API_KEY"),
    (401, "Unauthorized", "bad_key", "XAI_API_KEY"),
    (404, {"code": "Some requested entity (e.g., file or directory) was not found",
           "error": "The model grok-9 does not exist or your team does not have access to it."},
     "no_model", "REFUND_AGENT_MODEL"),
    (403, {"code": "The caller does not have permission to execute the specified operation",
           "error": "This team has zero data retention enabled: requests must set "
                    "store=false."}, "zero_retention", "REFUND_AGENT_ZERO_RETENTION=1"),
    (502, "<html><head><title>502 Bad Gateway</title></head><body><h1>502</h1></body></html>",
     "server", "502 Bad Gateway"),
    (503, "upstream connect error or disconnect/reset before headers", "server", "upstream"),
    (400, {"code": "previous_response_not_found", "error": "Previous response not found."},
     "response_gone", "transcript"),
    # OpenAI's answer to include on a model without reasoning (pydantic/pydantic-ai#2865): a
    # refused parameter, not a transcript someone changed (#33 item 9).
    (400, {"error": {"message": "Encrypted content is not supported with this model.",
                     "type": "invalid_request_error", "param": "include", "code": None}},
     "bad_parameter", "does not reason"),
])
def test_every_error_shape_is_read_into_plain_words(status, body, kind, words):
    error = read_error(status, body)
    assert error.kind == kind
    assert words in error.plain()
    assert "Error code" not in error.plain()


BODY_WORDS = ["", "Failed to deserialize the JSON body", "model", "reasoning", "credits",
              "rate limit", "api key", "store", "encrypted content", "not supported",
              "<html><title>Oops</title></html>", "previous_response_not_found"]


@hyp_settings(max_examples=300, deadline=None)
@given(status=st.one_of(st.none(), st.integers(400, 599)),
       words=st.lists(st.sampled_from(BODY_WORDS), max_size=3),
       flat=st.booleans())
def test_resume_is_promised_only_where_asking_again_can_help(status, words, flat):
    """A refusal no retry cures (a 4xx but 408, 409, 429) is never told "resume retries",
    since resume sends the same request again (#33 item 10); anything else may be."""
    message = " ".join(words)
    body = {"code": "x", "error": message} if flat else {"error": {"message": message}}
    error = read_error(status, body)
    permanent = status is not None and status < 500 and status not in (408, 409, 429)
    assert error.permanent == permanent
    if permanent:
        assert "Resume retries" not in error.plain() and not error.retry


def test_the_id_anywhere_in_the_body_means_the_stored_response_is_gone():
    error = read_error(404, {"code": "x", "error": "Response with id 'abc-123' not found."},
                       response_id="abc-123")
    assert error.kind == "response_gone"


def test_out_of_credits_is_not_retried_and_says_so_on_the_run_and_in_the_terminal(desk):
    agent, server = desk("xai")
    server.inject("credits")
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.FAILED
    assert len(server.requests) == 1   # the SDK would have asked max_retries + 1 times
    assert "out of credits" in run.error and "Not retried" in run.error
    assert "purchase more credits" in run.error   # the provider's own words
    shown = [s.data["message"] for s in agent.store.steps(run.id) if s.kind == "error"]
    assert shown == [run.error]


def test_a_rate_limit_is_still_retried(desk):
    agent, server = desk("openai")
    server.inject("429")
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.WAITING, run.error


def test_a_refused_effort_names_the_setting_on_the_run(desk):
    """A model the table does not know sends no effort; forced into a request, the stand-in
    refuses an effort grok-4 does not take, in xAI's flat shape, and the run says what to do."""
    agent, server = desk("xai", model="grok-4")
    raw = agent.model.client.with_options(max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        raw.responses.create(model="grok-4", input="hi", reasoning={"effort": "low"})
    assert caught.value.body == "Model grok-4 does not support parameter reasoningEffort."
    assert str(caught.value) == "Error code: 400"   # all the SDK itself shows of xAI's body
    error = read_error(400, caught.value.response.text)
    assert error.kind == "bad_parameter" and "REFUND_AGENT_REASONING_EFFORT" in error.plain()


# -- efforts and include as data ---------------------------------------------------------------

@pytest.mark.parametrize("model, wanted, sent", [
    ("grok-4.7", "low", "low"), ("grok-4.7", "xhigh", "xhigh"),
    ("grok-4", "low", None), ("grok-4.20-0309-reasoning", "low", None),
    ("grok-4-1-fast-reasoning", "high", None), ("gpt-5-mini", "minimal", "minimal"),
    ("gpt-5-mini", "xhigh", None), ("some-new-model", "low", None), ("grok-4.7", None, None),
])
def test_the_effort_is_sent_only_where_the_model_takes_it(model, wanted, sent):
    assert effort_for(model, wanted) == sent


def test_an_unknown_model_is_said_once(caplog):
    with caplog.at_level(logging.WARNING, logger="refund_agent"):
        effort_for("grok-from-the-future", "low")
        effort_for("grok-from-the-future", "low")
    told = [r for r in caplog.records if "grok-from-the-future" in r.getMessage()]
    assert len(told) == 1 and "no reasoning effort" in told[0].getMessage()


@pytest.mark.parametrize("model, wanted, sent", [
    # docs.x.ai/developers/model-capabilities/text/reasoning: grok-4.3 takes none, low,
    # medium, high (default low); grok-4.5 low, medium, high (default high, no none).
    ("grok-4.3", "low", "low"), ("grok-4.3", "high", "high"), ("grok-4.3", "xhigh", None),
    ("grok-4.5", "low", "low"), ("grok-4.5", "medium", "medium"), ("grok-4.5", "xhigh", None),
])
def test_xais_current_models_get_the_effort_asked_for(model, wanted, sent, caplog):
    with caplog.at_level(logging.WARNING, logger="refund_agent"):
        assert effort_for(model, wanted) == sent
    assert not any("does not know" in r.getMessage() for r in caplog.records)
    assert low_effort(model) == "low"
    assert needs_include(model, store=True)   # only grok-4.7 returns it unasked (xAI's guide)


@pytest.mark.parametrize("model, effort", [("grok-4", None), ("grok-4.7", "xhigh"),
                                           ("grok-4.5", "medium")])
def test_runs_on_each_model_send_what_it_takes(desk, model, effort):
    agent, server = desk("xai", model=model, effort=effort or "low")
    if effort:
        agent.settings = agent.settings.with_(reasoning_effort=effort)
    run = _waiting(agent)
    assert run.status == RunStatus.WAITING
    sent = [b.get("reasoning") for b in server.requests]
    assert sent == [({"effort": effort} if effort else None)] * len(sent)


def test_include_only_where_needed():
    assert not needs_include("grok-4.7", store=True)     # returned unasked at xAI
    assert needs_include("grok-4.7", store=False)        # zero retention keeps it itself
    assert needs_include("grok-4", store=True) and needs_include("gpt-5-mini", store=True)


NO_REASONING = ["gpt-4.1", "gpt-4.1-mini", "gpt-4o", "gpt-4o-mini"]


@pytest.mark.parametrize("model", NO_REASONING)
def test_a_model_without_reasoning_is_never_asked_for_encrypted_reasoning(model):
    """OpenAI refuses include on these with a 400 (#33 item 9), stored or not."""
    assert not needs_include(model, store=True) and not needs_include(model, store=False)


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4.1-mini"])
def test_the_openai_stand_in_refuses_include_on_a_model_without_reasoning(desk, model):
    _agent, server = desk("openai", model=model)
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=model, input="hi", include=["reasoning.encrypted_content"])
    assert refused.value.status_code == 400
    assert refused.value.response.json() == {"error": {
        "message": "Encrypted content is not supported with this model.",
        "type": "invalid_request_error", "param": "include", "code": None}}
    client.responses.create(model="gpt-5-mini", input="hi",    # a reasoning model takes it
                            include=["reasoning.encrypted_content"])


@pytest.mark.parametrize("zero_retention", [False, True])
def test_an_agent_on_gpt_4o_completes_a_ticket(desk, zero_retention):
    agent, server = desk("openai", model="gpt-4o")
    agent.settings = agent.settings.with_(zero_retention=zero_retention)
    run = _waiting(agent)
    _approve(agent, run.id)
    done = agent.advance(run.id)
    assert done.status == RunStatus.DONE, done.error
    assert all("include" not in body for body in server.requests)
    assert agent.store.escalations(run_id=run.id) == []
    [sent] = agent.outbox.messages()                 # the model's own email, not a hand-over
    assert "follow up with you personally" not in sent["request"]["body"]


def test_the_simulated_customer_asks_for_a_low_effort_where_one_is_taken():
    assert low_effort("grok-4.7") == "low" and low_effort("gpt-5-mini") == "low"
    assert low_effort("grok-4") is None and low_effort("unknown") is None


def test_openai_cost_is_an_estimate_from_the_price_table():
    # gpt-5-mini: $0.25 / $0.025 / $2.00 per million tokens.
    assert estimate_cost_ticks("gpt-5-mini", 1_000_000, 0, 0) == 25 * 10**8
    assert estimate_cost_ticks("gpt-5-mini", 1_000_000, 1_000_000, 1_000_000) == \
        round((0.025 + 2.0) * 10**10)
    assert estimate_cost_ticks("grok-4.7", 10, 0, 10) is None


def test_an_openai_run_reports_an_estimated_cost(desk):
    agent, server = desk("openai")
    run = _waiting(agent)
    steps = [s.data for s in agent.store.steps(run.id) if s.kind == "response"]
    assert steps and all(d.get("cost_estimated") == 1 and d["cost_ticks"] > 0 for d in steps)
    assert all(b["include"] == ["reasoning.encrypted_content"] for b in server.requests)


# -- the stand-in's two dialects ---------------------------------------------------------------

def test_the_xai_dialect_has_flat_errors_uuid_ids_and_xai_call_ids(desk):
    agent, server = desk("xai")
    run = _waiting(agent)
    assert len(run.last_response_id) == 36 and run.last_response_id.count("-") == 4
    ids = [s.data["call_id"] for s in agent.store.steps(run.id) if s.kind == "call"]
    assert ids and all(i.startswith("call-") and i.rsplit("-", 1)[1].isdigit() for i in ids)
    with pytest.raises(openai.NotFoundError) as caught:
        agent.model.client.responses.retrieve("nope")
    assert set(caught.value.response.json()) == {"code", "error"}


def test_the_openai_dialect_has_nested_errors_and_its_own_ids(desk):
    agent, server = desk("openai")
    run = _waiting(agent)
    assert run.last_response_id.startswith("resp_")
    with pytest.raises(openai.NotFoundError) as caught:
        agent.model.client.responses.retrieve("nope")
    assert caught.value.code == "not_found" and "nope" in str(caught.value)


def test_instructions_with_previous_response_id_differ_by_dialect(desk):
    for dialect, refused in (("xai", True), ("openai", False)):
        agent, server = desk(dialect)
        client = agent.model.client.with_options(max_retries=0)
        first = client.responses.create(model=agent.settings.model, input="hello")
        try:
            client.responses.create(model=agent.settings.model, input="again",
                                    previous_response_id=first.id, instructions="Be brief.")
            assert not refused
        except openai.BadRequestError:
            assert refused


def test_a_zero_retention_team_is_told_to_set_the_setting(desk):
    agent, server = desk("xai", zero_retention=True)
    run = agent.advance(agent.start_sample("damaged").id)
    assert run.status == RunStatus.FAILED and "REFUND_AGENT_ZERO_RETENTION=1" in run.error
    agent.settings = agent.settings.with_(zero_retention=True)
    resumed = agent.advance(run.id)
    assert resumed.status == RunStatus.WAITING, resumed.error
    assert all(b["store"] is False for b in server.requests[1:])


def test_a_stream_ending_incomplete_keeps_its_output(desk, monkeypatch):
    """xAI documents response.incomplete as a normal terminal event carrying the output."""
    from offline_model import events

    original = events.stream_events

    def incomplete(response):
        for event in original(response):
            if event["type"] == "response.completed":
                event = {**event, "type": "response.incomplete",
                         "response": {**event["response"], "status": "incomplete",
                                      "incomplete_details": {"reason": "max_output_tokens"}}}
            yield event

    monkeypatch.setattr(events, "stream_events", incomplete)
    agent, server = desk("xai")
    run = _waiting(agent)
    assert run.status == RunStatus.WAITING


def test_settings_pick_openai_when_only_its_key_is_set(monkeypatch, tmp_path: Path):
    from refund_agent.config import load_settings

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("XAI_API_KEY", "")
    chosen = load_settings(tmp_path / "none.env")
    assert chosen.provider == "openai" and chosen.api_key == "sk-test"
    assert chosen.base_url == "https://api.openai.com/v1" and chosen.model == "gpt-5-mini"
    monkeypatch.setenv("XAI_API_KEY", "xai-test")
    assert load_settings(tmp_path / "none.env").provider == "xai"
    monkeypatch.setenv("REFUND_AGENT_PROVIDER", "openai")
    assert load_settings(tmp_path / "none.env").api_key == "sk-test"
    monkeypatch.setenv("REFUND_AGENT_PROVIDER", "anthropic")
    with pytest.raises(Exception, match="xai or openai"):
        load_settings(tmp_path / "none.env")


@pytest.mark.parametrize("name, effort", [("grok-4.7", "low"), ("grok-4", None),
                                           ("gpt-5-mini", "low")])
def test_the_simulated_customer_request_uses_low_effort_where_taken(agent, name, effort):
    from refund_agent.desk.customer import persona_request

    run = agent.advance(agent.start_sample("past-window").id)
    agent.settings = agent.settings.with_(model=name)
    body = persona_request(agent, run)
    assert body.get("reasoning") == ({"effort": effort} if effort else None)


def test_the_page_shows_the_reason_and_an_openai_cost_as_an_estimate(desk):
    from refund_agent.web import views

    agent, server = desk("openai")
    waiting = _waiting(agent)
    titles = [b.title for b in views.timeline(agent.store.steps(waiting.id))
              if b.kind == "response"]
    assert titles and all("(estimate)" in t for t in titles)
    server.inject("credits")
    failed = agent.advance(agent.start_sample("past-window").id)
    [shown] = [b.title for b in views.timeline(agent.store.steps(failed.id)) if b.kind == "error"]
    assert "out of credits" in shown and "exceeded your current quota" in shown
    assert "OPENAI_API_KEY" not in shown and "platform.openai.com" in shown


def test_the_terminal_shows_the_reason(tmp_path):
    from helpers.cli import run_forked as run_cli  # a new process, forked warm

    done = run_cli(tmp_path / "out", "sample", "past-window",
                   REFUND_AGENT_OFFLINE_FAULTS="credits")
    assert done.returncode != 0 or "failed" in done.stdout
    shown = done.stdout + done.stderr
    assert "out of credits" in shown and "purchase more credits" in shown
    assert "Error code: 429" not in shown
