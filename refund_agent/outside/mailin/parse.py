"""What a customer's email says, read from its raw bytes: pure functions, no I/O.

Real mailboxes hold more than plain text: HTML-only mail, attachments, the earlier messages a
mail client quotes under a reply, and mail no person wrote (bounces, out-of-office answers,
list mail). :func:`read_mail` turns one raw message into an :class:`Inbound`: the text a model
may read (HTML turned into text, quoted lines left out, attachments named and never read), the
ids that place it in a thread, and, for mail a robot sent, why it is one. The raw bytes are
kept beside it, unchanged, for the store.

The sender is the address mail clients and DMARC read in the From header (RFC 5322, as
email.headerregistry parses it), never a display name: a From that does not name one mailbox
plainly is refused, and a display name that shows another address is flagged
(:func:`read_sender`). A message the standard library cannot read at all becomes an
:func:`unreadable_mail`, so it is recorded and never stops the mail behind it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from html.parser import HTMLParser

from ...intake import MAX_EMAIL_CHARS, same_address

# A Message-ID as it appears in Message-ID, In-Reply-To and References: "<left@right>", with no
# control characters (a NUL in an id would be refused by PostgreSQL's text columns).
_MSG_ID = re.compile(r"<[^<>\s\x00-\x1f\x7f]+>")
# Subjects that out-of-office and other automatic answers use. A subject is only a guess, so
# it is applied to replies on the desk's own threads (decide.py): a customer's first message
# "Out of office chair arrived cracked" is a ticket. Headers are what show a robot.
# Only the robots' own phrasings: a customer's "Undelivered order" or "Absence of a refund"
# must still reach the desk.
_AUTO_SUBJECT = re.compile(
    r"^\s*(auto(matic)?[ -]?(reply|response|answer)\b|out of (the )?office\b|"
    r"abwesenheitsnotiz|r[ée]ponse automatique|respuesta autom[áa]tica|vacation reply\b|"
    r"delivery status notification|undeliverable:|undelivered mail returned to sender|"
    r"mail delivery (failed|failure)|returned mail:|failure notice\b)", re.IGNORECASE)
_ROBOT_SENDER = re.compile(r"^(mailer-daemon|postmaster)@", re.IGNORECASE)
# The line a mail client writes above the message it quotes: "On <date>, <who> wrote:" (it may
# wrap onto a second line), and Outlook's separator.
_QUOTE_HEAD = re.compile(r"^\s*On\b.{0,300}\bwrote:\s*$", re.IGNORECASE | re.DOTALL)
_OUTLOOK_HEAD = re.compile(r"^\s*-{2,}\s*Original Message\s*-{2,}\s*$", re.IGNORECASE)
_NO_TEXT = "(The email has no text of its own.)"
# The most multipart containers a message may hold. The standard library's reader recurses
# once per nested multipart and checks every line against every open boundary, so a message of
# a thousand nested parts costs seconds and ends in RecursionError; real mail holds a few.
MAX_MULTIPARTS = 100
_MULTIPART = re.compile(rb"(?i)multipart/")
# Something in a display name that reads as an address ("maya@example.com", "Maya (maya@x.y)").
_ADDRESS_LIKE = re.compile(r"[^\s<>()\[\]\"',;:@]+@[^\s<>()\[\]\"',;:@]+")


@dataclass(frozen=True)
class Inbound:
    """One received email as the desk reads it.

    ``robot`` is ``"bounce"`` or ``"auto"`` for mail no person wrote (never fed to the agent),
    with ``robot_why`` saying which header showed it; None for a person's mail.
    ``subject_robot`` says why the subject looks automatic (decide.py trusts it only for a
    reply on the desk's own thread). ``sender_refused`` says why the From names no one sender
    plainly, ``sender_flagged`` why its display name may mislead a reader; ``unreadable`` why
    the message could not be read at all. ``text`` is what the model may read; ``raw`` the
    message exactly as it arrived.
    """

    message_id: str
    sender: str
    sender_name: str
    subject: str
    text: str
    in_reply_to: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    attachments: tuple[str, ...] = ()
    robot: str | None = None
    robot_why: str = ""
    subject_robot: str = ""
    sender_refused: str = ""
    sender_flagged: str = ""
    unreadable: str = ""
    raw: bytes = field(default=b"", repr=False)

    @property
    def thread_ids(self) -> tuple[str, ...]:
        """The ids that may name this message's thread, the closest first."""
        return tuple(dict.fromkeys((*self.in_reply_to, *reversed(self.references))))


def message_ids(value: str | None) -> tuple[str, ...]:
    """The Message-IDs in a header's value, in order, each once."""
    return tuple(dict.fromkeys(_MSG_ID.findall(value or "")))


def one_line_text(value: str | None) -> str:
    """A header's value on one line (folding and control characters become single spaces)."""
    return " ".join("".join(c if c.isprintable() else " " for c in (value or "")).split())


class _TextOfHtml(HTMLParser):
    """The readable text of an HTML body: blocks on their own lines, scripts and styles out,
    and what a mail client quotes (a <blockquote>, or Gmail's ``<div class="gmail_quote">``)
    left out up to its own closing tag only: a signature or an answer written below the quote
    is the customer's."""

    _BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table",
               "blockquote", "section", "article", "ul", "ol", "hr"}
    _HIDDEN = {"script", "style", "head", "title"}
    # Elements that never have a closing tag, so never stay open.
    _VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
             "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0
        self._quoted = 0
        # The open elements, each with whether it began a quote: a closing tag closes its own
        # element and any left unclosed inside it (HTML mail often leaves a <p> open).
        self._open: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self._hidden += 1
        if tag not in self._VOID:
            quotes = tag == "blockquote" or any(
                v and "gmail_quote" in v.split() for k, v in attrs if k == "class")
            self._open.append((tag, quotes))
            self._quoted += quotes
        if tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN and self._hidden:
            self._hidden -= 1
        if any(name == tag for name, _ in self._open):   # a stray closing tag closes nothing
            while self._open:
                name, quotes = self._open.pop()
                self._quoted -= quotes
                if name == tag:
                    break
        if tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden and not self._quoted:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The text of an HTML body, one paragraph a line, without what it quotes."""
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.parts).splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def strip_quoted(text: str) -> str:
    """The customer's own words: lines quoted with ">" left out, and everything from the line
    that introduces a quoted earlier message ("On ... wrote:", "-----Original Message-----")."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    for i, line in enumerate(lines):
        two = f"{line}\n{lines[i + 1]}" if i + 1 < len(lines) else line
        if _OUTLOOK_HEAD.match(line) or _QUOTE_HEAD.match(line) or (
                line.strip().lower().startswith("on ") and _QUOTE_HEAD.match(two)):
            break
        if line.lstrip().startswith(">"):
            continue
        kept.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def robot_reason(message: EmailMessage, sender: str = "") -> tuple[str, str] | None:
    """("bounce" | "auto", why) for mail no person wrote, else None.

    Only what the message's headers and structure say (RFC 3834's Auto-Submitted, Precedence,
    a delivery-status report, the auto-responders' own X- headers, list headers, a null or
    daemon ``sender``): a subject is a guess, left to :func:`subject_robot`.
    """
    if message.get_content_type() == "multipart/report":
        report = message.get_param("report-type", "") or ""
        return "bounce", f"a {report or 'delivery'} report (multipart/report)"
    for part in message.walk():
        if part.get_content_type() in ("message/delivery-status",
                                       "message/global-delivery-status"):
            return "bounce", "it holds a delivery-status report"
    submitted = one_line_text(message.get("Auto-Submitted")).lower()
    if submitted and submitted.split(";")[0].strip() != "no":
        return "auto", f"Auto-Submitted: {submitted}"
    precedence = one_line_text(message.get("Precedence")).lower()
    if precedence in ("bulk", "junk", "list", "auto_reply"):
        return "auto", f"Precedence: {precedence}"
    # Not X-Auto-Response-Suppress: Outlook puts it on some mail people write, too.
    for header in ("X-Autoreply", "X-Autorespond"):
        value = one_line_text(message.get(header)).lower()
        if value:
            return "auto", f"{header}: {value}"
    if message.get("List-Id") or message.get("List-Unsubscribe"):
        return "auto", "it is list mail (List-Id / List-Unsubscribe)"
    if _ROBOT_SENDER.match(sender) or str(message.get("Return-Path", "")).strip() == "<>":
        return "bounce", f"sent by {sender or 'the mail system'} (a null or daemon sender)"
    return None


