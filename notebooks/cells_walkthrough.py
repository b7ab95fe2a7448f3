# The cells of walkthrough.ipynb, read by build.py (md, code and SETUP come from there).
# ruff: noqa: F821

WALKTHROUGH = [
md("""
# Pause an agent for a person, resume it exactly once

**The problem.** Your agent is about to do something that cannot be undone, such as a
refund. A person must say yes first, minutes or days later, from another machine. Then the
action must happen **exactly once**: not zero times because a process died, not twice because
someone clicked twice.

**The pattern.** Run the model until it asks for the gated tool. Save three values (the
response id, the call id, the arguments) and stop. Later, in any process, do the action once,
keyed by the run id and the call id. Then resume with `previous_response_id` and the call's
output (the Responses API keeps the conversation, `store=True`).

With no `XAI_API_KEY`, requests go to the *offline stand-in*, a small Responses API server
following a fixed policy. Every claim is a `check`: it prints `True`, or stops the notebook.
"""),
code(SETUP.format(name="walkthrough")),
md("""
## The pattern in thirty lines

![Who does what: the agent saves, a person decides, whoever resumes pays once](../docs/flow.png)

A refund desk: the model may look orders up freely, but `issue_refund` is **gated**. From the
package we take only the shop: `ShopTools` (look-ups of an order, the policy, a quote),
`tool_schemas()` (the tools as the model sees them) and the `system_prompt`. The store is a
SQLite file of two tables: `waiting` (the three values) and `effects` (one row per
idempotency key).
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
The whole loop. Look-ups run at once. An effect runs once per **idempotency key**: the run id
plus the call id (a call id is unique within one conversation only). The gated call saves its
three values and stops. `approve`, run later by any process, **claims** the waiting row in one
statement (`DELETE ... RETURNING`). Without the claim, a second `approve` would resume again
from the same response: the model writes the email again under a new call id, so a new key,
and the customer gets two.
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
Run Maya's email (a cracked coffee maker) until the gated call. The model never sees the
run id.
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

Dana approves. A retry of the payment gets the first refund back; a second click sends nothing.
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

`refund_agent.desk.Agent` is that loop with the hard parts done. `start` saves the email as a
run. `advance` drives it until it finishes or waits for a person, printing a trace (`->` a
call, `<-` its saved output, `**` an approval).
"""),
code('''
maya = agent.advance(agent.start_sample("damaged").id, on_event=trace())
approval = agent.store.approvals("pending")[0]
[refund_call] = agent.store.calls(approval.response_id)
requests = agent.model.server.requests        # what the stand-in received, for the checks
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
note=...)`; the note is what the customer is told (`beyond.ipynb` starts with a rejection).
The **fingerprint** is a hash of what the person was shown: order, customer, lines, amount. A
decision made on a page that is out of date is refused. The next `advance`, from any process,
pays once and resumes.
"""),
code('''
from refund_agent import AlreadyDecided, DecisionRefused, IdempotencyConflict
stale = refused(lambda: agent.approve(approval.id, "fp-of-an-older-version", by="Sam Lee"),
                DecisionRefused)        # a page drawn before the proposal changed
check("a stale fingerprint is refused; the approval still waits", "changed since it was shown"
      in stale and agent.store.approval(approval.id).status == "pending")
sent_before = len(requests)
agent.approve(approval.id, approval.fingerprint, by="Dana Kim")
maya = agent.advance(maya.id)
resume = requests[sent_before]
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
md("""
## Seven durable boundaries, each checked

Each numbered badge of the picture is one committed transaction, a *durable boundary*. Each
why is what a process killed right there would leave behind without it:

1. **The run and its email, before any request.** Apart: a run with no email, never
   answered.
2. **Each response with its calls, before any call runs.** Apart: the email goes out, the
   response is lost, and the resume asks again: a new call id, a new key, two emails.
3. **Each output as the call returns.** Apart: a resume runs every call again. Its check is
   in `beyond.ipynb`, section "A restart, mid-run".
4. **The pending approval, its `requested` audit line and the run's `waiting` status.**
   Apart: a waiting run with nothing to decide, or a proposal made twice.
5. **A decision: a compare-and-set on `pending`, with its audit line.** Apart: a decision
   with no audit line; two clicks at once both win.
6. **Payments and emails take the call's key** as their idempotency key (next section).
7. **One process at a time holds the run's lease**, and every write checks it. Apart: a
   stalled process wakes up and pays beside the new owner. Its check is in `beyond.ipynb`,
   section "Fencing".

`boundaries_hold` runs a refund and checks 1, 2, 4 and 5 on the SQL sent, grouped by
transaction. With each statement committed alone, the first check fails.
"""),
code('''
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
## Idempotency: a crash after the refund

Boundary 6. The dangerous gap is between paying and saving that we paid: without a key, the
resume pays again. Dana approves Leo's refund from the terminal, in a process that pays and
is then killed (`SIGKILL`) before it records the payment.
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
`refund-agent resume`, another process, runs the refund call again. The payment stand-in
has seen the key and hands back the first refund, marked *reused*. The same key with other
arguments is refused, as at Stripe.
"""),
code('''
resumed = cli("resume", only=("$$",))
paid = [r for r in agent.payments.refunds() if r["idempotency_key"] == leo_call.key]
reported = [s.data for s in agent.store.steps(leo.id) if s.kind == "refund"]
check("6. still one refund for the call", len(paid) == 1)
check("the run reports that same refund, as reused", [(r["refund_id"], r["reused"])
      for r in reported] == [(paid[0]["refund_id"], True)])
check("audit: requested, approved, reused", [e.event for e in agent.store.audit()
      if e.run_id == leo.id] == ["requested", "approved", "reused"])
quote = agent.payments.refunds()[0]["request"]
conflict = refused(lambda: agent.payments.log.once(leo_call.key, {**quote, "amount_cents": 1},
                                                   dict), IdempotencyConflict)
check("the same key with another amount is refused", "already used" in conflict)
'''),
md('''
## Your own agent

Nothing above is specific to refunds. Here is a wire-transfer desk on the package's loop
(`refund_agent.Loop`), written to a module that other processes import. `lookup_wire` is
read-only. `send_wire` `needs_approval`: its call proposes (`ctx.propose`) and the run
pauses. The loop calls `send_wire` only after a person approved it. Two rules.
**Code before a pause runs again on resume**
([LangGraph](https://docs.langchain.com/oss/python/langgraph/interrupts)): after a crash,
`send_wire` starts again from its first line, so `ctx.once` keys the wire by the call.
**An approval is not authorization**
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
**How the stand-in drives your tools** (`docs/OFFLINE-MODEL.md`): from their declarations.
It calls the tool whose description starts with "Look up", with the email's identifier shaped
like its field's example ("for example WR-5001"). Then it calls the action that shares most
words with the email, filling each parameter from the look-up's output **by the same name**.
Rename `amount_cents` in `WIRES` only, and the run ends with "Not done: send_wire needs
amount_cents.".

Dana approves; a second click is refused. The process sending the wire is killed after the
bank took it; a worker resumes, and the bank hands back the first wire. Then a rejection, an
expiry and a balance that dropped.
'''),
code('''
import sqlite3, subprocess, sys
sys.path.insert(0, str(OUTPUT))                   # where the module was written
from wires import WireDesk

(OUTPUT / "balance.json").write_text('{"cents": 200000}')
desk = WireDesk(agent.settings)
run = desk.advance(desk.start("ops@north.example", "Please send wire WR-5001 today.").id)
pending = desk.store.approvals("pending")[0]
desk.approve(pending.id, pending.fingerprint, by="Dana Kim")
second = refused(lambda: desk.approve(pending.id, pending.fingerprint, by="Sam Lee"),
                 AlreadyDecided)                          # the double click
check("the second click is refused, naming the wire and who approved it",
      second.startswith("This wire was already approved by Dana Kim"))
child = f"import wires; wires.WireDesk().advance({run.id!r})"     # another process
killed = subprocess.run([sys.executable, "-c", child], cwd=OUTPUT, capture_output=True,
                        env={**os.environ, "REFUND_AGENT_CRASH_AT": "after_wire"})
wired = lambda: (OUTPUT / "wires.log").read_text().splitlines()     # the bank's log
attempts = lambda: (OUTPUT / "attempts.log").read_text().split()  # runs of send_wire
check("killed after the wire left, before its output was saved",
      killed.returncode == -signal.SIGKILL and len(wired()) == 1)
run = desk.advance(desk.claim())
check("resumed: send_wire ran again from its first line, the wire left once",
      run.status == "done" and len(wired()) == 1 and attempts() == ["WR-5001"] * 2)
'''),
code('''
def proposed(text):                                       # a new run, up to its proposal
    run = desk.advance(desk.start("ops@north.example", text).id)
    return run, desk.store.approvals("pending")[0]

run, pending = proposed("Please send wire WR-5002.")
desk.reject(pending.id, pending.fingerprint, by="Dana Kim", note="Paid by card.")
run = desk.advance(run.id)
check("rejected: send_wire never ran", len(wired()) == 1 and attempts() == ["WR-5001"] * 2)
run, pending = proposed("Please send wire WR-5002 by Friday.")    # nobody decides in 7 days
sqlite3.connect(desk.store.path, isolation_level=None).execute(
    "UPDATE approvals SET requested_at = requested_at - ? WHERE id = ?", (8 * 86400, pending.id))
check("expired after 7 days", [a.id for a in desk.expire()] == [pending.id])
run = desk.advance(run.id)
check("expired: send_wire never ran", run.status == "done" and len(wired()) == 1
      and attempts() == ["WR-5001"] * 2)
run, pending = proposed("Please send wire WR-5002 after all.")
desk.approve(pending.id, pending.fingerprint, by="Dana Kim")
(OUTPUT / "balance.json").write_text('{"cents": 50000}')       # another payment went out first
run = desk.advance(run.id)
outputs = [s.data["output"] for s in desk.store.steps(run.id) if s.kind == "result"]
check("approved, but refused when it ran: the balance no longer covers it",
      outputs[-1]["status"] == "refused" and len(wired()) == 1)
'''),
md('''
**Which tool to gate**: any whose effect cannot be undone or needs a person. **Who resumes**:
whoever records the decision, a worker looping on `claim()`, or `refund-agent resume`. To
test your agent with a scripted model, see `beyond.ipynb`, section "Testing your agent with a
scripted model".
'''),
md('''
## Recap

1. **Thirty lines**: save three values at the gated call; claim them once, pay keyed by run
   id + call id, resume with `previous_response_id`.
2. **Seven boundaries**, each with its why and a check seen to fail when broken.
3. **Your agent**: gate the tool, key its effect by the call, check its arguments when it runs.

The rest is in `beyond.ipynb`: a restart mid-run, fencing, a scripted model, partial approvals,
reconciliation, expiry, an angry customer, PostgreSQL.
'''),
]
