"""What differs between the model providers, in one place: xAI (the default) and OpenAI.

Both speak the Responses API through the same ``openai`` SDK, but they differ in the shape of
their error bodies, the models they offer and which reasoning efforts each takes, whether the
encrypted reasoning comes back unasked, and whether the response reports its cost. This module
holds those differences as data (:data:`MODELS`, :data:`PROFILES`) and as small pure functions
(:func:`read_error`, :func:`request_options`, :func:`estimate_cost_ticks`), so the agent, the
simulated customer and ``refund-agent doctor`` all read the same table. The offline stand-in,
playing the provider, keeps its own catalogue (offline_model/models.py); a test holds the two
to the same entries for the models both list.

Sources (read 2026-12-01):

- xAI error bodies are flat, ``{"code": "<gRPC status text>", "error": "<message>"}``
  (docs.x.ai/developers/debugging lists the statuses and their causes; bodies recorded by
  other clients, e.g. nocmt/LLMSearchPlus#2, show the shape). 400 also means an incorrect key.
- OpenAI's are nested, ``{"error": {"message", "type", "param", "code"}}``; the SDK's
  ``_make_status_error`` keeps ``body["error"]`` when it is a mapping, which for xAI's flat body
  is the bare message string, and puts only a nested ``error.message`` in the exception text.
- Reasoning efforts: docs.x.ai/guides/reasoning (grok-4.7: low, medium, high, xhigh; default
  high; it returns ``reasoning.encrypted_content`` on every response, and an explicit include
  stops xAI keeping the thinking trace for rehydration). grok-4, grok-4.20-* and
  grok-4-1-fast-* refuse the parameter ("Model does not support parameter reasoningEffort").
  grok-4.3: none, low, medium, high, default low (docs.x.ai/developers/model-capabilities/text/
  reasoning, "Effort levels"); grok-4.5: low, medium, high, default high, reasoning cannot be
  turned off (xAI's grok-4.5 page, as quoted in anomalyco/opencode#39448 and
  Zoo-Code-Org/Zoo-Code#866). Both return the encrypted reasoning only when ``include`` asks for
  it: xAI documents the unasked return for grok-4.7 alone.
- Encrypted reasoning at OpenAI: only reasoning models (the gpt-5 family, o-series) have it.
  Asking a model without reasoning for it is refused before anything runs, 400
  ``{"error": {"message": "Encrypted content is not supported with this model.", "type":
  "invalid_request_error", "param": "include", "code": null}}`` (gpt-4o and gpt-4o-mini in
  pydantic/pydantic-ai#2865, gpt-4.1 in microsoft/agent-framework#7483).
- xAI's statuses (docs.x.ai/developers/debugging): 422 is "a field in the POST request body
  has an invalid format"; like every 4xx but 408, 409 and 429, asking again the same way
  meets the same answer.
- OpenAI prices: openai.com/api/pricing (USD per million tokens), as published in 2026; OpenAI
  does not report a request's cost, so the project's figure is an estimate from this table.
"""

from __future__ import annotations

import html
import json
import logging
import re
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import lru_cache
from typing import Any

log = logging.getLogger("refund_agent")

XAI, OPENAI = "xai", "openai"
TICKS_PER_USD = 10**10

# The gRPC status texts xAI puts in a flat body's "code", by HTTP status (grpc.io status codes).
GRPC_TEXT = {
    400: "Client specified an invalid argument",
    401: "The request does not have valid authentication credentials for the operation",
    403: "The caller does not have permission to execute the specified operation",
    404: "Some requested entity (e.g., file or directory) was not found",
    409: "The operation was aborted",
    429: "Some resource has been exhausted",
    500: "Internal error",
    503: "The service is currently unavailable",
}


@dataclass(frozen=True)
class Profile:
    """One provider: where it answers, which key it reads, what it does by default."""

    name: str
    label: str
    base_url: str
    key_env: str
    default_model: str
    console: str
    # Whether a response carries its own cost (xAI: usage.cost_in_usd_ticks).
    reports_cost: bool


PROFILES = {
    XAI: Profile(XAI, "Grok (xAI)", "https://api.x.ai/v1", "XAI_API_KEY", "grok-4.7",
                 "https://console.x.ai", True),
    OPENAI: Profile(OPENAI, "OpenAI", "https://api.openai.com/v1", "OPENAI_API_KEY",
                    "gpt-5-mini", "https://platform.openai.com", False),
}