def subject_robot(subject: str) -> str:
    """Why ``subject`` reads as an automatic answer's ("" if it does not): a guess, for
    replies on the desk's own threads only."""
    subject = one_line_text(subject)
    return f"an automatic answer's subject ({subject!r})" if _AUTO_SUBJECT.match(subject) else ""


@dataclass(frozen=True)
class Sender:
    """Who a message is from, as mail clients and DMARC read its From header.

    ``refused`` says why no one sender can be named (``address`` is then empty);
    ``flagged`` why the display name may mislead a reader (``name`` is then empty, so nothing
    shows it as the customer's name).
    """

    address: str
    name: str
    refused: str = ""
    flagged: str = ""


def read_sender(message: EmailMessage) -> Sender:
    """The sender of ``message``: the one mailbox its one From header names.

    Python's parser and a mail client can read a malformed From differently (``maya@x.y
    <evil@x.test>`` is Maya to one and evil to the other), so a From with parse defects, with
    several mailboxes, or given twice is refused rather than guessed. A display name that
    shows an address other than the real one is flagged: a person reading the ticket would
    take it for that address.
    """
    headers = message.get_all("From") or []
    if not headers:
        return Sender("", "")
    shown = one_line_text(str(headers[0]))[:200]
    if len(headers) > 1:
        return Sender("", "", refused=f"it has {len(headers)} From headers, and mail clients "
                                      "and DMARC need not read the same one")
    defects = getattr(headers[0], "defects", ())
    mailboxes = getattr(headers[0], "addresses", ())
    if defects:
        return Sender("", "", refused=f"its From header ({shown!r}) is malformed "
                                      f"({one_line_text(str(defects[0]))}), so mail clients "
                                      "may read another sender in it")
    if len(mailboxes) != 1:
        return Sender("", "", refused=f"its From header ({shown!r}) names {len(mailboxes)} "
                                      "mailboxes, not one")
    address = mailboxes[0].addr_spec.strip()
    name = one_line_text(mailboxes[0].display_name)
    others = [a for a in _ADDRESS_LIKE.findall(name)
              if a.casefold() != address.casefold() and not same_address(a, address)]
    if others:
        return Sender(address, "", flagged=f"its display name {name!r} shows the address "
                                           f"{others[0]}, but it comes from {address}")
    return Sender(address, name)


