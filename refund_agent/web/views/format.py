"""Shared display helpers: money, model costs, times, Markdown escaping, short text and refund
lines.

Every page area uses these; like the rest of ``views`` they import no Streamlit.
"""

from __future__ import annotations

import re
import string
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from ...providers.table import PROFILES

if TYPE_CHECKING:
    from ...config import Settings

# Every ASCII punctuation character may be backslash-escaped in CommonMark, and Streamlit's
# Markdown also gives meaning to "$" (math) and ":" (emoji and colour directives), so customer
# text is escaped wholesale rather than character by character.
_MD_SPECIAL = set(string.punctuation)
# Where a GitHub-style autolink literal starts, in escaped text: "http(s)\:" and "www\.".
_AUTOLINK = re.compile(r"(?i)(https?|www)(?=\\[:.])")


def md(text: str) -> str:
    """Escape text for Streamlit Markdown and keep its line breaks.

    Customer emails are data, not formatting: "$48.00 and $94.95" must not turn into maths,
    and "**urgent**" must show its asterisks.
    """
    escaped = "".join("\\" + c if c in _MD_SPECIAL else c for c in text)
    # Escapes do not stop GitHub-style autolinks (they are found in the text after parsing):
    # an invisible WORD JOINER after "https" or "www" does, so a URL someone wrote into an
    # email or a link to the desk shows as text, not as a link to click.
    escaped = _AUTOLINK.sub("\\1\u2060", escaped)
    # Two trailing spaces make a hard line break, so an email keeps its shape.
    return "\n".join(line.rstrip() + "  " if line.strip() else "" for line in
                     escaped.splitlines()).rstrip()


def money(amount: float | None) -> str:
    """Dollars with two decimals (``$48.00``); empty for None."""
    return "" if amount is None else f"${amount:,.2f}"


# What a model cost figure is, said next to it wherever it shows (page and terminal): what the
# provider reported (xAI), an estimate from providers/table.py's prices (a provider that
# reports none, OpenAI), or the offline stand-in's figure, priced like Grok but costing
# nothing (as `refund-agent doctor` says).
CostBasis = Literal["reported", "estimate", "stand-in"]
REPORTED: CostBasis = "reported"
ESTIMATE: CostBasis = "estimate"
STAND_IN: CostBasis = "stand-in"
_COST_LABELS: dict[str, str] = {REPORTED: "", ESTIMATE: " (estimate)",
                                STAND_IN: " (simulated; the stand-in costs nothing)"}


def cost_basis(settings: Settings) -> CostBasis:
    """What the cost figures of runs made with ``settings`` are."""
    if settings.offline:
        return STAND_IN
    profile = PROFILES.get(settings.provider)
    return REPORTED if profile is None or profile.reports_cost else ESTIMATE


def cost_note(basis: CostBasis) -> str:
    """What a column of costs is, for under a table (empty: what the provider reported)."""
    return {ESTIMATE: "estimated from the price table (the provider reports no cost)",
            STAND_IN: _COST_LABELS[STAND_IN].strip(" ()")}.get(basis, "")


def cost_text(usd: float, basis: CostBasis = REPORTED) -> str:
    """A model cost as it shows: ``$0.0117``, with ``(estimate)`` or the stand-in's label."""
    return f"${usd:.4f}{_COST_LABELS[basis]}"


def ago(ts: float, now: float | None = None) -> str:
    """A short relative time: "just now", "4 min ago", "2 h ago", or a date."""
    seconds = max(0.0, (time.time() if now is None else now) - ts)
    if seconds < 45:
        return "just now"
    if seconds < 3600:
        return f"{round(seconds / 60)} min ago"
    if seconds < 86400:
        return f"{round(seconds / 3600)} h ago"
    return datetime.fromtimestamp(ts).strftime("%b %d")


def clock(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S") if ts else ""


def clock_day(ts: float) -> str:
    """``2026-12-24 00:00``: a day and time, for dates ahead (an absence's end)."""
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cents_to_money(cents: Any) -> str:
    return money(cents / 100) if isinstance(cents, int | float) else ""


def line_text(line: Mapping[str, Any]) -> str:
    """One refund line in a few words: ``POUR-GLS-01 damaged $48.00`` (``x1 of 4`` after it
    for some units of a line of several).

    Takes the shapes the steps and the audit log record: ``amount_cents`` (approvals, audit),
    ``amount`` in dollars (refunds), or no amount at all (a refused request).
    """
    if "amount_cents" in line:
        amount = cents_to_money(line["amount_cents"])
    else:
        amount = money(line.get("amount")) if isinstance(line.get("amount"), int | float) else ""
    units, of = line.get("units"), line.get("of_units")
    count = (f"x{units}" + (f" of {of}" if isinstance(of, int) else "")
             if isinstance(units, int) and of != 1 else "")
    return " ".join(str(part) for part in (line.get("line", "?"), line.get("reason", ""), amount,
                                           count) if part)


def lines_text(lines: Iterable[Mapping[str, Any]] | None) -> str:
    """Lines joined for one table cell: ``POUR-GLS-01 damaged $48.00; MUG-STN-2 ...``."""
    return "; ".join(line_text(line) for line in lines or [] if isinstance(line, Mapping))
