"""The offline stand-in's reader: what the customer says about each item, in their own words.

The brain used to match keywords across a whole email: a damage word anywhere marked every item
its clause named, quoted text counted as the customer's, and a question read as a request. This
reader works in the spirit of NegEx (Chapman et al., 2001), a clause at a time:

1. **Own words.** HTML is turned into text first; quoted lines (``>``), what follows "On ...
   wrote:", an original or forwarded message, a pasted order listing (lines that carry a
   price), and text that claims authority (staff notes, notes to the AI, approvals someone
   else gave, HTML comments) are set aside.
2. **Items.** Each clause is matched against the order's item names by whole words, the longest
   name first ("lamp shade" before "lamp"). A word two names share names neither, unless it is
   the head noun of one of them (the "lamp" of "Brass desk lamp" against "Lamp shade").
3. **Claims.** A claim word (damage, fine, keep, change of mind, used, unused, a request) counts
   for the clause it is in; a negation before it in the clause turns damage into "fine" ("not a
   single scratch", "neither ... nor ... damaged", "wasn't the problem"); a hypothetical or a
   belief before it ("if", "I thought", "worried") cancels it. A clause that names no item
   passes its claim to the items of the clause just before ("The vase is the issue: it arrived
   chipped"), except when it speaks of the others ("the rest are fine") or of the packaging.
   Claim words are whole words ("incident" holds no "dent"); a word in quotation marks is
   mentioned, not claimed; a story about another item or another time ("my old plate broke
   last winter") claims nothing; damage the customer keeps ("I'm keeping it, no refund
   needed") is a note, not a claim; and a later "it works now" after a correction ("turns
   out", "actually", "update") takes an earlier damage claim back (issue 38: when unsure,
   claim less). Newer text wins where it says less (issue 43): a later message, or the
   customer's words over a quoted email they adopt (read after it, past a ``NEWER`` line).
4. **Questions.** A question with a condition ("could I return it if ...?") is a question:
   nothing in it is a claim.
5. **Counts.** A count on the item's name, a survivors' count as the rest damaged ("only one of
   the four survived": three, counting.py), and a smaller count in newer text; the smallest.

Everything here is general support English; nothing names a shop, an item or an order format
beyond "letters and digits". Every scan is a single pass (no pattern here can backtrack over
a run of text more than once), so reading stays linear in the length of the email.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

from . import counting

# -- own words ----------------------------------------------------------------------------------

_TAG_HINT = re.compile(r"<(?:/?(?:p|br|div|li|ul|ol|table|tr|td|th|html|body|span|b|i|u|em"
                       r"|strong|blockquote|font|o:p|h\d)\b|!--)", re.I)
_TAG = re.compile(r"<[^<>]*>")
_BLOCK_TAG = re.compile(r"<\s*/?\s*(?:p|br|div|li|ul|ol|table|tr|h\d)\b[^<>]*>", re.I)
_CELL_END = re.compile(r"<\s*/\s*t[dh]\s*>", re.I)

# Lines after which the rest is someone else's earlier email.
_QUOTE_START = re.compile(
    r"^(?:On\b.{0,300}\bwrote:\s*$|-{2,}\s*(?:Original Message|Forwarded message)"
    r"|Begin forwarded message|From:\s|Sent:\s)", re.I)
# Text that claims authority: staff notes, notes to the assistant, approvals by someone else.
_AUTHORITY = re.compile(
    r"\bnote to the (?:ai|assistant|bot|model)\b|\bignore (?:all |any |your )?(?:previous|prior"
    r"|above) instructions\b|\b(?:staff|warehouse|agent|admin|customer) verified\b|\bverified by\b"
    r"|\binternal\b|\bsupport team note\b|\bsystem:|\btool_result\b|\b(?:supervisor|manager"
    r"|colleague|team lead)\b.{0,80}\b(?:approved|agreed|said|promised|confirmed)\b|\bas agreed"
    r" with\b|\balready approved\b|\bapproved by\b|\bauthori[sz]ed\b", re.I)
# A pasted order listing: a line that carries a price and reads as a list entry.
# (Fixed-width runs before the "$": a run of any length would be rescanned from each of its
# positions, quadratic on a line of dots.)
_LISTING = re.compile(r"(?:\.\.\.\s?|\s\s|\bx\s?|:\s?)\$\s?\d|\$\s?\d[\d,]*(?:\.\d{2})?\s*$"
                      r"|^\s*(?:total|subtotal|shipping|order)\b.{0,40}(?:\$\s?\d|free\s*$)", re.I)
# The customer makes quoted or forwarded words their own.
ADOPTS = re.compile(
    r"\b(?:exactly right|(?:i|we) (?:fully |completely )?agree with (?:every word|all of it|this"
    r"|(?:him|her|them)|what)|every word (?:of (?:it|this) )?is true|treat (?:it|this) as mine"
    r"|(?:it|this) is my (?:complaint|claim|request)|same (?:here|for me)|speaks for (?:me|us)"
    r"|on (?:my|our) behalf|please (?:sort|deal with|look into) (?:it|this)(?: out)?)\b", re.I)
_HEADER = re.compile(r"^(?:from|sent|to|cc|date|subject):", re.I)
_SENTENCE_END = re.compile(r"[.!?]+|\n|;")


def _drop_between(text: str, lower: str, start: str, end: str) -> tuple[str, str]:
    """``text`` without every ``start`` ... ``end`` span (to the end when ``end`` is missing),
    found with ``find`` so that a long text of unclosed starts is still read once."""
    pieces, lowers, pos = [], [], 0
    while (begin := lower.find(start, pos)) != -1:
        pieces.append(text[pos:begin])
        lowers.append(lower[pos:begin])
        close = lower.find(end, begin + len(start))
        pos = len(text) if close == -1 else close + len(end)
    pieces.append(text[pos:])
    lowers.append(lower[pos:])
    return "".join(pieces), "".join(lowers)


def html_to_text(text: str) -> str:
    """An HTML email as plain text: comments and quoted blocks dropped, paragraphs, breaks,
    list items and table rows as lines, table cells as "cell: cell", entities decoded."""
    if not _TAG_HINT.search(text):
        return text
    lower = text.lower()
    text, lower = _drop_between(text, lower, "<!--", "-->")
    text, lower = _drop_between(text, lower, "<blockquote", "</blockquote>")
    text = _CELL_END.sub(": ", text)
    text = _BLOCK_TAG.sub("\n", text)
    text = _TAG.sub("", text)
    text = html.unescape(text).replace("\u00a0", " ")
    return "\n".join(line.strip().rstrip(":").strip() for line in text.splitlines()).strip()


def _drop_authority(line: str) -> str:
    """A line without the sentences (or bracketed notes) that claim authority."""
    if not _AUTHORITY.search(line):
        return line
    kept, start = [], 0
    for mark in _SENTENCE_END.finditer(line):
        piece = line[start:mark.end()]
        if not _AUTHORITY.search(piece):
            kept.append(piece)
        start = mark.end()
    tail = line[start:]
    if tail and not _AUTHORITY.search(tail):
        kept.append(tail)
    return "".join(kept)


def own_words(body: str) -> str:
    """What the customer wrote themselves, now: no quoted, forwarded or pasted text, no notes
    claiming authority, HTML as text."""
    text = html_to_text(body)
    for opening, closing in (("[", "]"),):
        # A bracketed note is only set aside when it claims authority; brackets are common.
        if opening in text:
            pieces, pos = [], 0
            while (begin := text.find(opening, pos)) != -1:
                close = text.find(closing, begin)
                if close == -1:
                    break
                note = text[begin:close + 1]
                pieces.append(text[pos:begin])
                if not _AUTHORITY.search(note):
                    pieces.append(note)
                pos = close + 1
            pieces.append(text[pos:])
            text = "".join(pieces)
    kept, quoted = [], []
    forwarded = False
    for line in text.splitlines():
        stripped = line.strip()
        if forwarded or stripped.startswith(">"):
            quoted.append(stripped.lstrip("> "))
            continue
        if _QUOTE_START.match(stripped):
            forwarded = True
            quoted.append(stripped)
            continue
        if _LISTING.search(stripped):
            continue
        kept.append(_drop_authority(line))
    if quoted and ADOPTS.search("\n".join(kept)):
        # "My partner wrote this and it's exactly right": the quoted words are theirs too
        # (less its headers, listings and notes claiming authority). They are older than the
        # words on top of them, so they are read first, and the customer's newer words after
        # a NEWER line: "Update: only one is broken" over "all four arrived broken" wins.
        older = [_drop_authority(line) for line in quoted
                 if not _QUOTE_START.match(line) and not _HEADER.match(line)
                 and not _LISTING.search(line)]
        kept = [*older, NEWER, *kept]
    return "\n".join(kept)


# -- order numbers ------------------------------------------------------------------------------

# An order number as customers write it: letters then digits, with a space, a dash or nothing
# between ("RT 20581", "rt-20725", "B2201"), after "#", "no." or "number:" as often as not.
# (Edges are ASCII letters and digits, so a number written against other scripts, "注文B2001の",
# is still found.)
_ORDER_ID = re.compile(r"(?<![A-Za-z0-9_@.])#?\s?([A-Z]{1,3})(?:-|\s)?(\d{3,8})(?![A-Za-z0-9_])"
                       r"(?![@.]\w)", re.I)
_SPACED = re.compile(r"(?<![A-Za-z0-9_@.])([A-Z]{1,3}) (\d{4,8})(?![A-Za-z0-9_])(?![@.]\w)")
_NUMBER_DOT = re.compile(r"\b(no|nr|num|number)\.(?=[A-Za-z]{1,3}-?\d)", re.I)
# Words that say the number is not an order: a ticket, a reference, a member or post box.
_REFERENCE = re.compile(r"\b(?:ref|reference|ticket|case|incident|member|membership|po|p\.o"
                        r"|postboks|p\.?o\.? box|invoice|account|phone|tel|fax|vat|iban)\b",
                        re.I)
_ORDER_WORD = re.compile(r"\border\b", re.I)


def order_ids(text: str) -> list[str]:
    """Order numbers in ``text``, canonical (letters and digits, upper case), in order."""
    text = _NUMBER_DOT.sub(r"\1. ", text)
    found: list[tuple[int, str]] = []
    for pattern in (_ORDER_ID, _SPACED):
        for match in pattern.finditer(text):
            if pattern is _ORDER_ID and match.group(0).lstrip("#").lstrip()[len(
                    match.group(1)):][:1] == " " and not match.group(1).isupper():
                continue   # "on 2026", "at 1030": a lower-case word then a number
            # The nearest word before the number on its line says what it is.
            before = text[max(0, match.start() - 30):match.start()].rpartition("\n")[2]
            # ("There was an incident with the parcel for AB1234": too far to name it.)
            refs = [m.end() for m in _REFERENCE.finditer(before)
                    if len(before) - m.end() <= 12]
            orders = [m.end() for m in _ORDER_WORD.finditer(before)]
            if refs and (not orders or refs[-1] > orders[-1]):
                continue
            found.append((match.start(), (match.group(1) + match.group(2)).upper()))
    return list(dict.fromkeys(oid for _, oid in sorted(found)))


# -- items --------------------------------------------------------------------------------------

_NAME_WORD = re.compile(r"[a-z]+")
_TEXT_WORD = re.compile(r"[a-z0-9]+(?:['\u2019][a-z]+)?")
_CONNECTIVE = re.compile(r"\b(?:to|of|for|with|and|in|from|by)\b")
# Words that sit in many catalogue names without naming one product.
CATALOGUE_WORDS = {
    "set", "pack", "pair", "piece", "pieces", "pcs", "bundle", "kit", "count", "size",
    "inch", "inches", "cm", "mm", "ft", "oz", "lb", "lbs", "qt", "quart", "liter", "litre", "ml",
    "gal", "g", "kg", "small", "medium", "large", "mini", "the", "and", "with", "for", "of",
    "new", "a", "an", "to", "in", "by", "from", "x",
}


def stem(word: str) -> str:
    """A word without its plural or possessive ending: "lamps" and "lamp's" -> "lamp"."""
    word = word.replace("\u2019", "'")
    if word.endswith("'s"):
        word = word[:-2]
    elif word.endswith("'"):
        word = word[:-1]
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us")):
        return word[:-1]
    return word


@dataclass(frozen=True)
class _Alias:
    words: tuple[str, ...]   # stems, in order
    line: str
    definite: bool = False   # a lone modifier ("the ceramic"): only after "the", "my", ...


def _aliases(lines: list[dict[str, Any]]) -> dict[str, list[_Alias]]:
    """Every way the order's lines can be named, by first word, longest first.

    A name's head is the last word of its first part ("Ceramic vase, 2 litre" -> vase; "Book
    of knots" -> book; "Knife and fork" -> knife and fork). A line is named by its head, by any
    run of words ending in its head ("desk lamp"), or by another word of its first part that no
    other line of the order has ("ceramic").
    """
    heads: dict[str, set[str]] = {}
    words_of: dict[str, list[str]] = {}
    phrases: list[_Alias] = []
    for line in lines:
        name = str(line.get("name", "")).lower()
        first = re.split(r"[,(]", name, maxsplit=1)[0]
        parts = [p for p in _CONNECTIVE.split(first) if p.strip()]
        core = parts[0] if parts else first
        lid = str(line["line"])
        own_heads = set()
        for part in ([core] + (parts[1:] if " and " in first else [])):
            words = [stem(w) for w in _NAME_WORD.findall(part) if w not in CATALOGUE_WORDS]
            if not words:
                continue
            own_heads.add(words[-1])
            for i in range(len(words)):
                phrases.append(_Alias(tuple(words[i:]), lid))
        heads[lid] = own_heads
        words_of[lid] = [stem(w) for w in _NAME_WORD.findall(first) if w not in CATALOGUE_WORDS
                         and len(w) > 2]
    count: dict[str, int] = {}
    for words in words_of.values():
        for w in set(words):
            count[w] = count.get(w, 0) + 1
    all_heads = {h for hs in heads.values() for h in hs}
    for lid, words in words_of.items():
        for w in set(words):
            if count[w] == 1 and w not in heads[lid] and w not in all_heads:
                phrases.append(_Alias((w,), lid, definite=True))
    # A one-word phrase two lines share as their head names neither.
    single: dict[tuple[str, ...], set[str]] = {}
    for alias in phrases:
        single.setdefault(alias.words, set()).add(alias.line)
    by_first: dict[str, list[_Alias]] = {}
    for alias in dict.fromkeys(phrases):
        if len(single[alias.words]) > 1:
            continue
        by_first.setdefault(alias.words[0], []).append(alias)
    for group in by_first.values():
        group.sort(key=lambda a: -len(a.words))
    return by_first


# What a fragment holds besides the item's name: "The tray.", "Just my mug."
_FRAGMENT = re.compile(r"^[\W_]*(?:(?:the|my|our|your|a|an|also|just|and|only)\b[\W_]*)*$", re.I)
_DEFINITE = {"the", "my", "your", "our", "this", "that", "these", "those", "his", "her"}


@dataclass(frozen=True)
class _Mention:
    start: int
    end: int
    line: str


def _mentions(text: str, aliases: dict[str, list[_Alias]],
              skus: tuple[str, ...] = ()) -> list[_Mention]:
    """The items ``text`` names, left to right, the longest name at each place, or by sku."""
    tokens = [(m.start(), m.end(), stem(m.group())) for m in _TEXT_WORD.finditer(text.lower())]
    found: list[_Mention] = []
    i = 0
    while i < len(tokens):
        start, end, word = tokens[i]
        best = None
        for alias in aliases.get(word, ()):
            n = len(alias.words)
            if alias.definite and (i == 0 or tokens[i - 1][2] not in _DEFINITE):
                continue
            if tuple(t[2] for t in tokens[i:i + n]) == alias.words:
                best = alias
                break
        if best:
            n = len(best.words)
            found.append(_Mention(start, tokens[i + n - 1][1], best.line))
            i += n
        else:
            i += 1
    for sku in skus:
        for match in re.finditer(rf"(?<![\w-]){re.escape(sku)}(?![\w-])", text, re.I):
            found.append(_Mention(match.start(), match.end(), sku))
    return sorted(found, key=lambda m: m.start)


# -- claims -------------------------------------------------------------------------------------

# The item arrived damaged or does not work.
# Each starts a word ("confidential", "incident", "evident" hold no dent; "unbroken" no break).
DAMAGE = re.compile(
    r"\b(?:crack|broke|break|damag|defect|shatter|chip|dent|leak|torn|tore\b|\brip|faulty|scratch"
    r"|stain|split|snap|bent\b|in pieces|in two|in half|smash|warp|rust|burn|smok|overheat"
    r"|noise|rattl|wobbl|missing (?:a )?(?:part|piece)|stops? work|stopped|not work|dead\b"
    r"|doesn.t (?:work|close|lock|seal|heat|spin|charge|open|switch|turn)"
    r"|won.t (?:turn|start|work|switch|hold|stay|close|lock|seal|charge|heat|open|screw|go on"
    r"|come on)|does nothing|arrived wrong|fell apart|came apart|peel|fray|mou?ld\b|mouldy"
    r"|flicker|short.circuit|malfunction|busted|wrecked|ruined|crushed|burst|\bholes?\b"
    r"|punctur|weeps|spilt|spilled|smeared|blurr|popped off|came off|fell off|soaked"
    r"|glued together|falling out|sticky|shreds|bleach|moth|goes blank|\bflat\b|unusable"
    r"|\btears?\b|pulled (?:out|off|apart)|coming (?:out|apart|off|loose)"
    r"|\bfault)", re.I)
# The item is fine: undamaged, working, liked.
FINE = re.compile(
    r"\b(?:fine|ok|okay|perfect|perfectly|great|lovely|intact|undamaged|in one piece"
    r"|survived|brilliant|gorgeous|excellent|beautiful(?:ly)?|as promised|no complaints"
    r"|no issues|no problems?|so far so good|all good|(?:is|are|was|were|looks?|held) (?:all )?"
    r"good|works?(?: well| fine| great| perfectly)?|working|nothing(?:.s| is)? wrong"
    r"|no harm|in perfect shape|safely|happy with|loving|love)\b", re.I)
# A denial of a problem: "X wasn't the problem", "no damage to X".
PROBLEM = re.compile(r"\b(?:problem|issue|damage|fault|wrong)\b", re.I)
# The customer keeps the item.
KEEP = re.compile(r"\bkeep(?:ing)?\b|\bstaying\b|\bhold on to\b|\bi.ll keep\b", re.I)
# The customer says no money is wanted for it: the item is theirs to keep, whatever its state.
NO_REFUND = re.compile(r"\bno refund(?:s)? (?:needed|necessary|required|wanted)|\b(?:don.t|do not"
                       r"|won.t) (?:need|want|expect) (?:a |any )?refund|\bnot (?:asking|looking)"
                       r" for (?:a |any )?refund|\bno need (?:for a refund|to refund)", re.I)
# The customer no longer wants an item.
CHANGE = re.compile(
    r"chang\w{0,20} (?:my|of) mind|don.t (?:want|need|like|love)|no longer (?:want|need)"
    r"|didn.t (?:like|use)|\breturn|send (?:it|them|that|this|\w+ \w+) back|\bsend back"
    r"|not what I expected|too (?:big|small|large|heavy|thick|thin|firm|soft|warm|hot|cold|short"
    r"|long|tight|loose|dark|light|bright)|not \w+ enough|doesn.t fit|not for me"
    r"|ordered (?:by mistake|the wrong)|wrong (?:colou?r|size|model)|regret|rather have"
    r"|prefer|money back|decided|not the colou?rs?|overestimated", re.I)
# The customer says they used it.
USED = re.compile(
    r"\bused\b|\bwore\b|\bworn\b|slept (?:in|on)|\bwashed\b|made (?:notes|\w+ with)"
    r"|\bwritten in\b|\bevery (?:morning|day|night|evening)\b|\b(?:a few|several|many) times\b"
    r"|\btook (?:it|them|the [a-z -]{1,30}) (?:on|to) (?:a|one|two|three|several|\d+) \w+"
    r"|\bon (?:a|one|two|three|several|\d+) (?:trips?|hikes?|walks?|nights?|outings?)"
    r"|\bfor a (?:week|month|full day|fortnight)\b|\bbeen out with\b|\blit\b", re.I)
UNUSED = re.compile(
    r"unused|unopened|unworn|unlit|unwashed|never (?:been )?(?:used|opened|worn|lit|filled"
    r"|touched|taken out)|not (?:been )?(?:used|opened|worn)|haven.t (?:used|opened|worn"
    r"|touched)|still (?:sealed|boxed|wrapped|folded|in (?:the|its|their) \w+)|tags? (?:still )?on"
    r"|label on|in (?:the|its) original", re.I)
# A request for money.
REQUEST = re.compile(r"\brefund|\breimburs|money back|\breturn"
                     r"|(?:send|take) (?:it|them|\w+ \w+) back", re.I)
# Something other than money asked for: then the request is not one the policy settles alone.
ALTERNATIVE = re.compile(r"\bor (?:fix|replace|repair|exchange|swap)|\binstead of a refund"
                         r"|\bswap\b|\bexchange\b|\breplacement\b", re.I)
# The shop sent something else than what was ordered.
WRONG_ITEM = re.compile(
    r"\binstead of\b.{0,60}\bthere (?:was|were)\b|\bnever ordered\b|\bnot what I ordered\b"
    r"|(?:sent|received|got|came with|arrived with) (?:me )?(?:the |a )?wrong (?:item|product"
    r"|one|thing)|\bwrong (?:item|product)s? (?:was |were )?(?:sent|arrived|came)", re.I)
MISSING = re.compile(r"\bmissing\b|\bnot in the (?:box|parcel|package)|didn.t (?:arrive|come)"
                     r"|never (?:arrived|came)|wasn.t (?:there|in)", re.I)
NEGATION = re.compile(r"\b(?:not|no|never|nothing|none|neither|nor|without|nowhere near|hardly"
                      r"|barely|nope|zero|anything but)\b|n[’']t\b", re.I)
# Negation words that negate nothing (NegEx's pseudo-negations).
PSEUDO_NEGATION = re.compile(r"\b(?:can.t|cannot|couldn.t) believe\b|\bnot only\b|\bno doubt\b"
                             r"|\bno wonder\b|\bnot just\b|\bnothing (?:says|screams|beats"
                             r"|spells)\b", re.I)
# "Refund it as damaged": the customer naming the reason they want, not describing the item.
AS_LABEL = re.compile(r"\bas\s+$", re.I)
# A retraction: what follows in the sentence undoes an earlier claim.
RETRACTION = re.compile(r"\bjust kidding\b|\bjoking\b|\bfalse alarm\b|\bnever mind\b"
                        r"|\bscratch that\b|\bmy mistake\b|\bturn(?:ed|s) out\b"
                        r"|\bignore (?:that|my last)", re.I)
HYPOTHETICAL = re.compile(r"\b(?:if|in case|whether|thought|worried|afraid|sure|expected"
                          r"|(?:about|going) to (?:say|tell|write)|assumed|at first"
                          r"|might|may|ever|before i|would have|could have|what happens|unless"
                          r"|until|wonder(?:ing)?|seems?|looks? like|just asking)\b", re.I)
# A line holding only this marks where newer text begins: between the customer's messages
# (brain.py joins them with it), and between a quoted email the customer adopts and their own
# words on top of it. What follows is newer and, where it says less, wins (issue 43).
NEWER = "\x1e"
# A correction of something said earlier in the email: a later "it's fine" then wins. An
# update ("Update:", "Edit:", "after all", "having checked again") is one too.
CORRECTION = re.compile(RETRACTION.pattern + r"|\bactually\b|\bcorrection\b|\bon closer look"
                        r"|\blooked again\b|\bcounted again\b|\bi was wrong\b|\bmistaken\b"
                        r"|\bjust needed\b|\bupdate\b|\bedit\b|\bafter all\b|\bmiscount"
                        r"|\bchecked again\b|\b(?:second|closer) look\b|\blooking again\b"
                        r"|\bre-?counted\b|\bdisregard\b|\x1e", re.I)
CONTAINER = re.compile(r"\b(?:box|boxes|parcel|package|packaging|envelope|carton|bubble wrap"
                       r"|outer|courier|delivery)\b", re.I)
OTHERS = re.compile(r"\b(?:the rest|everything else|all else|other(?:s| \w+)?|the remaining"
                    r"|another)\b", re.I)
EVERYTHING = re.compile(r"\b(?:everything|it all|all of it|all of them|the whole (?:order|lot"
                        r"|thing|parcel)|entire order|whole order|all (?:the |my )?items)\b",
                        re.I)
EXCLUDE = re.compile(r"\b(?:not|except(?: for)?|apart from|other than|but not)\s+(?:the|my|your"
                     r"|a)?\s*$", re.I)
_CLAUSE_BREAK = re.compile(
    r",|:|\(|\)|\s[-\u2013\u2014]+\s|\s[-\u2013\u2014]+$|\b(?:but|however|though|although"
    r"|whereas|which|because|while|except)\b|\band\b", re.I)


@dataclass
class _Said:
    """What one clause says about the items it concerns."""

    damage: bool = False
    fine: bool = False
    keep: bool = False
    change: bool = False
    used: bool = False
    unused: bool = False
    request: bool = False
    missing: bool = False
    no_refund: bool = False

    def any(self) -> bool:
        return any(vars(self).values())

    def merge(self, other: _Said) -> None:
        for key, value in vars(other).items():
            if value:
                setattr(self, key, True)


_QUOTES = "\"\u201c\u201d'\u2018\u2019"


def _scare_quoted(clause: str, start: int, end: int) -> bool:
    """Whether the word around ``start:end`` stands in quotation marks of its own."""
    while end < len(clause) and clause[end].isalpha():
        end += 1
    return (start > 0 and clause[start - 1] in _QUOTES and end < len(clause)
            and clause[end] in _QUOTES)


def _first(clause: str, pattern: re.Pattern[str]) -> int:
    """Where ``pattern`` first ends in ``clause`` (past the end when it is not there): found
    once per clause, so that many claim words in one clause do not each rescan it."""
    match = pattern.search(clause)
    return match.end() if match else len(clause) + 1


def _claims(clause: str) -> tuple[_Said, bool]:
    """What a clause (item names already blanked out) says, and whether it is hypothetical."""
    said = _Said()
    hypothetical = False
    negation = _first(PSEUDO_NEGATION.sub(lambda m: " " * len(m.group()), clause), NEGATION)
    condition = _first(clause, HYPOTHETICAL)
    alternative = bool(ALTERNATIVE.search(clause))
    for match in DAMAGE.finditer(clause):
        if _scare_quoted(clause, match.start(), match.end()):
            continue   # a "tear" in quotes is a word mentioned, not damage claimed
        if AS_LABEL.search(clause, max(0, match.start() - 4), match.start()):
            said.request = True   # "refund it as damaged" names a reason, it claims none
        elif condition <= match.start():
            hypothetical = True
        elif negation <= match.start():
            said.fine = True
        else:
            said.damage = True
    for match in PROBLEM.finditer(clause):
        if negation <= match.start():
            said.fine = True
    for match in FINE.finditer(clause):
        if not negation <= match.start() and not condition <= match.start():
            said.fine = True
    for match in KEEP.finditer(clause):
        if not negation <= match.start():
            said.keep = True
    if NO_REFUND.search(clause):
        said.keep = said.no_refund = True
    for match in CHANGE.finditer(clause):
        if condition <= match.start():
            hypothetical = True
        else:
            said.change = True
    for match in REQUEST.finditer(clause):
        if condition <= match.start():
            hypothetical = True
        elif not negation <= match.start() and not alternative:
            said.request = True
    said.unused = bool(UNUSED.search(clause))
    used = USED.search(clause)
    said.used = bool(used) and not said.unused and negation > used.start()
    said.missing = bool(MISSING.search(clause))
    return said, hypothetical


def _sentences(text: str) -> list[tuple[str, bool]]:
    """Sentences, each with whether it is a question."""
    out, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        mark = match.group()
        if mark[0] in ".!?" and match.end() < len(text) and not text[match.end()].isspace():
            continue   # "no.5", "3.5 cm", "e.g": not a sentence end
        piece = text[start:match.start()]
        if piece.strip():
            out.append((piece, "?" in mark))
        start = match.end()
    if text[start:].strip():
        out.append((text[start:], False))
    return out


@dataclass
class Reading:
    """What the customer's own words ask for, item by item, and what could not be told."""

    wanted: dict[str, str] = field(default_factory=dict)   # line -> damaged | changed_mind
    used: list[str] = field(default_factory=list)          # changed mind on a used item
    missing: list[str] = field(default_factory=list)       # said to be missing
    unclear: list[str] = field(default_factory=list)       # asked about, with no reason given
    named: list[str] = field(default_factory=list)         # named, with nothing said of them
    questions: list[str] = field(default_factory=list)     # questions to answer
    fine_only: bool = False        # nothing wrong is claimed: a note, thanks, a heads-up
    fine_any: bool = False         # something was said to be fine
    loose_damage: bool = False     # damage claimed without saying which item
    packaging: bool = False        # the box or parcel was damaged
    alternative: bool = False      # an exchange, a repair or a replacement asked for
    wrong_item: list[str] = field(default_factory=list)   # ordered, but something else came
    kept_damaged: list[str] = field(default_factory=list)  # damaged, but kept: no refund asked