def _decoded(part: EmailMessage) -> str:
    try:
        content = part.get_content()
    except (LookupError, ValueError, AssertionError):   # an unknown charset, a broken encoding
        payload = part.get_payload(decode=True) or b""
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    return content if isinstance(content, str) else ""


def body_and_attachments(message: EmailMessage) -> tuple[str, tuple[str, ...]]:
    """The message's text (plain preferred, else HTML read as text) and the names of its
    attachments (never their content)."""
    names: list[str] = []
    for part in message.walk():
        if part.is_multipart():
            continue
        disposition = part.get_content_disposition()
        filename = part.get_filename()
        if disposition == "attachment" or (filename and disposition != "inline") or (
                filename and part.get_content_maintype() not in ("text",)):
            names.append(one_line_text(filename) or f"(unnamed {part.get_content_type()})")
    try:
        body = message.get_body(preferencelist=("plain", "html"))
    except (KeyError, IndexError):
        body = None
    if body is None:
        return "", tuple(names)
    text = _decoded(body)   # type: ignore[arg-type]
    if body.get_content_type() == "text/html":
        text = html_text(text)
    return text, tuple(names)


def fallback_id(raw: bytes) -> str:
    """The Message-ID of a message that has none: the same for every delivery of its bytes."""
    return f"<sha256-{hashlib.sha256(raw).hexdigest()[:32]}@refund-agent.no-message-id>"


def unreadable_id(raw: bytes) -> str:
    """The key of a message that cannot be read: the same for every delivery of its bytes,
    and never a real message's id (``.invalid`` is reserved, RFC 2606)."""
    return f"<sha256-{hashlib.sha256(raw).hexdigest()[:32]}@unreadable.invalid>"


def unreadable_mail(raw: bytes, error: BaseException) -> Inbound:
    """A message :func:`read_mail` failed on (``error``), as intake records it: its bytes
    and why, nothing read from it."""
    why = one_line_text(f"{type(error).__name__}: {error}")[:300]
    return Inbound(message_id=unreadable_id(raw), sender="", sender_name="", subject="",
                   text="", unreadable=f"it cannot be read ({why})", raw=raw)


def read_mail(raw: bytes) -> Inbound:
    """One raw message (RFC 5322 bytes, as an MTA or IMAP hands it over), read.

    Raises whatever the standard library raises on a message it cannot read (a header it
    refuses, parts nested past the recursion limit); intake records those with
    :func:`unreadable_mail`.
    """
    if (parts := len(_MULTIPART.findall(raw))) > MAX_MULTIPARTS:
        raise ValueError(f"it names {parts} multipart containers; the desk reads at most "
                         f"{MAX_MULTIPARTS}")
    message = message_from_bytes(raw, policy=default_policy)
    assert isinstance(message, EmailMessage)
    ids = message_ids(str(message.get("Message-ID") or ""))
    sender = read_sender(message)
    text, attachments = body_and_attachments(message)
    own = strip_quoted(text) or _NO_TEXT
    if len(own) > MAX_EMAIL_CHARS:
        cut = len(own) - MAX_EMAIL_CHARS + 200
        own = (own[: MAX_EMAIL_CHARS - 200].rstrip()
               + f"\n\n[... {cut:,} more characters; the whole message is stored]")
    robot = robot_reason(message, sender.address)
    subject = one_line_text(message.get("Subject"))
    return Inbound(
        message_id=ids[0] if ids else fallback_id(raw), sender=sender.address,
        sender_name=sender.name, subject=subject, text=own,
        in_reply_to=message_ids(str(message.get("In-Reply-To") or "")),
        references=message_ids(str(message.get("References") or "")),
        attachments=attachments, robot=robot[0] if robot else None,
        robot_why=robot[1] if robot else "", subject_robot=subject_robot(subject),
        sender_refused=sender.refused, sender_flagged=sender.flagged, raw=raw)


def reply_subject(subject: str) -> str:
    """The subject of an answer: "Re: " before it, once (never "Re: Re: ...")."""
    subject = one_line_text(subject)
    return subject if re.match(r"^re\s*:", subject, re.IGNORECASE) else f"Re: {subject}".rstrip()
