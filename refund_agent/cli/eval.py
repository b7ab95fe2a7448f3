"""``refund-agent eval``: the corpus (or a team's own emails) against the configured provider,
k runs each, scored against what the shop's policy owes (refund_agent/evals/, docs/EVAL.md)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ..config import load_settings
from ..desk.agent import Agent
from ..errors import ConfigError
from ..evals import corpus as corpora
from ..evals.runner import progress_bar, run_eval, table, write_csv
from ..outside.config import OutsideSettings
from ..web.views.format import cost_basis, cost_note


def runs(text: str) -> int:
    """-k: a whole number from 1 (argparse turns the error into a usage mistake)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1, got {text!r}")
    return int(text)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="score the provider on the corpus (or --emails FOLDER): "
                       "right, over-proposed, under, asked, declined, leaked, pass^k, cost")
    p.add_argument("--emails", type=Path, metavar="FOLDER",
                   help="a folder with emails.json (and shop/, else the desk's shop); "
                        "default: the built-in corpus")
    p.add_argument("-k", type=runs, default=1, dest="k", help="runs per email (default 1)")
    p.add_argument("--part", choices=("tuning", "held-out", "all"), default="all",
                   help="only this part of the corpus (default all)")
    p.add_argument("--csv", type=Path, metavar="PATH", help="also write one row per run here")
    p.set_defaults(func=evaluate)


def evaluate(args: argparse.Namespace) -> int:
    """Exit 0 when no run over-proposed or leaked, else 1 (the table says which)."""
    corpus = corpora.load(args.emails)
    emails = [e for e in corpus.emails if args.part in ("all", e["part"])]
    if not emails:
        raise ConfigError(f"{corpus.name} has no email in the {args.part} part.")
    if args.csv is not None and not args.csv.parent.is_dir():
        raise ConfigError(f"--csv: the folder {args.csv.parent} does not exist.")
    settings = load_settings()
    with tempfile.TemporaryDirectory(prefix="refund-agent-eval-") as scratch:
        # Its own store, outbox and payment log, never the desk's: nothing is sent or paid.
        agent = Agent(settings.with_(data_dir=corpus.shop_dir or settings.data_dir,
                                     output_dir=Path(scratch), database_url="",
                                     outside=OutsideSettings(), crash_at=frozenset()))
        corpora.check_orders(corpus, agent.shop)
        print(f"Model: {settings.model_label}")
        print(f"Emails: {len(emails)} from {corpus.name}, {args.k} run(s) each\n", flush=True)
        results = run_eval(agent, emails, args.k, progress_bar(sys.stderr))
    print(table(results, emails, args.k, offline=settings.offline), end="")
    if note := cost_note(cost_basis(settings)):
        print(f"$/email: {note}.")
    if args.csv is not None:
        write_csv(args.csv, results, emails)
        print(f"\nOne row per run: {args.csv}")
    bad = any(v.verdict == "over" or o.leaks for pairs in results.values() for o, v in pairs)
    return 1 if bad else 0
