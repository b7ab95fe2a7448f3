"""What the agent accepts from people, as pure checks: a customer's email or reply, a note.

Each returns the problem in one sentence, or None; the agent raises it as RunNotReady or
DecisionRefused, so bad input is a clear message and nothing is stored.
"""

from __future__ import annotations

from .errors import DecisionRefused, RunNotReady
from .identity import address_problem
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
