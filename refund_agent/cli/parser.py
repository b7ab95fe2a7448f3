"""The commands and their flags: the argparse tree, each command's function registered on its
parser with ``set_defaults(func=...)``, and the examples ``--help`` ends with."""

from __future__ import annotations

import argparse
import re

from ..config import APPROVAL_DAYS
from ..desk.accounts import DEFAULT_LIMIT, ROLES
from . import admin, decisions, eval, mail, owners, people, tickets
from .typed import CONCURRENCY, GRACE, IDLE_EXIT

EPILOG = """\
examples:
  refund-agent                              the damaged-item sample, up to the approval
  refund-agent approve --as "Dana Kim"      approve it in a new process and finish the run
  refund-agent approve --only SKU --note "The mugs were used"   approve some lines only
  refund-agent approve --only GLS-4:1                  approve 1 unit of a line (SKU:N)
  refund-agent reject --note "Used item"    reject it instead
  refund-agent ask "Could you send a photo of the damage?"   ask the customer first
  refund-agent approve --id ID --fingerprint FP   only if it is still what queue/show printed
  refund-agent expire                       expire refunds past the approval window (for cron)
  refund-agent sample past-window           a request the policy declines without a person
  refund-agent angry                        the angry customer, played by the model
  refund-agent send "My order A1058 ..." --from leo.martins@example.com
  refund-agent reply "That's not enough"    write back as the customer (--run RUN when several
                                            runs are done or waiting on the customer)
  refund-agent resume                       continue the last stopped, failed or crashed run
  refund-agent handoff --as "Ana Ruiz" --note "Over my limit"   send it to a lead instead
  refund-agent take --id 3 --as "Lee Park"   a lead picks up escalation 3 (first one wins)
  refund-agent claim RUN --as "Ana Ruiz"     own a ticket (assign RUN --to NAME, release RUN)
  refund-agent tickets --mine --as "Ana Ruiz"   your tickets (--unassigned: nobody's)
  refund-agent queue | runs | show RUN | audit [--verify]
  refund-agent doctor                       does the model provider work? (one tiny request)
  refund-agent eval -k 3 --csv runs.csv     score the provider on the corpus (docs/EVAL.md)
  refund-agent web --server.port 8600       the helpdesk page (Streamlit's options pass on)
  refund-agent webhooks --port 8790         Stripe's refund.failed/updated onto the desk
  refund-agent receive --smtp 127.0.0.1:2525   customers' mail in (or --imap imaps://...)
  refund-agent migrate --to postgresql://...   copy the SQLite store into an empty PostgreSQL
  refund-agent users add "Dana Kim" --role approver --limit 100    an account (asks a password)
  refund-agent users list | users remove NAME

With no accounts the desk is a single-user demo: decisions are signed with --as as typed. Once
an account exists, approve, reject and ask ask for the --as account's password (scripts set
REFUND_AGENT_PASSWORD), and an approver may approve only up to their limit; a lead has none.
Above it, `handoff` sends the refund to a lead (it keeps waiting); `queue` lists the refunds
and the open escalations, and a lead picks one up with `take` (handoff and take are signed
the same way).

Exit codes: 0 done (also when you repeat your own decision); 1 an error or a refusal (the
message says what); 2 a usage mistake; 3 someone else decided that refund first, or took that
escalation first (the message says who, what and when); 4 nothing was waiting to be decided
(or taken); 130 stopped with Ctrl+C. Output is only a report: when it cannot be written (a
pipe closed early, `| head`; a full disk), the command goes quiet and still finishes its work.

Replies are accepted only once a run has finished or asked the customer a question (not while
it works or waits for approval). Ctrl+C stops
a run at its last stored response; `resume` continues it. Without XAI_API_KEY every command
uses the offline stand-in model, which runs locally and is not Grok.

Each run keeps its own transcript (every item sent and returned, encrypted reasoning included):
when the provider's stored response is gone (30 days, or deleted) the run sends it instead and
carries on. REFUND_AGENT_ZERO_RETENTION=1 asks the provider to keep nothing (store=false) and
sends the transcript with every request; `show` and `runs` print each run's transcript size.
"""


