"""The brain corpus: emails the stand-in has never seen, to a shop it has never seen.

Issue 24 asks for a stand-in that reads what the customer meant, not the keywords it matched.
This is the yardstick, written before the brain changes: ``tests/corpus/emails.json`` holds
emails to an unseen shop (``tests/corpus/shop``, sharing no name, sku or order id with
``data/``), each with the outcome its shop's written policy calls for, grouped by the pattern it
probes. Every email runs through the real agent and the real openai SDK against the offline
stand-in, a fresh run each, and its outcome is classified:

- correct: the expected lines with the expected reasons (and shipping exactly when owed), or,
  where nothing is owed, no proposal and a reply that says what the expectation says;
- over: any line, reason or amount beyond what the policy owes for what the customer said
  (money a reviewer would have to catch);
- safe: less than is owed, or a question instead of a proposal; nothing paid wrongly;
- wrong: nothing over, but the reply is not the one owed (a refusal where a refund is due, a
  refusal for the wrong reason, no reply at all).

The test fails on any over-proposal not listed in KNOWN_OVER_PROPOSALS, and on a listed email
that no longer over-proposes: take it off the list, so the list only shrinks. The score table
by group is printed (``pytest -s``) and written to ``output/brain-corpus-score.txt``.

Units: where a customer counts units of a multi-unit line ("one of the four tumblers"), the
expectation records them. The approval's lines carry units (``ApprovalLine.units``, issue 24),
so units are compared like reasons, and a unit too many is an over-proposal. (Before units
existed, a whole line counted as the expected line and the money it paid for units nobody
mentioned was reported apart, the "$ units*" column, which is 0 now.)
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from refund_agent import Agent, RunStatus, Settings
from refund_agent.config import PROJECT_ROOT
from refund_agent.desk.policy import SHIPPING, quote_refund
from refund_agent.desk.shop import Order, PolicyTerms, Shop, to_cents
from refund_agent.models import ApprovalLine

CORPUS = Path(__file__).parents[1] / "corpus"
SHOP_DIR = CORPUS / "shop"
EMAILS: list[dict[str, Any]] = json.loads(
    (CORPUS / "emails.json").read_text(encoding="utf-8"))["emails"]
REPORT = PROJECT_ROOT / "output" / "brain-corpus-score.txt"

# Emails today's brain over-proposes on, each with the pattern it fails. When the brain learns
# to read one of them, its test fails until the entry is removed: the list only shrinks.
KNOWN_OVER_PROPOSALS: dict[str, str] = {
    # Empty since the reader (offline_model/reader.py) replaced the keyword matcher:
    # the 67 listed here before (damage spread across a clause, shared words in item names,
    # denials, quoted text, unnamed damage, authority notes, HTML, questions, used items,
    # mixed reasons) all read correctly now. A new entry needs a pattern and a reason.
}

VERDICTS = ("correct", "over", "safe", "wrong")
#: Whether the approval's lines say how many units they refund (issue 24's quantity feature).
UNITS_SUPPORTED = "units" in ApprovalLine.model_fields


# -- what the policy owes for what the customer said ----------------------------------------------

def _fee_cents(terms: PolicyTerms, cents: int, units: int) -> int:
    """The return fee a changed-mind line pays, charged per item as shop.json says."""
    if terms.return_fee_per == "item":
        return min(terms.return_fee_cents * units, cents)
    return 0   # charged once per refund: shared below by owed_cents


def owed_cents(order: Order, terms: PolicyTerms, expect: dict[str, Any], *,
               whole_lines: bool) -> dict[str, int]:
    """What the written policy owes for the expected lines: {sku or SHIPPING: cents}.

    Damaged units refund their price; unused units returned for a change of mind their price
    less the return fee; shipping only when every unit of every line is (or was) refunded as
    damaged. With ``whole_lines`` every expected line counts all its units, which is what a
    tool without units can refund.
    """
    owed: dict[str, int] = {}
    damaged_units: dict[str, int] = {}
    returned: list[str] = []
    for line in expect.get("lines", []):
        item = order.item(line["sku"])
        assert item is not None, f"{order.order_id} has no line {line['sku']}"
        units = item.quantity if whole_lines else line.get("units", item.quantity)
        cents = to_cents(item.price) * units
        if line["reason"] == "damaged":
            owed[item.sku] = cents
            damaged_units[item.sku] = units
        else:
            owed[item.sku] = cents - _fee_cents(terms, cents, units)
            returned.append(item.sku)
    if terms.return_fee_per == "refund" and returned:
        fee = terms.return_fee_cents
        subtotal = sum(owed[sku] for sku in returned)
        for sku in returned:   # in proportion to price, as policy._return_fees shares it
            owed[sku] -= fee * owed[sku] // subtotal if subtotal else 0
    earlier = {x.line for past in order.refunds for x in past.lines if x.reason == "damaged"}
    every_unit = all(item.sku in earlier or damaged_units.get(item.sku) == item.quantity
                     for item in order.items)
    if expect.get("lines") and order.shipping_cents and every_unit:
        owed[SHIPPING] = order.shipping_cents
    return owed


# -- what the agent did, and how it compares ------------------------------------------------------

@dataclass(frozen=True)
class Proposed:
    line: str
    reason: str
    amount_cents: int
    units: int | None = None


@dataclass
class Outcome:
    """What one run ended with: its status, the proposal if any, the emails it sent."""

    status: str
    order_id: str | None = None
    lines: list[Proposed] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class Verdict:
    verdict: str
    over_cents: int = 0
    unit_excess_cents: int = 0   # paid for units nobody mentioned, while units aren't compared
    detail: str = ""


def _asks(text: str) -> bool:
    return "?" in text


def classify(expect: dict[str, Any], outcome: Outcome, shop: Shop,
             units_supported: bool = UNITS_SUPPORTED) -> Verdict:
    """Compare one outcome with its expectation (see the module docstring for the verdicts)."""
    said = "\n\n".join(outcome.replies)
    proposed = ", ".join(f"{p.line}={p.reason} ${p.amount_cents / 100:.2f}"
                         + (f" x{p.units}" if p.units is not None else "")
                         for p in outcome.lines)
    paid = sum(p.amount_cents for p in outcome.lines)
    if expect["outcome"] != "propose":
        if outcome.lines:
            return Verdict("over", paid, detail=f"proposed {proposed} on {outcome.order_id}; "
                           f"expected {expect['outcome']}: {expect['about']}")
        if said and re.search(expect["reply_matches"], said, re.I) and (
                expect["outcome"] != "ask" or _asks(said)):
            return Verdict("correct")
        if _asks(said):
            return Verdict("safe", detail=f"asked instead ({expect['outcome']}: "
                                          f"{expect['about']} expected)")
        return Verdict("wrong", detail=f"expected {expect['outcome']}: {expect['about']}; "
                       f"{'replied: ' + one_line(said) if said else outcome.error or 'no reply'}")

    order = shop.order(expect["order"])
    assert order is not None, expect["order"]
    if not outcome.lines:
        if _asks(said):
            return Verdict("safe", detail="asked instead of proposing")
        return Verdict("wrong", detail="no proposal and no question: "
                       + (one_line(said) if said else outcome.error or "no reply"))
    if outcome.order_id != order.order_id:
        return Verdict("over", paid, detail=f"proposed {proposed} on {outcome.order_id}, "
                       f"expected {order.order_id}")
    owed = owed_cents(order, shop.terms, expect, whole_lines=not units_supported)
    by_units = owed_cents(order, shop.terms, expect, whole_lines=False)
    reasons = {line["sku"]: line["reason"] for line in expect["lines"]}
    if SHIPPING in owed:
        reasons[SHIPPING] = "shipping"
    over = sum(max(0, p.amount_cents - owed.get(p.line, 0)) for p in outcome.lines)
    beyond = [p.line for p in outcome.lines if p.line not in reasons]
    if over or beyond:
        return Verdict("over", over, detail=f"proposed {proposed}; owed "
                       + ", ".join(f"{k}=${v / 100:.2f}" for k, v in owed.items()))
    same = ({(p.line, p.reason) for p in outcome.lines} == set(reasons.items())
            and len(outcome.lines) == len(reasons))
    if units_supported:
        wanted = {line["sku"]: line.get("units") for line in expect["lines"]}
        same = same and all(wanted.get(p.line) in (None, p.units) for p in outcome.lines
                            if p.line != SHIPPING)
    if not same:
        return Verdict("safe", detail=f"proposed less: {proposed}")
    excess = 0 if units_supported else sum(owed.values()) - sum(by_units.values())
    return Verdict("correct", unit_excess_cents=excess)


def one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- running the corpus ---------------------------------------------------------------------------

def _outcome(agent: Agent, email: dict[str, Any]) -> Outcome:
    """A fresh run of one email, advanced until it waits for a person or finishes."""
    run = agent.start(email["from"], email["body"], subject=email["subject"],
                      sender_name=email["from_name"])
    run = agent.advance(run.id)
    signature = agent.shop.info.signature
    replies = [step.data.get("body", "").replace(signature, "").strip()
               for step in agent.store.steps(run.id) if step.kind == "message"]
    outcome = Outcome(status=str(run.status), replies=replies,
                      error=None if run.status in (RunStatus.WAITING, RunStatus.DONE)
                      else f"run ended {run.status}")
    approvals = agent.store.run_approvals(run.id)
    if approvals:
        approval = approvals[-1]
        outcome.order_id = approval.order_id
        outcome.lines = [Proposed(line.line, line.reason, line.amount_cents,
                                  getattr(line, "units", None)) for line in approval.lines]
        # A pending proposal holds its lines; rejected, it frees them, so the next email about
        # the same order starts from the shop's own ledger whatever ran before it.
        if approval.status == "pending":
            agent.decide(approval.id, approve=False, by="brain corpus",
                         note="Corpus run: read, never paid.")
    return outcome


@dataclass
class CorpusRun:
    results: dict[str, tuple[dict[str, Any], Outcome, Verdict]]
    seconds: float
    table: str


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> CorpusRun:
    """Every email of the corpus, run once, in one process, one output folder, one server."""
    with pytest.MonkeyPatch.context() as env:
        for name in ("XAI_API_KEY", "REFUND_AGENT_CRASH_AT", "CRASH_AFTER_REFUND",
                     "REFUND_AGENT_OFFLINE_FAULTS", "REFUND_AGENT_OFFLINE_LATENCY"):
            env.delenv(name, raising=False)
        output = tmp_path_factory.mktemp("brain-corpus") / "output"
        agent = Agent(Settings(api_key="", data_dir=SHOP_DIR, output_dir=output,
                               max_retries=2, timeout=30.0))
        started = time.monotonic()
        results = {}
        for email in EMAILS:
            outcome = _outcome(agent, email)
            results[email["id"]] = (email, outcome, classify(email["expect"], outcome,
                                                             agent.shop))
        seconds = time.monotonic() - started
    table = score_table(results, seconds)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(table, encoding="utf-8")
    return CorpusRun(results, seconds, table)


def score_table(results: dict[str, tuple[dict[str, Any], Outcome, Verdict]],
                seconds: float) -> str:
    """The score by pattern group, then every email that was not correct and why."""
    groups: dict[str, Counter] = defaultdict(Counter)
    money: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for email, _outcome, verdict in results.values():
        for key in (email["group"], "ALL"):
            groups[key][verdict.verdict] += 1
            money[key][0] += verdict.over_cents
            money[key][1] += verdict.unit_excess_cents
    header = (f"{'group':24} {'n':>4} {'correct':>8} {'over':>5} {'safe':>5} {'wrong':>6} "
              f"{'$ over':>9} {'$ units*':>9}")
    rows = [f"Brain corpus: {len(results)} emails in {seconds:.1f} s "
            f"(units {'compared' if UNITS_SUPPORTED else 'not yet compared'})", header,
            "-" * len(header)]
    for group in sorted(groups, key=lambda g: (g == "ALL", g)):
        c = groups[group]
        if group == "ALL":
            rows.append("-" * len(header))
        rows.append(f"{group:24} {sum(c.values()):>4} {c['correct']:>8} {c['over']:>5} "
                    f"{c['safe']:>5} {c['wrong']:>6} {money[group][0] / 100:>9.2f} "
                    f"{money[group][1] / 100:>9.2f}")
    rows.append("* paid for units the customer did not mention, counted as correct while "
                "units are not compared" + (" (they are)" if UNITS_SUPPORTED else ""))
    unowed = [v for e, _o, v in results.values()
              if v.verdict == "over" and e["expect"]["outcome"] != "propose"]
    rows.append(f"Over-proposals where nothing is owed (ask, decline or answer expected): "
                f"{len(unowed)}, ${sum(v.over_cents for v in unowed) / 100:.2f}")
    rows.append("")
    for verdict_name in ("over", "wrong", "safe"):
        for eid, (email, _outcome, verdict) in results.items():
            if verdict.verdict == verdict_name:
                rows.append(f"{verdict_name:5} {eid:7} [{email['group']}] {verdict.detail}")
    return "\n".join(rows) + "\n"


# -- the tests ------------------------------------------------------------------------------------

def test_the_corpus_is_large_grouped_and_consistent_with_its_shop():
    """At least 100 emails, every group several, and every expectation one the shop's policy
    code allows: right order and sender, lines that exist and are not final sale, units within
    the line, shipping exactly when the policy owes it."""
    shop = Shop(SHOP_DIR)
    assert len(EMAILS) >= 100
    ids = [e["id"] for e in EMAILS]
    assert len(set(ids)) == len(ids)
    sizes = Counter(e["group"] for e in EMAILS)
    assert len(sizes) >= 16 and all(n >= 2 for n in sizes.values()), sizes
    sample = {s.sender for s in Shop(PROJECT_ROOT / "data").samples.values()}
    for email in EMAILS:
        expect, where = email["expect"], email["id"]
        assert email["from"] not in sample, where
        assert expect["outcome"] in ("propose", "ask", "decline", "answer"), where
        if expect["outcome"] != "propose":
            re.compile(expect["reply_matches"])
            assert expect["about"], where
            continue
        order = shop.order(expect["order"])
        assert order is not None and order.customer.email == email["from"], where
        for line in expect["lines"]:
            item = order.item(line["sku"])
            assert item is not None and not item.final_sale, where
            assert line["reason"] in ("damaged", "changed_mind"), where
            assert "units" not in line or 1 <= line["units"] <= item.quantity > 1, where
        whole = owed_cents(order, shop.terms, expect, whole_lines=True)
        quote = quote_refund(order, shop.terms,
                             [(line["sku"], line["reason"]) for line in expect["lines"]],
                             {}, shop.today)
        assert not isinstance(quote, str), f"{where}: {quote}"
        assert {q.line: q.amount_cents for q in quote.lines} == whole, where
        by_units = owed_cents(order, shop.terms, expect, whole_lines=False)
        assert (SHIPPING in by_units) == expect["shipping"], where


def test_the_classifier_tells_over_from_under():
    """The verdicts themselves, on hand-made outcomes: the harness must be able to fail."""
    shop = Shop(SHOP_DIR)
    expect = {"outcome": "propose", "order": "RT20602", "shipping": False,
              "lines": [{"sku": "GT-DW-350", "reason": "damaged", "units": 1}]}
    tumblers = Proposed("GT-DW-350", "damaged", 5800)
    tray = Proposed("ST-BMB-L", "damaged", 2400)

    def verdict(*lines: Proposed, replies=(), units=False, order="RT20602") -> Verdict:
        outcome = Outcome("waiting", order if lines else None, list(lines), list(replies))
        return classify(expect, outcome, shop, units_supported=units)

    assert verdict(tumblers).verdict == "correct"
    assert verdict(tumblers).unit_excess_cents == 4350
    assert (verdict(tumblers, tray).verdict, verdict(tumblers, tray).over_cents) == ("over", 2400)
    assert verdict(tumblers, order="RT20581").verdict == "over"
    assert verdict(Proposed("GT-DW-350", "changed_mind", 4200)).verdict == "safe"
    assert verdict(replies=["Which item is broken?"]).verdict == "safe"
    assert verdict(replies=["I can't offer a refund."]).verdict == "wrong"
    assert verdict(Proposed("GT-DW-350", "damaged", 1450, 1), units=True).verdict == "correct"
    four = verdict(Proposed("GT-DW-350", "damaged", 5800, 4), units=True)
    assert (four.verdict, four.over_cents) == ("over", 4350)
    # Where nothing is owed, any proposal is over; the reply must say what was expected.
    decline = {"outcome": "decline", "about": "window", "reply_matches": "window"}
    assert classify(decline, Outcome("waiting", "RT20602", [tray]), shop).verdict == "over"
    assert classify(decline, Outcome("done", replies=["Past the 21-day window."]),
                    shop).verdict == "correct"
    assert classify(decline, Outcome("done", replies=["What happened?"]),
                    shop).verdict == "safe"
    assert classify(decline, Outcome("done"), shop).verdict == "wrong"


def test_the_score_table_is_printed_and_written(corpus):
    print("\n" + corpus.table)
    assert REPORT.read_text(encoding="utf-8") == corpus.table
    assert sum(1 for _ in corpus.results) == len(EMAILS)
    # The seconds are reported in the table, not judged: a wall-clock budget failed on a busy
    # machine ("the corpus took 63 s") with nothing wrong. A brain that reads in more than
    # linear time fails test_brain_linear.py (by CPU time); its speed is bench/brain_text.py.


def test_known_over_proposals_are_in_the_corpus():
    assert set(KNOWN_OVER_PROPOSALS) <= {e["id"] for e in EMAILS}


@pytest.mark.parametrize("email_id", [e["id"] for e in EMAILS])
def test_no_email_is_over_proposed(corpus, email_id):
    email, outcome, verdict = corpus.results[email_id]
    if email_id in KNOWN_OVER_PROPOSALS:
        assert verdict.verdict == "over", (
            f"{email_id} no longer over-proposes ({verdict.verdict}): remove it from "
            f"KNOWN_OVER_PROPOSALS in {Path(__file__).name}")
    else:
        assert verdict.verdict != "over", (
            f"{email_id} [{email['group']}] over-proposed: {verdict.detail}")
