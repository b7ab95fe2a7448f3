# The cells of walkthrough.ipynb, read by build.py (md, code and SETUP come from there).
# ruff: noqa: F821

WALKTHROUGH = [
md("""
# Pause an agent for a person, resume it exactly once

**The problem.** Your agent is about to do something that cannot be undone: refund a
customer, send a wire. A person must say yes first, in five minutes or three days, from
another machine. Then the action must happen **exactly once**: not zero times because a
process died, not twice because someone clicked twice or a retry ran again.

**The pattern.** Run the model until it asks for the gated tool; save three values (the
response id, the call id, the arguments) and stop. Later, in any process, do the action once,
keyed by the run id and the call id, and resume with `previous_response_id` and the call's
output (the Responses API keeps the conversation, `store=True`). You will write it in thirty
lines, make it survive a `kill -9`, a double click, a restart, a rejection and a decision
that never comes, see each of its seven durable boundaries checked, and build your own agent.

With no `XAI_API_KEY`, requests go to the *offline stand-in*, a small Responses API server in
this process (a fixed support policy, not a language model), so the stored outputs are what
you get. Every claim is a `check`: it prints the claim with `True`, or stops the notebook.
"""),
code(SETUP.format(name="walkthrough")),
md("""
## The pattern in thirty lines

![Who does what: the agent saves, a person decides, whoever resumes pays once](../docs/flow.png)

The agent runs until the gated call and saves; a person decides, later, anywhere; whoever
resumes pays once and continues. A refund desk: the model may look orders up freely, but
`issue_refund` is **gated**. From the package we take only the shop: `ShopTools` (its
look-ups: an order, the refund policy, a quote), `tool_schemas()` (those tools declared to the
model) and the desk's `system_prompt`. Our store is a SQLite file of two tables: `waiting`
(the three values) and `effects` (what happened, one row per idempotency key).
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
three values and stops. `approve` is what any process runs later: it **claims** the waiting
row in one statement (`DELETE ... RETURNING`), so a second click finds nothing. Without it,
a second `approve` pays once (same key) but resumes again from the same response: the model
writes the email again with a new call id, a new key, and the customer gets two.
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
    claimed = db.execute("DELETE FROM waiting WHERE run_id = ? RETURNING response_id, call_id, "
                         "arguments", (run_id,)).fetchone()   # one statement: one click wins
    if claimed is None: return None                      # decided already: send nothing
    response_id, call_id, arguments = claimed
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
sent_before, emails_before = len(server.requests), db.execute("SELECT * FROM effects").fetchall()
again = approve(run_id, "Dana Kim")                      # the double click
check("a second approve sends nothing: no request, no second email", again is None
      and len(server.requests) == sent_before
      and db.execute("SELECT * FROM effects").fetchall() == emails_before)
'''),
md("""
## The same with the package

`refund_agent.desk.Agent` is that loop with the hard parts done: the three values in a store,
committed before anything runs, and a process dying between paying and saving that it paid.
`start` saves the email as a run; `advance` drives it, printing the terminal's trace (`->` a
call, `<-` its saved output, `**` an approval), until it finishes or waits for a person.
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

One way to decide: `approve(id, fingerprint, by=...)` or `reject(id, fingerprint, by=...,
note=...)` (the note is what the customer is told). The **fingerprint** is a hash of what the
person was shown: the order, the customer, the lines and the amount. It binds the decision to
that: a decision made on a page drawn before the proposal changed is refused, never applied
to something nobody saw. The next `advance`, from any process, pays once and resumes.
"""),
code('''
from refund_agent import DecisionRefused
try:                                    # a page drawn before the proposal changed
    agent.approve(approval.id, "fp-of-an-older-version", by="Sam Lee")
    stale = "accepted"
except DecisionRefused as exc:
    stale = str(exc)
check("a stale fingerprint is refused; the approval still waits", "changed since it was shown"
      in stale and agent.store.approval(approval.id).status == "pending")
sent_before = len(requests)
agent.approve(approval.id, approval.fingerprint, by="Dana Kim")
maya = agent.advance(maya.id)
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

Each numbered badge of the picture is one committed transaction, a *durable boundary*. Each
why is what a process killed right there would leave behind without it:

1. **The run and its email, before any request.** Apart: a run with no email, which a worker
   picks up with nothing to send the model; the customer is never answered.
2. **Each response with its calls, before any call runs.** Apart: the email goes out, the
   process dies before the response is saved, and the resume asks the model again from the
   response before; it writes the email again under a new call id, a new key: two emails.
   (The core's double click is this story; there, `approve` claiming its row prevents it.)
3. **Each output as the call returns**: a resume sends it, never running the call again.
4. **The pending approval, its `requested` audit line and the run's `waiting` status.**
   Apart: a run marked waiting with nothing for a person to decide, stuck; or an approval
   whose run a worker advances again, proposing twice.
5. **A decision: a compare-and-set on `pending`, with its audit line.** Apart: an approval
   decided with no audit line; two clicks at once both win, and the run pays on the later.
6. **Payments and emails take the call's key** as their idempotency key.
7. **One process at a time holds the run's lease**, and every write checks it.

A claim that "this is one transaction" should be checked, and seen to fail.
`transactions(store)` records the SQL this process sends, grouped by transaction (SQLite's
trace, `notebooks/tutorial.py`). `boundaries_hold` runs a refund and checks 1, 2, 4 and 5;
run again with every statement committed on its own, the first check fails.
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
Each of the four also fails on its own: `tests/docs/test_notebook_mutations.py` breaks the
package one boundary at a time and runs this notebook against it.

## Idempotency: a crash after the refund

Boundaries 3 and 6. The dangerous gap is between paying and saving that we paid: without a
key, the resume pays again. Dana approves Leo's cracked cutting board from the terminal, in a
process started with `CRASH_AFTER_REFUND=1`: it pays, then is killed (`SIGKILL`) before it
records the payment.
"""),
code('''
leo = agent.start("leo.martins@example.com", sender_name="Leo Martins", subject="Cracked board",
                  body="The oak cutting board from order A1058 arrived cracked. A refund?")
leo = agent.advance(leo.id)
crashed = cli("approve", "--as", "Dana Kim", only=("crash point",), CRASH_AFTER_REFUND="1")
check("the approving process was killed with SIGKILL", crashed.returncode == -signal.SIGKILL)
[leo_call] = [c for c in agent.store.calls_named("issue_refund") if c.run_id == leo.id]
paid = [r for r in agent.payments.refunds() if r["idempotency_key"] == leo_call.key]
check("it paid, but never saved that it did", len(paid) == 1 and leo_call.output is None)
check("a resume would pick the run up", leo.id in [r.id for r in agent.resumable()])
'''),
md("""
`refund-agent resume`, another process, runs the refund call again (its output was never
saved). The payment stand-in has seen the key: it hands back the first refund, marked
*reused*. The same key with other arguments is refused, as at Stripe.
"""),
code('''
from refund_agent import IdempotencyConflict

resumed = cli("resume", only=("$$",))
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
**Boundary 3: a restart, mid-run.** Without saved outputs, a resume runs every call again.
Tom's email (past the 30-day window) is handled by a process killed right after its first
response was saved with the lookup's output (`after_response`); `resume` sends that output
without running the lookup again and is killed just after the email goes out (`after_email`);
this notebook finishes, and the outbox's key keeps it to one email. Then the store forgets
saved outputs, on purpose, and the check fails.
"""),
code('''
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
**Boundary 7: one owner at a time.** Without it, a process that was only stalled (a GC
pause) wakes up and writes, pays or emails beside the new owner. Every `advance` takes the
run's *lease*; a lease whose holder stopped renewing it is taken over, raising its *epoch*, a
fencing token. `claim()` (what `refund-agent worker` runs) takes a decided run under a fresh
lease, never one a live process holds; the stalled owner's first write is refused.
"""),
code('''
import time
from refund_agent import LeaseLost

fenced = Agent(agent.settings.with_(output_dir=OUTPUT / "fencing", lease_seconds=0.5))
run = fenced.advance(fenced.start_sample("damaged").id)
shown = fenced.store.approvals("pending")[0]
fenced.approve(shown.id, shown.fingerprint, by="Dana Kim")
epoch = lambda: fenced.store.lease_epoch(run.id)      # the fencing token, as stored
stalled, before = fenced.store.acquire(run.id, token="stalled owner"), epoch()
check("7. a worker takes no run a live process holds", fenced.claim() is None)
time.sleep(0.6)                                  # it stalls: no renewal for longer than a lease
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
md('''
## Your own agent

Nothing above is specific to refunds. Here is a wire-transfer desk on the package's loop
(`refund_agent.Loop`), written to a module so other processes can import it. A tool
**declares** what it is: `lookup_wire` is read-only; `send_wire` `needs_approval`: its call
proposes (`ctx.propose`) and the run pauses. The loop calls `send_wire` only once a person
approved, and checks the lease first; a rejected or expired proposal never reaches it. A tool
gets its run, its call's key and `ctx.once`, never the store. Two rules:
**code before a pause runs again on resume**
([LangGraph](https://docs.langchain.com/oss/python/langgraph/interrupts)): a crash between the
wire and its saved output starts `send_wire` again from its first line, so `ctx.once` keys
the wire by the call. **An approval is not authorization**
([Pydantic AI](https://ai.pydantic.dev/deferred-tools/#human-in-the-loop-tool-approval)):
`send_wire` checks the amount and the balance when it runs.
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
**How the stand-in drives your tools** (`docs/OFFLINE-MODEL.md`): from their declarations
only. The tool whose description starts with "Look up" is called first, with the identifier
in the email shaped like its field's example ("for example WR-5001"); then the action sharing
the most words with the email, each parameter filled from the look-up's output **by the same
name**. Rename `amount_cents` in `WIRES` only and the run ends `done` with "Not done:
send_wire needs amount_cents.", calling nothing.

Dana approves; a second click is refused. The process sending the wire is killed right after
the bank took it (`after_wire`); a worker claims the run, `send_wire` runs again, and the bank
hands back the first wire. Then a rejection, an expiry and a balance that dropped.
'''),
code('''
import subprocess, sys
from refund_agent import AlreadyDecided
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
run = desk.advance(desk.claim())
check("resumed: send_wire ran again from its first line, the wire left once",
      run.status == "done" and len(wired()) == 1
      and (OUTPUT / "attempts.log").read_text().split() == ["WR-5001"] * 2)
'''),
code('''
import sqlite3
def proposed(text):                                       # a new run, up to its proposal
    run = desk.advance(desk.start("ops@north.example", text).id)
    return run, desk.store.approvals("pending")[0]

run, pending = proposed("Please send wire WR-5002.")
desk.reject(pending.id, pending.fingerprint, by="Dana Kim", note="Paid by card.")
run = desk.advance(run.id)
check("rejected: send_wire never ran", len(wired()) == 1
      and (OUTPUT / "attempts.log").read_text().split() == ["WR-5001"] * 2)
run, pending = proposed("Please send wire WR-5002 by Friday.")    # nobody decides in 7 days
sqlite3.connect(desk.store.path, isolation_level=None).execute(
    "UPDATE approvals SET requested_at = requested_at - ? WHERE id = ?", (8 * 86400, pending.id))
check("expired after 7 days", [a.id for a in desk.expire()] == [pending.id])
run = desk.advance(run.id)
check("expired: send_wire never ran", run.status == "done" and len(wired()) == 1
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
**Testing your agent with a scripted model.** `ScriptedBrain` answers each request with the
next `Reply` you give it (reasoning, text, calls), mistakes included, and fails the test if a
step is never asked for. Here it asks for the wrong amount; `send_wire` refuses it.
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
md('''
**Which tool to gate**: any whose effect cannot be undone or must not happen without a
person. **Who resumes**: the process that records the decision, a worker looping on `claim()`,
or a sweep for runs left behind (`refund-agent resume`).
'''),
md('''
## Recap

1. **Thirty lines**: save the response id, the call id and the arguments at the gated call;
   claim them once, pay keyed by run id + call id, resume with `previous_response_id`.
2. **Seven boundaries**, each with its why, each check seen to fail when it is broken.
3. **Real life**: a `kill -9` after paying, a double click, a stale page, a restart mid-run,
   a rejection, a decision that never comes.
4. **Your agent**: gate the tool, key its effect by the call, check its arguments when it
   runs, test it with a scripted model.

Partial approvals, asking the customer, fencing of payments and emails, reconciliation,
ownership, accounts, a race of two clicks, expiry by the database's clock, a reply and an angry
customer, a response gone after 30 days, xAI versus OpenAI and PostgreSQL: `beyond.ipynb`.
'''),
]