# A question that asks for something ("Could you refund the vase?") rather than about something.
_ASKS_FOR = re.compile(r"^\W*(?:(?:could|can|would|will|may)\s+(?:i|you|we)\b(?!\s+tell)"
                       r"|please\b|i.d like\b)", re.I)
# A question that is a complaint: "Why did my lamp arrive broken?"
_RHETORICAL = re.compile(r"^\W*(?:why (?:did|does|is|was|are|were|would)|how come|how (?:could"
                         r"|can) (?:you|this|it))\b", re.I)
# A pronoun that points back at the item just named.
_POINTS_BACK = re.compile(r"\b(?:it|its|it.s|itself|they|them|their|they.re|these|those|both"
                          r"|this one|that one|that)\b", re.I)
# "... and so did the rug", "as is the vase": the same claim for another item.
_SAME_AGAIN = re.compile(r"^\W*(?:and\s+)?(?:so|as)\s+(?:did|do|does|is|are|was|were|has|have)\b"
                         r"|^\W*(?:and\s+)?(?:neither|nor)\s+(?:did|is|are|was|were)\b", re.I)
_TOO = re.compile(r"\b(?:too|as well|also)\W*$", re.I)
# Damage the customer says they caused, which the desk can't treat as arrived damaged.
SELF_CAUSED = re.compile(r"\bi (?:dropped|broke|knocked|damaged|ruined|cracked|sat on)\b"
                         r"|\bdropped (?:it|them)\b|\bmy (?:own )?fault\b|\baccident(?:ally)?\b"
                         r"|\bby mistake\b", re.I)
