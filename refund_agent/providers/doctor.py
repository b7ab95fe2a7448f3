"""``refund-agent doctor``: does the configured provider work, and if not, what to change.

With a key it sends one tiny streamed request built by the agent's own builder
(turns.build_request, with the same model, tools, effort, ``include`` and ``store`` decisions),
so what works here works for a ticket's first request (the caller hands in the tool schemas its
agent sends: the terminal passes the refund desk's); then it reads the stored response back.
Each failure is read into plain words by providers.read_error, and where one setting is at
fault the request is tried once more without it, so the other checks still say something. A
host that cannot be reached at all is named, with why. Without a key it says what the offline
stand-in is and how to switch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from .. import turns
from ..config import Settings
from .client import ProviderClient, provider_error
from .table import PROFILES, ProviderError, effort_for, model_info, needs_include

PROMPT = "Reply with the single word OK."


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, whether it works, and what to change."""

    name: str
    ok: bool | None   # None: not checked (an earlier failure hid it)
    detail: str

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "--  "}[self.ok]
        return f"  {mark} {self.name}: {self.detail}"


def offline_report(settings: Settings) -> list[str]:
    """What runs without a key, and how to switch to a real provider."""
    profile = PROFILES[settings.provider]
    return [
        f"No {profile.key_env} is set, so every command uses the offline stand-in model: a "
        "local server on 127.0.0.1, started by refund-agent itself, that speaks the Responses "
        f"API in {profile.label}'s dialect and decides from a fixed support policy. It is not "
        "a language model, costs nothing and needs no network.",
        "To run on Grok: export XAI_API_KEY=... (a key from https://console.x.ai); the model "
        "is grok-4.7 unless REFUND_AGENT_MODEL says otherwise.",
        "To run on OpenAI: export OPENAI_API_KEY=... (from https://platform.openai.com) with no "
        "XAI_API_KEY, or set REFUND_AGENT_PROVIDER=openai; the model is gpt-5-mini unless "
        "REFUND_AGENT_MODEL says otherwise.",
        "Then run `refund-agent doctor` again: it sends one tiny request and says whether the "
        "key, the model, the effort, storage and streaming work.",
    ]


def _stream_once(client: openai.OpenAI, params: dict) -> str:
    """Send one streamed request and return its response id (raises the SDK's errors)."""
    final_id = None
    with client.responses.create(**params) as events:
        for event in events:
            if event.type in ("response.completed", "response.incomplete"):
                final_id = event.response.id
            elif event.type in ("response.failed", "error"):
                raise openai.APIError("The stream ended with an error.", request=None,
                                      body=event.model_dump())
    if final_id is None:
        raise openai.APIConnectionError(message="The stream ended before the response did.",
                                        request=None)
    return final_id


# The tool schemas an agent sends (tools.schemas of its tools, or the desk's tool_schemas()).
Schemas = Sequence[Mapping[str, Any]]


