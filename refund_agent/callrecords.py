"""What the store keeps of a model's function call besides its text, decided in Python.

A call's arguments are written by the model, so they may be anything: invalid JSON, a value of
the wrong type, megabytes, or arrays nested thousands deep. The store never asks the database
to parse them (one bad call would break every query that did); the few fields the code needs
are read here, once, when the call is saved, with the work bounded.

A call's key names it in everything that outlives the request: the approval it queues, and the
idempotency key the payment and email stand-ins record. Provider call ids are not promised
unique across runs (xAI's look like ``call-5faadddf-0``, a prefix and a per-response index), so
the key carries the run's id as well: two runs whose calls share an id never share an approval,
a refund or an email.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

# Arguments longer than this, or nested deeper, are kept as text and never parsed for display
# or for the fields below: no call of this project's tools comes near either bound.
MAX_PARSED_CHARS = 256 * 1024
MAX_DEPTH = 32
# An order id longer than this is not one; the inbox shows none rather than a wall of text.
_MAX_ORDER_ID = 64
# Call ids made of these characters go into the key as they are (readable); others are hashed,
# so a key stays short and safe wherever it is shown or used as a widget key.
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def call_key(run_id: str, call_id: str) -> str:
    """The key of call ``call_id`` of run ``run_id``: the approval id and idempotency key."""
    part = call_id if _PLAIN_ID.fullmatch(call_id) else \
        "h" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"{run_id}-{part}"


def nesting_depth(text: str, stop: int = MAX_DEPTH) -> int:
    """How deeply JSON ``text`` nests arrays and objects (strings skipped), counting no
    further than ``stop + 1``; linear in the length of the text."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def parse_bounded(text: Any) -> Any:
    """``text`` parsed as JSON when it is small and shallow enough, else ``text`` itself.

    Never raises: invalid, huge or deeply nested JSON comes back as the text it was, which a
    view shows as text (parsing it could exhaust the stack: RecursionError).
    """
    if not isinstance(text, str):
        return text
    if len(text) > MAX_PARSED_CHARS or nesting_depth(text) > MAX_DEPTH:
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def order_id_in(arguments: str) -> str | None:
    """The ``order_id`` a call's arguments name, as the model wrote it, or None (bad JSON, no
    such field, not a short text or number)."""
    parsed = parse_bounded(arguments)
    if not isinstance(parsed, dict):
        return None
    value = parsed.get("order_id")
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    value = str(value).strip()
    return value if 0 < len(value) <= _MAX_ORDER_ID else None
