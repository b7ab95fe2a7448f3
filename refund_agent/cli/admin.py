"""Running the desk: the model provider's check (doctor), the audit and its verification, the
worker, the page (web), Stripe's webhooks, and moving the store to PostgreSQL (migrate)."""

from __future__ import annotations

import argparse
import os
import sys

from ..config import load_settings
from ..desk.agent import Agent
from ..desk.migrate import migrate as migrate_store
from ..desk.reconcile import email_notes, log_names, provider_problems, reconcile
from ..desk.records import DeskStore
from ..desk.status import amount_is, amount_label
from ..errors import MigrationRefused
from ..outside import stripe_missing
from ..text import plural
from .output import time_text
from .tickets import at_work
from .work import Drain


def doctor(_args: argparse.Namespace) -> int:
    """``refund-agent doctor``: exit 0 when the provider works (or the stand-in is in use)."""
    from ..desk.tools import tool_schemas
    from ..providers.doctor import report  # only this command needs it

    # The desk's tools: the doctor tries the request the refund desk's first turn sends.
    lines, ok = report(load_settings(), tool_schemas())
    print("\n".join(lines))
    return 0 if ok else 1


def audit(args: argparse.Namespace) -> int:
    """``refund-agent audit [--limit N] [--verify]``: the audit log, or its verification
    (exit 1 when anything disagrees)."""
    agent = Agent()
    if args.verify:
        return _verify(agent)
    entries = agent.store.audit(limit=args.limit)
    if not entries:
        print("The audit log is empty.")
        return 0
    print(f"{'TIME':19}  {'EVENT':9} {'BY':14} {'PID':11} {'ORDER':6} {'AMOUNT':>20}  "
          "LINES  NOTE")
    for e in entries:
        # An amount that moved no money (requested, asked, rejected, ...) says so.
        amount = amount_label(e.amount, amount_is(event=e.event))
        lines = " ".join(f"{line['line']}:{line['reason']}" for line in e.lines or [])
        print(f"{time_text(e.at)}  {e.event:9} {e.actor:14} pid {e.pid:<7} {e.order_id or '':6} "
              f"{amount:>20}  {lines + '  ' if lines else ''}{e.note or ''}")
    return 0


def _verify(agent: Agent) -> int:
    # The engine's own check first: a damaged page the checks below never read (an index,
    # say) would still let them say "intact" while a decision fails on it.
    damage = agent.store.integrity_problem()
    problem = (f"The store {agent.store.path} is damaged, so the audit cannot be trusted: the "
               f"database's integrity check says: {damage}. Stop every page and worker and "
               "restore it from a backup; nothing was changed." if damage else
               reconcile(agent.store, agent.settings.output_dir))
    unsent, resent = email_notes(agent.outbox)
    if not problem:   # the ledger agrees with the store; now with the provider's list
        problem = "\n".join(provider_problems(agent.payments, agent.store) + unsent) or None
    refunds, emails = log_names(agent.store)
    print(problem or f"Audit log intact: {len(agent.store.audit())} entries, chain and "
          f"anchor ok; {refunds} and {emails} agree with the approvals and the audit.")
    for note in resent:
        print(note)
    return 1 if problem else 0


def work(args: argparse.Namespace) -> int:
    """``refund-agent work [--concurrency N] [--grace SECONDS]``: claim runs (new, decided, or
    left by a dead process on any host) and advance up to N at once (cli/work.py).

    One line per run, and a progress line: a worker is meant to run unattended, several of
    them on several hosts. Ctrl+C or SIGTERM stops taking runs and lets those in flight end.
    """
    agent, _printer = at_work()
    agent.store.front = "worker"
    concurrency = args.concurrency or agent.settings.concurrency
    print(f"Worker {os.getpid()} on {agent.store.host}: taking runs from {agent.store.path}, "
          f"{plural(concurrency, 'run', 'runs')} at a time.", flush=True)
    if foreign := agent.foreign_runs():   # runs it will not take: say so, once
        print(agent.foreign_note(foreign), flush=True)
    return Drain(agent, concurrency, args.idle_exit, args.grace).run()


def web(args: argparse.Namespace) -> int:
    """``refund-agent web [Streamlit options]``: the page, from wherever the package is.

    The settings are read first, so a bad one stops here in one line rather than on the page.
    Then this process becomes Streamlit (exec, not a child), so Ctrl+C and a SIGTERM reach the
    server itself, as with ``streamlit run``, and nothing is left running behind it.
    """
    from ..web.app import desk_options, streamlit_command

    load_settings()
    command = streamlit_command(args.passed_on, desk_options(), os.environ)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(command[0], command)
    return 0  # not reached: execv returns only by raising OSError