def diagnose(settings: Settings, tools: Schemas, client: openai.OpenAI | None = None
             ) -> list[Check]:
    """Check the key, the model, the effort, storage and streaming with one tiny request
    carrying ``tools``, the schemas the agent sends."""
    client = client or ProviderClient(base_url=settings.base_url, api_key=settings.api_key,
                                      max_retries=0, timeout=min(settings.timeout, 120.0))
    model = settings.model
    effort = effort_for(model, settings.reasoning_effort)
    keep_nothing = settings.zero_retention
    # The parameters of a ticket's first request, from the same builder and decisions as
    # Agent._turn (tests/providers/test_doctor.py compares the two bodies).
    params = turns.build_request(
        model=model, run_id="refund-agent-doctor", items=[turns.user_message(PROMPT)],
        tools=[dict(tool) for tool in tools], previous_response_id=None,
        zero_retention=keep_nothing, include=needs_include(model, store=not keep_nothing),
        effort=effort)
    checks: dict[str, Check] = {}
    info = model_info(model)
    if info is None:
        checks["effort"] = Check("effort", None, f"refund-agent does not know {model}, so it "
                                 "sends no reasoning effort (the model's default applies)")
    elif settings.reasoning_effort and not effort:
        takes = ", ".join(info.efforts) or "none"
        checks["effort"] = Check("effort", True, f"{model} does not take "
                                 f"{settings.reasoning_effort!r} (it takes: {takes}), so none "
                                 "is sent")
    response_id = None
    for _attempt in range(4):   # each setting at fault is dropped once, then the rest tried
        try:
            response_id = _stream_once(client, params)
            break
        except openai.APIError as exc:
            error = provider_error(exc, settings.provider)
            if error.kind == "unreachable":
                # Nothing was sent: say which host and why, not that a stream broke.
                checks["network"] = Check("network", False, f"{error.message}; check the "
                                          "network, a proxy, or REFUND_AGENT_BASE_URL")
                break
            if (error.kind == "bad_parameter" and "include" in params
                    and "encrypted" in error.message.lower()):
                checks["model"] = _fail("model", error)   # a model without reasoning
                params.pop("include")         # try the rest without it
            elif error.kind == "bad_parameter" and "reasoning" in params:
                checks["effort"] = _fail("effort", error)
                params.pop("reasoning")       # try the rest without it
            elif error.kind == "zero_retention" and params["store"]:
                checks["storage"] = _fail("storage", error)
                params["store"] = False       # as the agent sends it with zero retention
                if needs_include(model, store=False):
                    params["include"] = turns.INCLUDE
            else:
                checks.update(_fatal(error))
                break
    if response_id is not None:
        checks.setdefault("key", Check("key", True, "accepted"))
        checks.setdefault("model", Check("model", True, f"{model} answered"))
        if effort and "effort" not in checks:
            checks["effort"] = Check("effort", True, f"{effort!r} accepted")
        checks.setdefault("effort", Check("effort", True, "none sent"))
        checks["streaming"] = Check("streaming", True, "events arrived and the response "
                                    "completed")
        if "storage" not in checks:
            checks["storage"] = _storage(client, response_id, params["store"])
    order = ["key", "model", "effort", "storage", "streaming"]
    if "network" in checks:   # listed only when the host could not be reached
        order.insert(0, "network")
    return [checks.get(name, Check(name, None, "not checked")) for name in order]


def _fail(name: str, error: ProviderError) -> Check:
    return Check(name, False, error.plain())


def _fatal(error: ProviderError) -> dict[str, Check]:
    """A failure that stops the checks, put against the setting it is about."""
    where = {"bad_key": "key", "no_permission": "key", "out_of_credits": "key",
             "no_model": "model", "bad_parameter": "model", "zero_retention": "storage",
             "connection": "streaming", "unreachable": "network"}.get(error.kind, "key")
    return {where: _fail(where, error)}


def _storage(client: openai.OpenAI, response_id: str, stored: bool) -> Check:
    if not stored:
        return Check("storage", True, "zero retention is on (store=false): nothing is kept, "
                     "and each run sends its own transcript")
    try:
        client.responses.retrieve(response_id)
    except openai.APIError as exc:
        return Check("storage", False, "the response was not kept for previous_response_id "
                     f"({provider_error(exc, 'xai').message or exc}); set "
                     "REFUND_AGENT_ZERO_RETENTION=1 to send each run's transcript instead")
    return Check("storage", True, "responses are kept (previous_response_id works, for 30 "
                 "days)")


def report(settings: Settings, tools: Schemas, client: openai.OpenAI | None = None
           ) -> tuple[list[str], bool]:
    """The doctor's text, and whether everything works (``tools``: see :func:`diagnose`)."""
    if settings.offline:
        return offline_report(settings), True
    profile = PROFILES[settings.provider]
    checks = diagnose(settings, tools, client)
    head = f"{profile.label} at {settings.base_url}, model {settings.model}:"
    ok = all(c.ok is not False for c in checks) and any(c.ok for c in checks)
    tail = ("Everything works." if ok else
            "Something needs changing (see FAIL above); run `refund-agent doctor` again after.")
    return [head, *(c.line() for c in checks), tail], ok