# A name right after one of these is the item's part or company ("its box", "with my lamp").
_BELONGS = re.compile(r"\b(?:its|their|his|her|\w+['\u2019]s)\s+(?:own\s+)?$", re.I)
# An item of the same kind the customer had before, not the one in this order ("my old teapot").
_FORMER = re.compile(r"\b(?:my|our|the|an?)\s+(?:old|previous|former|last)\s+$", re.I)
# A story from before this order ("last winter", "years ago"): its claims are not about it.
BACKSTORY = re.compile(r"\blast (?:year|winter|summer|spring|autumn|fall|month|christmas)\b"
                       r"|\b(?:years?|months?) ago\b|\ba while (?:ago|back)\b", re.I)
_PREPOSITION = re.compile(r"\b(?:with|next to|beside|alongside|inside|than|like|for|near)\s+"
                          r"(?:the|my|your|a|an|our)?\s*$", re.I)


def read(lines: list[dict[str, Any]], text: str, subject: str = "",
         blanket: bool = True) -> Reading:
    """Read the customer's own words against the order's lines (see the module docstring).

    ``subject`` is the email's subject line: it makes no claim, but an item it names alone is
    what a bare "it" at the start of the email refers to. ``blanket=False`` reads a claim about
    the whole order ("everything arrived broken") as one that names no item, to ask which
    (steering.py: an email that addresses the agent's instructions).
    """
    aliases = _aliases(lines)
    ids = [str(line["line"]) for line in lines]
    skus = tuple(lid for lid in ids if len(lid) >= 3)
    per: dict[str, _Said] = {lid: _Said() for lid in ids}
    excluded: set[str] = set()
    loose = _Said()
    loose_everything = False
    reading = Reading()
    about = list(dict.fromkeys(m.line for m in _mentions(subject, aliases, skus)))
    pending: list[str] = about if len(about) == 1 else []
    pending_sentence = -1
    named: list[str] = []
    previous = _Said()
    damaged_at: dict[str, int] = {}   # the last sentence that said the item is damaged
    fine_at: dict[str, int] = {}      # the last that said it is fine
    corrections: list[int] = []       # sentences that correct something said before
    loose_at, loose_said = -2, _Said()   # the last sentence with a claim that named no item

    def claim(lid: str, said: _Said, number: int) -> None:
        _merge(per[lid], said, retracting)
        if said.damage:
            damaged_at[lid] = number
        if said.fine:
            fine_at[lid] = number

    sentences = _sentences(text)
    number = 0
    # Where newer text begins counts as a correction of what came before it.
    for sentence, _question in sentences:
        if sentence.strip() == NEWER:
            corrections.append(number)
        else:
            number += 1
    sentences = [s for s in sentences if s[0].strip() != NEWER]
    for number, (sentence, question) in enumerate(sentences):
        mentions = _mentions(sentence, aliases, skus)
        retracting = bool(RETRACTION.search(sentence))
        if CORRECTION.search(sentence):
            corrections.append(number)
        if question and not _RHETORICAL.search(sentence) and (
                HYPOTHETICAL.search(sentence) or not REQUEST.search(sentence)
                or not _ASKS_FOR.search(sentence)):
            reading.questions.append(sentence.strip())
            # "How do I return the rug? It's unused.": the item asked about is the "it".
            items = list(dict.fromkeys(m.line for m in mentions))
            if items:
                pending, pending_sentence = items, -1
            continue
        for a, b, separator in _clause_spans(sentence):
            clause = sentence[a:b]
            here = [m for m in mentions if a <= m.start < b
                    and not _BELONGS.search(sentence[max(a, m.start - 12):m.start])]
            if BACKSTORY.search(clause) or any(
                    _FORMER.search(sentence[max(a, m.start - 16):m.start]) for m in here):
                continue   # "my old plate broke last winter": another plate, another time
            blanked = _blank(clause, [(m.start - a, m.end - a) for m in here])
            said, hypothetical = _claims(blanked)
            if not hypothetical and counting.claims_damage(blanked):
                said.damage, said.fine = True, False   # "only one of the four survived"
            if hypothetical and (CHANGE.search(blanked) or REQUEST.search(blanked)):
                reading.questions.append(clause.strip())   # "I might return it if ..."
            alternative = ALTERNATIVE.search(blanked)
            if alternative and _first(blanked, NEGATION) > alternative.start():
                reading.alternative = True
            if WRONG_ITEM.search(blanked):
                reading.wrong_item.extend(m.line for m in here)
                if not here:
                    reading.wrong_item.extend(pending)
                continue
            if (_SAME_AGAIN.search(blanked) or _TOO.search(blanked)) and not said.any():
                said = previous   # "... and so did the rug", "the vase too"
            if said.damage and SELF_CAUSED.search(blanked):
                said.damage = False   # broken by the customer: not "arrived damaged"
                said.request = True   # so it is asked about, not refunded or ignored
            for m in here:
                # (From the sentence, not the clause: "except" is itself a clause break.)
                if EXCLUDE.search(sentence[max(0, m.start - 20):m.start]):
                    excluded.add(m.line)
            # "the lamp I ordered with my rug is unused": the claim is the lamp's.
            subjects = [m for m in here
                        if not _PREPOSITION.search(sentence[max(a, m.start - 20):m.start])]
            items = list(dict.fromkeys(m.line for m in (subjects or here)))
            previous = said
            if items and not said.any() and loose_at == number - 1 and _FRAGMENT.match(blanked):
                said = loose_said   # "Something arrived broken. The tray.": the tray did
            if items:
                if not hypothetical or said.any():
                    named.extend(items)
                for lid in items:
                    claim(lid, said, number)
                # "The cups, which sat next to the vase, arrived broken": the cups did.
                if not hypothetical and separator.lower().split()[-1:] != ["which"]:
                    pending, pending_sentence = items, number
                continue
            if OTHERS.search(blanked):
                continue
            if said.damage and CONTAINER.search(blanked) and (
                    CONTAINER.search(blanked).start() < DAMAGE.search(blanked).start()
                    or CONTAINER.search(blanked).start() - DAMAGE.search(blanked).end() < 25):
                reading.packaging = True
                said.damage = False
            if not said.any():
                continue
            if EVERYTHING.search(blanked):
                loose_everything = True
                loose.merge(said)
                continue
            if pending and (pending_sentence == number or _POINTS_BACK.search(blanked)):
                pending_sentence = number   # the rest of this sentence is about them too
                for lid in pending:
                    claim(lid, said, number)
            else:
                loose.merge(said)
                loose_at, loose_said = number, said   # a fragment next may name its item
    # A claim that names no item is about the whole order only when it says so, or when the
    # order has one line: "it's unused" on an order of three could be any of them.
    if not blanket and loose_everything:
        loose_everything, ids_spread = False, False
    else:
        ids_spread = len(ids) == 1
    spread = loose_everything or ids_spread
    for lid, at in damaged_at.items():
        # "The lamp was dead. Turns out it needed a charge; it works now": corrected.
        if fine_at.get(lid, -1) > at and any(at <= c <= fine_at[lid] for c in corrections):
            per[lid].damage = False
    asked = any(s.request for s in per.values()) or loose.request
    for lid in ids:
        said = per[lid]
        if said.damage and (said.no_refund or said.keep and not said.request and not asked):
            reading.kept_damaged.append(lid)   # "frayed, but I'm keeping it": no claim
        elif said.damage:
            reading.wanted[lid] = "damaged"
        elif said.keep:
            continue
        elif said.change or (said.request and (said.unused or loose.change)) or (
                (said.unused or said.used) and (loose.request or loose.change)):
            if said.used or (loose.used and not said.unused):
                reading.used.append(lid)
            else:
                reading.wanted[lid] = "changed_mind"
        elif said.missing:
            reading.missing.append(lid)
        elif said.fine:
            continue
        elif lid in excluded:
            continue   # "It all came smashed. Well, not the rug": the rug is the exception
        elif spread and loose.damage and (loose_everything or ids_spread):
            reading.wanted[lid] = "damaged"
        elif spread and loose.change and not loose.keep:
            if loose.used and not (said.unused or loose.unused):
                reading.used.append(lid)
            else:
                reading.wanted[lid] = "changed_mind"
        elif said.request or said.used or (lid in named and (loose.request or loose.damage
                                                            or loose.change)):
            reading.unclear.append(lid)
        elif lid in named or said.any():   # "I haven't used it yet": no request in that
            reading.named.append(lid)
    claims = list(per.values()) + [loose]
    reading.fine_any = any(s.fine for s in claims)
    if not reading.wanted and len(ids) > 1 and not loose_everything and (
            loose.damage or reading.packaging and not reading.fine_any):
        reading.loose_damage = True
    kept = set(reading.kept_damaged)
    reading.fine_only = (not reading.wanted and not reading.used and not reading.missing
                         and not reading.unclear and not reading.loose_damage
                         and not any(s.damage or s.change or s.request or s.missing
                                     for lid, s in per.items() if lid not in kept)
                         and not (loose.damage or loose.change or loose.request or loose.missing)
                         and (reading.fine_any or bool(kept)))
    return reading