@dataclass(frozen=True)
class Model:
    """What one model (or family, by a shell-style pattern) accepts.

    Attributes:
        pattern: the model name, or a pattern such as ``grok-4.20-*``.
        provider: ``xai`` or ``openai``.
        efforts: the ``reasoning.effort`` values it takes; empty: it refuses the parameter.
        encrypted_by_default: it returns the encrypted reasoning without being asked (so
            ``include`` is needed only with ``store: false``).
        reasoning: it reasons, so it has encrypted reasoning to ask for; OpenAI refuses
            ``include: ["reasoning.encrypted_content"]`` on a model without (see Sources).
        price: USD per million tokens (input, cached input, output), for providers that do not
            report cost; None where the response reports it.
    """

    pattern: str
    provider: str
    efforts: tuple[str, ...]
    encrypted_by_default: bool = False
    price: tuple[float, float, float] | None = None
    reasoning: bool = True


# Most specific patterns first: the first match wins.
MODELS: tuple[Model, ...] = (
    Model("grok-4.7", XAI, ("low", "medium", "high", "xhigh"), encrypted_by_default=True),
    Model("grok-4.5", XAI, ("low", "medium", "high")),
    Model("grok-4.3", XAI, ("none", "low", "medium", "high")),
    Model("grok-4.20-*", XAI, ()),
    Model("grok-4-1-fast-*", XAI, ()),
    Model("grok-4", XAI, ()),
    Model("grok-4-0709", XAI, ()),
    Model("gpt-5-mini", OPENAI, ("minimal", "low", "medium", "high"), price=(0.25, 0.025, 2.0)),
    Model("gpt-5-nano", OPENAI, ("minimal", "low", "medium", "high"), price=(0.05, 0.005, 0.4)),
    Model("gpt-5.1", OPENAI, ("none", "low", "medium", "high"), price=(1.25, 0.125, 10.0)),
    Model("gpt-5.2", OPENAI, ("none", "low", "medium", "high", "xhigh"),
          price=(1.75, 0.175, 14.0)),
    Model("gpt-5", OPENAI, ("minimal", "low", "medium", "high"), price=(1.25, 0.125, 10.0)),
    # No reasoning: no effort, and no encrypted reasoning to ask for.
    Model("gpt-4.1-mini", OPENAI, (), price=(0.4, 0.1, 1.6), reasoning=False),
    Model("gpt-4.1", OPENAI, (), price=(2.0, 0.5, 8.0), reasoning=False),
    Model("gpt-4o-mini", OPENAI, (), price=(0.15, 0.075, 0.6), reasoning=False),
    Model("gpt-4o", OPENAI, (), price=(2.5, 1.25, 10.0), reasoning=False),
)
# Every effort any known model takes (the settings refuse anything else).
ALL_EFFORTS = frozenset(e for m in MODELS for e in m.efforts)
# The effort asked for where the caller wants little thinking (the simulated customer).
LOW_EFFORTS = ("low", "minimal", "none")


@lru_cache(maxsize=256)
def model_info(name: str) -> Model | None:
    """The table's entry for a model name, or None for a model it does not know (cached: it
    is asked several times a turn, and the table never changes)."""
    return next((m for m in MODELS if fnmatch(name, m.pattern)), None)


_told: set[tuple[str, str]] = set()


def _say_once(key: tuple[str, str], message: str) -> None:
    """Log a notice once per process (a model the table does not know, a dropped effort)."""
    if key not in _told:
        _told.add(key)
        log.warning(message)


def effort_for(model: str, wanted: str | None) -> str | None:
    """The ``reasoning.effort`` to send: ``wanted`` if the model takes it, else None.

    A model the table does not know gets none (said once), since a refused parameter is a
    failed request while a missing one is only the model's default.
    """
    if not wanted:
        return None
    info = model_info(model)
    if info is None:
        _say_once(("unknown", model),
                  f"refund-agent does not know model {model!r}: sending no reasoning effort "
                  "(the model's default applies).")
        return None
    if wanted in info.efforts:
        return wanted
    if info.efforts:
        _say_once(("effort", model),
                  f"Model {model} does not take reasoning effort {wanted!r} (it takes "
                  f"{', '.join(info.efforts)}); sending none, so its default applies.")
    return None


def low_effort(model: str) -> str | None:
    """The lowest documented effort the model takes, for cheap side requests; else None."""
    info = model_info(model)
    if info is None:
        return None
    return next((e for e in LOW_EFFORTS if e in info.efforts), None)


def needs_include(model: str, *, store: bool) -> bool:
    """Whether to ask for ``reasoning.encrypted_content`` explicitly.

    Needed when nothing is stored (the run keeps the reasoning itself), and for models that do
    not return it unasked. xAI's grok-4.7 returns it anyway, and an explicit include there stops
    xAI keeping the thinking trace for rehydration, so it is left out with ``store: true``.
    Never for a model without reasoning: it has none to return, and OpenAI refuses the request.
    A model the table does not know is asked (a refusal reads as a refused parameter).
    """
    info = model_info(model)
    if info is not None and not info.reasoning:
        return False
    if not store:
        return True
    return not (info and info.encrypted_by_default)


