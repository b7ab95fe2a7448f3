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

ORDER_ID = re.compile(r"\b#?([A-Z]{1,3}-?\d{3,8})\b", re.IGNORECASE)
MONEY = re.compile(r"\$\s?(\d[\d,]*(?:\.\d{2})?)")
DAMAGE = re.compile(r"crack|broke|damag|defect|shatter|chip|dent|leak|torn|faulty|grind|"
                    r"stops? work|stopped|not work|doesn.t work|won.t (?:turn|start)", re.I)
FINE = re.compile(r"\b(fine|ok|okay|perfect|great|keep|love)\b", re.I)
CHANGE_OF_MIND = re.compile(r"chang\w* (?:my|of) mind|don.t (?:want|need)|no longer (?:want|need)"
                            r"|unused|not used|didn.t (?:like|use)|return", re.I)
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


# -- the refund arithmetic, from the policy tool's facts ------------------------------------

def _stems(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z][a-z\-]{2,}", text.lower())}


@dataclass
class _Proposal:
    amount: float
    items: list[str]
    kind: str              # "damaged", "change of mind", or "none"
    why_not: str = ""
    fee: float = 0.0
    shipping: float = 0.0
    final_sale: list[str] = field(default_factory=list)


def _propose(facts: dict[str, Any], email: str) -> _Proposal:
    """What the policy allows for what the customer describes, from the computed facts."""
    if not facts.get("delivered"):
        return _Proposal(0, [], "none", "the order has not been delivered yet")
    if not facts.get("within_window"):
        return _Proposal(0, [], "none", f"it was delivered {facts.get('days_since_delivery')} "
                         f"days ago, past the {facts.get('window_days')}-day refund window")
    items = facts.get("items", [])
    sentences = [s for s in re.split(r"[.!?\n]+", email) if s.strip()]
    damaged, mentioned = [], []
    for item in items:
        # An item counts as mentioned when a sentence shares a word with its name.
        name_stems = _stems(item["name"]) - {"set", "inch", "the", "and", "with"}
        hits = [s for s in sentences if name_stems & _stems(s)]
        if hits:
            mentioned.append(item)
        if any(DAMAGE.search(s) and not FINE.search(s) for s in hits):
            damaged.append(item)
    if not damaged and DAMAGE.search(email) and len(items) == 1:
        damaged = items
    if damaged:
        chosen = [i for i in damaged if not i.get("final_sale")]
        amount = sum(i["price"] * i["quantity"] for i in chosen)
        shipping = facts.get("shipping", 0.0) if len(damaged) == len(items) else 0.0
        proposal = _Proposal(amount + shipping, [i["name"] for i in chosen], "damaged",
                             shipping=shipping, final_sale=[i["name"] for i in damaged
                                                            if i.get("final_sale")])
    elif CHANGE_OF_MIND.search(email):
        everything = re.search(r"\b(all|whole|everything|entire|full)\b", email, re.I)
        wanted = mentioned if mentioned and not everything else items
        chosen = [i for i in wanted if not i.get("final_sale")]
        subtotal = sum(i["price"] * i["quantity"] for i in chosen)
        fee = facts.get("return_fee", 0.0) if chosen else 0.0
        proposal = _Proposal(max(0.0, subtotal - fee), [i["name"] for i in chosen],
                             "change of mind", fee=fee,
                             final_sale=[i["name"] for i in wanted if i.get("final_sale")])
    else:
        return _Proposal(0, [], "unclear")
    earlier = facts.get("refunded_so_far", 0.0)
    if proposal.amount > facts.get("max_refund", 0.0) and earlier:
        # Refunds are tracked per order, not per item: when what the customer describes no
        # longer fits, the likeliest reason is that it was refunded already. Capping the amount
        # would pay a second time for the same item, so decline and let a person look.
        proposal.amount = 0
        proposal.why_not = (f"{_money(earlier)} of this order has already been refunded, which "
                            "covers what you describe")
        return proposal
    proposal.amount = round(min(proposal.amount, facts.get("max_refund", 0.0)), 2)
    if proposal.amount <= 0:
        proposal.why_not = ("the items asked about are final sale" if proposal.final_sale
                            else "nothing is left to refund on this order")
    return proposal


