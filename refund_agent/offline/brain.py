"""The offline model's decision maker: a deterministic support policy, not a language model.

It reads only what a real model would see — the conversation, the tools offered, the tool
outputs and the customer's words — and picks the next step the way a careful support agent
would. It knows nothing about the sample shop or its scenarios: order numbers, items, amounts
and names all come from the conversation. It is deliberately plain, so its choices are easy to
follow, and it is a stand-in: with an API key, Grok makes these choices instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# -- the lexicon ------------------------------------------------------------------------------
# Everything the stand-in recognises in a customer's words, in one place. The words are general
# customer-support language (how people describe a broken delivery, a return, an escalation),
# not phrases taken from the sample emails: a new email should be read as well as a sample.

ORDER_ID = re.compile(r"(?<![\w@.])#?\s?([A-Z]{1,3}-?\d{3,8})\b(?![@.]\w)", re.IGNORECASE)
MONEY = re.compile(r"\$\s?(\d[\d,]*(?:\.\d{2})?)")
DAMAGE = re.compile(
    r"crack|broke|break|damag|defect|shatter|chip|dent|leak|torn|\brip|faulty|scratch|stain"
    r"|split|snapped|bent|in pieces|in two|smash|warp|rust|burn|smok|overheat|noise|rattl"
    r"|wobbl|missing (?:a )?(?:part|piece)|stops? work|stopped|not work|doesn.t work"
    r"|won.t (?:turn|start|work)|dead on arrival|arrived wrong", re.I)
KEEP = re.compile(r"\b(fine|ok|okay|perfect|great|keep|love|happy with)\b", re.I)
CHANGE_OF_MIND = re.compile(
    r"chang\w* (?:my|of) mind|don.t (?:want|need|like)|no longer (?:want|need)|unused|not used"
    r"|never used|didn.t (?:like|use)|\breturn|send (?:it|them) back|not what I expected"
    r"|too (?:big|small|large)|doesn.t fit", re.I)
EVERYTHING = re.compile(r"\b(all|whole|everything|entire|full|both)\b", re.I)
# Words that sit in many product names without naming one product ("set of 2", "10 inch").
GENERIC = {"set", "inch", "the", "and", "with", "for", "pack", "piece", "size", "small",
           "large", "medium", "of"}
# Clauses end at sentence ends, semicolons and line breaks, and where a conjunction starts a
# new thought (", and", " but ", " also "): "the teapot arrived shattered, and I also don't want
# the tray" is two requests with two reasons.
CLAUSE_BREAK = re.compile(r"[.!?]+(?=\s|$)|[;\n]+|,?\s+(?:and|but|also|while|though|plus)\s+",
                          re.I)
THREATS = {
    "a chargeback": re.compile(r"charge.?back|dispute|my bank", re.I),
    "a bad review": re.compile(r"review|one.star|1.star|yelp|trustpilot", re.I),
    "legal action": re.compile(r"lawyer|legal|sue\b|court", re.I),
    "a manager": re.compile(r"manager|supervisor|someone in charge", re.I),
}
ACCEPTS = re.compile(r"\b(fine|okay|ok|thanks|thank you|accept|i'll take)\b", re.I)
WROTE_BACK = "The customer wrote back:"


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

    def last(self, name: str, anywhere: bool = True) -> dict[str, Any] | None:
        pool = self.calls if anywhere else self.since_customer
        found = [c for c in pool if c["name"] == name]
        return found[-1] if found else None


def _customer_words(message: str) -> str:
    """A customer message without its From: header: order numbers come from their words only
    (an address such as ana2024@example.com is not an order number)."""
    return "\n".join(line for line in message.splitlines()
                     if not line.lower().startswith("from:"))


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
            call = {"name": item.get("name"), "args": args, "output": None}
            calls.append(call)
            by_id[item.get("call_id", "")] = call
        elif kind == "function_call_output" and item.get("call_id") in by_id:
            try:
                output = json.loads(item.get("output") or "null")
            except json.JSONDecodeError:
                output = {"output": item.get("output")}
            by_id[item["call_id"]]["output"] = output if isinstance(output, dict) else {}
    return _Conversation(customer, calls, calls[since:])


def _money(value: float) -> str:
    return f"${value:,.2f}"


def _first_name(conv: _Conversation) -> str:
    lookup = conv.last("lookup_order")
    name = ((lookup or {}).get("output") or {}).get("customer", {}).get("name", "")
    if not name:
        match = re.search(r"From:\s*([^<\n]+)<", conv.customer[0] if conv.customer else "")
        name = match.group(1).strip() if match else ""
    return name.split()[0] if name and "@" not in name else "there"


# -- what the customer asks for, line by line, from the policy tool's facts ------------------

def _stems(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z][a-z\-]{2,}", text.lower())}


def _clauses(email: str) -> list[str]:
    return [c.strip() for c in CLAUSE_BREAK.split(email) if c and c.strip()]


def _signal(clause: str) -> str | None:
    """What one clause says about the items it names: damaged, keep, changed_mind or nothing."""
    if DAMAGE.search(clause) and not re.search(r"\bnot? (?:damaged|broken)\b", clause, re.I):
        return "damaged"
    if KEEP.search(clause):
        return "keep"
    if CHANGE_OF_MIND.search(clause):
        return "changed_mind"
    return None


@dataclass
class _Proposal:
    lines: list[dict[str, Any]]            # {"line", "reason", "name"}
    why_not: str = ""
    final_sale: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)    # already refunded or waiting

    @property
    def kinds(self) -> set[str]:
        return {line["reason"] for line in self.lines}


def _wanted(lines: list[dict[str, Any]], email: str) -> dict[str, str]:
    """Which lines the customer asks about, and why: {line: damaged|changed_mind}."""
    reasons: dict[str, list[str]] = {}
    named_any = False
    previous: list[dict[str, Any]] = []
    loose: list[str] = []   # signals in clauses that name no item and follow none
    for clause in _clauses(email):
        stems = _stems(clause)
        named = [line for line in lines
                 if (_stems(line["name"]) - GENERIC) & stems or line["line"].lower() in
                 clause.lower()]
        signal = _signal(clause)
        if named:
            named_any = True
            previous = named
        elif signal and previous and signal == "keep":
            named = previous    # "... the mugs are fine, I'd like to keep them"
        for line in named:
            reasons.setdefault(line["line"], []).append(signal or "asked")
        if not named and signal in ("damaged", "changed_mind"):
            loose.append(signal)
    wanted: dict[str, str] = {}
    for line_id, said in reasons.items():
        if "damaged" in said:
            wanted[line_id] = "damaged"
        elif "keep" in said:
            continue
        elif "changed_mind" in said:
            wanted[line_id] = "changed_mind"
        elif loose:     # named without a reason: the email's own reason applies
            wanted[line_id] = loose[0]
    everything = EVERYTHING.search(email)
    if loose and (not named_any or (everything and "changed_mind" in loose)):
        for line in lines:
            kept = "keep" in reasons.get(line["line"], [])
            if line["line"] not in wanted and not kept and (everything or len(lines) == 1
                                                             or "changed_mind" in loose):
                wanted[line["line"]] = loose[0]
    return wanted


def _propose(facts: dict[str, Any], email: str) -> _Proposal:
    """The lines the policy lets us refund for what the customer describes."""
    if not facts.get("delivered"):
        return _Proposal([], why_not="the order has not been delivered yet")
    if not facts.get("within_window"):
        return _Proposal([], why_not=f"it was delivered {facts.get('days_since_delivery')} days "
                         f"ago, past the {facts.get('window_days')}-day refund window")
    lines = facts.get("lines", [])
    wanted = _wanted(lines, email)
    if not wanted:
        return _Proposal([], why_not="unclear")
    by_id = {line["line"]: line for line in lines}
    proposal = _Proposal([])
    for line_id, reason in wanted.items():
        line = by_id[line_id]
        if line.get("final_sale"):
            proposal.final_sale.append(line["name"])
        elif line.get("status") != "refundable":
            proposal.taken.append(f"{line['name']} ({line.get('status')})")
        else:
            proposal.lines.append({"line": line_id, "reason": reason, "name": line["name"]})
    if not proposal.lines:
        if proposal.taken:
            proposal.why_not = ("what you describe has already been taken care of: "
                                + "; ".join(proposal.taken))
        else:
            proposal.why_not = "the items asked about are final sale"
    return proposal


def _explain(p: _Proposal) -> str:
    """One sentence on what is proposed and why, for the approver and the reasoning."""
    damaged = [line["name"].lower() for line in p.lines if line["reason"] == "damaged"]
    returned = [line["name"].lower() for line in p.lines if line["reason"] == "changed_mind"]
    parts = []
    if damaged:
        parts.append(f"the {' and '.join(damaged)} arrived damaged (full price)")
    if returned:
        parts.append(f"the {' and '.join(returned)} returned for a change of mind (less the "
                     "return fee)")
    text = "; ".join(parts)
    if p.final_sale:
        text += f". The {' and '.join(p.final_sale).lower()} is final sale and can't be refunded"
    if p.taken:
        text += f". Not included: {'; '.join(p.taken)}"
    return text


def _refunded_lines(outcome: dict[str, Any]) -> str:
    parts = []
    for line in outcome.get("lines") or []:
        how = "in full" if line.get("reason") == "damaged" else (
            "less the return fee" if line.get("reason") == "changed_mind" else "")
        parts.append(f"{str(line.get('item', '')).lower()} {_money(line.get('amount', 0))}"
                     + (f" ({how})" if how else ""))
    return ", ".join(parts)


# -- the support agent's next step ------------------------------------------------------------

def _send(reasoning: str, message: str) -> Reply:
    return Reply(reasoning, calls=[("send_customer_message", {"message": message})])


def _threats(text: str) -> list[str]:
    return [label for label, pattern in THREATS.items() if pattern.search(text)]


def _support(conv: _Conversation) -> Reply:
    first = _first_name(conv)
    sent = conv.last("send_customer_message", anywhere=False)
    latest = conv.customer[-1] if conv.customer else ""
    if latest.startswith(WROTE_BACK):
        return _pushback(conv, first, latest, sent)
    email = _customer_words(conv.customer[0]) if conv.customer else ""
    words = " ".join(_customer_words(c) for c in conv.customer)
    ids = list(dict.fromkeys(m.upper().replace("-", "") for m in ORDER_ID.findall(words)))
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
    lookup = conv.last("lookup_order")
    if lookup is None or lookup["output"] is None:
        return Reply(f"The customer mentions order {order_id}. I'll look it up first.",
                     calls=[("lookup_order", {"order_id": order_id})])
    if "error" in lookup["output"]:
        if sent:
            return Reply("The order isn't visible for this sender; I've told them.",
                         f"Order {order_id} does not match the sender's address. Shared nothing "
                         "about it and asked them to write from the address on the order.")
        return _send("The order isn't visible for this address. I must not reveal anything.",
                     f"Hi {first},\n\nI couldn't find order {order_id} for this email address. "
                     "Could you check the number, or write to us from the address you used "
                     "when you ordered?")
    policy = conv.last("check_refund_policy")
    if policy is None or policy["output"] is None:
        return Reply("I have the order. Next, the refund policy and the facts it depends on.",
                     calls=[("check_refund_policy", {"order_id": order_id})])
    facts = policy["output"].get("facts", {})
    refund = conv.last("issue_refund")
    if refund is not None and refund["output"] is not None:
        return _after_refund(conv, first, order_id, refund["output"], sent)
    proposal = _propose(facts, email)
    if not proposal.lines:
        return _decline(conv, first, order_id, facts, proposal, sent)
    lines = [{"line": line["line"], "reason": line["reason"]} for line in proposal.lines]
    return Reply(f"What the policy covers here: {_explain(proposal)}. The policy computes the "
                 "amount; a refund needs a person's approval, so I'll propose it.",
                 calls=[("issue_refund", {"order_id": order_id, "lines": lines, "amount": None,
                                          "summary": f"Refund on order {order_id}: "
                                                     f"{_explain(proposal)}."})])


def _decline(conv: _Conversation, first: str, order_id: str, facts: dict[str, Any],
             proposal: _Proposal, sent: dict | None) -> Reply:
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
            note = (outcome.get("note") or "").strip()
            if note and note[-1] not in ".!?":
                note += "."
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
    return _send("The refund could not be proposed or issued. A person needs to look at it.",
                 f"Hi {first},\n\nThank you for your patience. I couldn't complete the refund "
                 f"on order {order_id} automatically, so a member of our team will follow up "
                 "with you.")


def _pushback(conv: _Conversation, first: str, latest: str, sent: dict | None) -> Reply:
    threats = _threats(latest)
    refund = conv.last("issue_refund")
    outcome = (refund or {}).get("output") or {}
    accepts = not threats and ACCEPTS.search(latest)
    if sent and accepts:
        return Reply("The customer has accepted; a short note closes the ticket.",
                     "The customer accepted the outcome, unhappily. Nothing more to do.")
    if sent:
        flagged = (f" Flag: the customer mentioned {', '.join(threats)}." if threats else "")
        return Reply("I answered the customer calmly; the team should know what they said.",
                     "The customer pushed back on the outcome. I kept to the policy and offered "
                     f"nothing beyond it.{flagged}")
    if accepts:
        return _send("The customer accepts the outcome, if unhappily. A short, kind close.",
                     f"Hi {first},\n\nThank you for letting me know, and I'm sorry again for "
                     "the trouble. If you need anything else, just reply to this email.")
    if outcome.get("status") == "refunded":
        done = (f"We've refunded {_money(outcome['amount'])}, which is the most our refund "
                "policy allows for this order")
    else:
        done = "I've applied our refund policy as it stands, and I can't go beyond it"
    manager = (" I've shared your message and the full history with our team lead, who reads "
               "every escalation." if "a manager" in threats else "")
    return _send(f"The customer is upset{' and mentions ' + ', '.join(threats) if threats else ''}."
                 " Stay calm and kind, keep to the policy, offer nothing it doesn't allow.",
                 f"Hi {first},\n\nI hear how frustrating this is, and I'm sorry. {done}. I know "
                 f"that isn't everything you asked for, and I can't change that.{manager} If "
                 "there's anything else about the order I can help with, I'm here.")


# -- the simulated customer ------------------------------------------------------------------

def _play_customer(conversation: list[dict[str, Any]]) -> Reply:
    """Write the customer's next reply from the emails alone, or DONE."""
    transcript = "\n".join(_text(i.get("content")) for i in conversation
                           if i.get("role") == "user")
    blocks = re.split(r"^--- (?=Email from )", transcript, flags=re.M)
    mine = [b for b in blocks if b.startswith("Email from the customer")]
    theirs = [b for b in blocks if b.startswith("Email from support")]
    asked = max((float(m.replace(",", "")) for m in MONEY.findall(mine[0] if mine else "")),
                default=0.0)
    offered = MONEY.findall(theirs[-1] if theirs else "")
    offer = f"${offered[0]}" if offered else "that"
    if len(mine) == 1:
        want = f"all {_money(asked)}" if asked else "everything"
        return Reply("Escalate: refuse the partial refund, threaten, ask for a manager.",
                     f"{offer} is not acceptable. I asked for {want} back, not a fraction of it. "
                     "If you don't refund the whole order I'm filing a chargeback with my bank "
                     "and leaving a one-star review everywhere I can. Get me a manager.")
    if len(mine) == 2:
        return Reply("Last word: grudging, then stop.",
                     "Fine. I'll take the refund, but I'm not happy, and I won't be ordering "
                     "from you again.")
    return Reply("Nothing more to say.", "DONE")


def respond(conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
    """Decide the next response: a support turn when tools are offered, else the customer."""
    if not tools:
        return _play_customer(conversation)
    return _support(_read(conversation))
