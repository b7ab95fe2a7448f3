"""The models the stand-in serves, and what each accepts: its own catalogue.

This is a copy, on purpose. The stand-in plays the provider, and a provider's catalogue is its
own: a client learns which models exist and which reasoning efforts each takes by asking, and a
refused effort is an answer the client must handle. Reading the client's table instead would let
a client and the stand-in agree on a mistake, and would tie the stand-in to one client. The agent
keeps its own table too; a test holds the two to the same entries for the models both list
(tests/standin/test_offline_apart.py), so they cannot drift apart silently.

Sources, as the agent's table: docs.x.ai/guides/reasoning (grok-4.7 takes low, medium, high,
xhigh and returns ``reasoning.encrypted_content`` on every response; grok-4, grok-4.20-* and
grok-4-1-fast-* refuse the parameter) and OpenAI's model pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatch

XAI, OPENAI = "xai", "openai"


@dataclass(frozen=True)
class Model:
    """One model (or family, by a shell-style pattern such as ``grok-4.20-*``).

    Attributes:
        pattern: the model name, or a pattern.
        provider: ``xai`` or ``openai``.
        efforts: the ``reasoning.effort`` values it takes; empty: it refuses the parameter.
        encrypted_by_default: it returns the encrypted reasoning without being asked.
        reasoning: it reasons; OpenAI refuses ``include`` of the encrypted reasoning on a
            model without it.
    """

    pattern: str
    provider: str
    efforts: tuple[str, ...]
    encrypted_by_default: bool = False
    reasoning: bool = True


# Most specific patterns first: the first match wins. A model not listed is served as it is.
MODELS: tuple[Model, ...] = (
    Model("grok-4.7", XAI, ("low", "medium", "high", "xhigh"), encrypted_by_default=True),
    Model("grok-4.5", XAI, ("low", "medium", "high")),
    Model("grok-4.3", XAI, ("none", "low", "medium", "high")),
    Model("grok-4.20-*", XAI, ()),
    Model("grok-4-1-fast-*", XAI, ()),
    Model("grok-4", XAI, ()),
    Model("grok-4-0709", XAI, ()),
    Model("gpt-5-mini", OPENAI, ("minimal", "low", "medium", "high")),
    Model("gpt-5-nano", OPENAI, ("minimal", "low", "medium", "high")),
    Model("gpt-5.1", OPENAI, ("none", "low", "medium", "high")),
    Model("gpt-5.2", OPENAI, ("none", "low", "medium", "high", "xhigh")),
    Model("gpt-5", OPENAI, ("minimal", "low", "medium", "high")),
    Model("gpt-4.1-mini", OPENAI, (), reasoning=False),
    Model("gpt-4.1", OPENAI, (), reasoning=False),
    Model("gpt-4o-mini", OPENAI, (), reasoning=False),
    Model("gpt-4o", OPENAI, (), reasoning=False),
)


def model_info(name: str) -> Model | None:
    """The catalogue's entry for a model name, or None for a model it does not list."""
    return next((m for m in MODELS if fnmatch(name, m.pattern)), None)