def _how_many(text: str) -> int:
    """A --limit: a whole number from 1 (argparse turns the error into a usage mistake)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1, got {text!r}")
    return int(text)


def _fingerprint(text: str) -> str:
    """A --fingerprint: the 16 hex digits ``queue`` and ``show`` print, passed on as given (a
    mistyped one is a usage mistake here, not a refusal saying the approval changed)."""
    if not re.fullmatch(r"[0-9a-f]{16}", text):
        raise argparse.ArgumentTypeError(f"must be the 16 hex digits `queue` or `show` prints "
                                         f"after 'fingerprint:', got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="refund-agent", description="A refund agent that waits for a person's approval "
        "before any refund, and finishes each run exactly once.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    # No command at all is the damaged-item sample.
    parser.set_defaults(func=tickets.sample, key="damaged")
    sub = parser.add_subparsers(dest="command")
    sample = sub.add_parser("sample", help="send one of the sample emails")
    sample.add_argument("key", nargs="?", default="damaged",
                        help="damaged (default), past-window or angry")
    sample.set_defaults(func=tickets.sample)
    sub.add_parser("angry", help="the angry-customer sample; the model plays the customer"
                   ).set_defaults(func=tickets.angry)
    send = sub.add_parser("send", help="send your own email to the agent")
    send.add_argument("text")
    send.add_argument("--from", dest="sender", required=True, help="the customer's address")
    send.add_argument("--name", default="", help="the customer's name")
    send.add_argument("--subject", default="Refund request")
    send.set_defaults(func=tickets.send)
    for name, func, help_text in (
            ("approve", decisions.approve, "approve the waiting refund and finish its run"),
            ("reject", decisions.reject, "reject it with a note the agent passes on"),
            ("ask", decisions.ask, "ask the customer something before deciding; nothing is "
                                   "paid, and their reply continues the run")):
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(func=func)
        p.add_argument("--as", dest="by", metavar="NAME",
                       help="the account that decides (its password is asked for, or read "
                            "from REFUND_AGENT_PASSWORD); with no accounts, any name (default: "
                            "your login)")
        p.add_argument("--id", help="the approval id (needed when more than one is waiting)")
        p.add_argument("--fingerprint", metavar="FP", type=_fingerprint,
                       help="decide only if the approval is still what `queue` or `show` "
                            "printed with this fingerprint, else it is refused (default: the "
                            "approval as this command reads it)")
        if name == "approve":
            p.add_argument("--only", nargs="+", metavar="LINE",
                           help="approve only these lines (SKU), or fewer of a line's units "
                                "(SKU:N); the others are declined")
            p.add_argument("--note", help="a note for the agent, e.g. why a line was declined")
        if name == "reject":
            p.add_argument("--note", required=True, help="why; the customer hears it")
        if name == "ask":
            p.add_argument("question", help="the question, as the customer should read it")
    handoff = sub.add_parser("handoff", help="send the waiting refund, above your approval "
                             "limit, to a lead; it keeps waiting until a lead decides it")
    handoff.add_argument("--as", dest="by", metavar="NAME",
                         help="the account that sends it (signed as approve is)")
    handoff.add_argument("--id", help="the approval id (needed when more than one is waiting)")
    handoff.add_argument("--note", help="a note for the lead")
    handoff.set_defaults(func=decisions.handoff)
    take = sub.add_parser("take", help="pick up an open escalation (leads only; the first one "
                          "to take it wins)")
    take.add_argument("--as", dest="by", metavar="NAME",
                      help="the lead's account (signed as approve is)")
    which = take.add_mutually_exclusive_group()
    which.add_argument("--id", type=int, help="the escalation's number, as `queue` lists it "
                       "(needed when more than one is open)")
    which.add_argument("--run", help="take the open escalation on this run")
    take.set_defaults(func=decisions.take)
    for name, func, help_text in (
            ("assign", owners.assign, "give a ticket to an account (a lead: to anyone; "
                                      "anyone else: to themselves)"),
            ("claim", owners.claim, "take a ticket nobody owns (a lead: any ticket)"),
            ("release", owners.release, "give up your ticket (someone else's: a lead)")):
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(func=func)
        p.add_argument("run", help="the ticket's run id, as `runs` or `tickets` lists it")
        p.add_argument("--as", dest="by", metavar="NAME",
                       help="your account (signed as approve is)")
        if name == "assign":
            p.add_argument("--to", required=True, metavar="NAME",
                           help="the account that will own it")
    away = sub.add_parser("away", help="out of office: your tickets and approvals go to a "
                          "delegate until a date")
    away.add_argument("--to", required=True, metavar="NAME", help="the delegate's account")
    away.add_argument("--until", required=True, metavar="DATE",
                      help="YYYY-MM-DD (to the end of that day) or YYYY-MM-DD HH:MM")
    away.add_argument("--as", dest="by", metavar="NAME", help="your account (signed)")
    away.set_defaults(func=owners.away)
    back = sub.add_parser("back", help="back in the office: your work is yours again")
    back.add_argument("--as", dest="by", metavar="NAME", help="your account (signed)")
    back.set_defaults(func=owners.back)
    listing = sub.add_parser("tickets", help="list tickets with their owners, newest first")
    whose = listing.add_mutually_exclusive_group()
    whose.add_argument("--mine", action="store_true", help="only the --as account's tickets")
    whose.add_argument("--unassigned", action="store_true", help="only tickets nobody owns")
    listing.add_argument("--as", dest="by", metavar="NAME",
                         help="whose tickets --mine lists (no password: it only lists)")
    listing.add_argument("--limit", type=_how_many, default=50, help="how many (default 50)")
    listing.set_defaults(func=owners.tickets)
    sub.add_parser("expire", help="expire refunds nobody decided within "
                                  f"REFUND_AGENT_APPROVAL_DAYS (default {APPROVAL_DAYS:g}) and "
                                  "tell those customers; for cron").set_defaults(
                                      func=decisions.expire)
    resume = sub.add_parser("resume", help="continue a stopped, failed or crashed run")
    resume.add_argument("--run", help="run id (default: the last one that needs it)")
    resume.set_defaults(func=tickets.resume)
    reply = sub.add_parser("reply", help="write back to a finished run as the customer")
    reply.add_argument("text")
    reply.add_argument("--run", help="run id (needed unless exactly one run is done or "
                                     "waiting on the customer)")
    reply.set_defaults(func=tickets.reply)
    work = sub.add_parser("work", help="advance runs that need a worker, several at once, "
                          "from any host sharing the store (PostgreSQL); Ctrl+C to stop")
    work.add_argument("--idle-exit", type=IDLE_EXIT, default=None, metavar="SECONDS",
                      help="exit after this long with nothing to do (default: never)")
    work.add_argument("--concurrency", type=CONCURRENCY, default=None, metavar="N",
                      help="runs advanced at once (default: REFUND_AGENT_CONCURRENCY, 8)")
    work.add_argument("--grace", type=GRACE, default=30.0, metavar="SECONDS",
                      help="after Ctrl+C or SIGTERM, how long the runs in flight get to finish "
                           "before they stop at their last stored response and are handed "
                           "back (default 30)")
    work.set_defaults(func=admin.work)
    mail.add_parser(sub)
    migrate = sub.add_parser(
        "migrate", help="copy the SQLite store in the output folder, with its refunds.log and "
                        "outbox.log, into an empty PostgreSQL database")
    migrate.add_argument("--to", metavar="URL",
                         help="the target, postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
                              "(default: REFUND_AGENT_DATABASE_URL)")
    migrate.set_defaults(func=admin.migrate)
    eval.add_parser(sub)
    sub.add_parser("doctor", help="check the model provider: key, model, effort, storage, "
                   "streaming (one tiny request), or say how to switch from the stand-in"
                   ).set_defaults(func=admin.doctor)
    web = sub.add_parser("web", allow_abbrev=False, help="the helpdesk page in your browser "
                   "(Streamlit; its options such as --server.port 8600 pass on)",
                   description="Start the helpdesk page: `streamlit run` on the page shipped "
                   "in the package, with the desk's Streamlit settings. Every other option "
                   "goes to Streamlit and wins over those settings, e.g. --server.port 8600, "
                   "--server.headless true, --server.address 0.0.0.0 (then set "
                   "REFUND_AGENT_ALLOWED_HOSTS).")
    # The only command that takes options it does not know: they are Streamlit's.
    web.set_defaults(func=admin.web, passes_on=True)
    hooks = sub.add_parser("webhooks", help="receive Stripe's webhooks (refund.updated, "
                           "refund.failed), check their signatures with STRIPE_WEBHOOK_SECRET, "
                           "and put failed refunds on the desk; Ctrl+C to stop")
    hooks.add_argument("--port", type=int, default=8790)
    hooks.add_argument("--host", default="127.0.0.1",
                       help="the address to listen on (default 127.0.0.1; put a TLS proxy in "
                            "front for Stripe to reach it)")
    hooks.set_defaults(func=admin.webhooks)
    queue = sub.add_parser("queue", help="list refunds waiting for approval, and open "
                           "escalations")
    queue.add_argument("--as", dest="by", metavar="NAME",
                       help="mark the refunds above this account's limit (needs a lead)")
    queue.set_defaults(func=decisions.queue)
    runs = sub.add_parser("runs", help="list runs, newest first")
    runs.add_argument("--limit", type=_how_many, default=20, help="how many (default 20)")
    runs.set_defaults(func=tickets.runs)
    show = sub.add_parser("show", help="show one run's timeline")
    show.add_argument("run")
    show.set_defaults(func=tickets.show)
    audit = sub.add_parser("audit", help="show the audit log")
    audit.add_argument("--limit", type=_how_many, default=50, help="how many (default 50)")
    audit.add_argument("--verify", action="store_true",
                       help="check the hash chain and reconcile the payment and email logs")
    audit.set_defaults(func=admin.audit)
    users = sub.add_parser("users", help="the accounts that may decide refunds")
    users_sub = users.add_subparsers(dest="users_command", required=True)
    add = users_sub.add_parser("add", help="add an account (the password is asked for twice "
                                           "on a terminal, else read from "
                                           "REFUND_AGENT_NEW_PASSWORD or one line of standard "
                                           "input)")
    add.add_argument("name")
    add.set_defaults(func=people.users_add)
    add.add_argument("--role", required=True, choices=ROLES,
                     help="approver: may approve up to --limit; lead: no limit")
    add.add_argument("--limit", type=float, default=None,
                     help=f"an approver's limit in dollars (default ${DEFAULT_LIMIT:g})")
    users_sub.add_parser("list", help="list the accounts").set_defaults(func=people.users_list)
    remove = users_sub.add_parser("remove", help="remove an account")
    remove.add_argument("name")
    remove.set_defaults(func=people.users_remove)
    return parser
