"""What the agent accepts from people, as pure checks: a customer's email or reply, a note.

Each returns the problem in one sentence, or None; the agent raises it as RunNotReady or
DecisionRefused, so bad input is a clear message and nothing is stored.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from .errors import DecisionRefused, IdentityError, RunNotReady
from .text import one_line

MAX_EMAIL_CHARS = 20_000
# What a person writes with a decision (a note, a question for the customer), in characters:
# it goes on the card, into the audit and to the model; a page of text is the most it needs.
MAX_NOTE_CHARS = 2_000


def utf8_problem(*texts: str) -> str | None:
    """Text that cannot be stored or sent (undecodable bytes from a terminal or file)."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return ("The text is not valid UTF-8 (it has undecodable bytes); save it as UTF-8 "
                    "and send it again.")
    return None


def sender_problem(sender: str) -> str | None:
    """Why ``sender`` is not an address to answer: no whitespace or control characters, since
    a newline in an address is a header injection."""
    if ("@" not in sender or len(sender) > 254
            or any(c.isspace() or not c.isprintable() for c in sender)):
        return f"{sender!r} is not an email address."
    return None


def email_problem(body: str) -> str | None:
    if not body:
        return "The email is empty."
    if len(body) > MAX_EMAIL_CHARS:
        return (f"The email is {len(body):,} characters; the limit is {MAX_EMAIL_CHARS:,}. "
                "Trim it and send again.")
    return None


def reply_problem(text: str) -> str | None:
    if not text:
        return "The reply is empty."
    if len(text) > MAX_EMAIL_CHARS:
        return f"The reply is longer than {MAX_EMAIL_CHARS:,} characters."
    return None


def note_problem(text: str, what: str) -> str | None:
    """A person's note or question over MAX_NOTE_CHARS."""
    if len(text) > MAX_NOTE_CHARS:
        return (f"The {what} is {len(text):,} characters long; keep it to {MAX_NOTE_CHARS:,} "
                "or fewer.")
    return None


def checked_email(sender: str, body: str, subject: str, sender_name: str
                  ) -> tuple[str, str, str, str]:
    """A new run's sender, body, subject and name, stripped and checked.

    Raises:
        RunNotReady: undecodable text, no address (or a look-alike of someone else's),
            a subject or name on several lines, an empty or oversized email.
    """
    sender, body = sender.strip(), body.strip()
    if problem := (utf8_problem(sender, body, subject, sender_name) or sender_problem(sender)
                   or address_problem(sender)):
        raise RunNotReady(problem)
    subject, sender_name = one_line(subject, "subject"), one_line(sender_name, "sender's name")
    if problem := email_problem(body):
        raise RunNotReady(problem)
    return sender, body, subject, sender_name


def checked_decision(by: str | None, note: str | None, approve: bool) -> tuple[str, str | None]:
    """The approver's name and note, stripped; DecisionRefused for no name, an oversized
    note, or a rejection without a note (the agent explains the decision with it)."""
    by, note = one_line(by or "", "approver's name"), (note or "").strip() or None
    if not by:
        raise DecisionRefused("Say who is deciding: an approver's name is required.")
    if problem := note_problem(note or "", "note"):
        raise DecisionRefused(problem)
    if not approve and not note:
        raise DecisionRefused("A rejection needs a note; the agent uses it to explain the "
                              "decision to the customer.")
    return by, note


def checked_name(by: str | None, doing: str) -> str:
    """The name of whoever is ``doing`` something on the desk, stripped; DecisionRefused if
    there is none."""
    by = one_line(by or "", "name")
    if not by:
        raise DecisionRefused(f"Say who is {doing}: a name is required.")
    return by


def checked_handoff(by: str | None, note: str | None) -> tuple[str, str | None]:
    """Who sends a refund to a lead, and their note; DecisionRefused for no name or an
    oversized note."""
    by, note = checked_name(by, "sending it"), (note or "").strip() or None
    if problem := note_problem(note or "", "note"):
        raise DecisionRefused(problem)
    return by, note


def checked_question(by: str | None, question: str | None) -> tuple[str, str]:
    """The asker's name and question for the customer, stripped, or DecisionRefused."""
    by, question = one_line(by or "", "approver's name"), (question or "").strip()
    if not by:
        raise DecisionRefused("Say who is asking: an approver's name is required.")
    if not question:
        raise DecisionRefused("Write the question for the customer; the agent sends it to "
                              "them as it is.")
    if problem := note_problem(question, "question"):
        raise DecisionRefused(problem)
    return by, question


# Scripts that are written together in one word (Japanese mixes kanji and kana).
_SCRIPT_FAMILIES = {"CJK": "han", "HIRAGANA": "han", "KATAKANA": "han"}


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


@lru_cache(maxsize=4096)
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


@lru_cache(maxsize=4096)
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