def webhooks(args: argparse.Namespace) -> int:
    """``refund-agent webhooks``: Stripe's later word on refunds, into the store."""
    agent = Agent()
    host, port = args.host, args.port
    try:   # only this command needs it, and stripe is an optional extra
        from ..outside.webhooks import serve
    except ImportError:
        raise stripe_missing("refund-agent webhooks") from None

    secret = agent.settings.outside.stripe_webhook_secret
    if not secret:
        print("Set STRIPE_WEBHOOK_SECRET to the endpoint's signing secret (whsec_..., shown "
              "where the endpoint is added in Stripe's dashboard); without it no event can be "
              "checked, so none is accepted.")
        return 2
    try:
        server = serve(agent.store, secret, host, port,
                       max_connections=agent.settings.outside.max_connections)
    except OSError as exc:
        print(f"Cannot listen on {host}:{port}: {exc.strerror or exc}.")
        return 2
    print(f"Listening for Stripe webhooks on http://{host}:{server.server_port}/ "
          "(refund.updated, refund.failed, charge.refund.updated); Ctrl+C to stop.",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def migrate(args: argparse.Namespace) -> int:
    """``refund-agent migrate [--to URL]``: copy the SQLite store of these settings into
    PostgreSQL (the source is always the SQLite store, whatever the settings), then say what
    to do next."""
    settings = load_settings()
    target = (args.to or "").strip() or settings.database_url
    if not target:
        raise MigrationRefused("Say where to copy the store: --to postgresql://USER:PASSWORD@"
                               "HOST:PORT/DATABASE, or set REFUND_AGENT_DATABASE_URL.")
    if not settings.db_path.exists():
        raise MigrationRefused(f"There is no SQLite store at {settings.db_path} to migrate "
                               "(REFUND_AGENT_OUTPUT names the output folder).")
    source = DeskStore(settings.db_path, lease_seconds=settings.lease_seconds)
    try:
        report = migrate_store(source, settings.output_dir, target,
                               progress=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("\nStopped. A copy stopped before it committed is rolled back, so PostgreSQL is "
              "as it was; the SQLite store was only read. Run migrate again (it refuses a "
              "target that is not empty).")
        return 130
    counts = ", ".join(plural(report.rows[t], one, many) for t, one, many in (
        ("runs", "run", "runs"), ("steps", "step", "steps"), ("approvals", "approval",
                                                              "approvals"),
        ("audit", "audit entry", "audit entries"), ("accounts", "account", "accounts")))
    print("Reconciled on PostgreSQL: audit chain and anchor intact; the ledger table agrees "
          "with the approvals and the audit.\n")
    print(f"Migrated in {report.seconds:.1f} s: {counts}; "
          f"{plural(report.ledger['refunds'], 'refund', 'refunds')} and "
          f"{plural(report.ledger['outbox'], 'email', 'emails')} into the ledger table. "
          f"{plural(report.pending, 'refund waits', 'refunds wait')} for a decision, now on "
          "PostgreSQL.")
    if report.torn:
        print(f"Skipped {report.torn} torn log line(s): writes cut short by a crash, never "
              "acknowledged (reconcile skips them too).")
    if report.leases_cleared:
        print(f"Cleared {report.leases_cleared} abandoned lease(s), fencing epochs kept: "
              "`refund-agent resume` or `work` continues those runs.")
    if report.without_transcript:
        shown = ", ".join(report.without_transcript[:10])
        more = (f" and {len(report.without_transcript) - 10} more"
                if len(report.without_transcript) > 10 else "")
        print(f"Warning: {len(report.without_transcript)} unfinished run(s) have no complete "
              f"transcript ({shown}{more}): they continue only while the model still has "
              "their stored response (the offline model keeps them in this output folder's "
              "offline-model.sqlite3, xAI for 30 days).")
    if target == settings.database_url:
        use = "REFUND_AGENT_DATABASE_URL already names it: every command now uses PostgreSQL."
    else:
        use = (f"export REFUND_AGENT_DATABASE_URL='{report.target}'   (with the password, if "
               "it has one; on every host)")
    print(f"\nNext:\n  {use}\n  keep {settings.output_dir} as a read-only backup (its store is "
          "marked as moved: it still reads, and refuses every write)\n  refund-agent audit "
          "--verify   (checks the copy again, on PostgreSQL)")
    state = settings.output_dir / "offline-model.sqlite3"
    if settings.offline and not settings.offline_url and state.exists():
        print(f"\nThe offline model's stored responses, and the key its reasoning is sealed "
              f"with, stay in {state}: continue runs here with this output folder, or serve it "
              f"to every host (python -m offline_model --port 8787 --state {state}, "
              "then REFUND_AGENT_OFFLINE_URL). A stand-in on another file cannot continue "
              "them.")
    return 0