def _explain(p: _Proposal) -> str:
    """One or two sentences on how the amount was reached, for emails and the approver."""
    items = " and ".join(p.items).lower()
    if p.kind == "damaged":
        text = f"the {items} in full"
        if p.shipping:
            text += f" plus {_money(p.shipping)} shipping, since everything arrived damaged"
    else:
        text = f"the {items}, minus the {_money(p.fee)} return fee"
    if p.final_sale:
        text += f". The {' and '.join(p.final_sale).lower()} is final sale and can't be refunded"
    return text


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
    email = conv.customer[0] if conv.customer else ""
    ids = [m.upper().replace("-", "") for m in ORDER_ID.findall(" ".join(conv.customer))]
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
    proposal = _propose(facts, email)
    refund = conv.last("issue_refund")
    if proposal.amount <= 0:
        return _decline(conv, first, order_id, facts, proposal, sent)
    if refund is None:
        reason = f"Refund {_explain(proposal)} ({proposal.kind}, order {order_id})."
        return Reply(f"The policy allows {_money(proposal.amount)}: {_explain(proposal)}. "
                     "A refund needs a person's approval, so I'll propose it.",
                     calls=[("issue_refund", {"order_id": order_id, "amount": proposal.amount,
                                              "reason": reason})])
    return _after_refund(conv, first, order_id, proposal, refund["output"] or {}, sent)


def _decline(conv: _Conversation, first: str, order_id: str, facts: dict[str, Any],
             proposal: _Proposal, sent: dict | None) -> Reply:
    if proposal.kind == "unclear":
        if sent:
            return Reply("I've asked what went wrong.", f"Order {order_id}: the customer did "
                         "not say what is wrong. Asked them; no refund proposed yet.")
        return _send("The email doesn't say what went wrong, so I can't apply the policy yet.",
                     f"Hi {first},\n\nI'm sorry something isn't right with order {order_id}. "
                     "Could you tell me what happened: did an item arrive damaged, or would "
                     "you like to return something unused?")
    offer = ""
    if facts.get("appliances") and not facts.get("within_window"):
        offer = (f" The {' and '.join(facts['appliances']).lower()} is covered by the "
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


def _after_refund(conv: _Conversation, first: str, order_id: str, proposal: _Proposal,
                  outcome: dict[str, Any], sent: dict | None) -> Reply:
    status = outcome.get("status")
    if sent:
        if status == "refunded":
            note = (f"Refunded {_money(outcome.get('amount', proposal.amount))} on order "
                    f"{order_id} ({outcome.get('refund_id')}), approved by "
                    f"{outcome.get('approved_by')}. Emailed the customer. Nothing else to watch.")
        elif status == "rejected":
            note = (f"{outcome.get('rejected_by')} rejected the refund on order {order_id}. "
                    "Explained their note to the customer.")
        else:
            note = (f"The refund on order {order_id} could not be issued: "
                    f"{outcome.get('error')} Told the customer the team will follow up.")
        return Reply("The customer has their answer; I'll leave a note for the team.", note)
    if status == "refunded":
        amount = _money(outcome.get("amount", proposal.amount))
        return _send("The refund went through. I'll let the customer know.",
                     f"Hi {first},\n\nI'm sorry about this. I've refunded {amount} to your "
                     f"original payment method: {_explain(proposal)}. It should show up within "
                     "5 to 10 business days."
                     + (" You don't need to send anything back." if proposal.kind == "damaged"
                        else ""))
    if status == "rejected":
        note = outcome.get("note", "").strip()
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
