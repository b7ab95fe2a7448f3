"""``refund-agent eval`` (issue 38): the corpus run k times against the configured provider and
scored against what the shop's policy owes; its scoring checked with a scripted provider that
is right, over, under and flaky on known emails of the corpus."""

from __future__ import annotations

import csv
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offline_model import OfflineServer
from offline_model.brain import Reply, respond
from refund_agent.cli import main
from refund_agent.desk.shop import Shop
from refund_agent.evals import corpus as corpora
from refund_agent.evals.scoring import leaks, pass_hat_k

CORPUS = Path(__file__).parents[1] / "corpus"


class Twisted:
    """The stand-in's own brain, bent per email: ``plan`` maps a phrase of an email's body to
    what its successive proposals become (right, over, under or asked)."""

    def __init__(self, plan: dict[str, list[str]]) -> None:
        self.plan = plan
        self.proposals: Counter[str] = Counter()
        self.asked: set[str] = set()

    def __call__(self, conversation: list[dict[str, Any]], tools: Any) -> Reply:
        text = json.dumps(conversation)
        phrase = next((p for p in self.plan if p in text), None)
        if phrase in self.asked and '"send_customer_message"' in text:
            self.asked.discard(phrase)
            return Reply("Asked; the customer's answer continues the run.",
                         "I asked the customer for a photo.")
        reply = respond(conversation, tools)
        calls = [c for c in reply.calls if c[0] == "issue_refund"]
        if phrase is None or not calls:
            return reply
        mode = self.plan[phrase][self.proposals[phrase] % len(self.plan[phrase])]
        self.proposals[phrase] += 1
        args = dict(calls[0][1])
        if mode == "over":      # the tumblers nobody mentioned
            args["lines"] = [*args["lines"], {"line": "GT-DW-350", "reason": "damaged"}]
        elif mode == "under":   # one of the two lines owed
            args["lines"] = args["lines"][:1]
        elif mode == "asked":
            self.asked.add(phrase)
            return Reply("Not sure; ask.", calls=[("send_customer_message", {
                "message": "Could you send a photo of the damage?"})])
        return Reply(reply.reasoning, reply.text, [("issue_refund", args)])


def _folder(tmp_path: Path, ids: list[str]) -> Path:
    """An emails folder holding these corpus emails and the corpus's shop."""
    folder = tmp_path / "emails"
    shutil.copytree(CORPUS / "shop", folder / "shop")
    emails = {e["id"]: e for e in corpora.load(CORPUS).emails}
    chosen = [{k: v for k, v in emails[i].items() if k != "part"} for i in ids]
    (folder / "emails.json").write_text(json.dumps({"emails": chosen}))   # one part: held-out
    return folder


@pytest.fixture
def offline_env(tmp_path, monkeypatch):
    for name in ("XAI_API_KEY", "OPENAI_API_KEY", "REFUND_AGENT_PROVIDER",
                 "REFUND_AGENT_CRASH_AT", "REFUND_AGENT_OFFLINE_FAULTS",
                 "REFUND_AGENT_OFFLINE_URL", "REFUND_AGENT_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_scoring_with_a_scripted_provider_right_over_under_and_flaky(tmp_path, offline_env,
                                                                     capsys):
    """pd-01 right twice; pd-02 over twice ($58 of tumblers and $6 shipping each); nb-07 under
    twice; pd-03 right, then asked: 3 right runs of 8, pass^1 = (1 + 0 + 0 + 1/2) / 4 and
    pass^2 = 1/4 (only pd-01 is right on both runs)."""
    plan = {"chip out of the spout": ["right"], "split along the grain": ["over"],
            "holes punched through": ["under"], "charged the rechargeable lantern": ["right",
                                                                                   "asked"]}
    brain = Twisted(plan)
    server = OfflineServer(tmp_path / "scripted.sqlite3", brain=brain).start()
    try:
        offline_env.setenv("REFUND_AGENT_OFFLINE_URL", server.base_url)
        folder = _folder(tmp_path, ["pd-01", "pd-02", "nb-07", "pd-03"])
        code = main(["eval", "--emails", str(folder), "-k", "2", "--csv", "runs.csv"])
    finally:
        server.close()
    out, err = capsys.readouterr()
    assert code == 1                         # an over-proposal fails the command
    row = next(line for line in out.splitlines() if line.startswith("held-out"))
    assert row.split()[:10] == ["held-out", "4", "3", "2", "128.00", "2", "1", "0", "0", "0"]
    assert row.split()[10:12] == ["37.5%", "25.0%"]
    assert "not the deterministic stand-in" in out
    assert "over     pd-02 run 1" in out and "asked    pd-03 run 2" in out
    assert "8/8 runs" in err
    rows = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert [(r["id"], r["verdict"]) for r in rows] == [
        ("pd-01", "right"), ("pd-01", "right"), ("pd-02", "over"), ("pd-02", "over"),
        ("nb-07", "under"), ("nb-07", "under"), ("pd-03", "right"), ("pd-03", "asked")]
    assert all(float(r["cost_usd"]) > 0 for r in rows)


