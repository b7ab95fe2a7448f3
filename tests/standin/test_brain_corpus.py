"""The brain corpus: emails the stand-in has never seen, to a shop it has never seen.

Issue 24 asks for a stand-in that reads what the customer meant, not the keywords it matched.
This is the yardstick, written before the brain changes: ``tests/corpus/emails.json`` holds
emails to an unseen shop (``tests/corpus/shop``, sharing no name, sku or order id with
``data/``), each with the outcome its shop's written policy calls for, grouped by the pattern it
probes. Every email runs through the real agent and the real openai SDK against the offline
stand-in, a fresh run each (refund_agent/evals/runner.py:run_email, what `refund-agent eval`
runs), and its outcome is classified by refund_agent/evals/scoring.py:classify:

- right: the expected lines with the expected reasons and units (shipping exactly when owed),
  or, where nothing is owed, no proposal and a reply that says what the expectation says;
- over: any line, reason, unit or amount beyond what the policy owes for what the customer said
  (money a reviewer would have to catch);
- under, asked: less than is owed, or a question (or the ticket raised to a person) instead;
  nothing paid wrongly (the "safe" of issue 24);
- declined, failed: nothing over, but the reply is not the one owed (a refusal where a refund is
  due, a refusal for the wrong reason), or no reply at all (the "wrong" of issue 24).

Issue 38 split the corpus: a held-out part (``"part": "held-out"``, a third of the first 159
emails by a fixed hash of their ids, refund_agent/evals/corpus.py:hashed_part) that the reader
is never tuned on. The test fails on any over-proposal not listed in KNOWN_OVER_PROPOSALS, and
on a listed email that no longer over-proposes: take it off the list, so the list only shrinks.
The score table by group and part is printed (``pytest -s``) and written to
``output/brain-corpus-score.txt``.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from refund_agent import Settings
from refund_agent.config import PROJECT_ROOT
from refund_agent.desk import Agent
from refund_agent.desk.policy import SHIPPING, quote_refund
from refund_agent.desk.shop import Shop
from refund_agent.evals import corpus as corpora
from refund_agent.evals.runner import run_email
from refund_agent.evals.scoring import VERDICTS, Outcome, Proposed, Verdict, classify, owed_cents

CORPUS = Path(__file__).parents[1] / "corpus"
SHOP_DIR = CORPUS / "shop"
EMAILS: list[dict[str, Any]] = corpora.load(CORPUS).emails
REPORT = PROJECT_ROOT / "output" / "brain-corpus-score.txt"

# Emails today's brain over-proposes on, each with the pattern it fails. When the brain learns
# to read one of them, its test fails until the entry is removed: the list only shrinks.
KNOWN_OVER_PROPOSALS: dict[str, str] = {
    # Empty since the reader (offline_model/reader.py) replaced the keyword matcher:
    # the 67 listed here before (damage spread across a clause, shared words in item names,
    # denials, quoted text, unnamed damage, authority notes, HTML, questions, used items,
    # mixed reasons) all read correctly now. A new entry needs a pattern and a reason.
}

# -- running the corpus ---------------------------------------------------------------------------

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
            outcome = run_email(agent, email)
            results[email["id"]] = (email, outcome, classify(email["expect"], outcome,
                                                             agent.shop))
        seconds = time.monotonic() - started
    table = score_table(results, seconds)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(table, encoding="utf-8")
    return CorpusRun(results, seconds, table)


def score_table(results: dict[str, tuple[dict[str, Any], Outcome, Verdict]],
                seconds: float) -> str:
    """The score by part and by pattern group, then every email that was not right and why."""
    groups: dict[str, Counter] = defaultdict(Counter)
    money: dict[str, int] = defaultdict(int)
    for email, _outcome, verdict in results.values():
        for key in (email["group"], f"PART {email['part']}", "ALL"):
            groups[key][verdict.verdict] += 1
            money[key] += verdict.over_cents
    header = f"{'group':24} {'n':>4} " + " ".join(f"{v:>8}" for v in VERDICTS) + f" {'$ over':>9}"
    rows = [f"Brain corpus: {len(results)} emails in {seconds:.1f} s", header, "-" * len(header)]
    for group in sorted(groups, key=lambda g: (g == "ALL", g.startswith("PART "), g)):
        c = groups[group]
        if group == "ALL" or (group.startswith("PART ") and rows[-1][:5] != "PART "):
            rows.append("-" * len(header))
        rows.append(f"{group:24} {sum(c.values()):>4} " + " ".join(f"{c[v]:>8}" for v in VERDICTS)
                    + f" {money[group] / 100:>9.2f}")
    unowed = [v for e, _o, v in results.values()
              if v.verdict == "over" and e["expect"]["outcome"] != "propose"]
    rows.append(f"Over-proposals where nothing is owed (ask, decline or answer expected): "
                f"{len(unowed)}, ${sum(v.over_cents for v in unowed) / 100:.2f}")
    rows.append("")
    for verdict_name in VERDICTS[1:]:
        for eid, (email, _outcome, verdict) in results.items():
            if verdict.verdict == verdict_name:
                rows.append(f"{verdict_name:8} {eid:7} [{email['part']}/{email['group']}] "
                            f"{verdict.detail}")
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
        # The split made before the reader was tuned for issue 38 stays put; an email added
        # since says which issue added it and was put in its part when written.
        assert email["part"] == corpora.hashed_part(where) or "added_for" in email, where
        assert corpora.email_problem(email) is None, where
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

    def verdict(*lines: Proposed, replies=(), order="RT20602") -> Verdict:
        outcome = Outcome("waiting", order if lines else None, list(lines), list(replies))
        return classify(expect, outcome, shop)

    assert verdict(Proposed("GT-DW-350", "damaged", 1450, 1)).verdict == "right"
    all_four = verdict(tumblers)   # units None: the whole line, 3 units nobody mentioned
    assert (all_four.verdict, all_four.over_cents) == ("over", 4350)
    assert (verdict(tumblers, tray).verdict, verdict(tumblers, tray).over_cents) == ("over", 6750)
    assert verdict(tumblers, order="RT20581").verdict == "over"
    assert verdict(Proposed("GT-DW-350", "changed_mind", 1050, 1)).verdict == "under"
    assert verdict(replies=["Which item is broken?"]).verdict == "asked"
    assert verdict(replies=["I can't offer a refund."]).verdict == "declined"
    assert verdict().verdict == "failed"
    four = verdict(Proposed("GT-DW-350", "damaged", 5800, 4))
    assert (four.verdict, four.over_cents) == ("over", 4350)
    # Where nothing is owed, any proposal is over; the reply must say what was expected.
    decline = {"outcome": "decline", "about": "window", "reply_matches": "window"}
    assert classify(decline, Outcome("waiting", "RT20602", [tray]), shop).verdict == "over"
    assert classify(decline, Outcome("done", replies=["Past the 21-day window."]),
                    shop).verdict == "right"
    assert classify(decline, Outcome("done", replies=["What happened?"]),
                    shop).verdict == "asked"
    assert classify(decline, Outcome("done", replies=["Refunded."]), shop).verdict == "declined"
    assert classify(decline, Outcome("done"), shop).verdict == "failed"


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
