"""Money rules a decision checks, attacked the ways issue #21 found open.

- An approver's limit covers everything that person approved on the order: splitting an $80.95
  refund into $48.00 + $32.95 (``--only``, then a new proposal for the rest; ask, reply, a new
  proposal; two tickets for one order) needs a lead for the part above the limit.
- Shipping the policy owes after two side-by-side refunds can be proposed on its own, approved,
  and paid once.
- A kept line is never paid more than its card showed, line by line.
- The shop's data is read fresh at every decision, in a long-lived process too (the page's).

Through the real openai SDK and the offline model; the terminal paths through ``run_cli``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.cli import DATA
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from offline_model.brain import Reply
from refund_agent import Settings
from refund_agent.desk import Agent
from refund_agent.desk.records import DeskStore
from refund_agent.desk.shop import Shop
from refund_agent.errors import DecisionRefused
from refund_agent.models import RunStatus
from refund_agent.providers.client import open_model
from refund_agent.store import Store
from refund_agent.web.worker import Worker

MAYA = "maya.chen@example.com"
ANA, LEE = "ana-password", "lee-password"
BOTH_BROKEN = ("Order A1043: the coffee maker arrived shattered and the mugs arrived "
               "shattered too.")
COFFEE_MAKER = "Order A1043: the glass pour-over coffee maker arrived cracked."
MUGS = "Order A1043: the stoneware mugs arrived shattered."
MUGS_TOO = "Order A1043: the stoneware mugs arrived shattered too."
SHIPPING_TOO = ("Order A1043: you refunded the coffee maker and the mugs, but not the shipping "
                "I paid. Please refund the shipping too.")
OVER = ("Cannot approve: $32.95 would bring what Ana Ruiz has approved on order A1043 to "
        "$80.95 ($48.00 approved before), above Ana Ruiz's approval limit of $50.00 per order; "
        "a lead must decide this refund.")


def _pending(agent: Agent, run_id: str):
    (approval,) = [a for a in agent.store.approvals("pending") if a.run_id == run_id]
    return approval


def _waiting(agent: Agent, body: str):
    run = agent.advance(agent.start(MAYA, body).id)
    assert run.status == RunStatus.WAITING, run
    return run, _pending(agent, run.id)


def _approved_by(store: Store, name: str, order_id: str = "A1043") -> int:
    return sum(a.amount_cents for a in store.approvals("approved", limit=-1)
               if a.decided_by == name and a.order_id == order_id)


def _paid(agent: Agent) -> list[int]:
    return [r["request"]["amount_cents"] for r in agent.payments.refunds()]


# -- limits that add up ------------------------------------------------------------------------


def test_terminal_split_with_only_then_a_new_ticket_needs_a_lead(tmp_path):
    """The issue's attack in the terminal: refused on $80.95, Ana approves only the $48.00
    line, the customer writes again for the rest, and the $32.95 is now hers to refuse."""
    out = tmp_path / "out"
    for name, role, password in (("Ana Ruiz", "approver", ANA), ("Lee Park", "lead", LEE)):
        extra = ("--limit", "50") if role == "approver" else ()
        added = run_cli(out, "users", "add", name, "--role", role, *extra,
                        REFUND_AGENT_NEW_PASSWORD=password)
        assert added.returncode == 0, added.stderr
    assert run_cli(out, "send", BOTH_BROKEN, "--from", MAYA).returncode == 0
    whole = run_cli(out, "approve", "--as", "Ana Ruiz", REFUND_AGENT_PASSWORD=ANA)
    assert whole.returncode == 1
    assert ("Cannot approve: $80.95 is above Ana Ruiz's approval limit of $50.00; a lead must "
            "decide this refund.") in whole.stderr
    part = run_cli(out, "approve", "--as", "Ana Ruiz", "--only", "POUR-GLS-01",
                   REFUND_AGENT_PASSWORD=ANA)
    assert part.returncode == 0, part.stderr

    assert run_cli(out, "send", "Order A1043: the stoneware mugs arrived shattered too.",
                   "--from", MAYA).returncode == 0
    store = DeskStore(out / "refund-agent.sqlite3")
    (rest,) = store.approvals("pending")
    assert rest.amount_cents == 3295           # the mugs and, now every item is damaged, shipping
    refused = run_cli(out, "approve", "--as", "Ana Ruiz", REFUND_AGENT_PASSWORD=ANA)
    assert refused.returncode == 1
    assert OVER in refused.stderr
    assert store.approval(rest.id).status == "pending"
    assert [(e.event, e.actor) for e in store.audit() if e.approval_id == rest.id] == [
        ("requested", "agent"), ("refused", "Ana Ruiz")]
    assert store.audit()[-1].note == OVER.removeprefix("Cannot approve: ")

    lead = run_cli(out, "approve", "--as", "Lee Park", REFUND_AGENT_PASSWORD=LEE)
    assert lead.returncode == 0, lead.stderr
    paid = [json.loads(x)["request"]["amount_cents"]
            for x in (out / "refunds.log").read_text().splitlines()]
    assert paid == [4800, 3295]
    assert _approved_by(store, "Ana Ruiz") == 4800 <= 5000
    assert run_cli(out, "audit", "--verify").returncode == 0


def test_over_the_limit_by_what_she_approved_before_the_terminal_offers_the_hand_off(
        tmp_path, monkeypatch, capsys):
    """Issue 33.2, in this process: Ana ($50.00 per order) approved the $48.00 line; the
    $32.95 for the rest is within her limit alone, above it with the $48.00. `approve` must
    name the command that works, `queue --as` must say she needs a lead, and `handoff` must
    take it (it said "within your limit; a hand-off is for refunds above it")."""
    from refund_agent import cli
    from refund_agent.desk.accounts import Accounts

    out = tmp_path / "out"
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(out))
    monkeypatch.setenv("REFUND_AGENT_DATA", str(DATA))
    store = DeskStore(out / "refund-agent.sqlite3")
    Accounts(store).add("Ana Ruiz", "approver", ANA, limit=50, by="test")
    Accounts(store).add("Lee Park", "lead", LEE, by="test")

    def command(*args: str, password: str | None = None) -> tuple[int, str, str]:
        if password is None:
            monkeypatch.delenv("REFUND_AGENT_PASSWORD", raising=False)
        else:
            monkeypatch.setenv("REFUND_AGENT_PASSWORD", password)
        code = cli.main(list(args))
        said = capsys.readouterr()
        return code, said.out, said.err

    assert command("send", BOTH_BROKEN, "--from", MAYA)[0] == 0
    assert command("approve", "--as", "Ana Ruiz", "--only", "POUR-GLS-01", password=ANA)[0] == 0
    assert command("send", MUGS_TOO, "--from", MAYA)[0] == 0
    (rest,) = store.approvals("pending")
    assert rest.amount_cents == 3295 and store.approved_on("A1043", "Ana Ruiz") == 4800

    code, _, err = command("approve", "--as", "Ana Ruiz", password=ANA)
    assert code == 1
    assert (f"error: {OVER} `refund-agent handoff --id {rest.id} --as \"Ana Ruiz\"` sends it "
            "to a lead.") in err
    queue = command("queue", "--as", "Ana Ruiz")[1]
    assert ("Needs a lead: above Ana Ruiz's limit of $50.00 with the $48.00 they approved on "
            f"A1043 before; `refund-agent handoff --id {rest.id}` sends it to one") in queue
    code, said, err = command("handoff", "--as", "Ana Ruiz", password=ANA)
    assert code == 0, err
    assert "Sent $32.95 for A1043 (maya.chen@example.com) to a lead as Ana Ruiz" in said
    assert command("approve", "--as", "Lee Park", password=LEE)[0] == 0
    assert _paid_from(out) == [4800, 3295]
    assert [e.event for e in store.audit() if e.approval_id == rest.id] == [
        "requested", "refused", "handed_off", "approved", "issued"]
    # Within the limit, with what was approved before, a hand-off is still refused (and says
    # what counted).
    from refund_agent.desk.rules import handoff_problem
    assert handoff_problem("Ana Ruiz", 3295, 5000, before_cents=4800) is None
    assert handoff_problem("Ana Ruiz", 1500, 5000, before_cents=3000) == (
        "$15.00 and the $30.00 Ana Ruiz approved on this order before are within Ana Ruiz's "
        "approval limit of $50.00: approve, reject or ask the customer; a hand-off is for "
        "refunds above it.")


def test_the_page_card_says_needs_a_lead_when_what_she_approved_before_counts(agent: Agent,
                                                                           monkeypatch):
    """The page's side of 33.2, without a browser: the card's badge and first button count
    what the signed-in approver approved on the order before, as the decision does."""
    from types import SimpleNamespace

    from refund_agent.desk.accounts import Accounts
    from refund_agent.web import approvals as desk

    ana = Accounts(agent.store).add("Ana Ruiz", "approver", ANA, limit=50, by="test")
    run, coffee = _waiting(agent, COFFEE_MAKER)
    agent.decide(coffee.id, True, "Ana Ruiz", limit_cents=5000,
                 fingerprint=agent.store.approval(coffee.id).fingerprint)
    agent.advance(run.id)
    _, mugs = _waiting(agent, MUGS)
    assert mugs.amount_cents <= 5000 < mugs.amount_cents + 4800
    monkeypatch.setattr(desk, "signed_in", lambda accounts: ana)   # Ana's session
    worker = SimpleNamespace(agent=agent)
    assert desk.mine_before(worker, mugs) == 4800
    assert ":red-badge[:material/supervisor_account: Needs a lead]" in desk.card_flags(
        worker, mugs, now=mugs.requested_at)


def _paid_from(out: Path) -> list[int]:
    return [json.loads(x)["request"]["amount_cents"]
            for x in (out / "refunds.log").read_text().splitlines()]


def test_ask_reply_and_a_new_proposal_count_what_was_approved_before(agent: Agent):
    """Ana approved the coffee maker ($48.00); on the mugs she asks the customer first, the
    reply brings a new proposal in the same run, and approving it would pass her limit."""
    first_run, first = _waiting(agent, COFFEE_MAKER)
    agent.decide(first.id, True, "Ana Ruiz", limit_cents=5000,
                 fingerprint=agent.store.approval(first.id).fingerprint)
    assert agent.advance(first_run.id).status == RunStatus.DONE

    run, mugs = _waiting(agent, MUGS)
    agent.ask(mugs.id, "Ana Ruiz", "Could you send a photo of the mugs?",
              fingerprint=agent.store.approval(mugs.id).fingerprint)
    assert agent.advance(run.id).status == RunStatus.ASKED
    agent.add_reply(run.id, "Here you go: both mugs are in pieces (photo attached).")
    assert agent.advance(run.id).status == RunStatus.WAITING
    again = _pending(agent, run.id)
    assert again.id != mugs.id and again.amount_cents == 3295
    with pytest.raises(DecisionRefused) as refused:
        agent.decide(again.id, True, "Ana Ruiz", limit_cents=5000,
                     fingerprint=agent.store.approval(again.id).fingerprint)
    assert str(refused.value) == OVER
    assert agent.store.approval(again.id).status == "pending"
    assert agent.store.audit()[-1].event == "refused"
    # Another approver's own total on the order starts from nothing.
    agent.decide(again.id, True, "Sam Ode", limit_cents=5000,
                 fingerprint=agent.store.approval(again.id).fingerprint)
    assert agent.advance(run.id).status == RunStatus.DONE
    assert _paid(agent) == [4800, 3295]
    assert agent.store.verify_audit() is None


def test_two_tickets_side_by_side_then_the_shipping_owed_is_paid_once(agent: Agent, scripted):
    """Two tickets for one order, one per damaged item, proposed side by side: Ana may
    approve one, not both. Neither could include the shipping; once both are approved the
    customer asks for it, the agent proposes it alone, it is approved as it is (no line to
    tick), paid, and a second request for it is refused."""
    coffee_run, coffee = _waiting(agent, COFFEE_MAKER)
    mugs_run, mugs = _waiting(agent, MUGS)
    assert (coffee.amount_cents, mugs.amount_cents) == (4800, 2600)   # no shipping in either
    agent.decide(coffee.id, True, "Ana Ruiz", limit_cents=5000,
                 fingerprint=agent.store.approval(coffee.id).fingerprint)
    with pytest.raises(DecisionRefused, match=r"would bring what Ana Ruiz has approved on order "
                                              r"A1043 to \$74\.00 \(\$48\.00 approved before\)"):
        agent.decide(mugs.id, True, "Ana Ruiz", limit_cents=5000,
                     fingerprint=agent.store.approval(mugs.id).fingerprint)
    agent.decide(mugs.id, True, "Lee Park", fingerprint=agent.store.approval(mugs.id).fingerprint)
    for run in (coffee_run, mugs_run):
        assert agent.advance(run.id).status == RunStatus.DONE

    run, shipping = _waiting(agent, SHIPPING_TOO)
    assert [(x.line, x.reason, x.amount_cents) for x in shipping.lines] == [
        ("SHIPPING", "shipping", 695)]
    assert agent.approval_problem(shipping) is None          # the card's button is enabled
    assert agent.quote_kept(shipping).total_cents == 695
    with pytest.raises(DecisionRefused, match="pays only the shipping"):
        agent.decide(shipping.id, True, "Lee Park", keep=["MUG-STN-2"],
                     fingerprint=agent.store.approval(shipping.id).fingerprint)
    with pytest.raises(DecisionRefused, match="above Ana Ruiz's approval limit"):
        agent.decide(shipping.id, True, "Ana Ruiz", limit_cents=5000,
                     fingerprint=agent.store.approval(shipping.id).fingerprint)   # $48.00 + $6.95
    decided = agent.decide(shipping.id, True, "Lee Park", keep=["SHIPPING"],
                           fingerprint=agent.store.approval(shipping.id).fingerprint)
    assert (decided.status, decided.amount_cents) == ("approved", 695)
    assert agent.advance(run.id).status == RunStatus.DONE
    assert _paid(agent) == [4800, 2600, 695]
    assert "shipping $6.95" in agent.outbox.messages()[-1]["request"]["body"]

    # Paid once: a model that asks for it again is refused when it proposes.
    other, _brain, _server = scripted(Reply("again", calls=[("issue_refund", {
        "order_id": "A1043", "lines": [{"line": "SHIPPING", "reason": "damaged"}],
        "amount": None, "summary": "Shipping."})]))
    again = other.advance(other.start(MAYA, "Order A1043: the shipping, please.").id)
    assert again.status == RunStatus.DONE
    (call,) = [c for s in other.store.steps(again.id) if s.kind == "response"
               for c in other.store.calls(s.data["response_id"]) if c.name == "issue_refund"]
    assert "Shipping has already been refunded" in json.loads(call.output)["error"]
    assert _paid(agent) == [4800, 2600, 695]
    assert agent.store.verify_audit() is None


# -- a kept line is never paid more than its card showed ---------------------------------------


def _own_data(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA, tmp_path / "data"))


def _agent_on(data: Path, output: Path) -> Agent:
    settings = Settings(api_key="", data_dir=data, output_dir=output, max_retries=2,
                        timeout=30.0)
    return Agent(settings, model=open_model(settings))


def _edit_order(data: Path, edit) -> None:
    orders = json.loads((data / "orders.json").read_text())
    (maya,) = [o for o in orders["orders"] if o["order_id"] == "A1043"]
    edit(maya)
    (data / "orders.json").write_text(json.dumps(orders))


def test_a_kept_line_whose_price_rose_is_refused_though_the_total_is_lower(tmp_path: Path):
    """Proposed: the coffee maker $48.00 and the mugs $18.50. The price of the coffee maker is
    then edited to $60.00; keeping only it would pay $60.00, under the $66.50 total the card
    showed but more than its own line showed: refused, nothing paid."""
    data, output = _own_data(tmp_path), tmp_path / "output"
    agent = _agent_on(data, output)
    run, approval = _waiting(agent, "Order A1043: the coffee maker arrived shattered, and "
                                    "honestly I also don't want the mugs anymore.")
    assert [(x.line, x.amount_cents) for x in approval.lines] == [
        ("POUR-GLS-01", 4800), ("MUG-STN-2", 1850)]

    def dearer(order):
        order["items"][0]["price"] = 60.0
        order["total"] = round(order["total"] + 12, 2)
    _edit_order(data, dearer)

    approver = _agent_on(data, output)
    with pytest.raises(DecisionRefused) as refused:
        approver.decide(approval.id, True, "Sam", keep=["POUR-GLS-01"],
                        fingerprint=approver.store.approval(approval.id).fingerprint)
    assert str(refused.value) == (
        "Cannot approve: Glass pour-over coffee maker (POUR-GLS-01) now pays $60.00, more "
        "than the $48.00 its card showed; ask the agent to propose again.")
    assert approver.store.approval(approval.id).status == "pending"
    assert approver.payments.refunds() == []
    assert [e.event for e in approver.store.audit()] == ["requested", "refused"]
    # A line whose price fell is paid at its new, lower price.
    _edit_order(data, lambda order: (order["items"][0].update(price=40.0),
                                     order.update(total=round(order["total"] - 20, 2))))
    kept = approver.decide(approval.id, True, "Sam", keep=["POUR-GLS-01"],
                           fingerprint=approver.store.approval(approval.id).fingerprint)
    assert kept.amount_cents == 4000
    assert approver.advance(run.id).status == RunStatus.DONE
    assert _paid(approver) == [4000]
    for a in (agent, approver):
        a.model.server.close()


# -- fresh shop data at every decision ---------------------------------------------------------


def test_the_pages_worker_refuses_a_line_refunded_by_phone_since_it_started(tmp_path: Path):
    """One long-lived process, as the page's server is: it loaded orders.json before the
    proposal; the shop's export then records the line as refunded by phone. The page's
    decision call (Worker.decide) must refuse, as a new terminal process does, and the card
    must say why."""
    data, output = _own_data(tmp_path), tmp_path / "output"
    agent = _agent_on(data, output)
    worker = Worker(agent)
    worker.start()
    try:
        run, approval = _waiting(agent, COFFEE_MAKER)
        assert agent.approval_problem(approval) is None
        _edit_order(data, lambda order: order.update(refunds=[
            {"days_ago": 0, "reason": "Refunded by phone.",
             "lines": [{"line": "POUR-GLS-01", "reason": "damaged"}]}]))
        problem = agent.approval_problem(approval)
        assert problem and "has already been refunded (an earlier refund)" in problem
        with pytest.raises(DecisionRefused, match=r"already been refunded \(an earlier refund\)"):
            worker.decide(approval.id, True, "Dana",
                          fingerprint=worker.agent.store.approval(approval.id).fingerprint)
        assert agent.store.approval(approval.id).status == "pending"
        assert agent.payments.refunds() == []
        assert agent.store.run(run.id).status == RunStatus.WAITING
    finally:
        worker.shutdown()
        agent.model.server.close()


def test_the_shop_reads_a_changed_file_again_and_an_unchanged_one_once(tmp_path: Path):
    """A rewrite of the same size right after a read is seen (the racy window); an unchanged
    file gives back the same parsed orders, so the page does not parse it on every use."""
    data = _own_data(tmp_path)
    _edit_order(data, lambda order: None)    # written as json.dumps writes it, just now
    shop = Shop(data)
    first = shop.orders
    assert shop.orders is first
    before = (data / "orders.json").stat().st_size
    _edit_order(data, lambda order: (order["items"][0].update(price=49.0),
                                     order.update(total=81.95)))
    assert (data / "orders.json").stat().st_size == before          # same size, same second
    assert shop.order("A1043").items[0].price == 49.0
    assert shop.orders is shop.orders