def _merge(into: _Said, said: _Said, retracting: bool) -> None:
    """Add a clause's claims to an item's; "just kidding, it's fine" takes its damage back."""
    if retracting and said.fine and not said.damage:
        into.damage = False
    into.merge(said)


def _clause_spans(sentence: str) -> list[tuple[int, int, str]]:
    """The clauses of a sentence, each with the break before it. "and" splits only where both
    sides say something: "the rug and the vase are fine" is one clause, "the lid is cracked and
    the base leaks" two."""
    spans, start, separator = [], 0, ""
    for match in _CLAUSE_BREAK.finditer(sentence):
        spans.append((start, match.start(), separator))
        start, separator = match.end(), match.group().strip()
    spans.append((start, len(sentence), separator))
    merged: list[tuple[int, int, str]] = []
    carried = ""
    for a, b, sep in spans:
        sep = (carried + " " + sep).strip() if carried else sep
        if not sentence[a:b].strip():
            carried = sep   # ", and": the comma and the "and" are one break
            continue
        carried = ""
        if merged and sep.lower() == "and":
            pa, pb, psep = merged[-1]
            if not _claims(sentence[pa:pb])[0].any() or not _claims(sentence[a:b])[0].any():
                merged[-1] = (pa, b, psep)
                continue
        merged.append((a, b, sep))
    return merged


