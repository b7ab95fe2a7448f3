"""The terminal front end: every command is a new process sharing the store in ``output/``.

    refund-agent                         send the damaged-item sample; stops at the approval
    refund-agent approve --as "Dana Kim" approve the waiting refund and finish the run
    refund-agent reject --note "Why"     reject it; the agent explains the note to the customer
    refund-agent resume                  continue the last stopped, failed or crashed run
    refund-agent handoff --as "Ana Ruiz" send the waiting refund to a lead (over your limit)
    refund-agent take --as "Lee Park"    a lead picks up the open escalation

Exit codes (output.EXIT_CODES; the help's epilog says the same): 0 done, also when you repeat
your own decision; 1 an error or a refusal, the message saying what (a wrong password, over
a limit, several to choose from, an approval that changed since its --fingerprint was read);
2 a usage mistake; 3 someone else decided that refund, or took that escalation, first; 4
nothing was waiting to be decided (or taken); 130 stopped with Ctrl+C.

One function per command, registered on its parser with ``set_defaults(func=...)``, in one
module per area:

    parser.py     the commands, their flags and the help's examples
    output.py     a run's steps as they print, the lines commands share, the escaping stream
    tickets.py    sample, angry, send, resume, reply, runs, show
    decisions.py  approve, reject, ask, handoff, take, queue, expire
    people.py     users add | list | remove, and signing a decision as an account
    admin.py      doctor, audit, work, web, webhooks, migrate
    work.py       the worker: many runs at once, its progress line, its stop
    mail.py       receive (customers' mail in, by SMTP or IMAP)
"""

from __future__ import annotations

import getpass  # noqa: F401 (tests/desk/test_accounts.py patches cli.getpass.getpass)
import sys

from .. import telemetry
from ..desk.agent import Agent  # noqa: F401 (tests/helpers/powerloss_recover.py: cli.Agent)
from ..errors import RefundAgentError
from .decisions import only_lines
from .output import DECISION_WORDS, EXIT_CODES, STEP_LINES, EscapedStream, Printer
from .parser import build_parser
from .people import signer as _signer  # noqa: F401 (tests/desk/test_accounts.py)

__all__ = ["DECISION_WORDS", "EXIT_CODES", "STEP_LINES", "Printer", "build_parser", "main",
           "only_lines", "run_command"]


def run_command(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command's function (exceptions reach :func:`main`)."""
    parser = build_parser()
    args, passed_on = parser.parse_known_args(argv)
    if passed_on and not getattr(args, "passes_on", False):
        parser.error(f"unrecognized arguments: {' '.join(passed_on)}")
    args.passed_on = passed_on
    return args.func(args)


def main(argv: list[str] | None = None) -> int:
    """Entry point: user mistakes print a message and exit non-zero, never a traceback."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapedStream(out), EscapedStream(err)
    try:
        return run_command(argv)
    except KeyboardInterrupt:
        print("\nStopped. `refund-agent resume` continues from the last stored response.")
        return 130
    except RefundAgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CODES.get(type(exc), 1)
    finally:
        # A command is a short process: its spans and metrics are exported before it ends
        # (the console exporter writes them to stderr, while it is still wrapped).
        telemetry.flush()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()      # while still wrapped, so an output error stays quiet
        sys.stdout, sys.stderr = out, err
