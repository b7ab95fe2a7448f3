"""Money invariants over generated shops and generated histories (a Hypothesis state machine).

The README promises that the agent never pays more than the policy allows and pays each allowed
amount once. Hand-picked scenarios missed the ways that broke before (an item refunded twice,
an order id spelled "#A1043" escaping the per-order total), so this test generates them: random
shops (prices in cents, quantities, final-sale lines, shipping, delivery ages, return fees per
item or per refund) and random histories against them:

- a scripted model calls ``issue_refund`` with arbitrary lines, reasons, amounts (right, wrong,
  NaN, a boolean, a string) and order-id spellings, sometimes twice in one run;
- people approve, approve only some lines, reject, and race each other to decide; approvers
  with a limit split refunds (approve some lines, then the re-proposed rest; ask, the customer
  replies, a new proposal) and a lead decides what they may not;
- the shop's export raises a price between a proposal and its decision, and the model asks for
  the shipping on its own;
- the process "dies" at a named crash point, and runs are resumed.

After every step the invariants are read straight from the payments log, the store and the
audit log. The scripted model goes through the real openai SDK to the offline server.

Crash points here raise an exception instead of killing the process, so thousands of histories
fit in a test run; the crash matrix (test_crash_matrix.py) kills real processes at the same
points. ``REFUND_AGENT_MONEY_EXAMPLES`` sets how many histories to try (500 by default).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any
from unittest import mock

import hypothesis.strategies as st
import openai
import pytest
from helpers.cli import DATA
from helpers.crash import record
from helpers.desk import desk_drift
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

import refund_agent.loop as loop_module
from offline_model import OfflineServer
from offline_model.brain import Reply
from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.desk.identity import name_key
from refund_agent.desk.policy import quote_refund, units_left
from refund_agent.errors import AlreadyDecided, DecisionRefused, RefundAgentError
from refund_agent.models import RunStatus
from refund_agent.providers.client import ModelAccess

EXAMPLES = int(os.environ.get("REFUND_AGENT_MONEY_EXAMPLES", "500"))
# The same machine on PostgreSQL (a database per history): fewer by default, each history there
# also makes and drops a database.
PG_EXAMPLES = int(os.environ.get("REFUND_AGENT_MONEY_EXAMPLES_PG", "100"))
# About 0.2 s a history on 2 idle cores; the suite's 120-second default is for ordinary tests.
pytestmark = pytest.mark.timeout(120 + max(EXAMPLES, 2 * PG_EXAMPLES))
SCRIPT = "SCRIPT "
CUSTOMERS = [("Ann Lee", "ann.lee@example.com"), ("Bo Diaz", "bo.diaz@example.com")]
NOUNS = ["teapot", "tray", "lamp", "vase", "kettle", "rug", "bowl", "clock"]
# Approvers with a limit on what each may approve per order, in all (cents); a lead has none.
LIMITED = ["Ana"]
# The shop's two-person amount (shop.json desk.two_person_above, cents): above it, what an order
# pays in all takes a first sign-off and a second, different approver. "the dearest line": the
# worth of the shop's dearest line, so that one line never needs two people and two often do.
TWO_PERSON_ABOVE = [None, 3000, 10_000, "the dearest line", "the dearest line"]
# Where a "process death" can happen during the steps below.
CRASH_POINTS = ["after_response", "before_tool", "after_tool", "after_approval_queued",
                "after_decision", "before_refund", "after_refund", "after_email"]


class SimulatedCrash(BaseException):
    """The process died here (a BaseException, so no ``except Exception`` swallows it)."""


def _crash_point(name: str, enabled: frozenset[str]) -> None:
    if name in enabled:
        raise SimulatedCrash(name)


class ScriptBrain:
    """A model whose calls are written, as JSON, into the customer's email.

    It reads only the conversation: the n-th function call it makes is the n-th scripted call,
    and once the script is used up it finishes with a note.
    """

    def __call__(self, conversation: list[dict[str, Any]], tools: Any) -> Reply:
        # The customer's email and each reply may carry calls: one script, in order.
        script = []
        for item in conversation:
            if item.get("role") != "user":
                continue
            content = item.get("content")
            text = content if isinstance(content, str) else "".join(
                p.get("text", "") for p in content or [])
            if SCRIPT in text:
                script += json.loads(text.split(SCRIPT, 1)[1].strip().splitlines()[0])
        made = sum(1 for i in conversation if i.get("type") == "function_call")
        if made < len(script):
            return Reply("scripted", calls=[("issue_refund", script[made])])
        return Reply("done", "Finished.")


_SERVER: OfflineServer | None = None
# What the machines tried, per backend ("sqlite", "postgresql"), for the reliability log.
_TOTALS: defaultdict[str, Counter[str]] = defaultdict(Counter)


def _server() -> OfflineServer:
    global _SERVER
    if _SERVER is None:
        state = Path(tempfile.mkdtemp(prefix="money-model-")) / "model.sqlite3"
        _SERVER = OfflineServer(state, brain=ScriptBrain()).start()
    return _SERVER


# -- generated shops ------------------------------------------------------------------------------

@st.composite
def shops(draw) -> dict[str, Any]:
    window = draw(st.integers(1, 60))
    terms = {"window_days": window, "return_fee": draw(st.integers(0, 1500)) / 100,
             "return_fee_per": draw(st.sampled_from(["refund", "item"])),
             "warranty_categories": ["appliance"]}
    orders = []
    for k in range(draw(st.integers(1, 3))):
        name, email = draw(st.sampled_from(CUSTOMERS))
        items = []
        for j in range(draw(st.integers(1, 4))):
            items.append({"sku": f"S{k}{j}-{draw(st.sampled_from(['A', 'B']))}",
                          "name": f"{draw(st.sampled_from(NOUNS))} {j}",
                          "category": draw(st.sampled_from(["kitchen", "appliance", "gift"])),
                          "price": draw(st.integers(1, 40_000)) / 100,
                          "quantity": draw(st.sampled_from([1, 1, 2, 3, 4, 10])),
                          "final_sale": draw(st.integers(0, 4)) == 0})
        shipping = draw(st.sampled_from([0, 0, 495, 695, 1999]))
        total = sum(round(i["price"] * 100) * i["quantity"] for i in items) + shipping
        past = []
        refundable = [i for i in items if not i["final_sale"]]
        if refundable and draw(st.integers(0, 5)) == 0:
            past.append({"days_ago": 1, "reason": "Refunded before this desk existed.",
                         "lines": [{"line": refundable[0]["sku"], "reason": "damaged"}]})
        orders.append({
            "order_id": f"B{2000 + k}", "customer": {"name": name, "email": email},
            "ordered_days_ago": window + 20,
            # Mostly inside the window, sometimes past it or not delivered yet.
            "delivered_days_ago": draw(st.sampled_from([None, window + 1 + k]
                                                       + list(range(0, window + 1, 3)))),
            "payment_method": "Visa ending 0000", "items": items, "shipping": shipping / 100,
            "total": total / 100, "refunds": past})
    return {"terms": terms, "orders": orders}


def _write_shop(folder: Path, shop: dict[str, Any], two_person_above: int | None) -> None:
    shutil.copytree(DATA, folder)
    info = json.loads((folder / "shop.json").read_text())
    info["policy"] = shop["terms"]
    info["desk"] = {"two_person_above": None if two_person_above is None
                    else two_person_above / 100}
    (folder / "shop.json").write_text(json.dumps(info))
    (folder / "orders.json").write_text(json.dumps({"orders": shop["orders"]}))


def _spellings(order_id: str) -> list[str]:
    return [order_id, f"#{order_id}", f" {order_id}", f"{order_id} ", order_id.lower(),
            f"{order_id[0]} {order_id[1:]}", f"#{order_id.lower()} ", "\uff22" + order_id[1:]]


# -- the machine ---------------------------------------------------------------------------------

class MoneyMachine(RuleBasedStateMachine):
    """Generated histories against one generated shop, checked after every step."""

    #: Refunds proposed and not yet decided by a rule (a bundle, so that Hypothesis picks the
    #: deciding rules whenever something waits).
    waiting = Bundle("waiting")

    def __init__(self) -> None:
        super().__init__()
        # Memory-backed when the machine has it: thousands of histories, each with dozens of
        # synchronous commits, would otherwise spend most of their time in fsync.
        shm = Path("/dev/shm")
        self.tmp = Path(tempfile.mkdtemp(prefix="money-", dir=shm if shm.is_dir() else None))
        self.patch = mock.patch.object(loop_module, "crash_point", _crash_point)
        self.patch.start()
        self.crashes = 0
        self.steps = 0

    @initialize(shop=shops(), limits=st.tuples(*[st.sampled_from([1000, 3000, 8000, 20_000])
                                                  for _ in LIMITED]),
                two_person_above=st.sampled_from(TWO_PERSON_ABOVE))
    def open_shop(self, shop: dict[str, Any], limits: tuple[int, ...],
                  two_person_above: int | str | None) -> None:
        self.shop = json.loads(json.dumps(shop))   # edited by raise_price
        self.limits = dict(zip(LIMITED, limits, strict=True))
        if two_person_above == "the dearest line":   # one line alone never needs two people,
            two_person_above = max(round(i["price"] * 100) * i["quantity"]   # two often do
                                   for o in shop["orders"] for i in o["items"])
        self.two_person_above = two_person_above
        _write_shop(self.tmp / "data", shop, two_person_above)
        self.settings = Settings(api_key="", data_dir=self.tmp / "data",
                                 output_dir=self.tmp / "output", max_retries=0, timeout=30.0,
                                 database_url=self.database_url())
        server = _server()
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        self.agent = Agent(self.settings, model=ModelAccess(client, "scripted", server))
        self.orders = self.agent.shop.orders

    #: The backend this machine's store is on (the reliability log splits its totals by it).
    backend = "sqlite"

    @property
    def totals(self) -> Counter[str]:
        return _TOTALS[self.backend]

    def database_url(self) -> str:
        """Where this history's store lives: empty for SQLite in the output folder."""
        return ""

    def teardown(self) -> None:
        try:
            if hasattr(self, "agent"):
                # Whatever the history, once every run is resumed, nothing approved is unpaid.
                self._resume_all()
                self.money_holds()
                for approval in self.agent.store.approvals("approved", limit=-1):
                    assert self.agent.payments.find(approval.id) is not None, approval
                self.totals["refunds"] += len(self.agent.payments.refunds())
                self.totals["partial"] += sum(1 for a in self.agent.store.approvals(
                    "approved", limit=-1) if a.declined)
                self.totals["refused"] += sum(1 for e in self.agent.store.audit()
                                              if e.event == "refused")
                # Orders where a limited approver approved more than once (a split).
                self.totals["splits"] += sum(1 for n in Counter(
                    (a.decided_by, a.order_id) for a in self.agent.store.approvals(
                        "approved", limit=-1) if a.decided_by in self.limits).values() if n > 1)
                self.agent.store.close()
        finally:
            self.patch.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.totals["examples"] += 1
            self.totals["steps"] += self.steps
            self.totals["crashes"] += self.crashes

    # -- helpers ---------------------------------------------------------------------------

    def _advance(self, run_id: str, crash: str | None) -> None:
        self.agent._crash = frozenset({crash}) if crash else frozenset()
        try:
            self.agent.advance(run_id)
        except SimulatedCrash:
            self.crashes += 1
        finally:
            self.agent._crash = frozenset()

    def _resume_all(self) -> None:
        for _ in range(3):
            stuck = [r.id for r in self.agent.store.runs(limit=10_000)
                     if r.status in (RunStatus.FAILED, RunStatus.WORKING)]
            stuck += [r.id for r in self.agent.store.decided_but_waiting()]
            if not stuck:
                return
            for run_id in dict.fromkeys(stuck):
                self._advance(run_id, None)

    # -- rules -----------------------------------------------------------------------------

    def _request(self, data: st.DataObject, chaos: bool, reply_to: str | None = None) -> Any:
        self.steps += 1
        order = data.draw(st.sampled_from(list(self.orders.values())), label="order")
        if reply_to is not None:
            # The customer writes back on the same ticket: about the same order, as its owner.
            order = self.orders[self._order_of(reply_to, order.order_id)]
        other = chaos and reply_to is None and data.draw(st.integers(0, 4),
                                                          label="stranger") == 0
        sender = next(e for _n, e in CUSTOMERS if e != order.customer.email) if other \
            else order.customer.email
        skus = [i.sku for i in order.items]
        # A careful model reads the policy facts and names only lines still open; a careless
        # one names any line of the order.
        held = self.agent.store.held_lines(order.order_id)
        left = {i.sku: units_left(order, i.sku, held) for i in order.items}
        open_ = [i.sku for i in order.items if not i.final_sale and left[i.sku] > 0]
        careful = not chaos and open_ and data.draw(st.integers(0, 3), label="careful") > 0
        reason = st.sampled_from(["damaged", "changed_mind"])
        pool = open_ if careful else skus
        quantity = {i.sku: i.quantity for i in order.items}

        def units(sku: str) -> st.SearchStrategy[int | None]:
            # All that remain (null) as often as a count; a careful model counts within what
            # is left, a careless one anywhere up to the line's quantity and one past it.
            most = max(1, left[sku]) if careful else quantity[sku] + 1
            return st.one_of(st.none(), st.integers(1, most))

        # Two or more lines as often as one, so partial approvals have something to untick.
        wellformed = st.integers(1, min(3, len(pool))).flatmap(
            lambda n: st.lists(st.sampled_from(pool), min_size=n, max_size=n, unique=True)
        ).flatmap(lambda chosen: st.tuples(*[st.fixed_dictionaries(
            {"line": st.just(s), "reason": reason, "units": units(s)})
            for s in chosen]).map(list))
        anything = st.lists(st.fixed_dictionaries({
            "line": st.sampled_from([*skus, "SHIPPING", "NOPE", f" {skus[0]}"]),
            "reason": st.sampled_from(["damaged", "changed_mind", "broken"])}), max_size=4)
        amounts = st.sampled_from([None, "quote"])
        if chaos:
            amounts = st.one_of(amounts, st.floats(allow_nan=True, allow_infinity=True),
                                st.integers(-100, 100_000).map(lambda c: c / 100),
                                st.just(True), st.just("48"))
        shipping_only = st.just([{"line": "SHIPPING", "reason": "damaged"}])
        script = []
        for _ in range(data.draw(st.integers(1, 2), label="calls")):
            lines = data.draw(st.one_of(wellformed, anything) if chaos else
                              st.one_of(wellformed, wellformed, shipping_only), label="lines")
            spelling = data.draw(st.sampled_from(
                [*_spellings(order.order_id), *(["Z9999"] if chaos else [])]), label="order id")
            amount = data.draw(amounts, label="amount")
            if amount == "quote":
                quote = quote_refund(order, self.agent.shop.terms,
                                     [(x["line"], x["reason"], x.get("units")) for x in lines],
                                     self.agent.store.held_lines(order.order_id),
                                     self.agent.shop.today)
                amount = quote.amount if not isinstance(quote, str) else None
            summary = data.draw(st.sampled_from(["Refund as asked.", " "]), label="summary") \
                if chaos else "Refund as asked."
            script.append({"order_id": spelling, "lines": lines, "amount": amount,
                           "summary": summary})
        body = f"Please refund order {order.order_id}.\n{SCRIPT}{json.dumps(script)}"
        if reply_to is not None:
            try:
                self.agent.add_reply(reply_to, body)
            except RefundAgentError:
                return multiple()     # not open for a reply (waiting, working): nothing sent
            run = self.agent.store.run(reply_to)
        else:
            run = self.agent.start(sender, body)
        crash = data.draw(st.sampled_from([None] * 6 + CRASH_POINTS[:4]), label="crash")
        self._advance(run.id, crash)
        return multiple(*[a.id for a in self.agent.store.approvals("pending")
                          if a.run_id == run.id])

    def _order_of(self, run_id: str, fallback: str) -> str:
        """The order a run's proposals were about (the drawn one if it made none)."""
        made = [a.order_id for a in self.agent.store.run_approvals(run_id)]
        return made[-1] if made else fallback

    @precondition(lambda self: hasattr(self, "agent"))
    @rule(target=waiting, data=st.data())
    def request(self, data: st.DataObject) -> Any:
        """A customer writes in; the scripted model asks for a refund a model might ask for."""
        return self._request(data, chaos=False)

    @precondition(lambda self: hasattr(self, "agent"))
    @rule(target=waiting, data=st.data())
    def request_anything(self, data: st.DataObject) -> Any:
        """The same, with a model that sends anything: strangers' orders, bad lines, NaN."""
        return self._request(data, chaos=True)

    @precondition(lambda self: hasattr(self, "agent"))
    @rule(target=waiting, data=st.data())
    def reply(self, data: st.DataObject) -> Any:
        """The customer answers a question or writes again on a finished ticket; the model
        proposes again (the rest of a partly approved refund, say)."""
        # Oldest first, drawn by position: run ids are random, and Hypothesis replays a
        # history by its draws, so it must not draw the ids themselves.
        runs = [r.id for r in sorted(self.agent.store.runs(limit=10_000),
                                     key=lambda r: r.created_at)
                if r.status in (RunStatus.ASKED, RunStatus.DONE)]
        if not runs:
            return multiple()
        which = data.draw(st.integers(0, len(runs) - 1), label="run (oldest first)")
        return self._request(data, chaos=False, reply_to=runs[which])

    @rule(approval_id=waiting, data=st.data())
    def decide_limited(self, approval_id: str, data: st.DataObject) -> None:
        """An approver with a limit approves all or some lines; above what is left of the
        limit on the order the decision is refused and stays for a lead (not consumed)."""
        approval = self.agent.store.approval(approval_id)
        if approval.status != "pending":
            return
        self.steps += 1
        self.totals["limited decisions"] += 1
        name = data.draw(st.sampled_from(LIMITED), label="approver")
        skus = [line.line for line in approval.item_lines]
        keep = None
        if skus and data.draw(st.booleans(), label="partial"):
            keep = data.draw(st.lists(st.sampled_from(skus), min_size=1, unique=True),
                             label="keep")
        # Lowering a kept line's units (sometimes to a count the approval never proposed, which
        # must be refused with the approval left pending).
        lowered: dict[str, int] = {}
        for line in approval.item_lines:
            if (keep is None or line.line in keep) and (line.units or 1) > 1 and data.draw(
                    st.integers(0, 2), label="lower units") == 0:
                lowered[line.line] = data.draw(st.integers(0, line.units + 1), label="units")
        try:
            self.agent.decide(approval.id, True, name, keep=keep,
                              limit_cents=self.limits[name], units=lowered,
                              fingerprint=self.agent.store.approval(approval.id).fingerprint)
        except DecisionRefused:
            assert self.agent.store.approval(approval.id).status == "pending"
            return
        self._advance(approval.run_id, None)

    @precondition(lambda self: hasattr(self, "agent"))
    @rule(data=st.data())
    def split(self, data: st.DataObject) -> None:
        """The split attack: a refund of two or more lines is proposed; Ben, whose limit is
        below its total but covers each part, approves one line; the customer writes back for
        the rest on the same ticket, the model proposes it, and Ben approves that too where
        his limit (what he approved on the order, in all) allows. The old code paid both.
        Lee, a lead without a limit, splits the same way under the two-person amount: each
        part alone is under it, the order in all is not (issue 33)."""
        self.steps += 1
        candidates = [o for o in self.orders.values() if len(self._open_lines(o)) >= 2]
        if not candidates:
            return
        order = data.draw(st.sampled_from(candidates), label="order split")
        reason = data.draw(st.sampled_from(["damaged", "changed_mind"]), label="reason")
        who = data.draw(st.sampled_from(["Ben", "Lee"]), label="splitter")
        lines = [{"line": sku, "reason": reason} for sku in self._open_lines(order)[:3]]
        script = [{"order_id": order.order_id, "lines": lines, "amount": None,
                   "summary": "Refund as asked."}]
        run = self.agent.start(order.customer.email, f"Please refund order {order.order_id}."
                                                     f"\n{SCRIPT}{json.dumps(script)}")
        self._advance(run.id, None)
        pending = [a for a in self.agent.store.approvals("pending") if a.run_id == run.id]
        if not pending:
            return
        (approval,) = pending
        self.totals["splits tried"] += 1
        first = approval.item_lines[0].amount_cents
        # The first limit Ben gets stays his for the history; chosen so each part fits.
        limit = None if who == "Lee" else self.limits.setdefault(
            "Ben", max(first, approval.amount_cents - first))
        if not self._approve_as(approval.id, who, [approval.item_lines[0].line], limit):
            return
        self._advance(run.id, None)
        rest = [{"line": x.line, "reason": x.reason} for x in approval.item_lines[1:]]
        script = [{"order_id": order.order_id, "lines": rest, "amount": None,
                   "summary": "The rest of the refund."}]
        try:
            self.agent.add_reply(run.id, f"And the rest, please.\n{SCRIPT}{json.dumps(script)}")
        except RefundAgentError:
            return
        self._advance(run.id, None)
        for again in self.agent.store.approvals("pending"):
            if again.run_id == run.id and self._approve_as(again.id, who, None, limit):
                self._advance(run.id, None)

    def _approve_as(self, approval_id: str, who: str, keep: list[str] | None,
                    limit: int | None) -> bool:
        """``who`` approves; where that is a first sign-off, Sam completes it. Whether the
        refund was approved (False: refused, and still pending)."""
        try:
            decided = self.agent.decide(approval_id, True, who, keep=keep, limit_cents=limit,
                                        fingerprint=self.agent.store.approval(approval_id).fingerprint)
            if decided.status == "pending":
                self.totals["sign-offs"] += 1
                decided = self.agent.decide(approval_id, True, "Sam", keep=keep,
                                            fingerprint=self.agent.store.approval(approval_id).fingerprint)
        except DecisionRefused:
            assert self.agent.store.approval(approval_id).status == "pending"
            return False
        return decided.status == "approved"

    def _open_lines(self, order: Any) -> list[str]:
        """The order's lines with units no refund holds, made or pending, not final sale."""
        held = self.agent.store.held_lines(order.order_id)
        return [i.sku for i in order.items if not i.final_sale
                and units_left(order, i.sku, held) > 0]

    @precondition(lambda self: hasattr(self, "agent"))
    @rule(data=st.data())
    def raise_price(self, data: st.DataObject) -> None:
        """The shop's export raises a line's price (between a proposal and its decision, say):
        the running agent must price with it, and never pay a kept line more than its card
        showed. Prices only rise, so the invariants can check against today's data."""
        self.steps += 1
        order = data.draw(st.sampled_from(self.shop["orders"]), label="order edited")
        item = data.draw(st.sampled_from(order["items"]), label="item edited")
        delta = data.draw(st.integers(1, 5000), label="cents more")
        item["price"] = round(item["price"] + delta / 100, 2)
        order["total"] = round(order["total"] + delta * item["quantity"] / 100, 2)
        (self.tmp / "data" / "orders.json").write_text(json.dumps({"orders":
                                                                   self.shop["orders"]}))
        self.orders = self.agent.shop.orders
        assert self.orders[order["order_id"]].item(item["sku"]).price == item["price"]

    @rule(approval_id=consumes(waiting), data=st.data())
    def decide(self, approval_id: str, data: st.DataObject) -> None:
        """A person approves (all or some lines), rejects, or asks the customer first."""
        self._decide(approval_id, data, data.draw(st.sampled_from(
            ["approve", "partial", "reject", "nothing kept", "ask"]), label="decision"))

    @rule(approval_id=consumes(waiting), data=st.data())
    def decide_part(self, approval_id: str, data: st.DataObject) -> None:
        """A person unticks some lines and approves the rest (its own rule, so it is common)."""
        self._decide(approval_id, data, "partial")

    def _decide(self, approval_id: str, data: st.DataObject, choice: str) -> None:
        approval = self.agent.store.approval(approval_id)
        if approval.status != "pending":
            return
        self.steps += 1
        self.totals["decisions"] += 1
        skus = [line.line for line in approval.item_lines]
        keep = None
        if choice == "partial" and not skus:
            choice = "approve"    # shipping alone: nothing to untick
        if choice == "partial":   # untick at least one line when there are two or more
            keep = data.draw(st.lists(st.sampled_from(skus), min_size=1,
                                      max_size=max(1, len(skus) - 1), unique=True), label="keep")
        elif choice == "nothing kept":
            keep = []
        crash = data.draw(st.sampled_from([None] * 4 + CRASH_POINTS[4:]), label="crash")
        self.agent._crash = frozenset({crash}) if crash else frozenset()
        try:
            if choice == "ask":
                self.agent.ask(approval.id, "Dana", "Could you send a photo?",
                               fingerprint=self.agent.store.approval(approval.id).fingerprint)
            else:
                decided = self.agent.decide(approval.id, choice != "reject", "Dana",
                                            "Because.", keep=keep,
                                            fingerprint=self.agent.store.approval(approval.id).fingerprint)
                if decided.status == "pending":   # a first sign-off: above the two-person
                    self.totals["sign-offs"] += 1  # amount, on the order in all
                    second = data.draw(st.sampled_from(["Sam", "Dana"]), label="second")
                    self.agent.decide(approval.id, True, second, "Agreed.", keep=keep,
                                      fingerprint=self.agent.store.approval(approval.id).fingerprint)
        except DecisionRefused:
            assert choice == "nothing kept" or self.agent.store.approval(approval.id).status \
                == "pending"
            return
        except SimulatedCrash:
            self.crashes += 1
        finally:
            self.agent._crash = frozenset()
        self._advance(approval.run_id, crash)

    @rule(approval_id=consumes(waiting), data=st.data())
    def race(self, approval_id: str, data: st.DataObject) -> None:
        """Two people decide the same refund at the same instant: exactly one decision lands.

        Both make the same decision, so the history after the race does not depend on which
        thread won (Hypothesis replays histories and needs them deterministic); approve against
        reject is raced in test_races.py.
        """
        approval = self.agent.store.approval(approval_id)
        if approval.status != "pending":
            return
        self.steps += 1
        self.totals["races"] += 1
        approve = data.draw(st.booleans(), label="approve")
        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        def decide(approve: bool, by: str) -> None:
            barrier.wait()
            try:
                self.agent.decide(approval.id, approve, by, None if approve else "No.",
                                  fingerprint=self.agent.store.approval(approval.id).fingerprint)
                outcomes.append("won")
            except AlreadyDecided:
                outcomes.append("lost")
            except DecisionRefused:   # a price rose since the proposal: refused, still pending
                outcomes.append("refused")

        threads = [threading.Thread(target=decide, args=(approve, "Dana")),
                   threading.Thread(target=decide, args=(approve, "Sam"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if outcomes == ["refused", "refused"]:   # the same refusal for both, nothing decided
            assert approve and self.agent.store.approval(approval.id).status == "pending"
            return
        if outcomes == ["won", "won"]:   # above the two-person amount: a sign-off, then paid
            after = self.agent.store.approval(approval.id)
            first = self.agent.store.signoff(approval.id)
            assert approve and after.status == "approved" and first is not None, outcomes
            assert first.by != after.decided_by
            self._advance(approval.run_id, None)
            return
        assert sorted(outcomes) == ["lost", "won"], outcomes
        ignored = [e for e in self.agent.store.audit()
                   if e.event == "ignored" and e.approval_id == approval.id]
        assert len(ignored) == 1
        self._advance(approval.run_id, None)

    @precondition(lambda self: hasattr(self, "agent"))
    @rule()
    def expire(self) -> None:
        """Time passes: everything still waiting expires, and its runs tell the customer."""
        self.steps += 1
        for approval in self.agent.store.expire(0):
            self.totals["expired"] += 1
            self._advance(approval.run_id, None)

    @precondition(lambda self: hasattr(self, "agent"))
    @rule()
    def resume(self) -> None:
        """Someone runs `refund-agent resume` (or the page's worker restarts)."""
        self.steps += 1
        self._resume_all()

    # -- the invariants --------------------------------------------------------------------

    @precondition(lambda self: hasattr(self, "agent"))
    @invariant()
    def desk_rows_are_fresh(self) -> None:
        """The desk status each run keeps (schema 12) is what desk_status.py says now, after
        every history, rolled-back crash and race included."""
        assert desk_drift(self.agent.store) == []

    @invariant()
    def money_holds(self) -> None:
        try:
            self._check_money()
        except AssertionError:
            self.totals["failures"] += 1    # the report must not count a failing run as clean
            raise

    def _check_money(self) -> None:
        agent, orders, terms = self.agent, self.orders, self.agent.shop.terms
        payments = agent.payments.refunds()
        approvals = {a.id: a for a in agent.store.approvals(status=None, limit=-1)}
        audit = agent.store.audit()
        fee = terms.return_fee_cents

        paid_lines: Counter[tuple[str, str]] = Counter()     # units paid, per line
        damaged_units: Counter[tuple[str, str]] = Counter()  # of them, refunded as damaged
        per_order: Counter[str] = Counter()
        for order in orders.values():
            for past in order.refunds:
                for line in past.lines:
                    item = order.item(line.line)
                    paid_lines[(order.order_id, line.line)] += item.quantity if item else 1
                    if line.reason == "damaged" and item:
                        damaged_units[(order.order_id, line.line)] += item.quantity
                    per_order[order.order_id] += item.cents if item else order.shipping_cents
        for p in payments:
            req = p["request"]
            order = orders[req["order_id"]]             # canonical, and a real order
            assert req["amount_cents"] == sum(x["amount_cents"] for x in req["lines"]) > 0
            per_order[order.order_id] += req["amount_cents"]
            returned = []
            for x in req["lines"]:
                if x["line"] == "SHIPPING":
                    paid_lines[(order.order_id, x["line"])] += 1
                    assert x["amount_cents"] == order.shipping_cents
                    continue
                item = order.item(x["line"])
                # A line of several units says how many it pays; a line of one pays its one.
                units = x.get("units", item.quantity)
                assert item.quantity == 1 or "units" in x, x
                assert 1 <= units <= item.quantity, ("units outside the line", x)
                paid_lines[(order.order_id, x["line"])] += units
                worth = round(item.price * 100) * units   # the most these units may pay
                assert not item.final_sale, ("final sale refunded", x)
                assert 0 < x["amount_cents"] <= worth, ("units over their price", x)
                if x["reason"] == "changed_mind":
                    returned.append((worth, x["amount_cents"]))
                    if terms.return_fee_per == "item":
                        assert x["amount_cents"] <= worth - min(fee * units, worth)
                else:
                    assert x["reason"] == "damaged", x
                    damaged_units[(order.order_id, x["line"])] += units
            if returned and terms.return_fee_per == "refund":
                subtotal = sum(worth for worth, _ in returned)
                assert sum(a for _, a in returned) <= subtotal - min(fee, subtotal)
            # Paid only for its owner, inside the window, after delivery.
            approval = approvals[p["idempotency_key"]]
            assert approval.customer == order.customer.email
            assert order.delivered_on is not None
            assert (agent.shop.today - order.delivered_on).days <= terms.window_days
        over = [k for k, n in paid_lines.items() if n > (
            1 if k[1] == "SHIPPING" else orders[k[0]].item(k[1]).quantity)]
        assert not over, ("more units paid than bought", over, paid_lines)
        for order_id, total in per_order.items():
            assert total <= orders[order_id].total_cents, ("order over paid", order_id)

        # Shipping only when every unit of every item is refunded (or approved) as damaged.
        for a in approvals.values():
            if a.status == "approved" and a.id not in {p["idempotency_key"] for p in payments}:
                for line in a.kept:   # approved, not paid yet: counts as refunded
                    if line.reason == "damaged":
                        damaged_units[(a.order_id, line.line)] += line.units or 1
        for (order_id, line), _n in paid_lines.items():
            if line == "SHIPPING":
                assert all(damaged_units[(order_id, i.sku)] >= i.quantity
                           for i in orders[order_id].items), ("shipping too soon", order_id)

        # Units held by refunds waiting or approved never exceed their line.
        held = Counter()
        for a in approvals.values():
            for line in a.lines:
                if a.status == "pending" or line.decision == "approved":
                    item = orders[a.order_id].item(line.line)
                    held[(a.order_id, line.line)] += (
                        1 if item is None else line.units or item.quantity)
        assert not [k for k, n in held.items() if n > (
            1 if k[1] == "SHIPPING" else orders[k[0]].item(k[1]).quantity)], held

        # The payments log, the approvals and the audit agree, both ways.
        by_key = {p["idempotency_key"]: p for p in payments}
        assert len(by_key) == len(payments)
        for key, p in by_key.items():
            a = approvals[key]
            assert a.status == "approved"
            assert p["request"]["amount_cents"] == a.amount_cents
            assert [(x["line"], x["amount_cents"]) for x in p["request"]["lines"]] == [
                (line.line, line.amount_cents) for line in a.kept]
            issued = [e for e in audit if e.approval_id == key and e.event == "issued"]
            assert len(issued) <= 1
            for e in audit:
                if e.approval_id == key and e.event in ("issued", "reused"):
                    assert round(e.amount * 100) == a.amount_cents
                    assert e.note == p["refund_id"]
        for e in audit:
            if e.event in ("issued", "reused"):
                assert e.approval_id in by_key
        for a in approvals.values():
            assert a.order_id in orders
            decided = [e for e in audit if e.approval_id == a.id and e.event in
                       ("approved", "rejected", "asked", "expired")]
            if a.status == "pending":
                assert decided == []
                continue
            (entry,) = decided
            assert entry.event == a.status and entry.actor == a.decided_by
            if a.status == "approved":
                assert round(entry.amount * 100) == a.amount_cents
                assert [(x["line"], x["amount_cents"]) for x in entry.lines] == [
                    (line.line, line.amount_cents) for line in a.kept]
                run = agent.store.run(a.run_id)
                if run.status == RunStatus.DONE:
                    assert a.id in by_key, ("approved, run done, never paid", a.id)
        assert agent.store.verify_audit() is None
        self._check_decisions(approvals, audit)

    def _check_decisions(self, approvals: dict[str, Any], audit: list[Any]) -> None:
        """No approver's approvals on one order add up past their limit, no order pays above
        the two-person amount on one person's word, and no kept line pays more than the
        amount its proposal showed for it."""
        self._check_two_people(approvals, audit)
        by_person: Counter[tuple[str, str]] = Counter()
        for a in approvals.values():
            if a.status == "approved" and a.decided_by in self.limits:
                by_person[(a.decided_by, a.order_id)] += a.amount_cents
        for (name, order_id), cents in by_person.items():
            assert cents <= self.limits[name], ("over the limit", name, order_id, cents)
        proposed = {e.approval_id: {x["line"]: x["amount_cents"] for x in e.lines}
                    for e in audit if e.event == "requested" and e.approval_id}
        for a in approvals.values():
            for line in a.kept:
                assert line.amount_cents <= proposed[a.id][line.line], (
                    "kept line paid more than proposed", a.id, line.line)

    def _check_two_people(self, approvals: dict[str, Any], audit: list[Any]) -> None:
        """What one person alone approved on an order (no sign-off by someone else on record)
        adds up to the two-person amount at most: each approval that took the order above it
        had two different people, a sign-off and an approval, however the order's refunds
        were split across lines, tickets and decisions."""
        if self.two_person_above is None:
            return
        signed = {e.approval_id: e.actor for e in audit if e.event == "signed_off"}
        alone: Counter[str] = Counter()
        everything: Counter[str] = Counter()
        for a in approvals.values():
            if a.status != "approved":
                continue
            everything[a.order_id] += a.amount_cents
            first = self.agent.store.signoff(a.id)
            assert (first.by if first else None) == signed.get(a.id), ("sign-off off the record",
                                                                       a.id)
            if first is None or name_key(first.by) == name_key(a.decided_by):
                alone[a.order_id] += a.amount_cents
            else:
                assert first.amount_cents == a.amount_cents, ("signed off another amount", a.id)
        for order_id, cents in alone.items():
            assert cents <= self.two_person_above, (
                "paid above the two-person amount by one person", order_id, cents)
        for order_id, cents in everything.items():   # the words, checked as such
            if cents > self.two_person_above:
                assert any(a.id in signed and name_key(signed[a.id]) != name_key(a.decided_by)
                           for a in approvals.values()
                           if a.order_id == order_id and a.status == "approved"), order_id


MoneyMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=10, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large])
TestMoneyInvariants = MoneyMachine.TestCase

# The session's PostgreSQL server, set by _postgres_for_the_machine for the class below.
_PG: dict[str, Any] = {}


class PostgresMoneyMachine(MoneyMachine):
    """The same histories with the store (and the payments and emails) on PostgreSQL."""

    backend = "postgresql"

    def __init__(self) -> None:
        super().__init__()
        self.database = f"money_{uuid.uuid4().hex[:12]}"

    def database_url(self) -> str:
        return _PG["cluster"].create(self.database)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            _PG["cluster"].admin(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


PostgresMoneyMachine.TestCase.settings = settings(
    max_examples=PG_EXAMPLES, stateful_step_count=10, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large])
TestMoneyInvariantsPostgres = PostgresMoneyMachine.TestCase


@pytest.fixture(autouse=True)
def _postgres_for_the_machine(request):
    """Start (or skip without) the PostgreSQL server, only for the PostgreSQL machine."""
    if request.cls is TestMoneyInvariantsPostgres:
        _PG["cluster"] = request.getfixturevalue("pg_cluster")


@pytest.fixture(scope="class", autouse=True)
def _report_what_was_tried(request):
    """Write how many histories each machine (one per backend) tried to the reliability log,
    once it has run."""
    backend = PostgresMoneyMachine.backend if request.cls is TestMoneyInvariantsPostgres \
        else MoneyMachine.backend
    started = time.time()
    yield
    totals = _TOTALS[backend]
    if totals["examples"]:
        # "failures" always present, so the report can tell a clean run from a failing one.
        record("money_invariants", **{**totals, "failures": totals["failures"]},
               backend=backend, seconds=round(time.time() - started, 1))