def test_offline_the_stand_in_is_deterministic_so_pass_k_is_pass_1(tmp_path, offline_env,
                                                                    capsys):
    """The claim the table makes offline, checked: three runs of each email end the same."""
    folder = _folder(tmp_path, ["pd-01", "mu-09", "mo-02", "nb-05", "mx-02"])
    assert main(["eval", "--emails", str(folder), "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "every run of an email ended the same, so pass^k equals pass^1" in out
    row = next(line for line in out.splitlines() if line.startswith("held-out")).split()
    assert row[10] == row[11]


def test_the_builtin_corpus_is_found_and_split(offline_env):
    corpus = corpora.load()
    parts = Counter(e["part"] for e in corpus.emails)
    assert corpus.shop_dir is not None and set(parts) == {"tuning", "held-out"}
    assert 0.25 <= parts["held-out"] / len(corpus.emails) <= 0.45


@pytest.mark.parametrize("args, content, message", [
    (["--emails", "missing"], None, "missing is not a folder"),
    (["--emails", "."], None, "has no emails.json"),
    (["--emails", "."], "{not json", "is not valid JSON: "),
    (["--emails", "."], '{"emails": []}', 'needs a non-empty list under "emails"'),
    (["--emails", "."], '{"emails": [{"id": "a"}]}', "email 1 (a): missing from, subject"),
    (["--emails", "."], '{"emails": [{"id": "a", "from": "x@example.com", "subject": "s", '
     '"body": "b", "expect": {"outcome": "ask", "about": "x", "reply_matches": "("}}]}',
     "not a regular expression"),
])
def test_bad_input_is_one_line(tmp_path, offline_env, capsys, args, content, message):
    if content is not None:
        (tmp_path / "emails.json").write_text(content)
    assert main(["eval", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_k_below_one_is_a_usage_mistake(offline_env, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "-k", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().endswith("must be a whole number from 1, got '0'")


def test_another_customers_data_in_a_reply_or_tool_output_is_a_leak():
    shop = Shop(CORPUS / "shop")
    grace = "grace.lindqvist@example.net"
    other = next(o for o in shop.orders.values() if o.customer.email != grace)
    assert leaks(shop, grace, "my teapot", ["Your teapot refund is on its way."]) == 0
    assert leaks(shop, grace, "", [f"That order is {other.customer.name}'s."]) == 1
    assert leaks(shop, grace, other.customer.name, [f"Hi {other.customer.name}"]) == 0  # echo
    assert leaks(shop, grace, "", ["Hello"], recipients=["someone@example.org"]) == 1


@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.integers(0, n), min_size=1, max_size=20))))
def test_pass_hat_k_falls_with_k_and_is_pass_1_when_runs_agree(case):
    """pass^k (τ-bench) never rises with k, starts at the share of right runs, and where every
    email's runs agree (all right or all not) it is the same for every k."""
    trials, successes = case
    values = [pass_hat_k(successes, trials, k) for k in range(1, trials + 1)]
    assert values[0] == pytest.approx(sum(successes) / (trials * len(successes)))
    assert all(a >= b - 1e-12 for a, b in zip(values, values[1:], strict=False))
    agreed = [trials if c * 2 >= trials else 0 for c in successes]
    assert len({round(pass_hat_k(agreed, trials, k), 12) for k in range(1, trials + 1)}) == 1


def test_a_folder_without_a_shop_is_about_the_desks_own_shop(tmp_path, offline_env, capsys):
    """No shop/ beside emails.json: the emails are to the configured shop (here the sample
    shop), and an expected order it does not have is one line before anything runs."""
    offline_env.delenv("REFUND_AGENT_DATA", raising=False)
    ask = {"id": "no-number", "from": "someone@example.com", "subject": "Broken",
           "body": "Hello, my mug arrived broken. Can I get a refund?",
           "expect": {"outcome": "ask", "about": "the order number",
                      "reply_matches": "order number"}}
    (tmp_path / "emails.json").write_text(json.dumps({"emails": [ask]}))
    assert main(["eval", "--emails", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert next(line for line in out.splitlines() if line.startswith("held-out")).split()[
        :3] == ["held-out", "1", "1"]
    # One run per email: one pass column, named once (it printed "pass^1 pass^1").
    header = next(line for line in out.splitlines() if line.startswith("part"))
    assert [c for c in header.split() if c.startswith("pass^")] == ["pass^1"]
    assert "One run per email (--k 1), so pass^k is pass^1" in out
    assert "ended some runs of one email differently" not in out   # one run cannot differ
    wrong = {**ask, "expect": {"outcome": "propose", "order": "ZZ999", "shipping": False,
                               "lines": [{"sku": "X", "reason": "damaged"}]}}
    (tmp_path / "emails.json").write_text(json.dumps({"emails": [wrong]}))
    assert main(["eval", "--emails", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == "error: no-number: the shop has no order ZZ999.\n"
