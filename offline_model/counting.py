"""Counts in the customer's words: how many, and how many of those survived.

The reader (reader.py) finds which item a claim is about; this module reads the numbers in a
sentence. Issue 43 added the survivors rule: "only one of the four survived", "of the six, two
made it", "three of the four are fine" count the units that are *not* damaged, so the damaged
units are the rest (M - N, M the total the customer gives, else the line's quantity), and "only
one didn't make it" counts the damaged ones themselves. A count the customer gives of the
survivors is never the count of the damaged units: reading it so proposed one unit where three
were broken, or all of them where one was.

Every pattern here is bounded (fixed-width look-behinds, a bounded window before the verb), so a
sentence is scanned a fixed number of times, in time linear in its length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "a single": 1, "single": 1, "a couple of": 2}
COUNT = (r"(?:every single one|every one|each one|each|every|all but one|a single|a couple of|one"
         r"|two|three|four|five|six|seven|eight|nine|ten|\d{1,2}|both|all)")
_WHOLE = ("both", "all", "every single one", "every one", "each one", "each", "every")


def count_value(word: str | None, quantity: int) -> int | None:
    """The number a count word stands for on a line of ``quantity`` units, or None."""
    if not word:
        return None
    word = " ".join(word.lower().split())
    if word in _WHOLE:
        return quantity
    if word == "all but one":
        return quantity - 1
    if word.isdigit():
        return int(word)
    return NUMBER_WORDS.get(word)


# What the survivors did: came through unharmed, or are fine now.
_SURVIVE = re.compile(
    r"\b(?:survived?|made it|make it|came through|come through|pulled through"
    r"|(?:arrived|arrive|came|come|turned up|got here|came out|come out|is|are|was|were|looks?"
    r"|seems?)(?:\s+(?:still|all|completely|totally|perfectly|actually|really))?\s+(?:intact"
    r"|whole|unbroken|undamaged|unharmed|in one piece|ok|okay|fine|all right|alright|perfect"
    r"|safe(?:ly)?|usable|good))\b", re.I)
_NUMBER = re.compile(rf"\b{COUNT}\b", re.I)
# A count of the whole: "of the four", "out of 6", "of my six", "from the three".
# ("1/4 survived": the count after the slash is the whole.)
_OF_WHOLE = re.compile(r"\b(?:out\s+of|of|from)\s+(?:the\s+|my\s+|our\s+|those\s+|these\s+)?$"
                       r"|\d\s*/\s*$", re.I)
_WHOLE_AFTER = re.compile(rf"^[^.,;:]{{0,30}}?\b(?:out\s+of|of)\s+(?:the\s+|my\s+)?({COUNT})\b",
                          re.I)
# The survivors' count is of the others: "the other three are fine".
_OTHERS_BEFORE = re.compile(r"\b(?:other|remaining|rest of the)\s+$", re.I)
# Only some: "only one", "just two", "a single one".
_ONLY_BEFORE = re.compile(r"\b(?:only|just|merely)\s+(?:a\s+single\s+|a\s+)?$|\ba\s+single\s+$",
                          re.I)
_NEGATED = re.compile(r"\bn[o']t\b|n't\b|\bnever\b|\bfailed to\b|\bdidn.t\b", re.I)
# Where the clause of the verb begins: its count of survivors is in that clause.
_CLAUSE_START = re.compile(r"[,;:(]|\s[-\u2013\u2014]\s|\b(?:and|but|while|whereas|though)\b",
                           re.I)
_WINDOW = 120   # characters before the verb that can hold its count


@dataclass(frozen=True)
class Survivors:
    """One "N (of M) survived" in a sentence: where it is and what it counts."""

    start: int                 # where the survivors' count starts
    end: int                   # where the verb ends
    survivors: int             # N: the units that came through (damaged, when negated)
    whole: int | None          # M, when the customer gives it
    negated: bool              # "only one didn't make it": N counts the damaged units
    others: bool               # "the other three are fine": N counts the rest
    only: bool                 # "only one", "just two": some, not all, survived

    def damaged(self, quantity: int) -> int | None:
        """How many units this says arrived damaged on a line of ``quantity``, or None when it
        does not add up (more survivors than units, a total above the line's quantity)."""
        whole = self.whole if self.whole is not None else quantity
        if whole > quantity or whole < 1:
            return None
        if self.negated:
            return self.survivors if 1 <= self.survivors <= whole else None
        if not 0 <= self.survivors < whole:
            return None
        return whole - self.survivors

    @property
    def claims_damage(self) -> bool:
        """Whether the words say some units did not survive: "only one of the four made it",
        "one of the four survived", "only one didn't make it" (not "the other three are fine",
        whose damage is claimed elsewhere, nor a bare "one survived")."""
        if self.others:
            return False
        if self.negated:
            return self.survivors >= 1
        return self.only or (self.whole is not None and self.survivors < self.whole)


def survivors(sentence: str, quantity: int | None = None) -> list[Survivors]:
    """Every "N (of M) survived / made it / are fine" in ``sentence``, left to right."""
    found = []
    for verb in _SURVIVE.finditer(sentence):
        window_start = max(0, verb.start() - _WINDOW)
        before = sentence[window_start:verb.start()]
        clause_at = 0
        for mark in _CLAUSE_START.finditer(before):
            clause_at = mark.end()
        counts = [m for m in _NUMBER.finditer(before, clause_at)]
        n_match, whole = None, None
        for m in counts:
            value = count_value(m.group(), quantity or 99)
            if value is None:
                continue
            if _OF_WHOLE.search(before, max(0, m.start() - 16), m.start()):
                whole = value
            else:
                n_match = m
        if n_match is None:
            continue
        if whole is None:
            # "Of the four tumblers, only one made it": the total in an earlier clause.
            for m in _NUMBER.finditer(before, 0, clause_at):
                if _OF_WHOLE.search(before, max(0, m.start() - 16), m.start()):
                    whole = count_value(m.group(), quantity or 99)
        if whole is None:
            # "just one survived out of the four"
            after = _WHOLE_AFTER.match(sentence, verb.end())
            if after:
                whole = count_value(after.group(1), quantity or 99)
        value = count_value(n_match.group(), quantity or 99)
        if value is None:
            continue
        lead = before[max(0, n_match.start() - 16):n_match.start()]
        found.append(Survivors(
            start=window_start + n_match.start(), end=verb.end(), survivors=value,
            whole=whole, negated=bool(_NEGATED.search(before, n_match.end())),
            others=bool(_OTHERS_BEFORE.search(lead)), only=bool(_ONLY_BEFORE.search(lead))))
    return found


def claims_damage(clause: str) -> bool:
    """Whether ``clause`` says some units did not survive (see Survivors.claims_damage)."""
    return any(s.claims_damage for s in survivors(clause))
