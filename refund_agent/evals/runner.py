"""Running an eval: every email k times through the real agent and the configured provider,
each run fresh, each proposal rejected once read (never paid), then the table and the CSV."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..desk.agent import Agent
from ..desk.identity import Actor
from ..models import RunStatus
from .scoring import VERDICTS, Outcome, Proposed, Summary, Verdict, classify, leaks, summarize

OnProgress = Callable[[int, int], None]


def run_email(agent: Agent, email: dict[str, Any]) -> Outcome:
    """A fresh run of one email, advanced until it waits for a person or finishes."""
    started = time.monotonic()
    run = agent.start(email["from"], email["body"], subject=email["subject"],
                      sender_name=email.get("from_name", ""))
    run = agent.advance(run.id)
    seconds = time.monotonic() - started
    signature = agent.shop.info.signature
    steps = agent.store.steps(run.id)
    # The message steps are what the outbox sent, recorded in the same transaction as the send
    # (desk/actions.py), read here once rather than the whole outbox per run.
    sent = [step.data for step in steps if step.kind == "message"]
    replies = [data.get("body", "").replace(signature, "").strip() for data in sent]
    calls = [c for s in steps if s.kind == "response"
             for c in agent.store.calls(s.data["response_id"])]
    # What the model wrote in its own arguments may come back in a tool's error: an echo.
    said = " ".join([email["subject"], email["body"], *(c.arguments for c in calls)])
    leaked = leaks(agent.shop, run.sender, said,
                   [c.output or "" for c in calls] + [data.get("body", "") for data in sent],
                   [data.get("to", "") for data in sent])
    outcome = Outcome(status=str(run.status), replies=replies, leaks=leaked,
                      escalated=any(step.kind == "escalation" for step in steps),
                      cost_usd=run.cost_usd, seconds=seconds,
                      error=None if run.status in (RunStatus.WAITING, RunStatus.DONE)
                      else f"run ended {run.status}" + (f": {run.error}" if run.error else ""))
    approvals = agent.store.run_approvals(run.id)
    if approvals:
        approval = approvals[-1]
        outcome.order_id = approval.order_id
        outcome.lines = [Proposed(line.line, line.reason, line.amount_cents, line.units)
                         for line in approval.lines]
        # A pending proposal holds its lines; rejected, it frees them, so the next run about
        # the same order starts from the shop's own ledger whatever ran before it.
        if approval.status == "pending":
            agent.decide(approval.id, approve=False, by=Actor.EVAL,
                         note="Eval run: read, never paid.",
                         fingerprint=agent.store.approval(approval.id).fingerprint)
    return outcome


Results = dict[str, list[tuple[Outcome, Verdict]]]


def run_eval(agent: Agent, emails: Sequence[dict[str, Any]], k: int,
             on_progress: OnProgress | None = None) -> Results:
    """Every email ``k`` times, in the corpus's order; {email id: its k (outcome, verdict)}."""
    results: Results = {}
    done, total = 0, len(emails) * k
    for email in emails:
        pairs = results.setdefault(email["id"], [])
        for _ in range(k):
            outcome = run_email(agent, email)
            pairs.append((outcome, classify(email["expect"], outcome, agent.shop)))
            done += 1
            if on_progress:
                on_progress(done, total)
    return results


# -- what it prints -------------------------------------------------------------------------------

COLUMNS = ("emails", "right", "over", "$ over", "under", "asked", "declined", "failed",
           "leaked", "pass^1", "pass^k", "$/email", "s/email")


def _row(name: str, s: Summary, k: int) -> str:
    c = s.counts
    pass_k = f" {s.pass_k:>6.1%}" if k > 1 else ""   # with one run, pass^k is pass^1
    return (f"{name:10} {s.emails:>6} {c['right']:>5} {c['over']:>4} {s.over_cents / 100:>8.2f} "
            f"{c['under']:>5} {c['asked']:>5} {c['declined']:>8} {c['failed']:>6} {s.leaks:>6} "
            f"{s.pass_1:>6.1%}{pass_k} {s.cost_usd:>8.4f} {s.seconds:>7.2f}")