def estimate_cost_ticks(model: str, input_tokens: int, cached_tokens: int,
                        output_tokens: int) -> int | None:
    """Cost in ticks (10^10 per USD) from the price table, or None if the model has no price."""
    info = model_info(model)
    if info is None or info.price is None:
        return None
    price_in, price_cached, price_out = info.price
    fresh = max(input_tokens - cached_tokens, 0)
    usd = (fresh * price_in + cached_tokens * price_cached + output_tokens * price_out) / 1e6
    return round(usd * TICKS_PER_USD)


# -- errors ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProviderError:
    """A provider's error, read from its body whatever the shape, and what to do about it.

    Attributes:
        status: the HTTP status (None for a stream's error event or a cut connection).
        code: the machine-readable code if the body had one (OpenAI's ``code``/``type``, xAI's
            gRPC status text).
        message: the provider's own words (tags stripped, shortened).
        kind: what it means here: ``rate_limit``, ``out_of_credits``, ``bad_key``,
            ``no_permission``, ``no_model``, ``bad_parameter``, ``zero_retention``,
            ``response_gone``, ``bad_reasoning``, ``server``, ``connection`` (it broke after
            it was made), ``unreachable`` (never made: no name, refused), ``other``.
        retry: whether asking again can help (only rate limits, 5xx and cut connections).
        advice: what to change, in plain words.
    """

    status: int | None
    code: str | None
    message: str
    kind: str
    retry: bool
    advice: str

    @property
    def permanent(self) -> bool:
        """Whether asking again the same way can only meet the same answer: a refusal (4xx)
        other than a timeout, a conflict or a rate limit. A 5xx, a cut connection or a
        stream's error event (no status) may go away."""
        return refused_for_good(self.status)

    def said(self) -> str:
        """What went wrong, in the provider's words, without the advice."""
        where = f" ({self.status})" if self.status else ""
        said = f": {self.message}" if self.message else ""
        return f"{_HEADLINES[self.kind]}{where}{said}".rstrip(".")

    def plain(self) -> str:
        """One paragraph for the page, the terminal and the run's failure."""
        return f"{self.said()}. {self.advice}".replace("..", ".")


def refused_for_good(status: int | None) -> bool:
    """A status no retry changes: a 4xx but 408 (timeout), 409 (conflict), 429 (rate limit)."""
    return status is not None and 400 <= status < 500 and status not in (408, 409, 429)


_HEADLINES = {
    "rate_limit": "The provider is rate-limiting requests",
    "out_of_credits": "The provider's team is out of credits or over its spending limit",
    "bad_key": "The provider refused the API key",
    "no_permission": "The API key or its team may not do this",
    "no_model": "The model is not available to this key",
    "bad_parameter": "The provider refused a parameter of the request",
    "zero_retention": "The provider's team keeps no data and refused a stored request",
    "response_gone": "The stored response is gone",
    "bad_reasoning": "The provider refused the run's encrypted reasoning",
    "server": "The provider had an internal error",
    "connection": "The connection to the provider broke before the answer came",
    "unreachable": "The provider could not be reached",
    "other": "The model request failed",
}

_CREDITS = re.compile(r"credit|balance|spending[ -]limit|billing|insufficient_quota|"
                      r"exceeded your current quota|payment|prepaid", re.I)
_KEY = re.compile(r"api[ _-]?key|incorrect key|invalid key|authenticat|unauthori[sz]ed", re.I)
_MODEL = re.compile(r"\bmodel\b", re.I)
_RETENTION = re.compile(r"zero[ -]data[ -]retention|\bzdr\b|retention|store.{0,20}(true|not)",
                        re.I)
_PARAM = re.compile(r"reasoning|effort|argument not supported|unsupported parameter|"
                    r"not supported|unknown parameter|invalid value|parameter", re.I)
GONE_CODES = frozenset({"previous_response_not_found"})
RESUME = "Resume retries from the last stored response."
REFUSED = ("Not retried: the same request meets the same refusal, so resuming helps only once "
           "what it names is changed.")