def _blank(clause: str, spans: list[tuple[int, int]]) -> str:
    """The clause with the item names blanked out, so a name ("Cracked pepper") is no claim."""
    out, pos = [], 0
    for start, end in spans:
        out.append(clause[pos:start])
        out.append(" " * (end - start))
        pos = end
    out.append(clause[pos:])
    return "".join(out)


# -- the policy's own conditions -----------------------------------------------------------------

_POLICY_UNUSED = re.compile(r"\bunused\b|\bnot (?:been )?used\b|\bhave not used\b|\bnever used\b",
                            re.I)
_PARAGRAPH = re.compile(r"\n\s*(?:[-*]|\d+\.)\s+|\n\s*\n")


def policy_takes_back_unused_only(policy: str) -> bool:
    """Whether the policy's text limits change-of-mind returns to unused items."""
    return bool(_POLICY_UNUSED.search(policy or ""))


def policy_points(policy: str) -> list[str]:
    """The policy's points as plain sentences (list markers and markdown emphasis removed)."""
    text = "\n" + (policy or "")
    points = []
    for piece in _PARAGRAPH.split(text):
        piece = " ".join(piece.replace("**", "").split())
        if piece and not piece.startswith("#"):
            points.append(piece)
    return points


# Topics a question can be about, and the words of a policy point that answers it.
TOPICS = (
    (re.compile(r"\breturn|send \w+ back|unused|unopened|haven.t (?:opened|used|checked)"
                r"|doesn.t like|wrong size|keep it|deciding|change", re.I),
     re.compile(r"changed? (?:your |of )?mind|unused", re.I)),
    (re.compile(r"warranty|stops? working|after (?:your |the )?\d+ days|breaks|repair", re.I),
     re.compile(r"warranty", re.I)),
    (re.compile(r"shipping|delivery|postage", re.I), re.compile(r"shipping|delivery", re.I)),
    (re.compile(r"how long|how many days|deadline|window|time limit", re.I),
     re.compile(r"\bdays\b", re.I)),
    (re.compile(r"voucher|gift card|seconds|final sale", re.I), re.compile(r"final sale", re.I)),
    (re.compile(r"covered|gets? (?:damaged|broken)|replace|damaged by", re.I),
     re.compile(r"damaged", re.I)),
)
CARE = re.compile(r"\bwash|\bclean|\bcare\b|\bdry|\biron", re.I)
_WINDOW_POINT = re.compile(r"\b\d+ days\b", re.I)


