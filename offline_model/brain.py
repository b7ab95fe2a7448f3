"""The offline model's decisions: a deterministic support policy, not a language model.

It reads only what a real model would see — the conversation, the tools offered, the tool
outputs and the customer's words — and picks the next step the way a careful support agent
would. It knows nothing about the sample shop or its scenarios: order numbers, items, amounts
and names all come from the conversation. It is deliberately plain, so its choices are easy to
follow, and it is a stand-in: with an API key, Grok makes these choices instead.

It plays these parts, and says so plainly for anything else:

- the refund desk, when the request declares the desk's tools: it calls only tools the
  request declares and follows ``tool_choice`` (``none``, ``auto``, ``required``, a named
  function, ``allowed_tools``);
- the simulated customer, when the request has no tools and carries the customer's brief or
  the email transcript (the agent's simulated customer): it reacts to what the emails say happened
  and says ``DONE`` when it has said its piece;
- a desk that follows its tools' descriptions, when the request declares other tools shaped
  "look up, then act" (follower.py): another agent on the same loop, such as the agent's
  account-closure example, or your own, driven by its declarations alone.

Any other request gets a short text answer saying that the stand-in only plays the refund
desk; a forced tool call it cannot make is refused with a 400.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from . import follower, reader, steering
from .events import ApiError, function_tool_names

# -- the lexicon ------------------------------------------------------------------------------
# Everything the stand-in recognises in people's words, one pattern per concept, in one place.
# Where the words come from: everyday customer-service English — how people commonly describe
# a delivery that arrived broken or faulty, an unused item they want to send back, an item
# they are happy to keep, an escalation (chargebacks, reviews, lawyers, managers) — and, for
# the support side, the usual phrasing of refund, refusal and follow-up emails; plus the units
# and pack words of retail catalogues. None of it is taken from the sample emails in data/,
# and nothing here names a sample's item, order, person or amount: the tests feed emails
# written in other words, and a new email should be read as well as a sample.

# An order number as customers write it: one to three letters and digits (B2001, #C-20417).
# Never inside an email address or a domain (ana2024@example.com is not an order).
ORDER_ID = re.compile(r"(?<![\w@.])#?\s?([A-Z]{1,3}-?\d{3,8})\b(?![@.]\w)", re.IGNORECASE)
MONEY = re.compile(r"\$\s?(\d[\d,]*(?:\.\d{2})?)")

# The item arrived damaged or does not work: breakage, defects, faults on first use.
DAMAGE = re.compile(
    r"crack|broke|break|damag|defect|shatter|chip|dent|leak|torn|\brip|faulty|scratch|stain"
    r"|split|snapped|bent|in pieces|in two|in half|smash|warp|rust|burn|smok|overheat|noise"
    r"|rattl|wobbl|missing (?:a )?(?:part|piece)|stops? work|stopped|not work|doesn.t work"
    r"|won.t (?:turn|start|work|switch)|dead on arrival|arrived wrong|fell apart|came apart"
    r"|peel|fray|mou?ld|dead\b|flicker|short.circuit|malfunction|busted|wrecked|ruined",
    re.I)
# The customer no longer wants an item they have not used. ("chang" takes at most 20 more
# letters: an unbounded run would be rescanned from every "chang" of a long word, which is
# quadratic in its length.)
CHANGE_OF_MIND = re.compile(
    r"chang\w{0,20} (?:my|of) mind|don.t (?:want|need|like)|no longer (?:want|need)|unused"
    r"|not used|never used|didn.t (?:like|use)|\breturn|send (?:it|them) back|not what I expected"
    r"|too (?:big|small|large|heavy)|doesn.t fit|not for me|ordered (?:by mistake|the wrong)"
    r"|still (?:sealed|boxed|in the box)|unopened|regret", re.I)
# The request covers every item on the order.
EVERYTHING = re.compile(r"\b(all|whole|everything|entire|full|both)\b", re.I)
# Escalations a support team wants flagged.
THREATS = {
    "a chargeback": re.compile(r"charge.?back|dispute|my bank|card company", re.I),
    "a bad review": re.compile(r"review|one.star|1.star|yelp|trustpilot|social media", re.I),
    "legal action": re.compile(r"lawyer|attorney|legal|sue\b|court|small claims", re.I),
    "a manager": re.compile(r"manager|supervisor|someone in charge|escalate", re.I),
}
# What a lead must see, read in the customer's own words (quoted and forwarded text left out),
# stricter than THREATS: "I reviewed the order" is no threat, "I'll leave a one-star review" is.
ESCALATIONS = {
    "threat": re.compile(
        r"charge.?back|dispute (?:the|this) (?:charge|payment)|(?:call|contact|tell) my bank"
        r"|card company|one.star|1.star|(?:bad|negative|terrible|honest) review"
        r"|(?:leave|write|post|give) (?:you |a |an )?(?:\w+ )?review|trustpilot|yelp"
        r"|lawyer|attorney|legal action|\bsue\b|small claims|social media", re.I),
    "manager": re.compile(r"\bmanager\b|supervisor|someone in charge|escalate|team lead"
                          r"|speak to (?:a|your) (?:boss|superior)", re.I),
    "policy_exception": re.compile(r"make an exception|an exception for|bend the rules"
                                   r"|goodwill (?:gesture|refund)|just this once", re.I),
}
ESCALATION_REASONS = {
    "threat": "The customer threatens {what}.",
    "manager": "The customer asks for a manager.",
    "policy_exception": "The customer asks for an exception the refund policy does not allow.",
}
# A customer accepting an outcome, gladly or not.
ACCEPTS = re.compile(r"\b(fine|okay|ok|thanks|thank you|accept|i'll take|i will take"
                     r"|fair enough|understood|alright|all right)\b", re.I)
UNHAPPY = re.compile(r"not happy|unhappy|disappoint|won.t be (?:ordering|buying|back)"
                     r"|never again|last time|ridiculous|unacceptable|not acceptable", re.I)
# A reviewer's note that asks the customer for something.
ASKS_FOR = re.compile(r"\b(send|attach|provide|share|upload|include|email)\b", re.I)
EVIDENCE = re.compile(r"\b(photos?|pictures?|images?|receipt|proof|video|serial number)\b", re.I)

# Support emails, as the simulated customer reads them.
REFUND_MADE = re.compile(
    r"\b(?:i|we)(?:'ve| have)? (?:just |now )?(?:refunded|issued (?:a|your|the) refund"
    r"|processed (?:a|your|the) refund|sent (?:a|your|the) refund)|\bhas been refunded"
    r"|\brefund (?:of \$[\d,.]+ )?(?:has been|was) (?:issued|processed|sent|approved)", re.I)
NOT_REFUNDED = re.compile(
    r"(?:could not|couldn.t|can.t|cannot|unable to|not able to) (?:be )?refund(?:ed)? (?:the|your)"
    r"|final.sale|not included|(?:was|were) declined|can.t be refunded", re.I)
REFUSED = re.compile(
    r"(?:can.t|cannot|could not|couldn.t|unable to|not able to|aren.t able to|are not able to)"
    r" (?:offer|issue|give|process|approve|provide) (?:you )?(?:a |this |the |any |your )?refund"
    r"|\bno refund\b|\bdeclined? (?:the|your) (?:refund|request)|\bnot eligible\b", re.I)
FOLLOW_UP = re.compile(r"(?:will|'ll) (?:follow up|get back to you|be in touch|contact you"
                       r"|reach out)|member of our team will", re.I)
ASKS_ORDER_NUMBER = re.compile(r"order number|order id|order #", re.I)
ASKS_WHICH = re.compile(r"which (?:one|order)", re.I)
ASKS_WHAT_HAPPENED = re.compile(
    r"what (?:happened|went wrong|is wrong|'s wrong)|tell me (?:more|what)|describe", re.I)
ASKS_ADDRESS = re.compile(r"address you used|write (?:to us )?from|email address", re.I)
WARRANTY = re.compile(r"warranty|repair|replacement", re.I)

# Common short words of languages customers may write in, to notice an email the desk can't
# read (these are the usual high-frequency "stop words" of each language).
STOP_WORDS = {
    "English": set("the a an and or but of to in on at for with my your i it is was are be "
                   "been were have has had this that not no please can could would should will "
                   "you me we our they there what when which from so if as by do did just all "
                   "any some up out about hi hello thanks thank order refund item arrived got "
                   "get".split()),
    "Spanish": set("el la los las de del que y en un una mi mis por para con es su se lo al "
                   "pero como muy hola gracias quiero pedido llegó está estoy favor".split()),
    "French": set("le la les de des du et un une est je mon ma mes pour pas que qui dans avec "
                  "sur ce cette bonjour merci commande suis vous".split()),
    "German": set("der die das und ist ich nicht ein eine mein meine mit zu den dem von bitte "
                  "bestellung danke hallo habe wurde auf".split()),
    "Portuguese": set("o os as de do da dos das e que um uma meu minha para com não é pedido "
                      "obrigado obrigada olá por favor chegou".split()),
    "Italian": set("il lo gli le di e che un una mio mia per con non è ordine grazie ciao sono "
                   "della del arrivato".split()),
    "Dutch": set("de het een en van ik niet mijn met voor is bestelling bedankt hallo dat "
                 "zijn".split()),
}
WROTE_BACK = "The customer wrote back:"
REFUND_DESK_TOOLS = ("lookup_order", "check_refund_policy", "issue_refund",
                     "send_customer_message", "escalate")
# How the simulated customer's request is recognised (the agent's customer module writes it): a
# brief asking the model to play the customer, or the transcript of the emails.
# (Bounded like CHANGE_OF_MIND's "chang", for the same reason.)
PERSONA_BRIEF = re.compile(r"role.?play\w{0,20}\b.{0,80}\bcustomer", re.I | re.S)
TRANSCRIPT_BLOCK = re.compile(r"^--- Email from (the customer|support) ---[ \t]*$", re.M)


@dataclass
class Reply:
    """What the offline model answers: a reasoning summary, optional text, optional calls."""

    reasoning: str
    text: str | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


# -- reading the conversation ---------------------------------------------------------------

def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


@dataclass
class _Conversation:
    customer: list[str]                    # every user message, oldest first
    calls: list[dict[str, Any]]            # function calls, with their parsed output if any
    since_customer: list[dict[str, Any]]   # calls made after the customer last wrote
    before_latest: list[dict[str, Any]]    # calls made before the customer last wrote

    def last(self, name: str, anywhere: bool = True,
             order_id: str | None = None) -> dict[str, Any] | None:
        pool = self.calls if anywhere else self.since_customer
        found = [c for c in pool if c["name"] == name
                 and (order_id is None or _canonical(c["args"].get("order_id")) == order_id)]
        return found[-1] if found else None


def _canonical(order_id: Any) -> str:
    return str(order_id or "").strip().lstrip("#").upper().replace("-", "").replace(" ", "")


def _customer_words(message: str) -> str:
    """A customer message without its From: header: order numbers come from their words only
    (an address such as ana2024@example.com is not an order number)."""
    return "\n".join(line for line in message.splitlines()
                     if not line.lower().startswith("from:"))


def _body(message: str) -> str:
    """What the customer wrote themselves: no From:/Subject: headers, no reply preamble."""
    lines = [line for line in message.splitlines()
             if not line.lower().startswith(("from:", "subject:"))]
    return "\n".join(lines).removeprefix(WROTE_BACK).strip()


def _order_ids(text: str) -> list[str]:
    return list(dict.fromkeys(_canonical(m) for m in ORDER_ID.findall(text)))


def _read(conversation: list[dict[str, Any]]) -> _Conversation:
    customer: list[str] = []
    calls: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    since = 0
    for item in conversation:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            customer.append(_text(item.get("content")))
            since = len(calls)
        elif kind == "function_call":
            try:
                args = json.loads(item.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            call = {"name": item.get("name"), "args": args if isinstance(args, dict) else {},
                    "output": None}
            calls.append(call)
            by_id[item.get("call_id", "")] = call
        elif kind == "function_call_output" and item.get("call_id") in by_id:
            try:
                output = json.loads(item.get("output") or "null")
            except (json.JSONDecodeError, TypeError):
                output = {"output": item.get("output")}
            by_id[item["call_id"]]["output"] = output if isinstance(output, dict) else {}
    return _Conversation(customer, calls, calls[since:], calls[:since])


def _money(value: float) -> str:
    return f"${value:,.2f}"


def _first_name(conv: _Conversation) -> str:
    lookup = conv.last("lookup_order")
    # A tool output is whatever the caller sent back: read it, never trust its shape.
    customer = ((lookup or {}).get("output") or {}).get("customer")
    name = customer.get("name", "") if isinstance(customer, dict) else ""
    name = name if isinstance(name, str) else ""
    if not name:
        name = (_from_name(conv.customer[0] if conv.customer else "") or "").strip()
    return name.split()[0] if name and "@" not in name else "there"


_FROM = re.compile(r"From:")
_SPACES = re.compile(r"\s*")
_NAME_END = re.compile(r"[<\n]")


def _from_name(text: str) -> str | None:
    """The name in the first "From: Name <address>" of ``text``, unstripped, else None.

    The same answer as ``re.search(r"From:\\s*([^<\\n]+)<", text).group(1)``, which reads from
    every "From:" to the end of its line, quadratic on a long line of them. Here the end of
    the name (the next "<" or line break) is found once and kept while later "From:" still
    come before it. tests/standin/test_brain_linear.py checks it against the pattern.
    """
    stop = -1                 # the first "<" or line break at or after the last start read
    for found in _FROM.finditer(text):
        start = _SPACES.match(text, found.end()).end()
        if start > stop:
            end = _NAME_END.search(text, start)
            stop = end.start() if end else len(text)
        if stop == len(text) or text[stop] != "<":
            continue
        if stop > start:
            return text[start:stop]
        # "<" right after the spaces: the pattern gives back one space as the name, unless
        # that is a line break (or there are no spaces), and then this "From:" fails.
        if start > found.end() and text[start - 1] != "\n":
            return text[start - 1:start]
    return None


def _language(text: str) -> str | None:
    """The language an email is written in when it is clearly not English, else None.

    Judged by the share of each language's common short words, so a few foreign words in an
    English email (a product name, a greeting) don't count; a script other than Latin counts
    as a language the desk can't read.
    """
    letters = [c for c in text if c.isalpha()]
    if len(letters) >= 12 and sum(not ("a" <= c.lower() <= "z" or c in "ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖ"
                                       "ÙÚÛÜÝßàáâãäåçèéêëìíîïñòóôõöùúûüýÿ") for c in letters) \
            > len(letters) / 2:
        return "a script I can't read"
    words = re.findall(r"[^\W\d_]+", text.lower())
    if len(words) < 4:
        return None
    counts = {language: sum(w in stop for w in words) for language, stop in STOP_WORDS.items()}
    english = counts.pop("English")
    language, best = max(counts.items(), key=lambda kv: kv[1])
    if best >= 3 and best >= 0.2 * len(words) and best > 1.5 * english:
        return language
    return None


# -- what the customer asks for, line by line, from the policy tool's facts ------------------

@dataclass
class _Proposal:
    lines: list[dict[str, Any]]            # {"line", "reason", "name"}
    why_not: str = ""
    final_sale: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)    # already refunded or waiting
    # Why nothing is proposed when the reader could not propose: "" (a policy reason in
    # why_not), unclear, which, missing, question, fine or used; and the items concerned.
    kind: str = ""
    about: list[str] = field(default_factory=list)
    answer: list[str] = field(default_factory=list)   # policy points that answer a question

    @property
    def kinds(self) -> set[str]:
        return {line["reason"] for line in self.lines}


# Between the customer's messages, when they are read together; and between their own words,
# the later one newer (reader.NEWER).
_MESSAGE_BREAK = "\n\x1e\n"
_NEWER = f"\n{reader.NEWER}\n"


def _subject(message: str) -> str:
    """The Subject: line of a message, if it starts with its headers."""
    for line in message.splitlines():
        if not line.lower().startswith(("from:", "subject:")):
            break
        if line.lower().startswith("subject:"):
            return line[len("subject:"):].strip()
    return ""


# The customer asks about the shipping they paid (one alternation of words: linear time).
SHIPPING_ASKED = re.compile(r"\b(?:shipping|postage|delivery (?:fee|charge|cost))", re.I)


def _own_words(message: str) -> str:
    """The customer's own words in one message: no From:/Subject: header, no reply preamble,
    no quoted, forwarded or pasted text (see reader.own_words)."""
    lines = message.splitlines()
    while lines and lines[0].lower().startswith(("from:", "subject:")):
        lines.pop(0)
    return reader.own_words("\n".join(lines).strip().removeprefix(WROTE_BACK))


def _answerable(reading: reader.Reading, policy: str) -> bool:
    """Whether the customer's questions are ones to answer rather than to ask back about: on
    a topic the policy speaks to, a care question, or asked about items said to be fine ("It
    hasn't torn. Is that normal?"). "What can you do?" about an item with nothing said of it
    is answered with a question."""
    _points, topical = reader.answer_points(reading.questions, policy)
    return topical or bool(reader.CARE.search(" ".join(reading.questions))) or (
        reading.fine_any and not reading.named)


def _propose(facts: dict[str, Any], email: str, policy: str = "") -> _Proposal:
    """The lines the policy lets us refund for what the customer describes."""
    if not facts.get("delivered"):
        return _Proposal([], why_not="the order has not been delivered yet")
    if not facts.get("within_window"):
        return _Proposal([], why_not=f"it was delivered {facts.get('days_since_delivery')} days "
                         f"ago, past the {facts.get('window_days')}-day refund window")
    lines = facts.get("lines", [])
    by_id = {line["line"]: line for line in lines}
    messages = email.split(_MESSAGE_BREAK)
    # Each message is newer than the one before it: where it says less, it wins (issue 43).
    own = _NEWER.join(_own_words(part) for part in messages)
    reading = reader.read(lines, own, subject=_subject(messages[0]))
    texts = [own]
    if any(steering.steers(_body(part)) for part in messages):
        # Words addressed to the agent's instructions raise nothing: the lower of the readings
        # with and without them, and no claim on "everything" spread to every item.
        texts.append(_NEWER.join(_own_words(steering.without_steering(part))
                                 for part in messages))
        reading = steering.lower(reading, reader.read(lines, texts[-1], _subject(messages[0]),
                                                      blanket=False))
    wanted = dict(reading.wanted)
    # Shipping the facts say is owed (every item refunded as damaged, by refunds proposed side
    # by side, none of which could include it) is refunded on its own when the customer asks.
    shipping = bool(facts.get("shipping_owed")) and bool(SHIPPING_ASKED.search(texts[-1]))
    if not wanted and reading.unclear and all(by_id[i].get("final_sale") for i in
                                              reading.unclear):
        wanted = {lid: "changed_mind" for lid in reading.unclear}   # declined as final sale
    names = lambda ids: [str(by_id[i]["name"]) for i in ids if i in by_id]  # noqa: E731
    if not wanted and not shipping:
        if reading.used and reader.policy_takes_back_unused_only(policy):
            used = names(reading.used)
            return _Proposal([], why_not=(
                f"you've used the {' and '.join(n.lower() for n in used)}, and our policy only "
                "takes back unused items when you change your mind"), kind="used", about=used)
        if reading.used:
            wanted = {lid: "changed_mind" for lid in reading.used}
        elif reading.wrong_item:
            return _Proposal([], why_not="unclear", kind="wrong_item",
                             about=names(dict.fromkeys(reading.wrong_item)))
        elif reading.alternative:
            return _Proposal([], why_not="unclear", kind="exchange",
                             about=names(reading.unclear or reading.named))
        elif reading.missing:
            return _Proposal([], why_not="unclear", kind="missing",
                             about=names(reading.missing))
        elif reading.questions and not reading.unclear and _answerable(reading, policy):
            care = reader.CARE.search(" ".join(reading.questions))
            return _Proposal([], why_not="unclear", kind="question",
                             about=["care"] if care else [],
                             answer=reader.answer_points(reading.questions, policy)[0])
        elif reading.fine_only:
            return _Proposal([], why_not="unclear", kind="fine",
                             about=["packaging"] if reading.packaging else [])
        elif reading.loose_damage:
            return _Proposal([], why_not="unclear", kind="which")
        else:
            return _Proposal([], why_not="unclear", kind="unclear",
                             about=names(reading.unclear or reading.named))
    proposal = _Proposal([])
    for line_id, reason in wanted.items():
        line = by_id[line_id]
        if line.get("final_sale"):
            proposal.final_sale.append(line["name"])
        elif line.get("status") != "refundable":
            proposal.taken.append(f"{line['name']} ({line.get('status')})")
        else:
            # A line of several units is refunded for the units the customer counts ("one of
            # the four tumblers"), else all that remain; never more than remain.
            left = line.get("units_left")
            quantity = int(line.get("quantity") or 1)
            counted = [reader.units_named(lines, text, line_id, quantity) for text in texts]
            units = None if None in counted and len(set(counted)) == 1 else min(
                quantity if n is None else n for n in counted)
            if units is not None and isinstance(left, int):
                units = min(units, left)
            proposal.lines.append({"line": line_id, "reason": reason, "name": line["name"],
                                   "units": units, "quantity": line.get("quantity")})
    if shipping:
        # The tool takes a reason per line; shipping follows the items' "damaged".
        proposal.lines.append({"line": "SHIPPING", "reason": "damaged", "name": "Shipping"})
    if not proposal.lines:
        if proposal.taken:
            proposal.why_not = ("what you describe has already been taken care of: "
                                + "; ".join(proposal.taken))
        else:
            proposal.why_not = "the items asked about are final sale"
    return proposal


def _explain(p: _Proposal) -> str:
    """One sentence on what is proposed and why, for the approver and the reasoning."""
    damaged = [_counted(line) for line in p.lines if line["reason"] == "damaged"
               and line["line"] != "SHIPPING"]
    returned = [_counted(line) for line in p.lines if line["reason"] == "changed_mind"]
    parts = []
    if damaged:
        parts.append(f"the {' and '.join(damaged)} arrived damaged (full price)")
    if returned:
        parts.append(f"the {' and '.join(returned)} returned for a change of mind (less the "
                     "return fee)")
    if any(line["line"] == "SHIPPING" for line in p.lines):
        parts.append("the shipping paid, owed now that every item was refunded as damaged")
    text = "; ".join(parts)
    if p.final_sale:
        text += f". The {' and '.join(p.final_sale).lower()} is final sale and can't be refunded"
    if p.taken:
        text += f". Not included: {'; '.join(p.taken)}"
    return text


def _counted(line: dict[str, Any]) -> str:
    """'tumbler (1 of 4)' for some units of a line, its name alone for all of them."""
    name = str(line.get("name") or line.get("item") or "").lower()
    units, of = line.get("units"), line.get("quantity") or line.get("of_units")
    if isinstance(units, int) and isinstance(of, int) and of > 1 and units < of:
        return f"{name} ({units} of {of})"
    return name


def _refunded_lines(outcome: dict[str, Any]) -> str:
    parts = []
    for line in outcome.get("lines") or []:
        how = "in full" if line.get("reason") == "damaged" else (
            "less the return fee" if line.get("reason") == "changed_mind" else "")
        parts.append(f"{_counted(line)} {_money(line.get('amount', 0))}"
                     + (f" ({how})" if how else ""))
    return ", ".join(parts)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _sentence(text: str) -> str:
    """``text`` with a capital first letter and a closing full stop."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


# -- the support agent's next step ------------------------------------------------------------

def _send(reasoning: str, message: str) -> Reply:
    return Reply(reasoning, calls=[("send_customer_message", {"message": message})])


def _escalation(conv: _Conversation) -> Reply | None:
    """Raise the ticket to a lead when the customer's latest own words call for it, once.

    The first reason found wins (a threat over a manager request over an exception); a call
    already made since the customer last wrote means it is raised.
    """
    if not conv.customer or conv.last("escalate", anywhere=False) is not None:
        return None
    words = _own_words(conv.customer[-1])
    for kind, pattern in ESCALATIONS.items():
        if pattern.search(words):
            what = ", ".join(t for t in _threats(words) if t != "a manager") or "to go further"
            reason = ESCALATION_REASONS[kind].format(what=what)
            return Reply(f"{reason} A lead must see this, so I raise it before answering.",
                         calls=[("escalate", {"kind": kind, "reason": reason})])
    return None


def _escalated(conv: _Conversation) -> bool:
    """Whether a lead was asked to look, since the customer last wrote (the call answered;
    a ticket already with a lead for it counts)."""
    call = conv.last("escalate", anywhere=False)
    return bool(call and (call.get("output") or {}).get("status") in ("escalated",
                                                                      "already_escalated"))


def _threats(text: str) -> list[str]:
    return [label for label, pattern in THREATS.items() if pattern.search(text)]


def _settled(conv: _Conversation, order_id: str, earlier_words: str) -> bool:
    """Whether the request had its outcome before the customer's latest message.

    A refund was proposed (and decided), or the policy was checked and allowed nothing for
    what the customer had said by then. A reply after that is a reaction to the outcome; a
    reply before it (the order number asked for, what went wrong) carries the request on.
    """
    if any(c["name"] == "issue_refund" and c["output"] is not None
           and c["output"].get("status") != "needs_information" for c in conv.before_latest):
        return True
    policy = [c for c in conv.before_latest if c["name"] == "check_refund_policy"
              and c["output"] is not None and _canonical(c["args"].get("order_id")) == order_id]
    if not policy:
        return False
    proposal = _propose(policy[-1]["output"].get("facts", {}), earlier_words,
                        str(policy[-1]["output"].get("policy") or ""))
    return not proposal.lines and proposal.why_not != "unclear"


def _answered(conv: _Conversation, refund: dict[str, Any]) -> bool:
    """Whether the reviewer asked the customer something and the customer has written since:
    then the request goes on, and the refund is proposed again from what they said."""
    return (refund["output"].get("status") == "needs_information"
            and any(c is refund for c in conv.before_latest))


def _support(conv: _Conversation) -> Reply:
    if not conv.customer:
        return Reply("There is no message from a customer in this conversation.",
                     "There's no customer email here yet, so there's nothing for the refund desk "
                     "to do.")
    first = _first_name(conv)
    sent = conv.last("send_customer_message", anywhere=False)
    latest = conv.customer[-1] if conv.customer else ""
    language = _language(_body(latest))
    if language:
        return _foreign(conv, first, language, sent)
    said = [_customer_words(c) for c in conv.customer]
    # Order numbers come from the customer's own words (with the subject line): a number in
    # quoted text or in a signature's reference is not the order this is about.
    own = [reader.own_words(c.replace(WROTE_BACK, "")) for c in said]
    ids = reader.order_ids(own[-1]) if own else []
    if not ids or len(conv.customer) == 1:
        ids = reader.order_ids(" ".join(own))
    if not ids:   # only in a forwarded confirmation or a quoted email: still the order
        ids = reader.order_ids(" ".join(said))
    earlier = _MESSAGE_BREAK.join(said[:-1])
    if latest.startswith(WROTE_BACK) and ids and _settled(conv, ids[0], earlier):
        return _pushback(conv, first, ids[0], _body(latest), sent)
    email = _MESSAGE_BREAK.join(said)
    if 1 < len(ids) <= _ORDERS_TO_COMPARE:
        # Several orders named: look them all up, and go on with the one the email's claims
        # are about ("the pitcher from A1 is cracked; my other order, A2, is fine").
        unlooked = [oid for oid in ids if conv.last("lookup_order", order_id=oid) is None
                    or conv.last("lookup_order", order_id=oid)["output"] is None]
        if unlooked and not sent:
            return Reply(f"The email names orders {' and '.join(ids)}. I'll look them up to "
                         "see which one it is about.",
                         calls=[("lookup_order", {"order_id": oid}) for oid in unlooked])
        meant = None if unlooked else _order_meant(conv, ids, email)
        if meant is None and sent:
            return Reply("I asked which order the customer means.", f"The customer named "
                         f"{' and '.join(ids)}; asked which one the request is about.")
        if meant is None:
            return _send("The email names more than one order, and what it says fits none "
                         "of them alone. I'll ask rather than guess.",
                         f"Hi {first},\n\nThanks for writing. Your email mentions orders "
                         f"{' and '.join(ids)}. Which one is this about, and what happened? "
                         "Once I know, I'll look into it right away.")
        ids = [meant]
    if len(ids) > 1 and not conv.last("lookup_order"):
        if sent:
            return Reply("I asked which order the customer means.", f"The customer named "
                         f"{' and '.join(ids)}; asked which one the request is about.")
        return _send("The email names more than one order, and I can't tell which is meant. "
                     "I'll ask rather than guess.",
                     f"Hi {first},\n\nThanks for writing. Your email mentions orders "
                     f"{' and '.join(ids)}. Which one is this about? Once I know, I'll look "
                     "into it right away.")
    if not ids:
        if sent:
            return Reply("I asked the customer for their order number; nothing else to do.",
                         "No order number in the request. Asked the customer for it.")
        return _send("The email has no order number, so I can't look anything up. I'll ask.",
                     f"Hi {first},\n\nThanks for getting in touch. Could you send me your order "
                     "number? It's in your confirmation email. Then I can look into this.")
    order_id = ids[0]
    lookup = conv.last("lookup_order", order_id=order_id)
    if lookup is None or lookup["output"] is None:
        return Reply(f"The customer mentions order {order_id}. I'll look it up first.",
                     calls=[("lookup_order", {"order_id": order_id})])
    if "error" in lookup["output"]:
        if sent:
            return Reply("The order isn't visible for this sender; I've told them.",
                         f"No order {order_id} was found for the sender's address: it does not "
                         "exist, or it was placed from another address (the look-up cannot tell "
                         "which). Shared nothing about it and asked them to check the number or "
                         "write from the address they ordered with.")
        return _send("The order isn't visible for this address. I must not reveal anything.",
                     f"Hi {first},\n\nI couldn't find order {order_id} for this email address. "
                     "Could you check the number, or write to us from the address you used "
                     "when you ordered?")
    policy = conv.last("check_refund_policy", order_id=order_id)
    if policy is None or policy["output"] is None:
        return Reply("I have the order. Next, the refund policy and the facts it depends on.",
                     calls=[("check_refund_policy", {"order_id": order_id})])
    facts = policy["output"].get("facts", {})
    refund = conv.last("issue_refund", order_id=order_id)
    if refund is not None and refund["output"] is not None and not _answered(conv, refund):
        return _after_refund(conv, first, order_id, refund["output"], sent)
    proposal = _propose(facts, email, str(policy["output"].get("policy") or ""))
    if not proposal.lines:
        return _decline(conv, first, order_id, facts, proposal, sent)
    lines = [{"line": line["line"], "reason": line["reason"], "units": line.get("units")}
             for line in proposal.lines]
    return Reply(f"What the policy covers here: {_explain(proposal)}. The policy computes the "
                 "amount; a refund needs a person's approval, so I'll propose it.",
                 calls=[("issue_refund", {"order_id": order_id, "lines": lines, "amount": None,
                                          "summary": f"Refund on order {order_id}: "
                                                     f"{_explain(proposal)}."})])


# How many orders one email may name for the desk to look them all up and pick the one meant;
# beyond this it asks (a list of order numbers is fishing, not a request).
_ORDERS_TO_COMPARE = 3


def _order_meant(conv: _Conversation, ids: list[str], email: str) -> str | None:
    """The one order, of those the email names, that its claims are about: the only order of
    this sender's whose items the customer says something about, else None."""
    messages = email.split(_MESSAGE_BREAK)
    text = "\n\n".join(_own_words(part) for part in messages)
    subject = _subject(messages[0])
    about = []
    for oid in ids:
        output = (conv.last("lookup_order", order_id=oid) or {}).get("output") or {}
        items = output.get("items") if "error" not in output else None
        if not isinstance(items, list):
            continue
        lines = [{"line": str(i.get("sku", "")), "name": str(i.get("name", ""))}
                 for i in items if isinstance(i, dict)]
        reading = reader.read(lines, text, subject=subject)
        if (reading.wanted or reading.used or reading.missing or reading.unclear
                or reading.wrong_item):
            about.append(oid)
    return about[0] if len(about) == 1 else None


# What the desk says, in the customer's language, when it hands an email it cannot read to a
# person: thanks, who takes it, and that there is no need to write again. {about} names the
# order when the customer gave its number (never asked for again).
HANDOVER = {
    "Spanish": ("Hola {first}:\n\nGracias por tu mensaje{about}. Lo he pasado a una persona de "
                "nuestro equipo que lee español, que te responderá personalmente. No hace falta "
                "que vuelvas a escribir.", " sobre el pedido {order}"),
    "French": ("Bonjour {first},\n\nMerci pour votre message{about}. Je l'ai transmis à une "
               "personne de notre équipe qui lit le français ; elle vous répondra "
               "personnellement. Inutile de nous réécrire.", " au sujet de la commande {order}"),
    "German": ("Hallo {first},\n\nvielen Dank für Ihre Nachricht{about}. Ich habe sie an "
               "jemanden in unserem Team weitergegeben, der Deutsch liest; Sie bekommen eine "
               "persönliche Antwort. Sie müssen nicht noch einmal schreiben.",
               " zur Bestellung {order}"),
    "Portuguese": ("Olá {first},\n\nObrigado pela sua mensagem{about}. Passei-a a uma pessoa da "
                   "nossa equipa que lê português e que lhe vai responder pessoalmente. Não "
                   "precisa de escrever outra vez.", " sobre a encomenda {order}"),
    "Italian": ("Ciao {first},\n\ngrazie per il messaggio{about}. L'ho passato a una persona "
                "del nostro team che legge l'italiano e che ti risponderà personalmente. Non "
                "serve scriverci di nuovo.", " sull'ordine {order}"),
    "Dutch": ("Hallo {first},\n\nbedankt voor je bericht{about}. Ik heb het doorgegeven aan "
              "iemand in ons team die Nederlands leest; je krijgt persoonlijk antwoord. Je hoeft "
              "niet opnieuw te schrijven.", " over bestelling {order}"),
}


# A decline that depends on dates alone (delivered past the window), in the customer's
# language: {days}, {window}; {warranty} is WARRANTY's sentence when items of the order go to
# the manufacturer's warranty instead.
PAST_WINDOW = {
    "Spanish": ("Hola {first}:\n\nGracias por tu mensaje sobre el pedido {order}. Se entregó "
                "hace {days} días y solo podemos reembolsar hasta {window} días después de la "
                "entrega, así que no puedo ofrecerte un reembolso.{warranty}",
                " {items}: lo cubre la garantía del fabricante, así que podemos organizar una "
                "reparación o una sustitución; respóndenos y una persona de nuestro equipo se "
                "encargará."),
    "French": ("Bonjour {first},\n\nMerci pour votre message au sujet de la commande {order}. "
               "Elle a été livrée il y a {days} jours, et nous ne remboursons que jusqu'à "
               "{window} jours après la livraison : je ne peux donc pas vous proposer de "
               "remboursement.{warranty}",
               " {items} : la garantie du fabricant s'applique, nous pouvons organiser une "
               "réparation ou un remplacement ; répondez-nous et une personne de notre équipe "
               "s'en chargera."),
    "German": ("Hallo {first},\n\nvielen Dank für Ihre Nachricht zur Bestellung {order}. Sie "
               "wurde vor {days} Tagen geliefert; wir erstatten nur bis {window} Tage nach der "
               "Lieferung, daher kann ich Ihnen leider keine Erstattung anbieten.{warranty}",
               " {items}: Hier gilt die Herstellergarantie, wir können eine Reparatur oder "
               "einen Ersatz veranlassen; antworten Sie uns, und jemand aus unserem Team "
               "kümmert sich darum."),
    "Portuguese": ("Olá {first},\n\nObrigado pela sua mensagem sobre a encomenda {order}. Foi "
                   "entregue há {days} dias e só reembolsamos até {window} dias depois da "
                   "entrega, por isso não lhe posso oferecer um reembolso.{warranty}",
                   " {items}: está coberto pela garantia do fabricante, por isso podemos tratar "
                   "de uma reparação ou de uma substituição; responda-nos e uma pessoa da nossa "
                   "equipa trata disso."),
}


def _past_window(conv: _Conversation, first: str, language: str, order_id: str) -> Reply | None:
    """The order's look-up and policy facts for an email the desk cannot read, and, when they
    settle it by dates alone (delivered, past the window), the decline in the customer's
    language; None when they don't (a person reads it then)."""
    lookup = conv.last("lookup_order", order_id=order_id)
    if lookup is None or lookup["output"] is None:
        return Reply(f"The email names order {order_id}; its dates may settle it without "
                     "reading the rest. I'll look it up.",
                     calls=[("lookup_order", {"order_id": order_id})])
    if "error" in lookup["output"]:
        return None
    policy = conv.last("check_refund_policy", order_id=order_id)
    if policy is None or policy["output"] is None:
        return Reply("I have the order. Next, the policy's facts (its dates).",
                     calls=[("check_refund_policy", {"order_id": order_id})])
    facts = policy["output"].get("facts", {})
    if not (facts.get("delivered") and facts.get("within_window") is False):
        return None
    text, warranty = PAST_WINDOW[language]
    items = ", ".join(str(name) for name in facts.get("warranty") or [])
    return _send(f"Order {order_id} was delivered {facts.get('days_since_delivery')} days ago, "
                 f"past the {facts.get('window_days')}-day window: no refund whatever the email "
                 f"says. I decline in {language}.",
                 text.format(first=first, order=order_id, days=facts.get("days_since_delivery"),
                             window=facts.get("window_days"),
                             warranty=warranty.format(items=items) if items else ""))


def _foreign(conv: _Conversation, first: str, language: str, sent: dict | None) -> Reply:
    """An email the desk can't read: it guesses at nothing. When the one order it names was
    delivered past the window, the dates alone settle it: declined, in the customer's language.
    Otherwise it raises the ticket to a person (escalate, kind cannot_read) and tells the
    customer, in their language where it has the words, that a person who reads it will
    answer. The order number they gave is never asked for again."""
    named = language[0].isupper()
    ids = reader.order_ids(" ".join(_own_words(c) for c in conv.customer))
    about = f" about order {ids[0]}" if len(ids) == 1 else ""
    if sent:
        return Reply("I've told the customer what happens next.",
                     f"The customer wrote in {language if named else 'a script'}, which this "
                     "model can't read: answered from the order's dates alone, or handed to a "
                     "person; no refund proposed.")
    call = conv.last("escalate", anywhere=False)
    if call is None and len(ids) == 1 and language in PAST_WINDOW:
        settled = _past_window(conv, first, language, ids[0])
        if settled is not None:
            return settled
    if call is None:
        reason = (f"The customer wrote in {language if named else 'a script'}{about}, which "
                  "this model cannot read; a person who reads it should answer.")
        return Reply(f"The message isn't in English ({language}). I won't guess at it: a "
                     "person who reads it must take this, so I raise it first.",
                     calls=[("escalate", {"kind": "cannot_read", "reason": reason})])
    if _escalated(conv) and language in HANDOVER:
        text, order = HANDOVER[language]
        return _send(f"Raised to a person who reads {language}; I tell the customer so, in "
                     f"{language}.", text.format(first=first, about=order.format(
                         order=ids[0]) if len(ids) == 1 else ""))
    which = (f"it looks like it's written in {language}" if named
             else "it's written in a script I can't read")
    then = ("A colleague will look at it and reply to you." if _escalated(conv) else
            "Could you write to us again in English" + ("?" if ids else ", with your order "
                                                        "number?"))
    return _send(f"The message isn't in English ({which}); I can't read it myself.",
                 f"Hi {first},\n\nThank you for your email{about}. I'm sorry: I can only read "
                 f"English, and {which}, so I couldn't understand it myself. {then}")


def _decline(conv: _Conversation, first: str, order_id: str, facts: dict[str, Any],
             proposal: _Proposal, sent: dict | None) -> Reply:
    if proposal.why_not == "unclear" and (proposal.kind not in ("", "unclear")
                                          or proposal.about):
        return _not_yet(first, order_id, facts, proposal, sent)
    if proposal.why_not == "unclear":
        if sent:
            return Reply("I've asked what went wrong.", f"Order {order_id}: the customer did "
                         "not say what is wrong. Asked them; no refund proposed yet.")
        return _send("The email doesn't say what went wrong, so I can't apply the policy yet.",
                     f"Hi {first},\n\nI'm sorry something isn't right with order {order_id}. "
                     "Could you tell me what happened: did an item arrive damaged, or would "
                     "you like to return something unused?")
    offer = ""
    if facts.get("warranty"):
        offer = (f" The {' and '.join(facts['warranty']).lower()} is covered by the "
                 "manufacturer's warranty, so we can arrange a repair or a replacement instead. "
                 "Just reply and I'll set it up.")
    if sent:
        return Reply("I've explained the decision; only the team note is left.",
                     f"Declined order {order_id} without a refund proposal: {proposal.why_not}. "
                     f"{'Offered a warranty repair or replacement. ' if offer else ''}"
                     "No approval was needed.")
    return _send(f"No refund is possible: {proposal.why_not}. No approval needed; I'll explain.",
                 f"Hi {first},\n\nThank you for writing, and I'm sorry for the trouble. I've "
                 f"checked order {order_id}, and I can't offer a refund because "
                 f"{proposal.why_not}.{offer}")


def _not_yet(first: str, order_id: str, facts: dict[str, Any], proposal: _Proposal,
             sent: dict | None) -> Reply:
    """Nothing to propose yet: answer the question, acknowledge a note, or ask what the reader
    could not tell, naming it."""
    names = " and ".join(f"the {name.lower()}" for name in proposal.about)
    window = facts.get("window_days")
    if proposal.kind == "question":
        if sent:
            return Reply("I've answered the customer's question.", f"Order {order_id}: the "
                         "customer asked a question, not for a refund. Answered it from the "
                         "policy; nothing proposed.")
        points = "\n".join(f"- {point}" for point in proposal.answer)
        care = ("For washing and care, the care label and the manufacturer's instructions are the "
                "best guide.\n\n" if "care" in proposal.about else "")
        return _send("The customer is asking, not claiming anything. I'll answer from the "
                     "policy and propose nothing.",
                     f"Hi {first},\n\nThanks for your question about order {order_id}. "
                     + (f"Here is what our refund policy says:\n\n{points}\n\n" if points
                        else "\n\n") + care
                     + "If anything does go wrong with an item, just let us know which one and "
                     "what happened, and we'll look into it right away.")
    if proposal.kind == "fine":
        if sent:
            return Reply("I've thanked the customer.", f"Order {order_id}: the customer "
                         "reported nothing wrong with the items. Thanked them; nothing "
                         "proposed.")
        packaging = (" I've passed your note about the packaging on to our team for the "
                     "courier." if proposal.about else "")
        return _send("Nothing is wrong with the items, by the customer's own words. No refund "
                     "to propose; I'll thank them.",
                     f"Hi {first},\n\nThanks for letting us know, and I'm glad to hear the "
                     f"items in order {order_id} are all right.{packaging} If anything does "
                     "turn out to be wrong, just let us know"
                     + (f" within {window} days of delivery" if window else "") + ".")
    if proposal.kind == "missing":
        if sent:
            return Reply("I've told the customer we'll look for the missing item.",
                         f"Order {order_id}: the customer says {names} is missing. Nothing "
                         "proposed; the team should investigate with the carrier.")
        return _send(f"The customer says {names} is missing: that needs the team and the "
                     "carrier, not a refund for damage.",
                     f"Hi {first},\n\nI'm sorry {names} is missing from order {order_id}. "
                     "I've passed this to our team, who will investigate with the carrier and "
                     "follow up with you. Was the parcel itself damaged or opened when it "
                     "arrived?")
    if proposal.kind == "wrong_item":
        if sent:
            return Reply("I've asked what arrived instead.", f"Order {order_id}: the customer "
                         f"says something else arrived instead of {names}. Asked what came; "
                         "the team should arrange the right item.")
        return _send("The customer received something they didn't order: that is a wrong "
                     "item for the team to put right, not damage to refund.",
                     f"Hi {first},\n\nI'm sorry: it sounds like the wrong item arrived in "
                     f"order {order_id}" + (f" instead of {names}" if names else "") + ". "
                     "Could you tell me exactly what came, so our team can send the right one "
                     "or arrange a refund for it?")
    if proposal.kind == "exchange":
        if sent:
            return Reply("I've passed the exchange request on.", f"Order {order_id}: the "
                         "customer asked for an exchange or a repair, not a refund. Passed to "
                         "the team; asked whether a refund would do instead.")
        return _send("The customer asks for an exchange, a repair or a fix, which I can't "
                     "arrange with these tools. I'll pass it on and offer what the policy "
                     "allows.",
                     f"Hi {first},\n\nThanks for writing about order {order_id}. I can't "
                     "arrange an exchange, a repair or a replacement myself, so I've passed your "
                     "request to our team, who will follow up. If you'd rather have a refund "
                     + (f"for {names} " if names else "") + "instead, would you tell me what is "
                     "wrong with it, or whether it is unused?")
    if proposal.kind == "which":
        if sent:
            return Reply("I've asked which item is damaged.", f"Order {order_id}: the customer "
                         "says something arrived damaged but not which item. Asked them.")
        return _send("Something arrived damaged, but the email doesn't say which item. I'll "
                     "ask rather than guess.",
                     f"Hi {first},\n\nI'm sorry something arrived damaged in order "
                     f"{order_id}. Which item is it, and what is wrong with it? Once I know, "
                     "I'll look into it right away.")
    if sent:
        return Reply("I've asked what is wrong.", f"Order {order_id}: the customer named "
                     f"{names} but not what is wrong. Asked them; no refund proposed yet.")
    return _send(f"The email names {names} but doesn't say what is wrong, so I can't apply "
                 "the policy yet.",
                 f"Hi {first},\n\nI'm sorry something isn't right with order {order_id}. "
                 f"Could you tell me what is wrong with {names}: did it arrive damaged or "
                 "faulty, or would you like to return it unused?")


def _note_sentence(outcome: dict[str, Any]) -> str:
    note = (outcome.get("note") or "").strip()
    if note and note[-1] not in ".!?":
        note += "."
    return note


def _after_refund(conv: _Conversation, first: str, order_id: str, outcome: dict[str, Any],
                  sent: dict | None) -> Reply:
    status = outcome.get("status")
    declined = ", ".join(str(d.get("item", "")).lower() for d in outcome.get("declined") or [])
    if sent:
        if status == "refunded":
            note = (f"Refunded {_money(outcome.get('amount', 0))} on order {order_id} "
                    f"({outcome.get('refund_id')}), approved by {outcome.get('approved_by')}: "
                    f"{_refunded_lines(outcome)}."
                    + (f" Declined by the approver: {declined}." if declined else "")
                    + " Emailed the customer. Nothing else to watch.")
        elif status == "rejected":
            note = (f"{outcome.get('rejected_by')} rejected the refund on order {order_id}. "
                    "Explained their note to the customer.")
        elif status == "needs_information":
            note = (f"{outcome.get('asked_by')} wants more from the customer before deciding "
                    f"on order {order_id}. Sent them the question; waiting on their reply.")
        elif status == "expired":
            note = (f"Nobody decided the refund on order {order_id} in time, so it expired "
                    f"({_lower_first(_note_sentence(outcome).rstrip('.'))}). Told the "
                    "customer the team will follow up: someone needs to pick this ticket up.")
        else:
            note = (f"The refund on order {order_id} could not be proposed or issued: "
                    f"{outcome.get('error')} Told the customer the team will follow up.")
        return Reply("The customer has their answer; I'll leave a note for the team.", note)
    if status == "refunded":
        damaged = any(line.get("reason") == "damaged" for line in outcome.get("lines") or [])
        text = (f"Hi {first},\n\nI'm sorry about this. I've refunded "
                f"{_money(outcome.get('amount', 0))} to your original payment method: "
                f"{_refunded_lines(outcome)}. It should show up within 5 to 10 business days."
                + (" You don't need to send the damaged item back." if damaged else ""))
        if declined:
            note = _note_sentence(outcome)
            text += (f"\n\nOur team could not refund the {declined}."
                     + (f" Their note: {note}" if note else "") + " If that seems wrong, just "
                     "reply and we'll take another look.")
        return _send("The refund went through. I'll tell the customer exactly what was "
                     "refunded" + (" and what was not." if declined else "."), text)
    if status == "rejected":
        note = (outcome.get("note") or "").strip()
        return _send("A reviewer rejected the refund. I'll explain their reasoning kindly.",
                     f"Hi {first},\n\nThank you for your patience. A member of our team "
                     f"reviewed your request for order {order_id}, and we aren't able to issue "
                     f"this refund. Their note: {note}\n\nI'm sorry this isn't the answer you "
                     "hoped for. If anything here seems wrong, just reply.")
    if status == "needs_information":
        question = _sentence(str(outcome.get("question", "")))
        return _send("The reviewer needs more from the customer before deciding. I'll pass "
                     "their question on, as they wrote it.",
                     f"Hi {first},\n\nThank you for your patience. A member of our team is "
                     f"reviewing your refund for order {order_id} and needs one more thing "
                     f"before deciding: {question}\n\nJust reply to this email, and we'll "
                     "take it from there.")
    if status == "expired":
        return _send("Nobody decided the refund in time. The customer should hear that a "
                     "person will follow up, not silence.",
                     f"Hi {first},\n\nI'm sorry: your refund request for order {order_id} "
                     "wasn't reviewed in time, so it has been passed to our team, who will "
                     "follow up with you directly. You don't need to do anything.")
    return _send("The refund could not be proposed or issued. A person needs to look at it.",
                 f"Hi {first},\n\nThank you for your patience. I couldn't complete the refund "
                 f"on order {order_id} automatically, so a member of our team will follow up "
                 "with you.")


def _pushback(conv: _Conversation, first: str, order_id: str, latest: str,
              sent: dict | None) -> Reply:
    """The customer answered the outcome: hold the line kindly, or close if they accept it."""
    threats = _threats(latest)
    refund = conv.last("issue_refund", order_id=order_id)
    outcome = (refund or {}).get("output") or {}
    policy = conv.last("check_refund_policy", order_id=order_id)
    facts = ((policy or {}).get("output") or {}).get("facts", {})
    accepts = not threats and ACCEPTS.search(latest)
    if sent and accepts:
        mood = ", unhappily" if UNHAPPY.search(latest) else ""
        return Reply("The customer has accepted; a short note closes the ticket.",
                     f"The customer accepted the outcome{mood}. Nothing more to do.")
    if sent:
        flagged = (f" Flag: the customer mentioned {', '.join(threats)}." if threats else "")
        if _escalated(conv):
            flagged += " Escalated to a team lead (see the escalation queue)."

        return Reply("I answered the customer calmly; the team should know what they said.",
                     "The customer pushed back on the outcome. I kept to the policy and offered "
                     f"nothing beyond it.{flagged}")
    if accepts:
        return _send("The customer accepts the outcome" + (", if unhappily" if UNHAPPY.search(
                     latest) else "") + ". A short, kind close.",
                     f"Hi {first},\n\nThank you for letting me know, and I'm sorry again for "
                     "the trouble. If you need anything else, just reply to this email.")
    status = outcome.get("status")
    if status == "refunded":
        done = (f"We've refunded {_money(outcome['amount'])}, which is the most our refund "
                "policy allows for this order")
        if outcome.get("declined"):
            declined = ", ".join(str(d.get("item", "")).lower() for d in outcome["declined"])
            done += (f". Our team could not refund the {declined}"
                     + (f" ({_note_sentence(outcome).rstrip('.')})" if outcome.get("note")
                        else ""))
    elif status == "rejected":
        note = _note_sentence(outcome)
        done = ("A member of our team reviewed your request and couldn't approve it"
                + (f". Their note: {note[:-1]}" if note else "")
                + ". I can't overturn their decision myself")
        if note and ASKS_FOR.search(note):
            done += (", but if you send what they asked for, just reply with it and we'll take "
                     "another look")
    elif status:
        done = ("A member of our team is looking at your refund and will follow up with you; "
                "I can't settle it any faster from here")
    else:
        done = "I've applied our refund policy as it stands, and I can't go beyond it"
        if facts.get("warranty"):
            done += (". The offer of a warranty repair or replacement stands; just reply if "
                     "you'd like it")
    # Only what is true: a lead was asked to look only if the escalation was raised.
    manager = (" I've passed your message and the full history to a team lead, who will look "
               "at your ticket." if _escalated(conv) else "")
    short = ("isn't everything you asked for" if status == "refunded"
             else "isn't the answer you hoped for")
    return _send(f"The customer is upset{' and mentions ' + ', '.join(threats) if threats else ''}."
                 " Stay calm and kind, keep to the policy, offer nothing it doesn't allow.",
                 f"Hi {first},\n\nI hear how frustrating this is, and I'm sorry. {done}. I know "
                 f"that {short}, and I can't change that.{manager} If "
                 "there's anything else about the order I can help with, I'm here.")


# -- the simulated customer ------------------------------------------------------------------

def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


@dataclass
class _Story:
    """What the support emails say happened, as the customer reads them."""

    refunded: str | None = None        # "$12.00", the amount support says it refunded
    short: list[str] = field(default_factory=list)   # sentences about what was not refunded
    refused: str | None = None         # why support said no refund, in its words
    note: str | None = None            # a reviewer's note, quoted
    warranty: bool = False             # a repair or replacement was offered
    question: str | None = None        # order_number | which | what_happened | address | other
    follow_up: bool = False            # "a member of our team will follow up"


def _story(theirs: list[str]) -> _Story:
    story = _Story()
    for email in theirs:     # later emails refine earlier ones
        sentences = _sentences(email)
        for i, sentence in enumerate(sentences):
            if REFUND_MADE.search(sentence):
                amounts = MONEY.findall(sentence)
                if amounts:
                    story.refunded = f"${amounts[0]}"
                    story.refused = None
            elif NOT_REFUNDED.search(sentence) and story.refunded:
                story.short.append(sentence)
            elif REFUSED.search(sentence) and not story.refunded:
                reason = re.split(r"\bbecause\b", sentence, maxsplit=1)
                story.refused = reason[1].strip(" .") if len(reason) > 1 else ""
                following = sentences[i + 1] if i + 1 < len(sentences) else ""
                if re.match(r"^\w+(?: \w+)? note:", following, re.I):
                    story.note = following.split(":", 1)[1].strip().rstrip(".")
            if WARRANTY.search(sentence) and not story.refunded:
                story.warranty = True
        story.follow_up = bool(FOLLOW_UP.search(email)) and not story.refunded
    latest = theirs[-1]
    asks = [s for s in _sentences(latest) if s.endswith("?")]
    if asks and story.refunded is None and story.refused is None:
        question = " ".join(asks)
        story.question = ("which" if ASKS_WHICH.search(question) else
                          "order_number" if ASKS_ORDER_NUMBER.search(question) else
                          "address" if ASKS_ADDRESS.search(question) else
                          "what_happened" if ASKS_WHAT_HAPPENED.search(question) else "other")
    return story


def _my_request(first_email: str) -> tuple[float, str]:
    """What I asked for in my first email: the largest amount I named, and how to say it."""
    asked = max((float(m.replace(",", "")) for m in MONEY.findall(first_email)), default=0.0)
    if asked:
        return asked, f"all {_money(asked)} back"
    if EVERYTHING.search(first_email):
        return 0.0, "a refund for everything"
    return 0.0, "a refund"


def _complaint(first_email: str) -> str | None:
    """The sentence of my first email that says what went wrong, if there is one."""
    for sentence in _sentences(first_email):
        if DAMAGE.search(sentence) or CHANGE_OF_MIND.search(sentence):
            return sentence.rstrip(".!")
    return None


def _play_customer(conversation: list[dict[str, Any]]) -> Reply:
    """Write the customer's next reply from the emails alone, or DONE.

    The customer reacts to what the support emails say happened — a refund, a partial refund,
    a refusal or a rejection with the reviewer's note, a question, a promise to follow up —
    pushes back once when short-changed, then accepts grudgingly, and never claims a refund
    the emails don't report. Once they have said their piece, the answer is exactly DONE.
    """
    transcript = "\n".join(_text(i.get("content")) for i in conversation
                           if i.get("type", "message") == "message" and i.get("role") == "user")
    parts = TRANSCRIPT_BLOCK.split(transcript)
    blocks = [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]
    mine = [text for who, text in blocks if who == "the customer"]
    theirs = [text for who, text in blocks if who == "support"]
    if not mine or not theirs or blocks[-1][0] != "support":
        return Reply("Support hasn't written anything new to answer.", "DONE")
    replies = mine[1:]
    if len(replies) >= 2 or any(ACCEPTS.search(r) and not _threats(r) for r in replies):
        return Reply("I've said my piece.", "DONE")
    pushed = any(_threats(r) for r in replies)
    story = _story(theirs)
    first_email = mine[0]
    asked, wanted = _my_request(first_email)
    orders = _order_ids(first_email)
    order = f" for order {orders[0]}" if orders else ""

    if story.refunded:
        got = float(story.refunded[1:].replace(",", ""))
        partial = bool(story.short) or (asked and got + 0.005 < asked)
        if not partial:
            if replies:
                return Reply("I got what I asked for and said thanks.", "DONE")
            return Reply("They refunded what I asked for. Thank them, briefly.",
                         f"Thanks. I'll watch for the {story.refunded} on my card. That's all "
                         "I needed.")
        if pushed:
            return Reply("They held firm. Take the refund that was made, grudgingly, and stop.",
                         "Fine. I'll take the refund, but I'm not happy, and I won't be ordering "
                         "from you again.")
        lines = [f"{story.refunded} is not acceptable.",
                 f"I asked for {wanted}, not a fraction of it." if asked
                 else f"I asked for {wanted}, not part of it."]
        if story.short:
            lines.append(f"And you tell me: \"{story.short[0].rstrip('.')}\"? That's not good "
                         "enough.")
        lines.append("If you don't refund the whole order I'm filing a chargeback with my bank "
                     "and leaving a one-star review everywhere I can. Get me a manager.")
        return Reply("Short-changed: refuse the partial refund, threaten, ask for a manager.",
                     " ".join(lines))

    if story.refused is not None:
        if pushed:
            if story.note and EVIDENCE.search(story.note):
                thing = EVIDENCE.search(story.note).group(1).lower()
                return Reply("They won't move without it. Send what they asked for, grudgingly.",
                             f"Fine. I'll send the {thing}, but I expect this sorted out "
                             "quickly this time.")
            if story.warranty:
                return Reply("They won't refund. Take the repair, grudgingly, and stop.",
                             "Fine. Set up the repair or the replacement, then. But I'm not "
                             "happy, and I won't be ordering from you again.")
            return Reply("They won't refund. Give up, unhappily, and stop.",
                         "Fine. I still think I'm owed my money back, but I'm done arguing. I "
                         "won't be ordering from you again.")
        lines = [f"No refund at all{order}? I asked for {wanted}."]
        if story.note:
            lines.append(f"Your team's note says \"{story.note}\". That's not a reason to keep "
                         "my money.")
        elif story.refused:
            lines.append(f"You say {story.refused}. I don't care about your rules.")
        if story.warranty:
            lines.append("I don't want a repair, I want my money back.")
        lines.append("I'm disputing the charge with my bank and leaving a one-star review. "
                     "Get me a manager.")
        return Reply("Refused outright: push back, threaten, ask for a manager.", " ".join(lines))

    if story.question and not replies:
        if story.question == "order_number":
            text = (f"I already gave you the order number: {orders[0]}." if orders else
                    "I don't have the order number to hand. You have my email address; look it "
                    "up yourself.")
        elif story.question == "which":
            text = (f"The first one, {orders[0]}. Obviously." if orders else
                    "The one I wrote to you about. Check your records.")
        elif story.question == "address":
            text = "This is the address I always use. Check again."
        elif story.question == "what_happened":
            complaint = _complaint(first_email)
            text = (f"I already told you: {complaint[0].lower() + complaint[1:]}. I want "
                    f"{wanted}." if complaint else f"I told you in my first email. I want "
                    f"{wanted}.")
        else:
            text = f"I explained everything in my first email. I want {wanted}."
        return Reply("They asked me something. Answer it, impatiently, from what I know.",
                     _sentence(text))
    if story.follow_up and not replies:
        return Reply("They are passing me on. Push for an answer.",
                     "When? I've waited long enough for this. I want a manager to call me "
                     "today.")
    return Reply("Nothing new to answer.", "DONE")


# -- which part to play, and the tools it may use -----------------------------------------------

@dataclass(frozen=True)
class _Choice:
    """What ``tools`` and ``tool_choice`` allow: the callable tools and how calls are chosen."""

    callable: tuple[str, ...]   # function tools this response may call
    mode: str                   # none | auto | required | forced
    forced: str | None = None   # the named function, for mode "forced"

    def describe(self) -> str:
        return {"none": 'tool_choice "none"', "auto": 'tool_choice "auto"',
                "required": 'tool_choice "required"',
                "forced": f'tool_choice naming {self.forced}'}[self.mode]


def _choice(tools: list[dict[str, Any]], tool_choice: Any) -> _Choice:
    declared = tuple(function_tool_names(tools))
    if tool_choice in ("none", "required"):
        return _Choice(declared, tool_choice)
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        return _Choice(declared, "forced", tool_choice.get("name"))
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "allowed_tools":
        allowed = {t.get("name") for t in tool_choice.get("tools") or [] if isinstance(t, dict)}
        mode = "required" if tool_choice.get("mode") == "required" else "auto"
        return _Choice(tuple(n for n in declared if n in allowed), mode)
    return _Choice(declared, "auto")


def _is_persona_request(conversation: list[dict[str, Any]]) -> bool:
    """The simulated customer's request: its brief, or the transcript of the emails."""
    for item in conversation:
        if item.get("type", "message") != "message":
            continue
        text = _text(item.get("content"))
        if item.get("role") in ("system", "developer") and PERSONA_BRIEF.search(text):
            return True
        if item.get("role") == "user" and TRANSCRIPT_BLOCK.search(text):
            return True
    return False


def _out_of_lane(tools: list[dict[str, Any]], choice: _Choice) -> Reply:
    """Anything but the refund desk or its customer: say plainly what the stand-in is."""
    declared = function_tool_names(tools)
    what = (f"it declares {', '.join(declared)}, none of the refund desk's tools" if declared
            else "it declares no function tools" if tools
            else "it has no tools and isn't the simulated customer's brief")
    if choice.mode in ("required", "forced"):
        raise ApiError(
            400,
            f"The offline stand-in only plays refund-agent's refund desk, so it can't choose a "
            f"call to {choice.forced or ' or '.join(declared)} ({choice.describe()}). Set "
            "XAI_API_KEY to use Grok for other requests.",
            param="tool_choice",
            code="unsupported_parameter",
        )
    return Reply(f"This request is outside what the offline stand-in can play: {what}.",
                 "I'm the offline stand-in for Grok that ships with refund-agent, not a general "
                 "model. I only play the shop's refund desk (with its tools: "
                 f"{', '.join(REFUND_DESK_TOOLS)}) and the simulated customer who writes back "
                 "to it, so I can't answer this request. Set XAI_API_KEY to use Grok instead.")


def _as_text(calls: list[tuple[str, dict[str, Any]]], why: str) -> str:
    """Calls the response may not make, written out as what the desk would do instead."""
    lines = [f"{why}, so here is what I would do instead."]
    for name, args in calls:
        if name == "send_customer_message":
            lines.append(f"Email the customer:\n\n{args.get('message', '')}")
        else:
            lines.append(f"Call {name} with {json.dumps(args)}.")
    return "\n\n".join(lines)


def _fallback_call(conv: _Conversation, choice: _Choice) -> tuple[str, dict[str, Any]] | None:
    """A harmless call for a required or forced choice when the next step needs none.

    Only the read-only look-ups qualify, and only for an order the customer named: the desk
    never sends an email or proposes a refund just because a call was demanded.
    """
    ids = _order_ids(" ".join(_customer_words(c) for c in conv.customer))
    if not ids:
        return None
    wanted = [choice.forced] if choice.mode == "forced" else ["lookup_order",
                                                              "check_refund_policy"]
    for name in wanted:
        if name in ("lookup_order", "check_refund_policy") and name in choice.callable:
            return name, {"order_id": ids[0]}
    return None


def _conform(reply: Reply, conv: _Conversation, choice: _Choice) -> Reply:
    """The desk's step, limited to the calls this request allows."""
    if choice.mode == "none":
        allowed: tuple[str, ...] = ()
    elif choice.mode == "forced":
        allowed = (choice.forced,) if choice.forced in choice.callable else ()
    else:
        allowed = choice.callable
    kept = [call for call in reply.calls if call[0] in allowed]
    dropped = [call for call in reply.calls if call[0] not in allowed]
    text = reply.text
    if dropped:
        names = sorted({name for name, _ in dropped})
        why = ("Tool calls are off for this request (tool_choice \"none\")" if choice.mode ==
               "none" else f"This request does not let me call {' or '.join(names)} "
               f"({choice.describe()}; it declares {', '.join(choice.callable) or 'no tools'})")
        text = "\n\n".join(filter(None, [text, _as_text(dropped, why)]))
    if choice.mode in ("required", "forced") and not kept:
        fallback = _fallback_call(conv, choice)
        if fallback is None:
            raise ApiError(
                400,
                f"The offline stand-in has no call to {choice.forced or 'any tool'} to make at "
                f"this point of the refund desk's work ({choice.describe()}); its next step is "
                f"{'a call to ' + dropped[0][0] if dropped else 'a note for the team'}. Use "
                "tool_choice \"auto\", or Grok (XAI_API_KEY).",
                param="tool_choice",
                code="unsupported_parameter",
            )
        name, args = fallback
        return Reply(f"{reply.reasoning} The request demands a tool call ({choice.describe()}), "
                     f"so I call {name} for order {args['order_id']}, a read-only look-up, "
                     "rather than send or propose anything.", None, [fallback])
    return Reply(reply.reasoning, text, kept)


def respond(conversation: list[dict[str, Any]], tools: list[dict[str, Any]],
            tool_choice: Any = None) -> Reply:
    """Decide the next response.

    Args:
        conversation: Every item the model would read, oldest first (instructions first, as a
            system message, when the request has them).
        tools: The request's tools.
        tool_choice: The request's ``tool_choice`` (None means ``"auto"``).

    Returns:
        The refund desk's next step when the request declares the desk's tools (only
        declared, allowed tools are called); the simulated customer's reply for its brief;
        otherwise a short text saying this stand-in only plays the refund desk.

    Raises:
        ApiError: 400 when ``tool_choice`` demands a call the stand-in cannot make.
    """
    choice = _choice(tools, tool_choice)
    declared = function_tool_names(tools)
    if not tools and _is_persona_request(conversation):
        return _play_customer(conversation)
    if not any(name in REFUND_DESK_TOOLS for name in declared):
        if follower.plays(tools) and choice.mode in ("auto", "none"):
            conv = _read(conversation)
            return Reply(*follower.respond(conv.customer, conv.calls, tools,
                                           may_call=choice.mode == "auto"))
        return _out_of_lane(tools, choice)
    conv = _read(conversation)
    raised = (_escalation(conv) if "escalate" in choice.callable
              and choice.mode not in ("none", "forced") else None)
    return _conform(raised or _support(conv), conv, choice)
