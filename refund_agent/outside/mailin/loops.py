"""Mail loops: how often the desk may answer automatically, decided from when it answered
before (pure functions; the store reads the times, desk/records/mail.py ``Answered``).

An auto-responder that says it is one (RFC 3834's ``Auto-Submitted``, ``Precedence``) never
reaches the agent (parse.py). One that does not looks like a customer who answers every
message at once, and the desk would answer it forever. So the desk sends at most
``MailCap.answers`` automatic answers on one thread, and to one address, within
``MailCap.seconds``: a message that would make it answer once more is kept, not answered, and
its ticket goes to a person (desk/records/mail.py escalates it and audits ``mail_looped``).

Why a window rather than a total: a long conversation with a person is fine over days; what no
person does is answer within seconds, again and again. Counting answers *sent* (the desk's
"out" rows) rather than messages received means a customer who writes three times while the
agent works is not punished for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...config import MAIL_CAP, MAIL_CAP_SECONDS, Settings
from .decide import FLAGGED, HELD, REPLY, TICKET, decide
from .parse import Inbound
from .rows import Answered, MailThread

# What a message becomes when answering it would break the cap (desk/records/mail.py keeps it).
LOOPED = "looped"
# The kinds that make the desk answer: on the thread's run, or on a new one.
CONTINUES = (REPLY, HELD)
STARTS = (TICKET, FLAGGED)


@dataclass(frozen=True)
class MailCap:
    """At most ``answers`` automatic answers per thread and per address within ``seconds``."""

    answers: int = MAIL_CAP
    seconds: float = MAIL_CAP_SECONDS

    @classmethod
    def of(cls, settings: Settings) -> MailCap:
        """The cap the settings name (REFUND_AGENT_MAIL_CAP, REFUND_AGENT_MAIL_CAP_SECONDS)."""
        return cls(settings.mail_cap, settings.mail_cap_seconds)


# The settings' defaults, for a caller that names no cap (tests, a script of one's own).
DEFAULT_CAP = MailCap()


def within(times: Iterable[float], now: float, seconds: float) -> int:
    """How many of ``times`` are later than ``seconds`` before ``now``.

    A time after ``now`` (another host's clock a little ahead) counts too: it is recent.
    """
    return sum(1 for t in times if t > now - seconds)


def spent(answered: Answered, now: float, cap: MailCap) -> str | None:
    """Why the desk may not answer once more now (the cap is met on the thread or to the
    address), in words a person reads on the escalation; None when it may."""
    window = span(cap.seconds)
    on_thread = within(answered.on_thread, now, cap.seconds)
    if on_thread >= cap.answers:
        return (f"the desk sent {on_thread} automatic answers on this thread within {window} "
                f"(REFUND_AGENT_MAIL_CAP is {cap.answers}): the reply looks like an "
                "auto-responder's, so it was not answered; a person must read it and answer")
    to_sender = within(answered.to_sender, now, cap.seconds)
    if to_sender >= cap.answers:
        return (f"the desk sent {to_sender} automatic answers to {answered.sender} within "
                f"{window} (REFUND_AGENT_MAIL_CAP is {cap.answers}): the message looks like an "
                "auto-responder's, so it was not answered; a person must read it and answer")
    return None


def looped(kind: str, why: str, answered: Answered, now: float, cap: MailCap
           ) -> tuple[str, str]:
    """(kind, why) as decided, unless acting on it would make the desk answer past the cap:
    then (LOOPED, why not). A reply counts the answers on its thread and to its sender; a new
    ticket (or a flagged one) the answers to its sender, on whatever thread."""
    if kind in CONTINUES:
        reason = spent(answered, now, cap)
    elif kind in STARTS:
        reason = spent(Answered(to_sender=answered.to_sender, sender=answered.sender), now, cap)
    else:
        return kind, why
    return (LOOPED, reason) if reason else (kind, why)


def decide_capped(mail: Inbound, cap: MailCap, now: float, thread: MailThread | None,
                  answered: Answered) -> tuple[str, str]:
    """decide.decide, then the cap: what intake makes of ``mail`` (desk/records/mail.py calls it
    with the thread its ids name and the desk's earlier answers)."""
    kind, why = decide(mail, thread)
    return looped(kind, why, answered, now, cap)


def release_capped(cap: MailCap, now: float, thread: MailThread, answered: Answered
                   ) -> tuple[str, str]:
    """What a held reply becomes now that its run can take one: a reply, or LOOPED."""
    return looped(REPLY, "", answered, now, cap)


def span(seconds: float) -> str:
    """A window in words: "an hour", "2 hours", "30 minutes", "90 seconds"."""
    for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"an {unit}" if n == 1 and unit == "hour" else \
                f"a {unit}" if n == 1 else f"{n} {unit}s"
    return f"{seconds:g} seconds"