def answer_points(questions: list[str], policy: str) -> tuple[list[str], bool]:
    """The policy's points that answer the customer's questions, the window point always, and
    whether any question was on a topic the policy speaks to."""
    asked = " ".join(questions)
    points = policy_points(policy)
    chosen = []
    topical = False
    for topic, answer in TOPICS:
        if topic.search(asked):
            topical = True
            chosen.extend(p for p in points if answer.search(p))
    chosen.extend(p for p in points if _WINDOW_POINT.search(p))
    return list(dict.fromkeys(chosen))[:4], topical


def unused_condition(policy: str) -> str:
    """The policy's sentence about used items or unused returns, to quote."""
    for point in policy_points(policy):
        if _POLICY_UNUSED.search(point):
            return point
    return ""


# -- units ----------------------------------------------------------------------------------------

_COUNT = counting.COUNT
_count_value = counting.count_value
# "one of the four tumblers", "two tumblers", "one pair of the socks", "all three tea towels":
# a count right before the item's name, with at most "(pair of) (of the) (four)" between.
_COUNT_BEFORE = re.compile(
    rf"\b({_COUNT})(?:\s+({_COUNT}))?(?:\s+pairs?)?(?:\s+out)?(?:\s+of)?"
    rf"(?:\s+(?:the|my|your|those|these))?"
    rf"(?:\s+({_COUNT}))?(?:\s+[a-z]+){{0,2}}?\s*$", re.I)
