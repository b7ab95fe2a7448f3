# The cells of walkthrough.ipynb, read by build.py (md, code and SETUP come from there).
# ruff: noqa: F821

WALKTHROUGH = [
md("""
# Pause an agent for a person, resume it exactly once

**The problem.** Your agent is about to do something that cannot be undone: refund a
customer, close an account, send a payout. You want a person to say yes first. That person
may answer in five minutes or in three days, from another machine, after your process was
redeployed twice. When they say yes, the action must happen **exactly once**: not zero times
because a process died, not twice because someone clicked twice or a retry ran again.

The pattern that solves it is short. Run the model until it asks for the gated tool; save
three values (the response id, the call id, the arguments) and stop: nothing runs while the
person decides. Later, in any process, do the action once, keyed by the call id, and resume
the model with `previous_response_id` and the call's output. The Responses API keeps the
conversation (`store=True`), so nothing else has to survive.

**After this notebook you will be able to:**

1. write that pattern in about thirty lines of plain `client.responses.create` calls;
2. say which three values to save, and why they are enough;
3. make the action happen once with an **idempotency key**, across a `kill -9`, a double
   click, a restart, a reply, an angry customer and a decision that never comes;
4. apply it to your own agent: which tool to gate, who triggers the resume, and what differs
   between xAI and OpenAI.

**Which model answers?** With no `XAI_API_KEY`, every request goes to the *offline stand-in*:
a small HTTP server in this process that speaks the Responses API through the same `openai`
SDK. It is not a language model; it follows a fixed support policy, so the stored outputs are
what you get. Every claim below is a cell that prints `True` and asserts it (`check`).
"""),
code(SETUP.format(name="walkthrough")),
md("""
## The pattern in thirty lines

A refund desk: the model may look orders up freely, but `issue_refund` is **gated**. The loop
below is all of it: send the input, run the read-only calls and send their outputs back with
`previous_response_id`, and stop at the first gated call. The stand-in is started the way the
package starts it (`refund_agent/providers/client.py`); the tools and prompt come from the package so the
model has something real to call.
"""),
code('''
import openai
from offline_model import start_offline_server
from refund_agent import tool_schemas
from refund_agent.desk.prompts import system_prompt
from refund_agent.tools import ShopTools, parse_args

server = start_offline_server(OUTPUT / "plain-model.sqlite3", latency=0)
client = openai.OpenAI(base_url=server.base_url, api_key="offline-stand-in")
shop, email = agent.shop, agent.shop.sample("damaged")
read_only = ShopTools(shop, email.sender, lambda order_id, **_: {})   # lookups, no effects
GATED = {"issue_refund", "send_customer_message"}                    # a person or an effect

def run_until_gated(input, previous=None):
    while True:
        response = client.responses.create(
            model="grok-4.7", input=input, tools=tool_schemas(), store=True,
            previous_response_id=previous, parallel_tool_calls=False)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls or calls[0].name in GATED:
            return response, (calls or [None])[0]
        output = getattr(read_only, calls[0].name)(parse_args(calls[0].name, calls[0].arguments))
        input = [{"type": "function_call_output", "call_id": calls[0].call_id,
                  "output": json.dumps(output)}]
        previous = response.id

response, call = run_until_gated([
    {"role": "system", "content": system_prompt(shop.info.name, shop.today)},
    {"role": "user", "content": f"From: {email.sender}\\nSubject: {email.subject}\\n\\n{email.body}"}])
saved = {"response_id": response.id, "call_id": call.call_id, "arguments": call.arguments}
(OUTPUT / "waiting.json").write_text(json.dumps(saved))              # ...and this process stops
print(call.name, json.loads(call.arguments)["lines"])
check("three values saved, nothing paid", set(saved) == {"response_id", "call_id", "arguments"}
      and not (OUTPUT / "refunds.log").exists())
'''),
md("""
### Later: pay once, keyed by the call id (the idempotency key), and resume

A person approves, hours later, in another process. That process reads the three values,
pays with the call id as the **idempotency key** (a payment provider that has seen the key
hands back the first refund instead of paying again), and resumes the model: the same
`previous_response_id`, and one `function_call_output` for the saved call. The payment
stand-in is the package's (`refund_agent/outside/payments.py`), as a real provider would be.
"""),
code('''
from refund_agent.outside import StandInPayments

saved = json.loads((OUTPUT / "waiting.json").read_text())
args = parse_args("issue_refund", saved["arguments"])
payments = StandInPayments(OUTPUT / "plain")

def pay_and_resume(saved, approved_by):
    refund, reused = payments.refund(saved["call_id"], read_only.quote(args), args.summary)
    output = {"status": "refunded", "refund_id": refund["refund_id"], "approved_by": approved_by}
    return run_until_gated([{"type": "function_call_output", "call_id": saved["call_id"],
                             "output": json.dumps(output)}], previous=saved["response_id"])

response, call = pay_and_resume(saved, "Dana Kim")
print("the model continues with:", call.name)
again = payments.refund(saved["call_id"], read_only.quote(args), args.summary)   # a retry
check("paid once: the retry got the first refund back", again[1]
      and len(payments.refunds()) == 1 and again[0] == payments.refunds()[0])
'''),
md("""
That is the whole pattern. Everything else in this notebook makes those lines survive real
life: where the three values live (a store, committed before anything runs), who calls
`pay_and_resume` (whoever picks the run up), and what happens when a process dies between
paying and saving that it paid.

## The same with the package

`refund_agent.Agent` is that loop with the hard parts done. `start` saves the email as a run;
`advance` drives it, one `responses.create` per turn, printing the same trace as the terminal
(`refund-agent`), until the run finishes or waits for a person.
"""),
code('''
maya = agent.advance(agent.start_sample("damaged").id, on_event=trace())
approval = agent.store.approvals("pending")[0]
[refund_call] = agent.store.calls(approval.response_id)
print()
check("the run waits, and no process holds it", maya.status.value == "waiting"
      and maya.lease_pid is None)
check("the approval saved the three values", approval.response_id == maya.last_response_id
      and approval.call_id == refund_call.call_id and refund_call.name == "issue_refund"
      and json.loads(refund_call.arguments)["order_id"] == approval.order_id)
requests = agent.model.server.requests        # what the stand-in received, for the checks
check("every request asked the API to store its response", all(r["store"] for r in requests))
'''),
md("""
## Approve, then resume

The plain path, on its own: a person decides (`decide` is one compare-and-set in the store),
and the next `advance`, from this process or any other, pays once and sends the resume
request. In the terminal this is `refund-agent approve --as "Dana Kim"`.
"""),
code('''
sent_before = len(requests)
agent.decide(approval.id, approve=True, by="Dana Kim")
maya = agent.advance(maya.id, on_event=trace())
resume = requests[sent_before]
print()
check("the resume continues the response that made the call",
      resume["previous_response_id"] == approval.response_id)
check("its input is the call's output, with the decision",
      [i["type"] for i in resume["input"]] == ["function_call_output"]
      and resume["input"][0]["call_id"] == approval.call_id
      and json.loads(resume["input"][0]["output"])["approved_by"] == "Dana Kim")
check("one refund, keyed by the call", maya.status.value == "done"
      and [r["idempotency_key"] for r in agent.payments.refunds()] == [approval.id])
'''),
md("""
## What makes those lines survive real life

![Who does what: the agent saves, a person decides, whoever resumes pays once](../docs/flow.png)

Each numbered badge is one committed transaction, a *durable boundary*: a crash between two
of them loses nothing and repeats nothing. The run and its email are saved before the first
request (1); each response with its calls before any call runs (2); each output as soon as
the call returns (3); the gated call becomes a pending approval and the run stops (4); a
decision is a compare-and-set on `pending` (5); payments and emails take the call's key as
their idempotency key (6); one process at a time holds the run's lease (7). Audit lines are
written in the same transactions as 4, 5 and 6's outputs.

Each boundary has a named crash point: start a process with `REFUND_AGENT_CRASH_AT=name` and
it kills itself there with `SIGKILL`, like `kill -9`. Trace lines: `->` a call, `<-` its saved
output, `**` an approval, `$$` a payment, `>` an email, `!!` an error.

## Idempotency: a crash after the refund

The dangerous gap is between paying and saving that we paid. Leo's cutting board arrived
cracked; the agent proposes the refund. Dana approves from the terminal, in a new process
started with `CRASH_AFTER_REFUND=1`: it pays, then is killed before it records the payment.
"""),
code('''
leo = agent.start("leo.martins@example.com", sender_name="Leo Martins", subject="Cracked board",
                  body="The oak cutting board from order A1058 arrived cracked. A refund?")
leo = agent.advance(leo.id)
crashed = cli("approve", "--as", "Dana Kim", CRASH_AFTER_REFUND="1")
[leo_call] = agent.store.calls(agent.store.run(leo.id).last_response_id)
paid = [r for r in agent.payments.refunds() if r["idempotency_key"] == leo_call.key]
check("the approving process was killed with SIGKILL", crashed.returncode == -signal.SIGKILL)
check("it paid, but never saved that it did", len(paid) == 1 and leo_call.output is None)
check("a resume would pick the run up", leo.id in [r.id for r in agent.resumable()])
'''),
md("""
`refund-agent resume`, another new process, runs the refund call again, because its output
was never saved. The payment stand-in has seen the key (the run's id plus the call id), so it
hands back the first refund, marked *reused*, and pays nothing.
"""),
code('''
resumed = cli("resume")
paid = [r for r in agent.payments.refunds() if r["idempotency_key"] == leo_call.key]
reported = [s.data for s in agent.store.steps(leo.id) if s.kind == "refund"]
check("still one refund for the call", len(paid) == 1)
check("the run reports that same refund, as reused", [(r["refund_id"], r["reused"])
      for r in reported] == [(paid[0]["refund_id"], True)])
check("audit: requested, approved, reused", [e.event for e in agent.store.audit()
      if e.run_id == leo.id] == ["requested", "approved", "reused"])
'''),
md("""
## Two people click Approve at once

Dana and Sam both have the ticket open. A decision reads the approval and writes it in one
`BEGIN IMMEDIATE` transaction, and only `WHERE status = 'pending'`, so exactly one wins; the
other gets `AlreadyDecided` naming the winner (the web page answers 409), audited `ignored`.
We try it on a fresh desk (an `Agent` with its own store), from two threads at one barrier.
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
        outcomes[name] = race.decide(pending.id, approve=True, by=name)
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
check("the run pays once", race.advance(ticket.id).status.value == "done"
      and len(race.payments.refunds()) == 1)
'''),
md("""
## A restart, mid-run

A deploy, an out-of-memory kill, a laptop closed: the process dies between two lines. Tom's
email (a stand mixer past the 30-day window) is handled by a process killed right after its
first call's output was saved (`after_tool`). `resume` picks the run up, sends the saved
output without running the call again, and is itself killed just after the email goes out
(`after_email`). A third process, this notebook, finishes: the outbox, like the payments, takes the call's
key, so the customer gets one email.
"""),
code('''
cli("sample", "past-window", REFUND_AGENT_CRASH_AT="after_tool")
tom = agent.store.runs(limit=1)[0]
cli("resume", REFUND_AGENT_CRASH_AT="after_email")
tom = agent.advance(tom.id, on_event=trace())          # the third process: this notebook
ran = [s.data["call_id"] for s in agent.store.steps(tom.id) if s.kind == "result"]
mails = [m for m in agent.outbox.messages() if m["idempotency_key"].startswith(tom.id)]
check("three processes, one finished run", tom.status.value == "done")
check("no call ran twice", len(ran) == len(set(ran)) == 3)
check("one email, although its process died after sending", len(mails) == 1)
'''),
md("""
## The customer writes back

A finished run continues when the customer replies: `add_reply` saves the reply, and the next
`advance` sends it as one user message on top of the run's last stored response. Nothing
else is sent again; the order, the policy and the refund are on the API's side.
"""),
code('''
last = agent.store.run(maya.id).last_response_id
agent.add_reply(maya.id, "Thank you, that was quick!")
sent_before = len(requests)
maya = agent.advance(maya.id)
body = requests[sent_before]
check("the reply continues the last stored response", body["previous_response_id"] == last)
check("and is the only input", [i.get("role") for i in body["input"]] == ["user"])
check("the answer went to Maya only", agent.outbox.messages()[-1]["request"]["to"]
      == "maya.chen@example.com")
'''),
md("""
## An angry customer

Priya wants all `$94.95` back for order A1066, gift card included, and threatens a chargeback.
`converse` lets the stand-in play her, replying whenever the run finishes. The amount is never
the model's: `issue_refund` names lines and the policy prices them (`quote_refund`), so the
gift card (final sale) is refused and the skillet pays `$39.00` less the `$7.50` return fee.
"""),
code('''
from refund_agent import converse, quote_refund

priya = converse(agent, agent.start_sample("angry").id)
approval = agent.store.approvals("pending")[0]
order = shop.order("A1066")
allowed = quote_refund(order, shop.terms, [("SKL-CI-10", "changed_mind")], {}, shop.today)
check("proposed exactly what the policy computes", approval.amount == allowed.amount == 31.50)
check("the gift card is refused", isinstance(quote_refund(
      order, shop.terms, [("GIFT-50", "changed_mind")], {}, shop.today), str)
      and [x.line for x in approval.lines] == ["SKL-CI-10"])
agent.decide(approval.id, approve=True, by="Dana Kim")
priya = converse(agent, priya.id)
paid = [r for r in agent.payments.refunds() if r["request"]["order_id"] == "A1066"]
check(f"after {priya.simulated_replies} angry replies, still one refund of $31.50",
      priya.simulated_replies >= 2
      and [r["request"]["amount_cents"] for r in paid] == [3150])
'''),
md("""
## Expiry: nobody decides in time

Durable execution needs a timeout. `agent.expire()` (the web app runs it on a timer; a cron job
can run `refund-agent expire`) closes approvals left pending longer than `approval_days` (7 by
default) as a compare-and-set, like a decision, so a person clicking at that moment wins or
loses cleanly. The run then tells the customer nothing was refunded. Here a desk whose
approvals expire at once.
"""),
code('''
late = Agent(agent.settings.with_(output_dir=OUTPUT / "expiry", approval_days=1e-9))
run = late.advance(late.start_sample("damaged").id)
expired = late.expire()
run = late.advance(run.id)
check("the approval expired", [a.status for a in expired] == ["expired"])
check("the run told the customer and paid nothing", run.status.value == "done"
      and not late.payments.refunds() and len(late.outbox.messages()) == 1)
'''),
md("""
The stored response expires too: the API keeps it 30 days. A decision that comes later still
works: the first request that names the gone response gets a 404, and the agent sends the
same turn once more with the run's own transcript (saved at boundary 2), then chains from the
new response. We move the stand-in's clock 31 days ahead.
"""),
code('''
slow = Agent(agent.settings.with_(output_dir=OUTPUT / "thirty-days"))
run = slow.advance(slow.start_sample("damaged").id)
slow.model.server.advance_clock(days=31)
slow.decide(slow.store.approvals("pending")[0].id, approve=True, by="Dana Kim")
run = slow.advance(run.id)
check("the gone response was replaced by the transcript",
      [s.kind for s in slow.store.steps(run.id)].count("resent") == 1)
check("the run finished and paid once", run.status.value == "done"
      and len(slow.payments.refunds()) == 1)
'''),

md('''
## Apply it to your agent

Nothing above is specific to refunds. `refund_agent/examples/closure.py` is a second agent on
the same loop and store, short enough to read whole: an account-closure desk with two tools.
A tool **declares** what it is, and the loop dispatches by that declaration, never by name:
`lookup_account` is read-only (it may run again after a crash); `close_account`
`needs_approval`. Its first call queues a proposal and the run pauses; once a person decides,
the loop runs it with the decision, and it closes the account keyed by the call.
'''),
code('''
from refund_agent.examples import ClosureAgent
from refund_agent.examples.closure import TOOLS
from refund_agent.tools import ToolKind

for tool in TOOLS.values():
    print(f"{tool.name:<15} {tool.kind}")
closer = ClosureAgent(agent.settings.with_(output_dir=OUTPUT / "closures"))
ana = closer.start("ana.ruiz@example.com", "Please close my account AC-1001, we move abroad.",
                   sender_name="Ana Ruiz")
ana = closer.advance(ana.id, on_event=trace())
pending = closer.store.approvals("pending")[0]
check("close_account is gated by its declaration", TOOLS["close_account"].needs_approval
      and TOOLS["lookup_account"].kind is ToolKind.READ_ONLY)
check("the run waits, and nothing was closed", ana.status.value == "waiting"
      and closer.closed() == [])
'''),
md('''
**Which tool to gate.** Gate every tool whose effect cannot be undone or must not happen
without a person: money out, deletion, anything sent to the outside world on someone's
behalf. Keep look-ups read-only and ungated; they are free to run twice. An effect that needs
no person (the customer email here) still takes the call's key as its idempotency key.

**The minimal state to save** is the three values of the thirty lines, kept where any process
can read them: the response that made the call, the call id, and the call's arguments (the
package adds the run id, which makes the key, and the decision). The conversation itself
stays on the API's side.
'''),
code('''
[call] = [c for c in closer.store.calls(pending.response_id) if c.name == "close_account"]
print("arguments:", json.loads(call.arguments))
check("the approval and its call hold the three values", pending.call_id == call.call_id
      and pending.response_id == closer.store.run(ana.id).last_response_id)
'''),
md('''
**Who triggers the resume.** Nothing resumes by itself; one of three things calls `advance`:

1. the process that records the decision, at once (`refund-agent approve`; on the web page,
   the Approve button hands the run to the page's worker thread);
2. a worker: `refund-agent worker` loops on `claim()`, which takes one decided run, or one
   whose owner died, from any host, under a fresh lease;
3. a sweep for runs left behind: `refund-agent resume`, and the web app at start-up, continue
   every run in `resumable()`.

Here Dana decides in this process without continuing, and a worker's `claim()` takes the run.
'''),
code('''
closer.decide(pending.id, approve=True, by="Dana Kim")
check("a decided run is resumable", ana.id in [r.id for r in closer.resumable()])
claimed = closer.claim()                         # what `refund-agent worker` does in a loop
ana = closer.advance(claimed, on_event=trace())
[closure] = closer.closed()
check("the worker claimed it and closed the account once", claimed == ana.id
      and ana.status.value == "done" and closure["idempotency_key"] == pending.id)
check("the key is the run and the call", pending.id == f"{ana.id}-{pending.call_id}")
'''),
md('''
**The real provider's idempotency key.** The stand-ins take the key as real providers do:
Stripe's `Idempotency-Key` header, `stripe.Refund.create(..., idempotency_key=approval.id)`.
Use the run's id together with the call id: providers promise call ids unique within one
conversation, not across conversations. Stripe forgets keys after 24 hours, so a resume days
later should first look the refund up by that key (kept in the refund's metadata) before
creating one; an answer that never came back is settled by reading back, never by paying
again.

**xAI versus OpenAI.** Both speak the Responses API, with differences the package keeps in one
place (`refund_agent/providers/table.py`, `docs/PROVIDERS.md`). The one that shapes this pattern:
xAI refuses `instructions` together with `previous_response_id`, OpenAI accepts it. So the
system prompt goes as the first input message, and every resume sends only new items. The
stand-in speaks both dialects:
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

What the opening promised, and where it happened:

1. **The pattern in thirty lines**: run until the gated call, save the response id, the call
   id and the arguments, stop; later, pay once keyed by the call id and resume with
   `previous_response_id` and the call's `function_call_output`. The package does the same,
   and the plain approve-then-resume path sent exactly that request.
2. **Three values are enough**, because the API keeps the conversation (`store=True`); when it
   no longer does (30 days), the run's own transcript takes over.
3. **Once, by idempotency key**: a `kill -9` after paying (the refund came back *reused*), a
   double click (one winner, the other told who), a restart mid-run (no call ran twice, one
   email), a reply and an angry customer (one refund, priced by the policy), and an approval
   nobody decided (expired, customer told, nothing paid).
4. **Your agent**: declare the tool `needs_approval`, save the three values, let the decision,
   a worker's `claim()` or `resume` trigger the resume, key the effect by run and call id, and
   put the system prompt in the input, not `instructions`.

Partial approvals, asking the customer, fencing, reconciliation, accounts and PostgreSQL are
in `beyond.ipynb`.
'''),
]
