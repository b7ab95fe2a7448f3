"""Text from outside (customers, approvers, the model) made safe for one-line fields and terminals.

A line break in a subject or a sender's name is a header injection waiting for a real mail
server; an escape sequence in a customer's email or an approver's name can repaint a terminal
(a forged "Approved by" line). Fields that must be one line refuse such characters; text shown
in a terminal has them escaped, so they are visible instead of obeyed.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from .errors import RunNotReady

# Kept as they are when printed: they shape multi-line text and do no harm.
_LAYOUT = {"\n", "\t"}


def _unsafe(char: str) -> bool:
    # Cc: control characters (ESC, CR, BEL, C1 controls); Cf: format characters such as the
    # bidirectional overrides that make text read backwards; Zl/Zp: Unicode line breaks.
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")


def one_line(value: str, what: str) -> str:
    """``value`` stripped, or RunNotReady if it holds a line break or a control character."""
    value = value.strip()
    if any(_unsafe(c) for c in value):
        raise RunNotReady(f"The {what} cannot contain line breaks or control characters.")
    return value


def printable(text: str) -> str:
    """``text`` with control and format characters shown as escapes, line breaks kept."""
    if not any(_unsafe(c) and c not in _LAYOUT for c in text):
        return text
    return "".join(c if c in _LAYOUT or not _unsafe(c) else repr(c)[1:-1] for c in text)


def size_text(nbytes: int) -> str:
    """A byte count for people: ``812 B``, ``18.4 kB``, ``2.1 MB`` (powers of 1,000)."""
    if nbytes < 1000:
        return f"{nbytes} B"
    if nbytes < 1_000_000:
        return f"{nbytes / 1000:.1f} kB"
    return f"{nbytes / 1_000_000:.1f} MB"


def transcript_text(items: int, nbytes: int) -> str:
    """What a run keeps of its conversation: ``transcript 23 items, 18.4 kB``."""
    return f"transcript {items:,} item{'s' if items != 1 else ''}, {size_text(nbytes)}"


def sender_line(name: str | None, address: str) -> str:
    """``Maya Chen <maya.chen@example.com>``, or the address alone when there is no other name
    (a run started without a name keeps the address as its name)."""
    return f"{name} <{address}>" if name and name != address else address


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 entry``, ``2 entries``."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


# Arguments longer than this, or nested deeper, are kept as text and never parsed for display
# or for the fields below: no call of this project's tools comes near either bound.
MAX_PARSED_CHARS = 256 * 1024


MAX_DEPTH = 32


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