# "one of the two oolong tins" where the name the customer uses is not the shop's: a count of
# a part, with no item of the order named in it.
_COUNT_OF = re.compile(rf"\b({_COUNT})\s+of\s+(?:the|my|your|those|these)\b", re.I)
# "Tea towels: one has a stain", "the tumblers - two arrived chipped", "...and one arrived
# cracked": a count right after the name, before what it says of them.
_COUNT_AFTER = re.compile(
    rf"^\s*(?::|-|\u2013|\u2014|,|\band\b|\bbut\b|\bof which\b)+\s*({_COUNT})\b"
    rf"(?!\s+of\s+(?:the|my)\b\s+other)", re.I)
_ONLY_COUNT = re.compile(r"\b(?:only|just)\s+(one|two|three|four|five|six|seven|eight|nine|ten"
                         r"|\d{1,2})\b(?!\s+of\b)", re.I)
_ANY_COUNT = re.compile(rf"\b{_COUNT}\b", re.I)
_ONLY_BEFORE = re.compile(r"\b(?:only|just)\s+$", re.I)
# A count in a newer sentence that is not the count of damaged units: "of the four", "not
# four", "the other three".
_NOT_DAMAGED_COUNT = re.compile(r"\b(?:of|out of|from|not|other|remaining|than)\s+"
                                r"(?:the\s+|my\s+)?$", re.I)


