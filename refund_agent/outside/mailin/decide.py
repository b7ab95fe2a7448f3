"""What intake makes of a received message, decided from the message and the run its thread
ids name: a pure function the store calls inside the intake's transaction (desk/records/mail.py)."""

from __future__ import annotations

from ...intake import address_problem, same_address, sender_problem
from .parse import Inbound
from .rows import MailThread

# Every kind a received message can become (desk/records/mail.py keeps it on the message's row).
TICKET, REPLY, HELD, FLAGGED = "ticket", "reply", "held", "flagged"
AUTO, BOUNCE, REFUSED, UNREADABLE = "auto", "bounce", "refused", "unreadable"
NO_RUN = (AUTO, BOUNCE, REFUSED, UNREADABLE)


def decide(mail: Inbound, thread: MailThread | None) -> tuple[str, str]:
    """(kind, why) for ``mail``, whose thread ids name ``thread``'s run (None: none known).

    A message that could not be read is recorded as such. Mail no person wrote, by its headers,
    is never fed to the agent (two robots would mail each other forever); a sender the desk
    cannot name or answer is refused. An automatic answer's subject is only a guess, trusted
    on a reply to the desk's own thread (a customer may well write "Out of office chair
    arrived cracked"). A display name showing another address makes a new ticket, flagged,
    on no customer's thread; so does a reply from anyone but the thread's customer; an
    unknown thread is a new ticket; the customer's own reply continues the run, or waits
    (held) while the run works or waits on a person.
    """
    if mail.unreadable:
        return UNREADABLE, mail.unreadable
    if mail.robot:
        return (BOUNCE if mail.robot == BOUNCE else AUTO), mail.robot_why
    if mail.sender_refused:
        return REFUSED, f"its sender cannot be told: {mail.sender_refused}"
    if problem := sender_problem(mail.sender) or address_problem(mail.sender):
        return REFUSED, f"it cannot be answered: {problem}"
    if thread is not None and mail.subject_robot:
        return AUTO, f"{mail.subject_robot}, on the thread of {thread.run_id}"
    if mail.sender_flagged:
        return FLAGGED, (f"{mail.sender_flagged}: a new ticket, so that nobody takes it for "
                         "that address's")
    if thread is None:
        return TICKET, ""
    if not same_address(mail.sender, thread.sender):
        return FLAGGED, (f"it answers the thread of {thread.run_id}, whose customer is "
                         f"{thread.sender}, but comes from {mail.sender}: a new ticket, so "
                         "it cannot continue someone else's conversation")
    if thread.takes_reply:
        return REPLY, ""
    return HELD, (f"{thread.run_id} is not finished yet; the reply is added once it can "
                  "take one")
