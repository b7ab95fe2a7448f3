# The cells of beyond.ipynb, read by build.py (md, code and SETUP come from there).
# ruff: noqa: F821

BEYOND = [
md("""
# Beyond the pattern

The walkthrough (`walkthrough.ipynb`) teaches the pattern: stop at the gated call, save three
values, pay once keyed by the call id, resume with `previous_response_id`. This notebook is
for when you run it for real: a rejection; a restart mid-run (the walkthrough's boundary 3);
a person who approves only part of a proposal, or who needs to ask the customer first; two
processes that both believe they own a run (boundary 7); the books checked against the
outside systems; accounts with limits; a customer who writes back, an angry one played by a
second model; a stored response gone after 30 days; xAI versus OpenAI; the store on
PostgreSQL; and testing your own agent with a scripted model. As in the walkthrough, every
claim is a cell that prints `True` and asserts it.
"""),
code(SETUP.format(name="beyond")),
md("""
## A rejection, and what the customer is told

`reject(id, fingerprint, by=..., note=...)`: nothing is paid, and the reviewer's note is what
the customer is told.
"""),
code('''
other = Agent(agent.settings.with_(output_dir=OUTPUT / "rejection"))   # a second desk
check("each desk runs on SQLite, the file in its output folder", other.store.engine == "sqlite"
      and other.store.path == OUTPUT / "rejection" / "refund-agent.sqlite3")
run = other.advance(other.start_sample("damaged").id)
[no] = other.store.approvals("pending")
other.reject(no.id, no.fingerprint, by="Dana Kim",
             note="The photos show a chip from use, not damage in transit.")
run = other.advance(run.id)
told = other.outbox.messages()[-1]["request"]
show(wrap(told["body"]))
check("rejected: nothing paid", run.status.value == "done" and not other.payments.refunds())
check("the customer is told the reviewer's note", told["to"] == "maya.chen@example.com"
      and "a chip from use" in told["body"])
'''),
md("""
## A restart, mid-run

Boundary 3 of the walkthrough: each call's output is saved as the call returns. Without it, a
resume runs every call again. Tom's email (past the 30-day window) is handled by a process
killed right after its first response was saved with the lookup's output (`after_response`).
`resume` sends that output without running the lookup again, and is killed just after the
email goes out (`after_email`). This notebook finishes the run, and the outbox's key keeps it
to one email. Then the store forgets saved outputs, on purpose, and the check fails.
"""),
code('''
from unittest import mock
from refund_agent import Store

def restarted(kill_again=True):
    cli("sample", "past-window", only=("crash point",), REFUND_AGENT_CRASH_AT="after_response")
    tom = agent.store.runs(limit=1)[0]
    if kill_again:
        cli("resume", only=("crash point",), REFUND_AGENT_CRASH_AT="after_email")
    tom = agent.advance(tom.id)                          # this notebook
    ran = [s.data["call_id"] for s in agent.store.steps(tom.id) if s.kind == "result"]
    check("3. no call ran twice, across the processes", tom.status.value == "done"
          and len(ran) == len(set(ran)) == 3)
    mails = [m for m in agent.outbox.messages() if m["idempotency_key"].startswith(tom.id)]
    check("one email, although its process died after sending", len(mails) == 1)

restarted()
saved = Store.calls   # the break: this process forgets the outputs the killed one saved
with mock.patch.object(Store, "calls", lambda self, response_id: [
        c.model_copy(update={"output": None}) for c in saved(self, response_id)]):
    failed = fails(lambda: restarted(kill_again=False))
check("the broken store fails the check", failed.startswith("3."))
'''),
md("""
## Partial approvals, priced again at the decision

Maya no longer wants the coffee maker or the mugs, both unused: a change of mind on two lines,
with the `$7.50` return fee shared between them. Dana approves the coffee maker only. The
kept line is priced again inside the decision's transaction: on its own it carries the whole
fee, so it pays `$40.50`, not the `$43.14` it showed as part of the pair. The unticked mugs are
declined, and their line is free for a later request.
"""),
code('''
from refund_agent.desk import quote_refund
from tutorial import wrap

shop, order = agent.shop, agent.shop.order("A1043")
run = agent.advance(agent.start("maya.chen@example.com", sender_name="Maya Chen",
    subject="Return", body="Order A1043: I don't want the coffee maker or the mugs anymore. "
                           "Both are unused, still in the box.").id)
proposal = agent.store.approvals("pending")[0]
print([(x.line, x.amount) for x in proposal.lines])
decided = agent.decide(proposal.id, approve=True, by="Dana Kim", keep=["POUR-GLS-01"],
                       note="The mugs were a gift; they stay.", fingerprint=proposal.fingerprint)
alone = quote_refund(order, shop.terms, [("POUR-GLS-01", "changed_mind")], {}, shop.today)
check("the kept line is priced again: $40.50, not $43.14", decided.amount == alone.amount
      == 40.50)
run = agent.advance(run.id)
[refund] = agent.payments.refunds()
check("the payment holds the kept line only", [x["line"] for x in refund["request"]["lines"]]
      == ["POUR-GLS-01"] and refund["request"]["amount_cents"] == 4050)
told = agent.outbox.messages()[-1]["request"]["body"]
show(wrap(told))
check("the customer is told which line stays, and the reviewer's note", "mugs" in told.lower()
      and "were a gift" in told)
check("the declined line is free again", "MUG-STN-2" not in agent.store.held_lines("A1043"))
'''),
md("""
## Asking the customer first

Sometimes the approver needs something before deciding: a photo, a serial number. `ask`
closes the proposal as *asked* (a compare-and-set like a decision) and the run emails the
question and finishes, waiting on the customer (`asked`). Their reply continues the run, and
the agent proposes again, with a fresh approval.
"""),
code('''
leo = agent.advance(agent.start("leo.martins@example.com", sender_name="Leo Martins",
    subject="Board", body="The oak cutting board from order A1058 arrived cracked.").id)
first = agent.store.approvals("pending")[0]
agent.ask(first.id, by="Dana Kim", question="Could you send a photo of the crack?",
          fingerprint=first.fingerprint)
leo = agent.advance(leo.id)
check("the run waits on the customer, question sent", leo.status.value == "asked"
      and "photo of the crack" in agent.outbox.messages()[-1]["request"]["body"])
agent.add_reply(leo.id, "Here it is: the crack runs along one edge.")
leo = agent.advance(leo.id)
check("the reply brings a new proposal, nothing paid yet", leo.status.value == "waiting"
      and [a.status for a in agent.store.run_approvals(leo.id)] == ["asked", "pending"]
      and len(agent.payments.refunds()) == 1)
'''),
md("""
## Fencing: a process that lost its run does nothing more

Every `advance` takes the run's *lease*; a lease whose holder died or stopped renewing it is
taken over, and each takeover raises its *epoch*, a fencing token. A process that was only
stalled (a long GC pause, a laptop lid) wakes up believing it still owns the run. Every write
on a run's behalf checks the epoch in its own transaction, so its first write is refused.
"""),
md("""
**A worker's claim: one owner at a time** (the walkthrough's boundary 7). Without it, a
stalled process wakes up and writes, pays or emails beside the new owner. `claim()`, what
`refund-agent worker` runs, takes a decided run under a fresh lease (its epoch raised), never
one a live process holds. The stalled owner's first write is refused, and so is its hand-over
of the run to a person, which would email the customer.
"""),
code('''
import time
from refund_agent import LeaseLost

fenced = Agent(agent.settings.with_(output_dir=OUTPUT / "fencing", lease_seconds=0.5))
held = fenced.advance(fenced.start_sample("damaged").id)
shown = fenced.store.approvals("pending")[0]
fenced.approve(shown.id, shown.fingerprint, by="Dana Kim")
epoch = lambda: fenced.store.lease_epoch(held.id)      # the fencing token, as stored
stalled, before = fenced.store.acquire(held.id, token="stalled owner"), epoch()
check("7. a worker takes no run a live process holds", fenced.claim() is None)
time.sleep(0.6)                                  # it stalls: no renewal for longer than a lease
claimed = fenced.claim()
check("7. the worker claimed the run under a fresh lease", claimed == held.id
      and epoch() == before + 1)
try:
    fenced.store.record_output(stalled, "call-0", "{}", [])    # the stalled owner wakes up
    refused = "accepted"
except LeaseLost:
    refused = "refused"
check("the stalled owner's write is refused", refused == "refused")
try:   # a run that cannot continue is handed to a person, and the customer emailed: fenced too
    fenced.hand_over(held.id, stalled, "The stalled owner gives up on the run.")
except LeaseLost:
    pass
check("nor can it hand the run over: no email went out", not [m for m in
      fenced.outbox.messages() if m["idempotency_key"] == f"{held.id}/follow-up"])
check("the new owner finishes and pays once; the customer got its one answer",
      fenced.advance(claimed).status.value == "done" and len(fenced.payments.refunds()) == 1
      and len([m for m in fenced.outbox.messages() if m["request"]["to"] == held.sender]) == 1)
'''),
md("""
The same takeover, drawn on a timeline, on the desk's own store:
"""),
code('''
from refund_agent import RunStatus, Store
from refund_agent.errors import LeaseLost

stalled = agent.store.acquire(run.id, token="stalled owner")
takeover = Store(agent.settings.db_path, lease_seconds=0).acquire(run.id, token="new owner")
try:
    agent.store.record_output(stalled, "call-0", "{}", [])     # the stalled owner wakes up
    refused = False
except LeaseLost:
    refused = True
show(f"""
time ──────────────────────────────────────────────────────────────────────────────▶
stalled owner  ■ lease, epoch {stalled.epoch} ···· paused (GC, laptop lid) ········ write as epoch {stalled.epoch}: \
{"refused" if refused else "ACCEPTED"}
new owner                   ■ takes the expired lease, epoch {takeover.epoch} ───── writes as epoch {takeover.epoch}
store          lease_epoch {stalled.epoch} ──────────▶ {takeover.epoch}     (each write: WHERE its epoch is the run's)
""")
check(f"epoch {stalled.epoch} -> {takeover.epoch}: the stalled owner's write is refused",
      refused and takeover.epoch == stalled.epoch + 1)
_ = agent.store.release(takeover, RunStatus.DONE)   # returns the run as it leaves it
'''),
md("""
Writes are not the only danger: a payment or an email leaves the building before anything is
written. So the loop checks the lease once more just before any effect function runs (paying,
emailing): an agent cannot forget it.
To show it, a run started by another process (`refund-agent sample`) is approved here, and the
lease is taken over at the exact moment this process picks the run up.
"""),
code('''
taken = []
def take_over_at(kind, name=None):
    "An on_event hook: another owner takes the run over when this step appears."
    def hook(event):
        if (event.kind == "step" and event.step.kind == kind and not taken
                and name in (None, event.step.data.get("name"))):
            other = Store(agent.settings.db_path, lease_seconds=0)
            taken.append((other, other.acquire(event.run_id, token="new owner")))
    return hook

cli("sample", "angry")
[approval] = [a for a in agent.store.approvals("pending") if a.order_id == "A1066"]
priya = agent.store.run(approval.run_id)
agent.approve(approval.id, approval.fingerprint, by="Dana Kim")
try:
    agent.advance(priya.id, on_event=take_over_at("restart"))
except LeaseLost as exc:
    print("LeaseLost:", str(exc).split(" while")[0])
check("the process that lost the run paid nothing", agent.payments.find(approval.id) is None)
other, lease = taken.pop()
_ = other.release(lease, RunStatus.WAITING)
'''),
md("""
The refund and its audit line are written in one transaction: there is no moment at which a
crash leaves a payment the audit does not know about. A `resume` killed right after saving
the refund's output (`after_tool`) shows it. Then the email: the lease is taken over just as
the model asks to send it, and nothing goes out.
"""),
code('''
cli("resume", REFUND_AGENT_CRASH_AT="after_tool")
issued = [e for e in agent.store.audit() if e.approval_id == approval.id and e.event == "issued"]
check("killed right after paying: the payment has its audit line",
      agent.payments.find(approval.id) is not None and len(issued) == 1)
try:
    agent.advance(priya.id, on_event=take_over_at("call", "send_customer_message"))
except LeaseLost as exc:
    print("LeaseLost:", str(exc).split(" while")[0])
check("the process that lost the run sent no email", not [m for m in agent.outbox.messages()
      if m["idempotency_key"].startswith(priya.id)])
for other, lease in taken:   # the new owner lets the run go; this notebook finishes it
    other.release(lease, RunStatus.WAITING)
priya = agent.advance(priya.id)
check("the new owner finishes: one refund, one email", priya.status.value == "done"
      and len([m for m in agent.outbox.messages() if m["request"]["to"] == priya.sender]) == 1)
'''),
md("""
## Reconciliation: the books against the outside systems

`reconcile(store, output_dir)` (what `refund-agent audit --verify` runs) checks the audit
chain, then compares the outside systems with the store **in both directions**: every refund
in `refunds.log` has an approved approval and an audit line with the same lines and amount,
and every approved payment has its refund; every email in `outbox.log` belongs to a
`send_customer_message` call, and every sent call has its email. We tamper with copies.
"""),
code('''
import shutil, sqlite3
from contextlib import closing
from refund_agent.desk import DeskStore
from refund_agent.desk.reconcile import reconcile

def copy_of_desk(name, log=None, edit=None):
    "A copy of this desk's store and logs; `edit` changes the lines of one log."
    folder = OUTPUT / name
    folder.mkdir()
    with closing(sqlite3.connect(agent.settings.db_path)) as src, \\
         closing(sqlite3.connect(folder / "refund-agent.sqlite3")) as dst:
        src.backup(dst)
    for each in ("refunds.log", "outbox.log"):
        lines = (OUTPUT / each).read_text().splitlines(keepends=True)
        (folder / each).write_text("".join(edit(lines) if each == log else lines))
    return DeskStore(folder / "refund-agent.sqlite3"), folder

made = len((OUTPUT / "refunds.log").read_text().splitlines())
sent = len((OUTPUT / "outbox.log").read_text().splitlines())
approved = len([a for a in agent.store.approvals("approved")])
show(f"""
  outside systems              the store
  refunds.log ({made} refunds) ──▶  each one: an approved approval and its audit line, same lines
                         ◀──  each approved approval ({approved}): its refund
  outbox.log  ({sent} emails)  ──▶  each one: a send_customer_message call
                         ◀──  each sent call: its email
""")

check("this desk's books agree", reconcile(agent.store, OUTPUT) is None and made == approved)
first_refund, first_email = (json.loads((OUTPUT / log).read_text().splitlines()[0])
                             for log in ("refunds.log", "outbox.log"))
mugs = {"line": "MUG-STN-2", "reason": "changed_mind", "amount_cents": 1850}
forged = {**first_refund, "idempotency_key": "run_000000000000-call-0",
          "refund_id": "re_" + "0" * 16, "request": {"order_id": "A1043", "amount_cents": 1850,
                                                      "lines": [mugs], "reason": "nobody"}}
forged_email = {**first_email, "idempotency_key": "run_000000000000-call-0",
                "message_id": "msg_" + "0" * 16}
cases = {  # the tampering: which log, how, and what the problem must name
    "a refund nobody approved": ("refunds.log", lambda ls: ls + [json.dumps(forged) + "\\n"],
                                 forged["idempotency_key"]),
    "an approved refund missing": ("refunds.log", lambda ls: ls[1:], first_refund["refund_id"]),
    "an email no call sent": ("outbox.log", lambda ls: ls + [json.dumps(forged_email) + "\\n"],
                              forged_email["message_id"]),
    "a sent email missing": ("outbox.log", lambda ls: ls[1:], first_email["message_id"]),
}
for what, (log, edit, named) in cases.items():
    problem = reconcile(*copy_of_desk(what.replace(" ", "-"), log, edit)) or ""
    show(f"  {what}: {problem}")
    check(f"caught: {what}", named in problem)
'''),
md("""
Each audit entry's hash covers every field, chained to the entry before it, and the chain's
head is anchored. Edit any one field of a payment's audit line in a copy, and `verify_audit`
names the entry.
"""),
code('''
fields = {"at": "at + 1", "event": "'issued!'", "actor": "'Mallory'", "pid": "pid + 1",
          "run_id": "'run_x'", "approval_id": "'other'", "order_id": "'A1021'",
          "amount": "amount + 1", "note": "'re_x'", "lines": "'[]'"}
caught = []
for field, value in fields.items():
    store, _ = copy_of_desk(f"edited-{field}")
    with closing(sqlite3.connect(store.path)) as db:
        db.execute(f"UPDATE audit SET {field} = {value} WHERE event = 'issued'"); db.commit()
    if "was edited after it was written" in (store.verify_audit() or ""):
        caught.append(field)
check(f"an edit of any of the {len(fields)} fields is caught", caught == list(fields))
'''),
md("""
## Ownership: only the sender's orders

The model can only see what the tools show it, and `lookup_order` shows an order only to the
address that placed it (compared in canonical form, so a look-alike address matches no one).
A stranger naming Maya's order number gets the same answer as for an order that does not
exist, so order numbers cannot be probed. Sam names her mugs too (their line is free again
since Dana declined it): without the ownership check, the agent would propose him a refund.
"""),
code('''
sam = agent.advance(agent.start("sam.stone@example.com", sender_name="Sam Stone",
    subject="Refund", body="Order A1043 came with both stoneware mugs cracked; please refund the"
    " mugs.").id)
[looked] = [s.data["output"] for s in agent.store.steps(sam.id)
            if s.kind == "result" and s.data["name"] == "lookup_order"]
check("the stranger's lookup found nothing", "error" in looked and "Maya" not in json.dumps(looked))
check("no refund was proposed to the stranger", not agent.store.run_approvals(sam.id))
'''),
md("""
## Accounts and limits

With accounts (`refund-agent users add`), the page and the terminal ask who you are before
anything else (`tests/desk/test_accounts.py` and the web tests prove it), and each approver has a
limit covering everything they approved on an order, checked inside the decision's
transaction. A wrong password is refused, and the store keeps only a salted hash.
"""),
code('''
from refund_agent import DecisionRefused
from refund_agent.desk.accounts import Accounts
from refund_agent.errors import SignInFailed

accounts = Accounts(agent.store)
accounts.add("Sam Lee", "approver", "correct horse battery", limit=40)
sam_lee = accounts.sign_in("Sam Lee", "correct horse battery")
try:
    accounts.sign_in("Sam Lee", "a guess at it")
    wrong = "accepted"
except SignInFailed as exc:
    wrong = str(exc)
check("a wrong password is refused", wrong == "Wrong name or password.")
pending = agent.store.approvals("pending")[0]
try:
    agent.decide(pending.id, approve=True, by=sam_lee.name, limit_cents=sam_lee.limit_cents,
                 fingerprint=pending.fingerprint)
    refused = ""
except DecisionRefused as exc:
    refused = str(exc)
show(refused)
check(f"Sam's $40 limit refuses ${pending.amount:.2f}", "limit" in refused
      and agent.store.approval(pending.id).status == "pending")
'''),
md("""
## PostgreSQL, for several hosts

One SQLite file serves every process on one machine. For several hosts, set
`REFUND_AGENT_DATABASE_URL=postgresql://...` (install `.[postgres]`): the same `Store` API runs
on PostgreSQL (`refund_agent/store/`: one class per engine, each with its own schema steps), the stand-ins keep their idempotency records in the same database, workers
claim runs with `FOR UPDATE SKIP LOCKED` (`refund-agent worker`), and pages learn of changes by
`LISTEN/NOTIFY`. `docs/MANY-MACHINES.md` says how to set it up; the test suite runs the same reliability tests on a throwaway cluster. Nothing in the
notebooks depends on the engine: they call the store's methods, never SQL.
"""),
code('''
from refund_agent.store import engine_for

elsewhere = agent.settings.with_(database_url="postgresql://desk@db.example/refunds")
check("the store is chosen by the settings alone: a database URL there opens PostgreSQL",
      engine_for(elsewhere.store_target).engine == "postgresql")
'''),
md("""
## Two people click Approve at once

Boundary 5, raced. A decision reads the approval and writes it
in one `BEGIN IMMEDIATE` transaction, only `WHERE status = 'pending'`, so exactly one wins; the
other gets `AlreadyDecided` naming the winner (the web page answers 409), audited `ignored`.
"""),
code('''
import threading
from refund_agent import AlreadyDecided

race = Agent(agent.settings.with_(output_dir=OUTPUT / "double-click"))
ticket = race.advance(race.start_sample("damaged").id)
pending = race.store.approvals("pending")[0]
barrier, outcomes = threading.Barrier(2), {}
def click(name):
    barrier.wait()
    try:
        outcomes[name] = race.approve(pending.id, pending.fingerprint, by=name)
    except AlreadyDecided as exc:
        outcomes[name] = exc
threads = [threading.Thread(target=click, args=(n,)) for n in ("Dana Kim", "Sam Lee")]
[t.start() for t in threads]; [t.join() for t in threads]
won = [n for n, o in outcomes.items() if not isinstance(o, Exception)]
lost = [o for o in outcomes.values() if isinstance(o, AlreadyDecided)]
check("exactly one click won; the other was told who", len(won) == len(lost) == 1
      and won[0] in str(lost[0]))
check("the late click is audited 'ignored'", [e.event for e in race.store.audit()].count(
      "ignored") == 1)
ticket = race.advance(ticket.id)
approved = [e.actor for e in race.store.audit() if e.event == "approved"]
paid = [s.data.get("approved_by") for s in race.store.steps(ticket.id) if s.kind == "refund"]
check("the run pays once, on the one decision that won", ticket.status.value == "done"
      and len(race.payments.refunds()) == 1 and approved == paid == won)
'''),
md("""
## Expiry: nobody decides in time

Durable execution needs a timeout. `agent.expire()` (the web app runs it on a timer; a cron job
can run `refund-agent expire`) closes approvals left pending longer than `approval_days`, 7 by
default, as a compare-and-set like a decision. Ages are read by the **database's** clock, which
wrote them: a host whose clock runs a week ahead expires nothing early. We age one approval by
editing its row, and move this process's clock with `mock`.
"""),
code('''
import sqlite3, time
from unittest import mock
from refund_agent.config import APPROVAL_DAYS   # the default, one constant

late = Agent(agent.settings.with_(output_dir=OUTPUT / "expiry"))
run = late.advance(late.start_sample("damaged").id)
age = lambda days: sqlite3.connect(late.settings.db_path, isolation_level=None).execute(
    "UPDATE approvals SET requested_at = requested_at - ?", (days * 86400,))
ahead = time.time() + 8 * 86400
with mock.patch("time.time", lambda: ahead):
    check("a process clock 8 days ahead expires nothing", late.expire() == [])
age(6.9)
check("7 days by default: at 6.9 days it waits", late.settings.approval_days == APPROVAL_DAYS
      == 7 and late.expire() == [])
age(0.2)
check("at 7.1 days it expires", [a.status for a in late.expire()] == ["expired"])
run = late.advance(run.id)
check("the run told the customer and paid nothing", run.status.value == "done"
      and not late.payments.refunds() and len(late.outbox.messages()) == 1)
'''),
md("""
## The customer writes back, and an angry one

A finished run continues when the customer replies: `add_reply` saves the reply, and the next
`advance` sends it as one user message on top of the run's last stored response.

Then Priya wants all `$94.95` back for order A1066, gift card included, and threatens a
chargeback. `converse` lets a second model play her: it writes at most three replies (the
stand-in here; with `XAI_API_KEY` set, Grok plays her from a short brief and the emails so
far, never the team's notes). The amount is never the model's: the policy prices the lines, so
the gift card (final sale) is refused and the skillet pays `$39.00` less the `$7.50` return fee.
"""),
code('''
chat = Agent(agent.settings.with_(output_dir=OUTPUT / "replies"))    # a desk of their own
requests = chat.model.server.requests        # what the stand-in received, for the checks
maya = chat.advance(chat.start_sample("damaged").id)
shown = chat.store.approvals("pending")[0]
chat.approve(shown.id, shown.fingerprint, by="Dana Kim")
maya = chat.advance(maya.id)
last = chat.store.run(maya.id).last_response_id
chat.add_reply(maya.id, "Thank you, that was quick!")
sent_before = len(requests)
maya = chat.advance(maya.id)
body = requests[sent_before]
check("the reply continues the last stored response", body.get("previous_response_id") == last)
check("and is the only input", [i.get("role") for i in body["input"]] == ["user"])
check("the answer went to Maya only", chat.outbox.messages()[-1]["request"]["to"]
      == "maya.chen@example.com")
'''),
code('''
from refund_agent.desk import converse, quote_refund
from tutorial import emails

priya = converse(chat, chat.start_sample("angry").id)
approval = chat.store.approvals("pending")[0]
allowed = quote_refund(chat.shop.order("A1066"), chat.shop.terms,
                       [("SKL-CI-10", "changed_mind")], {}, chat.shop.today)
check("proposed exactly what the policy computes", approval.amount == allowed.amount == 31.50
      and [x.line for x in approval.lines] == ["SKL-CI-10"])
check("the gift card is refused: final sale", isinstance(quote_refund(chat.shop.order("A1066"),
      chat.shop.terms, [("GIFT-50", "changed_mind")], {}, chat.shop.today), str))
sent_before = len(requests)
chat.approve(approval.id, approval.fingerprint, by="Dana Kim",
             note="TEAM ONLY: chargeback risk.")
priya = converse(chat, priya.id)
thread = emails(chat, priya.id, last=2)
playing = [r for r in requests[sent_before:] if not r.get("tools")]   # the customer's model
paid = [r for r in chat.payments.refunds() if r["request"]["order_id"] == "A1066"]
check(f"at most 3 simulated replies ({priya.simulated_replies}), still one refund of $31.50",
      1 <= priya.simulated_replies <= 3 and [r["request"]["amount_cents"] for r in paid] == [3150])
check("the simulated customer read the emails, never the team's note", playing
      and not any("TEAM ONLY" in json.dumps(r["input"]) for r in playing))
private = [json.dumps(s.data["text"])[1:-1] for s in chat.store.steps(priya.id)
           if s.kind in ("note", "reasoning")]                # the agent's, for the team
check("nor the agent's notes for the team or its reasoning", private and not any(
      p in json.dumps(r["input"]) for p in private for r in playing))
'''),
md("""
## Thirty days later, and the two providers

The stored response expires too: the API keeps it 30 days. A decision that comes later still
works: the request naming the gone response gets a 404, the agent sends the same turn once more
with the run's own transcript (saved at boundary 2), and chains from the new response. We move
the stand-in's clock 31 days ahead.
"""),
code('''
slow = Agent(agent.settings.with_(output_dir=OUTPUT / "thirty-days"))
run = slow.advance(slow.start_sample("damaged").id)
slow.model.server.advance_clock(days=31)
shown = slow.store.approvals("pending")[0]
slow.approve(shown.id, shown.fingerprint, by="Dana Kim")
sent_before = len(slow.model.server.requests)
run = slow.advance(run.id)
resent = [s.data["response_id"] for s in slow.store.steps(run.id) if s.kind == "resent"]
after = slow.model.server.requests[sent_before:]
check("the gone response was replaced by the transcript", resent and len(after) >= 3
      and after[1].get("previous_response_id") is None)
check("and the next request chains from the new response", len(resent) == 1
      and len(after) >= 3 and after[2].get("previous_response_id") == resent[0])
check("the run finished and paid once", run.status.value == "done"
      and len(slow.payments.refunds()) == 1)
'''),
md('''
**The real provider's key.** Stripe takes it as `idempotency_key=approval.id` (run id + call
id) but forgets keys after 24 hours, so a resume days later looks the refund up by its key
(kept in the refund's metadata) before creating one (`docs/OUTSIDE-SYSTEMS.md`).

**xAI versus OpenAI.** Both speak the Responses API, with differences kept in one place
(`refund_agent/providers/table.py`, `docs/PROVIDERS.md`). The one that shapes this pattern:
xAI refuses `instructions` together with `previous_response_id`, so the system prompt goes as
the first input message. The stand-in speaks both dialects:
'''),
code('''
import openai
from offline_model import start_offline_server

answers = {}
for dialect, model in (("xai", "grok-4.7"), ("openai", "gpt-5")):
    stand_in = start_offline_server(OUTPUT / f"{dialect}.sqlite3", latency=0, dialect=dialect)
    api = openai.OpenAI(base_url=stand_in.base_url, api_key="offline", max_retries=0)
    first = api.responses.create(model=model, input="Hello", store=True)
    try:
        api.responses.create(model=model, input="Again", previous_response_id=first.id,
                             instructions="Be brief.")
        answers[dialect] = "accepted"
    except openai.BadRequestError as exc:
        answers[dialect] = f"refused ({exc.status_code})"
print(answers)
check("xAI refuses instructions with previous_response_id, OpenAI accepts them",
      answers == {"xai": "refused (400)", "openai": "accepted"})
'''),
md('''
## Testing your agent with a scripted model

The wire desk of the walkthrough's "Your own agent", imported from the module its
`%%writefile` cell writes. `ScriptedBrain` answers each request with the next `Reply` you give
it (reasoning, text, calls), mistakes included, and fails the test if a step is never asked
for. Here it asks for the wrong amount; `send_wire` refuses it.
'''),
code('''
from tutorial import module_of
WireDesk = module_of("walkthrough.ipynb", OUTPUT).WireDesk   # as the walkthrough wrote it
'''),
code('''
import openai
from offline_model import OfflineServer, Reply
from offline_model.testing import ScriptedBrain
from refund_agent import ModelAccess

(OUTPUT / "balance.json").write_text('{"cents": 200000}')
brain = ScriptedBrain(Reply("Look it up.", calls=[("lookup_wire", {"wire_id": "WR-5002"})]),
                      Reply("Send it.", calls=[("send_wire", {"wire_id": "WR-5002",
                                                              "amount_cents": 95000})]))
server = OfflineServer(OUTPUT / "scripted.sqlite3", brain=brain).start()
client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
tested = WireDesk(agent.settings.with_(output_dir=OUTPUT / "scripted"),
                  model=ModelAccess(client, "scripted", server))
run = tested.advance(tested.start("ops@north.example", "Send wire WR-5002.").id)
shown = tested.store.approvals("pending")[0]
tested.approve(shown.id, shown.fingerprint, by="Dana Kim")
run = tested.advance(run.id)
brain.assert_all_used()                                   # every scripted step was asked for
outputs = [s.data["output"] for s in tested.store.steps(run.id) if s.kind == "result"]
check("a scripted model asks $950.00 for a $900.00 wire: send_wire refuses it",
      outputs[-1]["status"] == "refused" and not (OUTPUT / "scripted" / "wires.log").exists())
'''),
md("""
## Recap

- A rejection pays nothing and tells the customer the reviewer's note; a restarted run sends
  each saved output instead of running its call again.
- A partial approval is priced again at the decision, pays only the kept lines, and frees
  the others; `ask` sends a proposal back to the customer with nothing paid.
- A process that lost its run's lease is refused at its first write, and checks the lease
  again before paying and before emailing; a worker's `claim()` takes only a run no live
  process holds; a payment and its audit line commit together.
- `reconcile` compares refunds and emails with the store in both directions, and the audit
  hash covers every field of every entry.
- `lookup_order` shows only the sender's orders; approvers' limits are checked in the
  decision's transaction; the store's API is the same on SQLite and PostgreSQL.
- A reply continues the run's last stored response; a simulated customer reads only the
  emails, never the team's notes; a response gone after 30 days is replaced by the run's own
  transcript; xAI refuses `instructions` with `previous_response_id`.
- A scripted model tests your own agent: its wrong amount is refused when the tool runs.
"""),
]