def units_named(lines: list[dict[str, Any]], text: str, line_id: str,
                quantity: int) -> int | None:
    """How many units of one line the customer's own words count, or None if they count none.

    Read are a count attached to the item's name ("one of the four tumblers", "two tumblers",
    "Tea towels: one has a stain"); survivors, as the rest damaged ("only one of the four
    survived": three; counting.py); and, after a correction or in newer text (a later message,
    the customer's words over a quoted one they adopt), a count of damaged units that names no
    other item ("Update: only one of them is cracked"). "The other three are fine" names no
    item and counts nothing by itself. Where the words count the line more than once, the
    smallest count is taken: fewer units than meant is a reviewer's easy fix, more would be
    money not owed (issue 43: the newest text wins, and it never raises the count).
    """
    if quantity <= 1:
        return None
    aliases = _aliases(lines)
    skus = tuple(str(line["line"]) for line in lines if len(str(line["line"])) >= 3)
    counts: list[int] = []
    corrected = False
    last_named: str | None = None   # the item the last sentence that named one named last
    spans: list[tuple[int, int]] = []   # survivors' phrases, by position in the text
    offset = end = 0
    for sentence, _question in _sentences(text):
        offset = text.find(sentence, end)   # (sentences come in order and never overlap)
        end = offset + len(sentence)
        if sentence.strip() == NEWER:
            corrected = True
            continue
        mentions = _mentions(sentence, aliases, skus)
        standing = counting.survivors(sentence, quantity)
        spans += [(offset + s.start, offset + s.end) for s in standing]

        def survivors_count(at: int, standing=standing) -> bool:
            return any(s.start <= at < s.end for s in standing)

        for m in mentions:
            if m.line != line_id:
                continue
            window = max(0, m.start - 40)
            before = _COUNT_BEFORE.search(sentence[window:m.start])
            found, at = None, -1
            if before:
                # "one of the four tumblers": the first count is the units, the last the line's.
                found, at = _count_value(before.group(1), quantity), window + before.start(1)
                if before.group(1).lower() == "all" and (before.group(2) or before.group(3)):
                    found = _count_value(before.group(2) or before.group(3), quantity)
            else:
                after = _COUNT_AFTER.search(sentence[m.end:m.end + 30])
                if after:
                    found, at = _count_value(after.group(1), quantity), m.end + after.start(1)
            # A count of the survivors is not a count of the damaged units (read below).
            if found is not None and found >= 1 and not survivors_count(at):
                counts.append(min(found, quantity))
        for s in standing:
            # The item a survivors' count is about: the one named nearest before its verb,
            # else the one the sentence before named last ("... only one of them survived").
            named = [m.line for m in mentions if m.start < s.end]
            about = named[-1] if named else (None if mentions else last_named)
            damaged = s.damaged(quantity)
            if about == line_id and damaged is not None and damaged >= 1:
                counts.append(damaged)
        corrected = corrected or bool(CORRECTION.search(sentence))
        if corrected and not any(m.line != line_id for m in mentions):
            # "Three arrived cracked. Correction: it is just two": the later count, if smaller.
            for match in _ONLY_COUNT.finditer(sentence):
                found = _count_value(match.group(1), quantity)
                if counts and found is not None and 1 <= found and not survivors_count(
                        match.start(1)):
                    counts.append(found)
            counts += _newer_counts(sentence, quantity, survivors_count, bare=True)
        elif not mentions and last_named == line_id:
            # "All four cups arrived chipped. Looking properly, only three are": the item of
            # the sentence before, narrowed, marker or not.
            counts += _newer_counts(sentence, quantity, survivors_count, only=True)
        if mentions:
            last_named = mentions[-1].line
    if not counts:
        # No count on the name itself, but "one of the ..." somewhere: the customer counts
        # part of something, so the smallest such count is the most that is safe to assume.
        for match in _COUNT_OF.finditer(text):
            found = _count_value(match.group(1), quantity)
            if any(a <= match.start() < b for a, b in spans):
                continue   # "only one of the ... survived" counts survivors
            if found is not None and 1 <= found < quantity and match.group(1).lower() not in (
                    "both", "all"):
                counts.append(found)
    return min(counts) if counts else None


def _newer_counts(sentence: str, quantity: int, survivors_count: Any, bare: bool = False,
                  only: bool = False) -> list[int]:
    """Counts of damaged units in a correction or a newer message: a count in a clause that
    claims damage ("only one of them is cracked", "two of them are torn, not four") or, with
    ``bare``, claims nothing ("Update: it's three"); not a count of the whole, of the others,
    of a denial or of the survivors. With ``only``, just "only N" and "just N"."""
    found = []
    for a, b, _separator in _clause_spans(sentence):
        clause = sentence[a:b]
        said, hypothetical = _claims(clause)
        if hypothetical or not (said.damage or bare and not said.any()):
            continue   # (a count of "the other three" is skipped below, not the clause)
        for match in _ANY_COUNT.finditer(clause):
            if _NOT_DAMAGED_COUNT.search(clause, max(0, match.start() - 16), match.start()):
                continue
            if only and not _ONLY_BEFORE.search(clause, max(0, match.start() - 8),
                                                match.start()):
                continue
            value = _count_value(match.group(), quantity)
            if value is not None and 1 <= value and not survivors_count(a + match.start()):
                found.append(min(value, quantity))
    return found
