"""Who is who: account names and email addresses compared in canonical form.

Two spellings that a person reads as the same name or address must count as the same one
("Dana Kim", "dana kim", "ＤＡＮＡ ＫＩＭ"), and a spelling that only looks like another
one must not pass for it (a Cyrillic "а" inside "Dаna", a KELVIN SIGN inside "becKer").
The first is NFKC plus case folding; the second is refused outright: a word that mixes
alphabets, or an address with characters that NFKC would rewrite, names nobody honestly.
A small skeleton map of the common Cyrillic and Greek look-alikes of Latin letters makes
whole-word look-alikes ("Раса" in Cyrillic next to "Paca") collide as one name.

Pure functions, no I/O: the store, the accounts and the shop tools call them.
"""

from __future__ import annotations

import unicodedata

# Cyrillic and Greek letters drawn like a Latin one (a short list of the common ones, after
# Unicode's confusables.txt): enough that a name cannot be doubled with a homoglyph.
_SKELETON = str.maketrans({
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "ԁ": "d",
    "ԛ": "q", "ԝ": "w", "ү": "y", "һ": "h", "ӏ": "l",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J", "Ү": "Y",
    "Һ": "H", "Ӏ": "I",
    # Greek
    "α": "a", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t",
    "υ": "u", "χ": "x", "ϲ": "c", "ω": "w",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
    "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C",
})
# Scripts that are written together in one word (Japanese mixes kanji and kana).
_SCRIPT_FAMILIES = {"CJK": "han", "HIRAGANA": "han", "KATAKANA": "han"}

# Names the code itself writes into the audit log as the actor of an entry: a person with
# one of these names could not be told from the system in the record.
RESERVED_ACTORS = frozenset({"agent", "payments", "expiry", "system", "customer", "model",
                             "unknown login"})


class IdentityError(ValueError):
    """A name or address that cannot be told apart from another one."""


def _script(char: str) -> str | None:
    """The script a letter belongs to (None for digits, spaces, punctuation)."""
    if not char.isalpha():
        return None
    first = unicodedata.name(char, "UNKNOWN").split()[0]
    return _SCRIPT_FAMILIES.get(first, first)


def mixed_script(word: str) -> bool:
    """Whether one word holds letters of more than one alphabet (``Dаna`` with Cyrillic а)."""
    return len({s for s in map(_script, word) if s}) > 1


def _describe(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'UNKNOWN')}"


def canonical_name(name: str) -> str:
    """The form two spellings of one name share: NFKC, case-folded, single spaces."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def name_key(name: str) -> str:
    """What names are unique by, and looked up by: the canonical name with look-alike letters
    mapped to the Latin ones they imitate."""
    folded = unicodedata.normalize("NFKC", name)
    return canonical_name(folded.translate(_SKELETON))


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a person's account name, or None."""
    if not canonical_name(name):
        return "An account needs a name."
    for word in unicodedata.normalize("NFKC", name).split():
        if mixed_script(word):
            return (f"The name {name!r} mixes alphabets in {word!r} (a look-alike letter?); "
                    "write it in one alphabet.")
    key = name_key(name)
    if key in RESERVED_ACTORS or key.endswith(" (login)"):
        return (f"{name!r} is a name the desk itself signs the audit log with; choose a "
                "person's name.")
    return None


def address_problem(address: str) -> str | None:
    """Why ``address`` cannot identify a customer, or None.

    Characters that NFKC rewrites (a KELVIN SIGN for K, full-width letters, ligatures) and
    words that mix alphabets are refused rather than folded: folded, they would make a
    look-alike mailbox the same customer as the real one.
    """
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        return f"{address!r} is not an email address."
    for char in address:
        if unicodedata.normalize("NFKC", char) != char:
            return (f"The address {address!r} contains {_describe(char)}, which only looks "
                    f"like {unicodedata.normalize('NFKC', char)!r}.")
    for part in [local, *domain.split(".")]:
        if mixed_script(part):
            return f"The address {address!r} mixes alphabets in {part!r} (a look-alike letter?)."
    try:
        _idna(domain)
    except UnicodeError:
        return f"The address {address!r} does not end in a valid domain name."
    return None


def _idna(domain: str) -> str:
    # Python's codec is IDNA 2003 (nameprep folds case and applies NFKC), enough to compare.
    return domain.rstrip(".").encode("idna").decode("ascii").lower()


def canonical_address(address: str) -> str:
    """The form two spellings of one address share: the local part NFKC and case-folded,
    the domain in IDNA (ASCII). IdentityError for an address ``address_problem`` refuses."""
    address = address.strip()
    problem = address_problem(address)
    if problem:
        raise IdentityError(problem)
    local, _, domain = address.rpartition("@")
    return f"{unicodedata.normalize('NFKC', local).casefold()}@{_idna(domain)}"


def same_address(a: str, b: str) -> bool:
    """Whether two addresses name the same mailbox; False if either is a look-alike."""
    try:
        return canonical_address(a) == canonical_address(b)
    except IdentityError:
        return False
