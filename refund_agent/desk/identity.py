"""Who is who: account names and email addresses compared in canonical form.

Two spellings that a person reads as the same name or address must count as the same one
("Dana Kim", "dana kim", "ＤＡＮＡ ＫＩＭ"), and a spelling that only looks like another
one must not pass for it (a Cyrillic "а" inside "Dаna", a KELVIN SIGN inside "becKer").
Addresses that only look like another are refused outright (``address_problem``). Names are
compared by their skeleton (``same_person``): Unicode's confusables table (UTS #39, through
the ``confusable-homoglyphs`` package, which ships it), with invisible characters, accents,
width and case folded away, so "Dana Kım", "Dɑna Kim", "Dana Kim" with an invisible U+034F
and "Dana Kím" are all Dana Kim; a word that mixes alphabets is refused as well.

Pure functions, no I/O: the store, the accounts and the shop tools call them.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import cache, lru_cache

from ..intake import mixed_script
from ..models import Actor

RESERVED_ACTORS = frozenset(value for key, value in vars(Actor).items() if key.isupper())
# Account changes from this machine are signed "<OS login> (login)" (desk/accounts.py), and a
# Stop from the demo page by "page <the browser's address>" (web/session.py): any name of
# either shape is the system's as well.
LOGIN_SUFFIX = " (login)"
_ADDRESS = re.compile(r"[0-9a-f.:\[\]]*[0-9:][0-9a-f.:\[\]]*")

# Default_Ignorable_Code_Point, from Unicode's DerivedCoreProperties.txt (unchanged since
# Unicode 6.0; Unicode keeps these ranges for such code points): drawn as nothing, so a name
# with one inside looks exactly like the name without it. Python's unicodedata lacks the
# property, and the confusables package does not carry it.
DEFAULT_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF))
# Rounds of folding before a name's key is taken as it is: a character maps to one that may
# itself fold further (KELVIN SIGN -> K -> k), two or three rounds in Unicode's table.
_MAX_ROUNDS = 8


def default_ignorable(char: str) -> bool:
    """Whether ``char`` is a default-ignorable code point (drawn as nothing)."""
    point = ord(char)
    return any(low <= point <= high for low, high in DEFAULT_IGNORABLE_RANGES)


def _visible(text: str) -> str:
    return "".join(c for c in text if not default_ignorable(c))


def shown(name: str) -> str:
    """``name`` quoted for a message, its invisible characters written out (``\\u034f``), so
    the message shows how two names that look the same differ."""
    return "'" + "".join(f"\\u{ord(c):04x}" if default_ignorable(c) else c for c in name) + "'"


@cache
def confusable_pairs() -> tuple[tuple[str, str], ...]:
    """Unicode's confusables table as (character, what it looks like) pairs, both directions.

    The package writes right-to-left characters between LEFT-TO-RIGHT MARKs (as Unicode's
    file comments do); those are default-ignorable and are dropped here.
    """
    from confusable_homoglyphs.confusables import confusables_data  # ~30 ms: on first use
    pairs = []
    for char, homoglyphs in confusables_data.items():
        for glyph in homoglyphs:
            a, b = _visible(char), _visible(glyph["c"])
            if a and b and a != b:
                pairs.append((a, b))
    return tuple(pairs)


def _representatives(join_ascii_case: bool) -> dict[str, str]:
    """Each character of the table -> the member of its class of look-alikes that stands for
    the class (TR39's prototype: a sequence such as "rn" for m, else a lower-case ASCII
    letter, else the member most others look like).

    The table is a set of stars (each character -> one prototype), so its classes are its
    connected parts. ``join_ascii_case`` also joins each ASCII capital with its small letter:
    then a capital that only looks like a Latin one (Cyrillic К, Greek Ι) is that letter in
    either case, as names are compared ignoring case.
    """
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    degree: Counter[str] = Counter()
    pairs = list(confusable_pairs())
    if join_ascii_case:
        pairs += [(chr(c), chr(c).lower()) for c in range(ord("A"), ord("Z") + 1)]
    for a, b in pairs:
        degree[a] += 1
        degree[b] += 1
        parent[root(a)] = root(b)
    classes: dict[str, list[str]] = {}
    for member in parent:
        classes.setdefault(root(member), []).append(member)
    out = {}
    for members in classes.values():
        rep = min(members, key=lambda m: (len(m) == 1, not (m.isascii() and m.islower()),
                                          not m.isascii(), -degree[m], m))
        out.update({m: rep for m in members if len(m) == 1 and m != rep})
    return out


@cache
def _tables() -> tuple[dict[str, str], dict[str, str]]:
    return _representatives(join_ascii_case=False), _representatives(join_ascii_case=True)


def _fold(text: str, table: dict[str, str], casefold: bool) -> str:
    """Fold ``text`` round after round until it no longer changes: (NFKC and case folding,)
    default-ignorables dropped, each character mapped to its class's representative, then
    decomposed with its combining marks (accents) dropped, spaces collapsed."""
    for _ in range(_MAX_ROUNDS):
        step = unicodedata.normalize("NFKC", text).casefold() if casefold else text
        step = "".join(table.get(c, c) for c in _visible(step))
        step = "".join(c for c in unicodedata.normalize("NFD", step)
                       if unicodedata.category(c) not in ("Mn", "Me") and not default_ignorable(c))
        step = " ".join(step.split())
        if step == text:
            break
        text = step
    return text


def canonical_name(name: str) -> str:
    """The form two spellings of one name share: NFKC, case-folded, single spaces."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