def body_fields(body: Any) -> tuple[str | None, str]:
    """(code, message) from an error body in any shape: flat, nested, text or HTML."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        text = body.strip()
        try:
            body = json.loads(text)
        except ValueError:
            return None, _clean(text)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):  # OpenAI's nested shape (or a stream's response.error)
            code = inner.get("code") or inner.get("type")
            return (str(code) if code else None), _clean(str(inner.get("message") or ""))
        # xAI's flat shape: the message is the "error" string, the gRPC text its "code".
        code = body.get("code")
        message = inner if isinstance(inner, str) else body.get("message") or ""
        return (str(code) if code else None), _clean(str(message))
    return None, _clean(str(body or ""))


def _clean(text: str) -> str:
    """The readable part of a body: HTML tags and entities gone, spaces collapsed, shortened."""
    if "<" in text and ">" in text:
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        text = re.sub(r"(?is)<(script|style).*?</\1>", " ", text)
        text = title.group(1) if title else re.sub(r"<[^>]+>", " ", text)
        text = html.unescape(text)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def read_error(status: int | None, body: Any, *, settings_hint: str = XAI,
               response_id: str | None = None) -> ProviderError:
    """What a provider's error means and what to change, from its status and raw body.

    Args:
        status: the HTTP status, or None for a stream's error event.
        body: the raw body (text, bytes, or parsed JSON) as the provider sent it.
        settings_hint: the provider in use, to name the right key and console.
        response_id: the ``previous_response_id`` the request continued, if any: a 404 (or a
            400 ``previous_response_not_found``) naming it means the stored response is gone.
    """
    code, message = body_fields(body)
    raw = body if isinstance(body, str) else json.dumps(body, default=str) if body else ""
    profile = PROFILES.get(settings_hint, PROFILES[XAI])
    key, console = profile.key_env, profile.console
    text = f"{code or ''} {message}"

    def error(kind: str, retry: bool, advice: str) -> ProviderError:
        return ProviderError(status, code, message, kind, retry, advice)

    if code in GONE_CODES or (response_id and response_id in raw and status in (400, 404)):
        return error("response_gone", False,
                     "The run continues from its own transcript.")
    if status == 400 and re.search(r"encrypted[ _]content", message, re.I) and re.search(
            r"not supported|unsupported", message, re.I):
        # The model has no encrypted reasoning to give (OpenAI's answer to include on gpt-4o):
        # a parameter this model refuses, not a transcript someone changed.
        return error("bad_parameter", False,
                     "The model does not reason, so it has no encrypted reasoning to return; "
                     "refund-agent asks for it only where providers.MODELS says a model "
                     "reasons, so add the model there with reasoning=False, or choose another.")
    if code == "invalid_encrypted_content" or (  # OpenAI's code; xAI documents none for it
            status == 400 and re.search(r"encrypted[ _]content", message, re.I)):
        return error("bad_reasoning", False,
                     "The transcript was changed after the model wrote it, or was written "
                     "under another key or provider.")
    if status == 401 or (status in (400, 403) and _KEY.search(text) and not _MODEL.search(text)):
        return error("bad_key", False,
                     f"Check {key} (a new key is made at {console}); without a key the "
                     "offline stand-in answers instead.")
    if _CREDITS.search(text) and status in (402, 403, 429, None):
        return error("out_of_credits", False,
                     f"Not retried: asking again will not help. Add credits or raise the "
                     f"spending limit at {console}, then resume.")
    if status == 429:
        return error("rate_limit", True,
                     "Retried with backoff; if it persists, send fewer requests at once or "
                     f"raise the team's rate limit at {console}. {RESUME}")
    if status in (400, 403) and _RETENTION.search(text):
        return error("zero_retention", False,
                     "Set REFUND_AGENT_ZERO_RETENTION=1 so every request is sent with "
                     "store=false and the run's own transcript.")
    if status == 404 or (status in (400, 403) and _MODEL.search(text)
                         and re.search(r"not (found|exist|available|have access)|access|"
                                       r"permission|does not exist", text, re.I)):
        return error("no_model", False,
                     "Set REFUND_AGENT_MODEL to a model this team can use (the console lists "
                     f"them at {console}), or check REFUND_AGENT_BASE_URL.")
    if status == 403:
        return error("no_permission", False,
                     f"Ask the team's admin for permission at {console}, or use another key.")
    if status in (400, 422) and _PARAM.search(text):
        advice = "Change or drop that setting."
        if re.search(r"reasoning|effort", text, re.I):
            advice = ("Set REFUND_AGENT_REASONING_EFFORT to a value this model takes, or to "
                      "none to send no effort.")
        return error("bad_parameter", False, advice)
    if status is not None and status >= 500:
        return error("server", True, f"Retried with backoff. {RESUME}")
    if refused_for_good(status):
        # Asking again the same way (what resume does) meets the same refusal.
        return error("other", False, REFUSED)
    return error("other", False, RESUME)


def worth_retrying(status: int, body: Any) -> bool:
    """Whether the SDK should retry a status error: rate limits and 5xx, never a lack of
    credits, a bad key or a refused request."""
    if status == 429:
        return read_error(status, body).kind == "rate_limit"
    return status == 408 or status >= 500
