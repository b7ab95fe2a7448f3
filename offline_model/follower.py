"""The stand-in's second part: a desk that follows its tools' descriptions.

For a request whose tools are not the refund desk's, the stand-in can still play a plain
"look up, then act" desk, using nothing but what a real model is sent: the tool declarations
(names, descriptions, parameter schemas), the customer's email and the tool outputs. It knows
no tool or sample by name. It plays it only when the tools have that shape: at least one tool
whose description starts with "Look up" (read-only by that description) and at least one
other tool (the action).

1. Look up: fill the look-up's parameters with identifiers from the customer's words, each
   shaped like the example its description gives ("for example AC-1001": two letters, a
   dash, digits). None found: ask the customer for it, and stop.
2. Act: pick the action whose name and description share the most words with the email, and
   fill each parameter from the look-up's output (same name), else from the customer's own
   words (a text parameter: their first sentence); an enum, from a value they wrote.
3. Report: once the action's output arrives, a short note for the team saying what it says.

Anything it cannot fill, it says so in a note rather than guess.
"""

from __future__ import annotations

import json
import re
from typing import Any

LOOKS_UP = re.compile(r"^\s*look\s?up\b", re.I)
EXAMPLE = re.compile(r"for example,?\s+([A-Za-z0-9][A-Za-z0-9_-]*[A-Za-z0-9])", re.I)
WORD = re.compile(r"[a-z]{3,}")


def plays(tools: list[dict[str, Any]]) -> bool:
    """Whether the declared tools have the look-up-then-act shape."""
    functions = [t for t in tools if isinstance(t, dict) and t.get("type") == "function"]
    lookups = [t for t in functions if LOOKS_UP.match(t.get("description") or "")]
    return bool(lookups) and len(functions) > len(lookups)


def _shape(example: str) -> re.Pattern[str]:
    """A pattern for identifiers shaped like ``example``: letters as letters, digits as
    digits (any count of each run), other characters as themselves (optional)."""
    parts = []
    for run in re.findall(r"[A-Za-z]+|\d+|.", example):
        if run.isalpha():
            parts.append(f"[A-Za-z]{{{len(run)}}}")
        elif run.isdigit():
            parts.append(rf"\d{{{max(1, len(run) - 2)},{len(run) + 4}}}")
        else:
            parts.append(re.escape(run) + "?")
    return re.compile(r"(?<![\w@.])(" + "".join(parts) + r")\b(?![@.]\w)")


def _customer_text(message: str) -> str:
    """What the customer wrote: no From:/Subject: header lines."""
    return "\n".join(line for line in message.splitlines()
                     if not line.lower().startswith(("from:", "subject:"))).strip()


def _first_sentence(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    body = " ".join(line for line in lines if not re.match(r"^(hi|hello|dear)\b", line, re.I)
                    or len(line.split()) > 3)
    match = re.search(r"(.+?[.!?])(\s|$)", body)
    return (match.group(1) if match else body)[:300]


def _properties(tool: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return (tool.get("parameters") or {}).get("properties") or {}


def _identifier(prop: dict[str, Any], words: str) -> str | None:
    example = EXAMPLE.search(prop.get("description") or "")
    if example is None:
        return None
    found = _shape(example.group(1)).search(words)
    if found is None:
        return None
    value = found.group(1).upper()
    # Written without the example's separator ("AC1001"): put it back where it belongs.
    sample = example.group(1).upper()
    if "-" in sample and "-" not in value:
        cut = len(re.match(r"[A-Z]*", sample).group(0))  # type: ignore[union-attr]
        value = f"{value[:cut]}-{value[cut:]}"
    return value


def _fill(tool: dict[str, Any], known: dict[str, Any], words: str) -> tuple[dict, list[str]]:
    """The tool's arguments from what is known, and the parameters it could not fill."""
    args: dict[str, Any] = {}
    missing = []
    for name, prop in _properties(tool).items():
        if name in known and not isinstance(known[name], dict | list):
            args[name] = known[name]
        elif prop.get("enum"):
            said = [v for v in prop["enum"] if isinstance(v, str)
                    and re.search(rf"\b{re.escape(v.replace('_', ' '))}\b", words, re.I)]
            if said:
                args[name] = said[0]
            else:
                missing.append(name)
        elif prop.get("type") == "string":
            value = _identifier(prop, words)
            if value is None and not EXAMPLE.search(prop.get("description") or ""):
                value = _first_sentence(words) or None
            if value is None:
                missing.append(name)
            else:
                args[name] = value
        else:
            missing.append(name)
    return args, missing


def _overlap(tool: dict[str, Any], words: str) -> int:
    said = set(WORD.findall(words.lower()))
    own = set(WORD.findall(f"{tool.get('name', '').replace('_', ' ')} "
                           f"{tool.get('description') or ''}".lower()))
    return len(said & own)


def _outcome(name: str, output: dict[str, Any]) -> str:
    shown = ", ".join(f"{key} {value}" for key, value in output.items()
                      if not isinstance(value, dict | list))
    return f"{name} returned: {shown}." if shown else f"{name} returned nothing to report."


def respond(customer: list[str], calls: list[dict[str, Any]], tools: list[dict[str, Any]],
            may_call: bool = True) -> tuple[str, str | None, list[tuple[str, dict[str, Any]]]]:
    """The next step: (reasoning, text, calls).

    Args:
        customer: the user messages, oldest first (the email first).
        calls: the calls made so far, each ``{"name", "args", "output"}`` (output parsed).
        tools: the request's tools.
        may_call: False when ``tool_choice`` is "none".
    """
    functions = [t for t in tools if isinstance(t, dict) and t.get("type") == "function"]
    lookups = [t for t in functions if LOOKS_UP.match(t.get("description") or "")]
    actions = [t for t in functions if t not in lookups]
    words = "\n".join(_customer_text(m) for m in customer)
    looked = [c for c in calls if c["name"] in {t["name"] for t in lookups}]
    acted = [c for c in calls if c["name"] in {t["name"] for t in actions}]
    if acted and acted[-1]["output"] is not None:
        return ("The action's output is in: I report it to the team.",
                _outcome(acted[-1]["name"], acted[-1]["output"]), [])
    if not looked:
        args, missing = _fill(lookups[0], {}, words)
        if missing:
            wanted = " and ".join((_properties(lookups[0])[m].get("description") or m).lower()
                                  .rstrip(".") for m in missing)
            return (f"The email does not give {', '.join(missing)}, which "
                    f"{lookups[0]['name']} needs.", f"Could you send me {wanted}?", [])
        if not may_call:
            return ("Tool calls are off for this request.",
                    f"I would call {lookups[0]['name']} with {json.dumps(args)}.", [])
        return (f"I look it up first, as {lookups[0]['name']}'s description says.", None,
                [(lookups[0]["name"], args)])
    found = looked[-1]["output"] or {}
    if "error" in found:
        return ("The look-up found nothing I may act on.",
                f"I did not act: {found['error']}", [])
    action = max(actions, key=lambda t: _overlap(t, words))
    args, missing = _fill(action, found, words)
    if missing:
        return (f"I cannot fill {', '.join(missing)} for {action['name']} from the email or "
                "the look-up.", f"Not done: {action['name']} needs {', '.join(missing)}.", [])
    if not may_call:
        return ("Tool calls are off for this request.",
                f"I would call {action['name']} with {json.dumps(args)}.", [])
    return (f"The look-up found it; I call {action['name']} with what it returned.", None,
            [(action["name"], args)])