@lru_cache(maxsize=4096)
def name_key(name: str) -> str:
    """What a name is looked up, signed in and throttled by: its case-insensitive skeleton.

    NFKC and case folding first (so "DANA KIM", "ｄａｎａ kim" and "Dana  Kim" are one), then
    Unicode's confusables table (UTS #39: dotless ı is i, Latin ɑ is a, m is rn), with
    default-ignorable code points (U+034F, zero-width spaces, bidi controls) removed and, beyond
    TR39, every combining mark too: "Dana Kím" is Dana Kim, as a reader takes it for her.
    Names that differ only in their accents are one name here, deliberately.
    """
    return _fold(name, _tables()[0], casefold=True)


@lru_cache(maxsize=4096)
def skeleton(name: str) -> str:
    """The name's TR39 skeleton taken before case folding, ASCII capitals joined with their
    small letters: catches a capital that only looks like a Latin one ("Dana КІМ" in
    Cyrillic capitals reads as "DANA KIM"), which case folding first would turn into a small
    Cyrillic letter that looks like nothing Latin. Capital I is drawn like l, so here i, I,
    l and 1 are one letter ("Ali" and "All" are refused as a pair)."""
    return _fold(name, _tables()[1], casefold=False)


def same_person(a: str, b: str) -> bool:
    """Whether two names can pass for each other, so they must count as one person: their
    case-insensitive skeletons (``name_key``) or their TR39 skeletons (``skeleton``) agree.

    Every comparison of who someone is goes through this (four eyes, one's own ticket, new
    account names), never through ``==``.
    """
    return a == b or name_key(a) == name_key(b) or skeleton(a) == skeleton(b)


def looks_like(name: str, others: Iterable[str]) -> str | None:
    """The first of ``others`` that ``name`` can pass for, or None."""
    return next((other for other in others if same_person(name, other)), None)


def taken_problem(name: str, existing: str) -> str:
    """Why ``name`` cannot be added beside the account ``existing``, which it passes for."""
    if canonical_name(name) == canonical_name(existing):
        return f"An account named {shown(existing)} already exists."
    return (f"An account named {shown(existing)} already exists, and {shown(name)} looks like "
            "it (names are compared ignoring case, accents, invisible characters and look-alike "
            "letters); choose a name that cannot pass for another.")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a person's account name, or None."""
    if not name_key(name):
        return "An account needs a name (one with visible letters)."
    for word in unicodedata.normalize("NFKC", name).split():
        if mixed_script(word):
            return (f"The name {name!r} mixes alphabets in {word!r} (a look-alike letter?); "
                    "write it in one alphabet.")
    actor = looks_like(name, sorted(RESERVED_ACTORS))
    if actor is not None or _system_shaped(name):
        like = f" (it looks like {actor!r})" if actor and actor != canonical_name(name) else ""
        return (f"{shown(name)} is a name the desk itself signs the audit log with{like}; choose a "
                "person's name.")
    return None


def _system_shaped(name: str) -> bool:
    """Whether ``name`` has the shape of a signature the system makes up: an OS login's
    ("ops (login)") or the demo page's ("page 203.0.113.9")."""
    if name_key(name).endswith(name_key(LOGIN_SUFFIX)):
        return True
    # The address in its canonical form: the skeleton would fold its digits into letters.
    first, _, rest = canonical_name(name).partition(" ")
    return name_key(first) == name_key(Actor.PAGE) and _ADDRESS.fullmatch(rest) is not None
