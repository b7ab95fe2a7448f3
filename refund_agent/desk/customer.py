"""The simulated customer: a second model plays the person who wrote in, to test composure.

``converse`` is :meth:`Agent.advance` with a follow-up: whenever the agent has answered and the
run would end, it asks the model (with no tools and a short persona brief) for the customer's
next reply, built only from the emails so far: never the agent's reasoning or tool results,
which a real customer never sees. The reply goes into the run exactly like one a person
typed, and the run continues.
"""

from __future__ import annotations

from typing import Any

import openai

from ..crash import crash_point
from ..errors import EndRun
from ..intake import MAX_EMAIL_CHARS
from ..models import Run, RunStatus
from ..providers.client import provider_error
from ..providers.table import low_effort
from ..store import Lease
from ..streaming import Cancel, OnEvent
from ..turns import usage_of
from .agent import Agent
from .prompts import customer_brief

MAX_SIMULATED_REPLIES = 3
DONE = "DONE"


def transcript(agent: Agent, run_id: str) -> str:
    """The emails exchanged so far, oldest first, as the customer would have them."""
    blocks = []
    for step in agent.store.steps(run_id):
        if step.kind == "email":
            blocks.append(f"--- Email from the customer ---\n{step.data['body']}")
        elif step.kind == "reply":
            blocks.append(f"--- Email from the customer ---\n{step.data['text']}")
        elif step.kind == "message":
            blocks.append(f"--- Email from support ---\n{step.data['body']}")
    return "\n\n".join(blocks)


def persona_request(agent: Agent, run: Run) -> dict[str, Any]:
    """The request body for the simulated customer's next reply.

    A low effort where the model takes one: playing the customer needs little thinking, and
    without it grok-4.7 would think at its default, high.
    """
    body: dict[str, Any] = {
        "model": agent.settings.model, "store": False,
        "input": [
            {"type": "message", "role": "system",
             "content": customer_brief(run.sender_name, agent.shop.info.name)},
            {"type": "message", "role": "user", "content": transcript(agent, run.id)},
        ],
    }
    effort = low_effort(agent.settings.model)
    if effort:
        body["reasoning"] = {"effort": effort}
    return body


def simulate_reply(agent: Agent, run: Run, lease: Lease) -> str | None:
    """Ask the model for the customer's next reply; None when the customer is done."""
    response = agent.model.client.responses.create(**persona_request(agent, run))
    text = (response.output_text or "").strip()
    finished = not text or text.upper().strip(". ") == DONE
    agent.store.add_cost(lease, usage_of(response, agent.settings.model),
                         ("customer_done", {}) if finished else None)
    return None if finished else text


def customer_is_done(agent: Agent, run_id: str) -> bool:
    return any(s.kind == "customer_done" for s in agent.store.steps(run_id))


def converse(agent: Agent, run_id: str, on_event: OnEvent | None = None,
             cancel: Cancel | None = None, max_replies: int = MAX_SIMULATED_REPLIES) -> Run:
    """Advance the run, the simulated customer writing back each time the agent has answered.

    Her reply is asked for and saved within the same advance, under the run's lease, before
    the run can end: a process that dies anywhere in between leaves the run working, and
    resume asks her again. Stops when the run waits for a person, stops or fails; when the
    customer says DONE; or after ``max_replies`` simulated replies, so two models cannot
    argue forever.
    """
    def write_back(run: Run, lease: Lease) -> bool:
        if run.simulated_replies >= max_replies or customer_is_done(agent, run_id):
            return False
        try:
            text = simulate_reply(agent, run, lease)
        except openai.APIError as exc:
            # Say why the conversation paused, so the front end shows it and resume retries.
            why = provider_error(exc, agent.settings.provider).plain()
            error = f"The simulated customer's reply failed: {why} Resume asks for it again."
            raise EndRun(RunStatus.FAILED, error) from None
        if text is None:
            return False
        agent.store.add_reply(run_id, text[:MAX_EMAIL_CHARS], simulated=True, lease=lease)
        crash_point("after_simulated_reply", agent.settings.crash_at)
        return True

    return agent.advance(run_id, on_event, cancel, follow_up=write_back)
