# The cells of walkthrough.ipynb, read by build.py (md, code and SETUP come from there).
# ruff: noqa: F821

WALKTHROUGH = [
md("""
# Pause an agent for a person, resume it exactly once

**The problem.** Your agent is about to do something that cannot be undone: refund a
customer, close an account, send a wire. A person must say yes first, in five minutes or in
three days, from another machine, after your process was redeployed twice. When they say yes,
the action must happen **exactly once**: not zero times because a process died, not twice
because someone clicked twice or a retry ran again.

The pattern is short. Run the model until it asks for the gated tool; save three values (the
response id, the call id, the arguments) and stop. Later, in any process, do the action once,
keyed by the run id and the call id, and resume the model with `previous_response_id` and the
call's output. The Responses API keeps the conversation (`store=True`).

**After this notebook you will be able to** write that pattern in thirty lines of plain
`client.responses.create` calls; make it survive a `kill -9`, a double click, a restart, a
reply, an angry customer and a decision that never comes; check each of its seven durable
boundaries and see each check fail when the boundary is broken; and build your own agent on
the package's loop.

**Which model answers?** With no `XAI_API_KEY`, every request goes to the *offline stand-in*:
a small HTTP server in this process that speaks the Responses API through the same `openai`
SDK. It is not a language model but a fixed support policy, so the stored outputs are what you
get. Every claim is a `check`: it prints the claim with `True`, or stops the notebook.
"""),
code(SETUP.format(name="walkthrough")),
md("""
## The pattern in thirty lines

A refund desk: the model may look orders up freely, but `issue_refund` is **gated**. The setup:
the stand-in, an `openai` client, the shop's read-only tools, and a SQLite file of two tables,
`waiting` (the three values) and `effects` (what happened, one row per idempotency key).
"""),
code('''
import sqlite3, uuid, openai
from offline_model import start_offline_server
from refund_agent.desk import tool_schemas
from refund_agent.desk.prompts import system_prompt
from refund_agent.desk.tools import ShopTools, parse_args

server = start_offline_server(OUTPUT / "plain-model.sqlite3", latency=0)   # or api.x.ai
client = openai.OpenAI(base_url=server.base_url, api_key="offline-stand-in")
email = agent.shop.sample("damaged")                                  # Maya's cracked coffee maker
tools = ShopTools(agent.shop, email.sender, lambda order_id, **_: {})  # look-ups and prices
db = sqlite3.connect(OUTPUT / "plain.sqlite3", isolation_level=None)
db.executescript("CREATE TABLE waiting(run_id PRIMARY KEY, response_id, call_id, arguments);"
                 "CREATE TABLE effects(key PRIMARY KEY, name, output);")
check("effects: one row per idempotency key, the table's primary key", db.execute(
      "SELECT pk FROM pragma_table_info('effects') WHERE name = 'key'").fetchone() == (1,))
'''),
md("""
The whole loop. Look-ups run at once; an effect runs once per **idempotency key**, the run id
plus the call id (call ids are unique within one conversation only); the gated call saves its
three values and stops. `approve` is what any process runs later.
"""),
code('''
GATED, EFFECTS = {"issue_refund"}, {"issue_refund", "send_customer_message"}
def run_tool(run_id, name, call_id, arguments):
    if name not in EFFECTS:                              # a look-up: free to run again
        return getattr(tools, name)(parse_args(name, arguments))
    key = f"{run_id}-{call_id}"                          # the idempotency key
    done = {"status": "refunded", "refund_id": f"re_{uuid.uuid4().hex[:16]}", "amount":
        tools.quote(parse_args(name, arguments)).amount} if name in GATED else {"status": "sent"}
    db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?, ?)", (key, name, json.dumps(done)))
    [(first,)] = db.execute("SELECT output FROM effects WHERE key = ?", (key,))
    return json.loads(first)                             # a repeat gets the first one back

def advance(run_id, input, previous=None):
    while True:
        response = client.responses.create(model="grok-4.7", input=input, tools=tool_schemas(),
            store=True, previous_response_id=previous, parallel_tool_calls=False)
        call = next((item for item in response.output if item.type == "function_call"), None)
        if call is None or call.name in GATED:           # finished, or save 3 values and stop
            db.executemany("INSERT INTO waiting VALUES (?, ?, ?, ?)",
                           [(run_id, response.id, call.call_id, call.arguments)] if call else [])
            return response
        output = json.dumps(run_tool(run_id, call.name, call.call_id, call.arguments))
        input = [{"type": "function_call_output", "call_id": call.call_id, "output": output}]
        previous = response.id

def approve(run_id, by):                                 # later, in any process
    response_id, call_id, arguments = db.execute("SELECT response_id, call_id, arguments FROM"
                                                 " waiting WHERE run_id = ?", (run_id,)).fetchone()
    output = {**run_tool(run_id, "issue_refund", call_id, arguments), "approved_by": by}
    return advance(run_id, [{"type": "function_call_output", "call_id": call_id,
                             "output": json.dumps(output)}], previous=response_id)
'''),
md("""
Run Maya's email until the gated call. The run id is ours; the model never sees it.
"""),
code('''
run_id = "run_" + uuid.uuid4().hex[:12]
prompt = system_prompt(agent.shop.info.name, agent.shop.today)
text = f"From: {email.sender}\\nSubject: {email.subject}\\n\\n{email.body}"
advance(run_id, [{"role": "system", "content": prompt}, {"role": "user", "content": text}])
saved = db.execute("SELECT response_id, call_id, arguments FROM waiting").fetchall()
paid = db.execute("SELECT * FROM effects WHERE name = 'issue_refund'").fetchall()
check("three values saved; nothing paid before approval", len(saved) == 1 and not paid)
[(response_id, call_id, arguments)] = saved
print("waiting for a person:", json.loads(arguments)["lines"])
'''),
md("""
### Later: a person approves; pay once and resume

Hours later, in another process, Dana approves: `approve` reads the three values, pays keyed by
the run and the call, and resumes with the same `previous_response_id`. A retry of the payment
(the approving process died and ran again) gets the first refund back.
"""),
code('''
sent_before = len(server.requests)
answer = approve(run_id, "Dana Kim")
resume = server.requests[sent_before]
show("the model, after: " + answer.output_text)
[(key, paid)] = db.execute("SELECT key, output FROM effects WHERE name = 'issue_refund'")
check("paid once, keyed by the run id and the call id", key == f"{run_id}-{call_id}")
check("the resume chains from the response that made the call",
      resume["previous_response_id"] == response_id and resume["input"][0]["call_id"] == call_id)
check("a retry gets the first refund back", run_tool(run_id, "issue_refund", call_id, arguments)
      == json.loads(paid) and len(db.execute("SELECT * FROM effects").fetchall()) == 2)
check("every request: store=True, one call at a time", all(
      r["store"] is True and r["parallel_tool_calls"] is False for r in server.requests))
'''),
md("""
That is the whole pattern. The rest of this notebook makes those lines survive real life:
where the three values live (a store, committed before anything runs), who calls `approve`,
and what happens when a process dies between paying and saving that it paid.

## The same with the package

`refund_agent.desk.Agent` is that loop with the hard parts done. `start` saves the email as a run;
`advance` drives it, one streamed `responses.create` per turn, printing the terminal's trace
(`->` a call, `<-` its saved output, `**` an approval, `$$` a payment, `>` an email), until
the run finishes or waits for a person.
"""),
code('''
maya = agent.advance(agent.start_sample("damaged").id, on_event=trace())
approval = agent.store.approvals("pending")[0]
[refund_call] = agent.store.calls(approval.response_id)
requests = agent.model.server.requests        # what the stand-in received, for the checks
print()
check("the run waits, and no process holds it", maya.status.value == "waiting"
      and maya.lease_pid is None)
check("the approval saved the three values", approval.response_id == maya.last_response_id
      and approval.call_id == refund_call.call_id and refund_call.name == "issue_refund"
      and json.loads(refund_call.arguments)["order_id"] == approval.order_id)
check("every request asked the API to store its response", all(r["store"] for r in requests))
check("and for one call at a time", all(r["parallel_tool_calls"] is False for r in requests))
'''),
md("""
## Approve, or reject, then resume

`decide` is one compare-and-set in the store; the next `advance`, from any process, pays once
and resumes (`refund-agent approve --as "Dana Kim"` in the terminal). A rejection needs a note,
and the note is what the customer is told.
"""),
code('''
sent_before = len(requests)
agent.decide(approval.id, approve=True, by="Dana Kim", fingerprint=approval.fingerprint)
maya = agent.advance(maya.id, on_event=trace())
resume = requests[sent_before]
print()
check("the resume continues the response that made the call",
      resume.get("previous_response_id") == approval.response_id)
check("its input is the call's output, with the decision",
      [i["type"] for i in resume["input"]] == ["function_call_output"]
      and resume["input"][0]["call_id"] == approval.call_id
      and json.loads(resume["input"][0]["output"]).get("approved_by") == "Dana Kim")
check("one refund, keyed by the run and the call", maya.status.value == "done"
      and [r["idempotency_key"] for r in agent.payments.refunds()]
      == [approval.id] == [f"{maya.id}-{approval.call_id}"])
'''),
code('''
from tutorial import wrap
other = Agent(agent.settings.with_(output_dir=OUTPUT / "rejection"))   # a second desk
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
## Seven durable boundaries, each checked

![Who does what: the agent saves, a person decides, whoever resumes pays once](../docs/flow.png)

Each numbered badge is one committed transaction, a *durable boundary*; a crash between two
loses nothing and repeats nothing. 1: the run and its email, before any request. 2: each
response with its calls, before any call runs. 3: each output as the call returns. 4: the
gated call becomes a pending approval, its audit line `requested` and the run's `waiting`
status. 5: a decision is a compare-and-set on `pending`, with its audit line. 6: payments and
emails take the call's key as their idempotency key. 7: one process at a time holds the run's
lease, and every write checks it.

A claim that "this is one transaction" should be checked, and the check should be seen to
fail. `transactions(store)` records the SQL this process sends to the store, grouped by
transaction (SQLite's own trace, `notebooks/tutorial.py`). `boundaries_hold` runs a refund and
checks 1, 2, 4 and 5; then we run it again with the transactions taken away (every statement
committed on its own), and each check fails.
"""),
code('''
from unittest import mock
from refund_agent import Store
from tutorial import no_transactions, one_transaction, transactions

def boundaries_hold(name):
    desk = Agent(agent.settings.with_(output_dir=OUTPUT / name))
    with transactions(desk.store) as txs:
        run = desk.advance(desk.start_sample("damaged").id)
        shown = desk.store.approvals("pending")[0]
        desk.approve(shown.id, shown.fingerprint, by="Dana Kim")
    check("1. the run and its email: one transaction", one_transaction(
          txs, "INSERT INTO runs", "INSERT INTO steps"))
    check("2. each response and its calls: one transaction", one_transaction(
          txs, "INSERT INTO calls", "last_response_id"))
    check("4. the approval, 'requested' and 'waiting': one transaction", one_transaction(
          txs, "INSERT INTO approvals", "INSERT INTO audit", "'waiting'"))
    check("5. the decision and its audit line: one transaction", one_transaction(
          txs, "UPDATE approvals SET status", "INSERT INTO audit"))
    return run

boundaries_hold("boundaries")
with no_transactions():             # SQLite drops BEGIN and COMMIT: each statement alone
    failed = fails(lambda: boundaries_hold("no-transactions"))
check("without transactions, the first check fails", failed.startswith("1."))
'''),
md("""
Each of the four fails on its own, too: `tests/docs/test_notebook_mutations.py` breaks the
package one boundary at a time (the email step in a transaction of its own, the `waiting`
status written after the approval, the `approved` audit line after the commit, ...) and runs
this notebook against it; every break stops the notebook at the check written for it.

## Idempotency: a crash after the refund

Boundaries 3 and 6. The dangerous gap is between paying and saving that we paid. Leo's cutting board arrived cracked; Dana approves from the terminal, in a new
process started with `CRASH_AFTER_REFUND=1`: it pays, then is killed (`SIGKILL`, as `kill -9`)
before it records the payment.
"""),
code('''
leo = agent.start("leo.martins@example.com", sender_name="Leo Martins", subject="Cracked board",
                  body="The oak cutting board from order A1058 arrived cracked. A refund?")
leo = agent.advance(leo.id)
crashed = cli("approve", "--as", "Dana Kim", CRASH_AFTER_REFUND="1")
check("the approving process was killed with SIGKILL", crashed.returncode == -signal.SIGKILL)
[leo_call] = [c for c in agent.store.calls_named("issue_refund") if c.run_id == leo.id]
paid = [r for r in agent.payments.refunds() if r["idempotency_key"] == leo_call.key]
check("it paid, but never saved that it did", len(paid) == 1 and leo_call.output is None)
check("a resume would pick the run up", leo.id in [r.id for r in agent.resumable()])
'''),
md("""
`refund-agent resume`, another new process, runs the refund call again: its output was never
saved. The payment stand-in has seen the key, so it hands back the first refund, marked
*reused*, and pays nothing. The same key with other arguments is refused, as at Stripe.
"""),
code('''
from refund_agent import IdempotencyConflict

resumed = cli("resume")
paid = [r for r in agent.payments.refunds() if r["idempotency_key"] == leo_call.key]
reported = [s.data for s in agent.store.steps(leo.id) if s.kind == "refund"]
check("6. still one refund for the call", len(paid) == 1)
check("the run reports that same refund, as reused", [(r["refund_id"], r["reused"])
      for r in reported] == [(paid[0]["refund_id"], True)])
check("audit: requested, approved, reused", [e.event for e in agent.store.audit()
      if e.run_id == leo.id] == ["requested", "approved", "reused"])
quote = agent.payments.refunds()[0]["request"]
try:
    agent.payments.log.once(leo_call.key, {**quote, "amount_cents": 1}, dict)
    conflict = "accepted"
except IdempotencyConflict as exc:
    conflict = str(exc)
check("the same key with another amount is refused", "already used" in conflict)
'''),
md("""
**Boundary 5: two people click Approve at once.** A decision reads the approval and writes it
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
**Boundary 3: a restart, mid-run.** Tom's email (a stand mixer past the 30-day window) is
handled by a process killed right after its first response was saved (`after_response`),
with the output of the lookup it asked for: read-only calls a response starts with run before
it is committed and are saved with it. `resume` sends the saved output without running the
lookup again, and is itself killed just
after the email goes out (`after_email`). A third process, this notebook, finishes: the
outbox takes the call's key, so the customer gets one email. Then we break boundary 3 on
purpose (the store forgets saved outputs) and the check fails.
"""),
code('''
def restarted(kill_again=True):
    cli("sample", "past-window", REFUND_AGENT_CRASH_AT="after_response")
    tom = agent.store.runs(limit=1)[0]
    if kill_again:
        cli("resume", REFUND_AGENT_CRASH_AT="after_email")
    tom = agent.advance(tom.id, on_event=trace() if kill_again else None)   # this notebook
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
**Boundary 7: one owner at a time.** Every `advance` takes the run's *lease*; a lease whose
holder died or stopped renewing it is taken over, and each takeover raises its *epoch*, a
fencing token. `claim()` (what `refund-agent worker` runs in a loop) takes a decided run under
a fresh lease; a process that was only stalled wakes up with the old epoch, and its first
write is refused. `beyond.ipynb` shows the payment and the email refused the same way.
"""),
code('''
import time
from refund_agent import LeaseLost

fenced = Agent(agent.settings.with_(output_dir=OUTPUT / "fencing", lease_seconds=0.05))
run = fenced.advance(fenced.start_sample("damaged").id)
shown = fenced.store.approvals("pending")[0]
fenced.approve(shown.id, shown.fingerprint, by="Dana Kim")
epoch = lambda: fenced.store.lease_epoch(run.id)      # the fencing token, as stored
stalled, before = fenced.store.acquire(run.id, token="stalled owner"), epoch()
time.sleep(0.1)                                  # it stalls: no renewal for longer than a lease
claimed = fenced.claim()
check("7. the worker claimed the run under a fresh lease", claimed == run.id
      and epoch() == before + 1)
try:
    fenced.store.record_output(stalled, "call-0", "{}", [])    # the stalled owner wakes up
    refused = "accepted"
except LeaseLost:
    refused = "refused"
check("the stalled owner's write is refused", refused == "refused")
try:   # a run that cannot continue is handed to a person, and the customer emailed: fenced too
    fenced.hand_over(run.id, stalled, "The stalled owner gives up on the run.")
except LeaseLost:
    pass
check("nor can it hand the run over: no email went out", not [m for m in
      fenced.outbox.messages() if m["idempotency_key"] == f"{run.id}/follow-up"])
check("the new owner finishes and pays once; the customer got its one answer",
      fenced.advance(claimed).status.value == "done" and len(fenced.payments.refunds()) == 1
      and len([m for m in fenced.outbox.messages() if m["request"]["to"] == run.sender]) == 1)
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
last = agent.store.run(maya.id).last_response_id
agent.add_reply(maya.id, "Thank you, that was quick!")
sent_before = len(requests)
maya = agent.advance(maya.id)
body = requests[sent_before]
check("the reply continues the last stored response", body.get("previous_response_id") == last)
check("and is the only input", [i.get("role") for i in body["input"]] == ["user"])
check("the answer went to Maya only", agent.outbox.messages()[-1]["request"]["to"]
      == "maya.chen@example.com")
'''),
code('''
from refund_agent.desk import converse, quote_refund
from tutorial import emails

priya = converse(agent, agent.start_sample("angry").id)
approval = agent.store.approvals("pending")[0]
allowed = quote_refund(agent.shop.order("A1066"), agent.shop.terms,
                       [("SKL-CI-10", "changed_mind")], {}, agent.shop.today)
check("proposed exactly what the policy computes", approval.amount == allowed.amount == 31.50
      and [x.line for x in approval.lines] == ["SKL-CI-10"])
check("the gift card is refused: final sale", isinstance(quote_refund(agent.shop.order("A1066"),
      agent.shop.terms, [("GIFT-50", "changed_mind")], {}, agent.shop.today), str))
sent_before = len(requests)
agent.decide(approval.id, approve=True, by="Dana Kim", note="TEAM ONLY: chargeback risk.",
             fingerprint=approval.fingerprint)
priya = converse(agent, priya.id)
thread = emails(agent, priya.id)
playing = [r for r in requests[sent_before:] if not r.get("tools")]   # the customer's model
paid = [r for r in agent.payments.refunds() if r["request"]["order_id"] == "A1066"]
check(f"at most 3 simulated replies ({priya.simulated_replies}), still one refund of $31.50",
      1 <= priya.simulated_replies <= 3 and [r["request"]["amount_cents"] for r in paid] == [3150])
check("the simulated customer read the emails, never the team's note", playing
      and not any("TEAM ONLY" in json.dumps(r["input"]) for r in playing))
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
## Your own agent

Nothing above is specific to refunds. Here is a wire-transfer desk on the package's loop
(`refund_agent.Loop`), written to a module so other processes can import it. A tool
**declares** what it is and the loop dispatches by that: `lookup_wire` is read-only (it may
run again after a crash); `send_wire` `needs_approval`: its first call proposes
(`ctx.propose`) and the run pauses; the loop calls `send_wire` only once a person approved
(it checks no decision, and need not), after checking the lease. A tool gets its run, its
call's key, `ctx.once`, never the store.

Two rules from the references. **The code before a pause runs again on resume**: LangGraph
restarts an interrupted node from its first line, so side effects before the interrupt must be
idempotent ([LangGraph, Interrupts](https://docs.langchain.com/oss/python/langgraph/interrupts)).
Here, a run resumes from its last durable boundary: `send_wire` starts again from its first
line if a crash hit between the wire and its saved output, so `ctx.once` keys the wire by
the call.
**An approval is not authorization**: the tool must check its arguments when it runs
([Pydantic AI, Deferred tools](https://ai.pydantic.dev/deferred-tools/#human-in-the-loop-tool-approval)).
A balance may have dropped, or the request been cancelled, since the person said yes.
'''),
code('''
%%writefile {OUTPUT}/wires.py
import json, os, uuid
from pathlib import Path
from pydantic import BaseModel, Field
from refund_agent import LOOP_POINTS, Loop, Outcome, Tool, ToolKind, toolset

HERE = Path(os.environ["REFUND_AGENT_OUTPUT"])
WIRES = {"WR-5001": {"wire_id": "WR-5001", "to": "Acme Tools", "amount_cents": 125000},
         "WR-5002": {"wire_id": "WR-5002", "to": "Birch Paper", "amount_cents": 90000}}

class WireId(BaseModel):
    wire_id: str = Field(description="The wire's id, for example WR-5001.")

class Wire(WireId):
    amount_cents: int

def lookup_wire(ctx, args):
    return Outcome(WIRES.get(args.wire_id.upper(), {"error": "No such wire."}), [])

def propose(ctx, args):
    return ctx.propose(f"Send {args.wire_id}: ${args.amount_cents / 100:,.2f}",
                       subject=args.wire_id, amount_cents=args.amount_cents)

def send_wire(ctx, args, approval):                       # only ever approved
    with open(HERE / "attempts.log", "a") as log:         # to count runs of this function
        log.write(args.wire_id + "\\n")
    balance = json.loads((HERE / "balance.json").read_text())["cents"]
    if WIRES.get(args.wire_id, {}).get("amount_cents") != args.amount_cents or \\
            args.amount_cents > balance:                  # approval is not authorization
        return Outcome({"status": "refused", "why": "amount or balance changed"}, [])
    record, reused = ctx.once(args.model_dump(),          # the bank, keyed by the call
                              lambda: {"ref": "wr_" + uuid.uuid4().hex[:12]})
    ctx.crash("after_wire")
    return Outcome({"status": "sent", "ref": record["ref"], "again": reused}, [])

class WireDesk(Loop):
    agent_name, store_file, effect_log, proposal_noun = "wires", "wires.sqlite3", "wires", "wire"
    crash_points = {**LOOP_POINTS, "after_wire": "the wire left; its output is not saved"}
    tools = toolset(
        Tool("lookup_wire", "Look up a wire transfer request: payee and amount.", WireId,
             run=lookup_wire),
        Tool("send_wire", "Send the wire transfer once a person approves it.", Wire,
             ToolKind.NEEDS_APPROVAL, run=send_wire, propose=propose, done_status="sent"))

    def system_prompt(self, run):
        return "You send the wire transfers customers ask for. A person approves each one."
'''),
md('''
Run it through the stand-in (it drives any tools of this "look up, then act" shape from their
declarations, `docs/OFFLINE-MODEL.md`). Dana approves; a second click is refused. The process
that sends the wire is killed right after the bank took it (`after_wire`); a worker claims the
run, `send_wire` runs again from its first line, and the bank hands back the first wire.
'''),
code('''
import subprocess, sys
sys.path.insert(0, str(OUTPUT))                   # where the module was written
from wires import WireDesk

(OUTPUT / "balance.json").write_text('{"cents": 200000}')
desk = WireDesk(agent.settings)
run = desk.advance(desk.start("ops@north.example", "Please send wire WR-5001 today.").id)
pending = desk.store.approvals("pending")[0]
desk.approve(pending.id, pending.fingerprint, by="Dana Kim")
try:
    desk.approve(pending.id, pending.fingerprint, by="Sam Lee")    # the double click
    second = "accepted"
except AlreadyDecided as exc:
    second = str(exc)
check("the second click is refused, naming the wire and who approved it",
      second.startswith("This wire was already approved by Dana Kim"))
child = f"import wires; wires.WireDesk().advance({run.id!r})"     # another process
killed = subprocess.run([sys.executable, "-c", child],
                        env={**os.environ, "REFUND_AGENT_CRASH_AT": "after_wire", "PYTHONPATH":
                             os.pathsep.join([str(OUTPUT), os.environ.get("PYTHONPATH", "")])},
                        capture_output=True)
wired = lambda: (OUTPUT / "wires.log").read_text().splitlines()
check("killed after the wire left, before its output was saved",
      killed.returncode == -signal.SIGKILL and len(wired()) == 1)
run = desk.advance(desk.claim(), on_event=trace())
check("resumed: send_wire ran again from its first line, the wire left once",
      run.status == "done" and len(wired()) == 1
      and (OUTPUT / "attempts.log").read_text().split() == ["WR-5001"] * 2)
'''),
code('''
def proposed(text):                                       # a new run, up to its proposal
    run = desk.advance(desk.start("ops@north.example", text).id)
    return run, desk.store.approvals("pending")[0]

run, pending = proposed("Please send wire WR-5002.")
desk.reject(pending.id, pending.fingerprint, by="Dana Kim", note="Paid by card.")
run = desk.advance(run.id)
check("rejected: send_wire never ran", len(wired()) == 1
      and (OUTPUT / "attempts.log").read_text().split() == ["WR-5001"] * 2)
run, pending = proposed("Please send wire WR-5002 after all.")
desk.approve(pending.id, pending.fingerprint, by="Dana Kim")
(OUTPUT / "balance.json").write_text('{"cents": 50000}')       # another payment went out first
run = desk.advance(run.id)
outputs = [s.data["output"] for s in desk.store.steps(run.id) if s.kind == "result"]
check("approved, but refused when it ran: the balance no longer covers it",
      outputs[-1]["status"] == "refused" and len(wired()) == 1)
'''),
md('''
**Which tool to gate.** Every tool whose effect cannot be undone or must not happen without a
person: money out, deletion, anything sent on someone's behalf. Look-ups stay ungated. An
effect that needs no person (the customer email) still takes the call's key.

**Who triggers the resume.** Nothing resumes by itself: the process that records the decision
(`refund-agent approve`, the web page's worker thread), a worker looping on `claim()`, or a
sweep for runs left behind (`refund-agent resume`, the web app at start-up).

**The real provider's key.** Stripe takes it as `idempotency_key=approval.id` (run id + call
id) but forgets keys after 24 hours, so a resume days later looks the refund up by its key
(kept in the refund's metadata) before creating one (`docs/OUTSIDE-SYSTEMS.md`).

**xAI versus OpenAI.** Both speak the Responses API, with differences kept in one place
(`refund_agent/providers/table.py`, `docs/PROVIDERS.md`). The one that shapes this pattern:
xAI refuses `instructions` together with `previous_response_id`, so the system prompt goes as
the first input message. The stand-in speaks both dialects:
'''),
code('''
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
## Recap

1. **Thirty lines**: run until the gated call, save the response id, the call id and the
   arguments, stop; later pay once keyed by run id + call id and resume with
   `previous_response_id` and the call's `function_call_output`.
2. **Seven boundaries**, each checked here, and each check seen to fail when its boundary is
   broken: transactions taken away, outputs forgotten, a stalled owner's write, a key reused
   with another amount.
3. **Real life**: a `kill -9` after paying (the refund came back *reused*), a double click,
   a restart mid-run, a rejection with its note, a reply, an angry customer (at most three
   simulated emails, one refund), a decision that never comes (7 days, the database's clock),
   a stored response gone after 30 days.
4. **Your agent**: declare the tool `needs_approval`, key its effect by the call, check its
   arguments again when it runs, and let a decision, a worker's `claim()` or `resume` continue
   it.

Partial approvals, asking the customer, fencing of payments and emails, reconciliation,
accounts and PostgreSQL are in `beyond.ipynb`.
'''),
]