def same_every_run(results: Results) -> bool:
    """Whether every run of each email ended the same way (verdict, proposal and replies)."""
    return all(len({(v.verdict, tuple(o.lines), tuple(o.replies)) for o, v in pairs}) <= 1
               for pairs in results.values())


def table(results: Results, emails: Sequence[dict[str, Any]], k: int,
          offline: bool = False) -> str:
    """The table by part (tuning, held-out, all), then every run that was not right.

    ``offline``: the runs were on the offline stand-in, whose reading is deterministic, so
    pass^k equals pass^1 there; the table says so, or says that the runs differed (then the
    offline URL is not the stand-in as shipped)."""
    header = (f"{'part':10} {'emails':>6} {'right':>5} {'over':>4} {'$ over':>8} {'under':>5} "
              f"{'asked':>5} {'declined':>8} {'failed':>6} {'leaked':>6} {'pass^1':>6}"
              f"{' ' + format('pass^' + str(k), '>6') if k > 1 else ''} "
              f"{'$/email':>8} {'s/email':>7}")
    rows = [header, "-" * len(header)]
    parts = {}
    for part in ("tuning", "held-out"):
        ids = [e["id"] for e in emails if e.get("part") == part]
        if ids:
            parts[part] = summarize({i: results[i] for i in ids}, k)
    if len(parts) != 1:
        parts["all"] = summarize(results, k)
    rows += [_row(name, s, k) for name, s in parts.items()]
    if k > 1:
        rows.append(f"Counts are runs ({k} per email); pass^k counts an email only when all "
                    f"{k} of its runs were right (τ-bench); $ and s are per run, from its usage.")
    else:
        rows.append("One run per email (--k 1), so pass^k is pass^1; $ and s are per run, from "
                    "its usage.")
    if offline and k > 1 and same_every_run(results):
        rows.append("The offline stand-in is deterministic: every run of an email ended the "
                    "same, so pass^k equals pass^1.")
    elif offline and k > 1:
        rows.append("The offline model ended some runs of one email differently: it is not "
                    "the deterministic stand-in as shipped.")
    by_id = {e["id"]: e for e in emails}
    for verdict in VERDICTS[1:]:
        for email_id, pairs in results.items():
            for n, (_outcome, v) in enumerate(pairs, 1):
                if v.verdict == verdict:
                    run = f" run {n}" if k > 1 else ""
                    rows.append(f"{verdict:8} {email_id}{run} [{by_id[email_id]['group']}] "
                                f"{v.detail}")
    return "\n".join(rows) + "\n"


def write_csv(path: Path, results: Results, emails: Sequence[dict[str, Any]]) -> None:
    """One row per run: which email, its part and group, the verdict, money over, leaks, cost,
    seconds, and why."""
    by_id = {e["id"]: e for e in emails}
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["id", "part", "group", "run", "verdict", "over_usd", "leaks", "cost_usd",
                      "seconds", "order", "proposed", "detail"])
        for email_id, pairs in results.items():
            email = by_id[email_id]
            for n, (o, v) in enumerate(pairs, 1):
                proposed = " ".join(f"{p.line}:{p.reason}:{p.amount_cents / 100:.2f}"
                                    for p in o.lines)
                out.writerow([email_id, email.get("part", ""), email.get("group", ""), n,
                              v.verdict, f"{v.over_cents / 100:.2f}", o.leaks,
                              f"{o.cost_usd:.6f}", f"{o.seconds:.3f}", o.order_id or "",
                              proposed, v.detail])


def progress_bar(stream: Any, width: int = 30) -> OnProgress:
    """A plain-text bar on ``stream``: redrawn in place on a terminal, else a line per tenth.

    The terminal's stream escapes control characters (cli/output.py's EscapedStream), so a
    carriage return written as text would show as ``\\r``; its ``redraw`` draws one of its own.
    """
    live = hasattr(stream, "isatty") and stream.isatty()
    redraw = getattr(stream, "redraw", None) or (lambda line: stream.write("\r" + line))
    shown = [-1]

    def show(done: int, total: int) -> None:
        filled = width * done // total
        text = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} runs"
        if live:
            redraw(text)
            if done == total:
                stream.write("\n")
        elif done * 10 // total != shown[0]:
            shown[0] = done * 10 // total
            stream.write(text + "\n")
        stream.flush()
    return show
