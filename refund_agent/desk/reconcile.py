"""Reconciliation: do the money and the email stand-ins agree with the store, both ways?

The audit log is the reference: its hash chain and anchor are checked first, so once they hold
every other source is compared with it. Approvals are checked against their audit entries, the
payment log (``refunds.log``) against the approvals and the audit, and the email log
(``outbox.log``) against the calls the agent made. Each comparison runs in both directions: a
record nobody asked for was forged, a record something in the store points to but the log
lacks was removed, and a record that disagrees with what asked for it was edited.

:func:`reconcile` returns the first problem as one sentence, or None when everything agrees.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models import Approval, AuditEntry, Call, Run
from ..store import Store

if TYPE_CHECKING:
    from .records import DeskStore

# How the ledger starts every record (json.dumps of a dict whose first key is this). A write
# cut short by a crash leaves a prefix of such a line; anything else was not written by it.
_RECORD_START = '{"idempotency_key": "'
_MONEY_EVENTS = ("issued", "reused")


@dataclass(frozen=True)
class Entry:
    """One record of a log, with its 1-based line number for the messages."""

    number: int
    record: dict[str, Any]
    source: str = "refunds.log"   # the file, or the ledger table on a shared store
    unit: str = "line"

    @property
    def where(self) -> str:
        return f"{self.source} {self.unit} {self.number}"

    @property
    def key(self) -> str:
        return self.record["idempotency_key"]

    @property
    def request(self) -> dict[str, Any]:
        return self.record["request"]


def reconcile(store: Store, output_dir: Path) -> str | None:
    """None when the store, refunds.log and outbox.log agree; else the first problem.

    On a shared store (PostgreSQL) the two logs are the ledger table's "refunds" and "outbox"
    rows, read and checked the same way. Each table is read once, whole (a few queries, however
    many runs), so the check grows with the history but never by a query per run.
    """
    audit = store.audit()
    approval_list = store.approvals(status=None, limit=-1)
    problem = store.verify_audit(audit, approval_list)
    if problem:
        return problem
    refunds, problem = read_records(store, output_dir, "refunds")
    if problem:
        return problem
    emails, problem = read_records(store, output_dir, "outbox")
    if problem:
        return problem
    names = log_names(store)
    approvals = {a.id: a for a in approval_list}
    # By key, the approval's id (a repeated call, answered without running, has none).
    refund_calls = {c.key: c for c in store.calls_named("issue_refund") if c.key}
    sends = _send_calls(store)
    # Generators: the checks after the first problem never run.
    problems = chain(
        _approvals_match_audit(approvals, audit),
        _refunds_match_approvals(refunds, approvals, audit, refund_calls),
        _unique_refunds(refunds),
        _money_events_have_refunds(audit, refunds, names[0]),
        _made_refunds_have_records(approvals, refunds, refund_calls, names[0]),
        _emails_match_calls(emails, sends),
        _sent_calls_have_emails(sends, emails, names[1]),
    )
    return next(problems, None)


def provider_problems(payments: Any, store: DeskStore) -> list[str]:
    """What the payment provider's own list of refunds says against the agent's records (for
    Stripe: a refund made outside the agent, one missing at Stripe, a failure the desk was
    never told of); nothing for the stand-in, whose log is the provider."""
    from ..outside.payments import StandInPayments
    if isinstance(payments, StandInPayments):
        return []
    from ..outside.stripe import StripePayments, reconcile_stripe
    if not isinstance(payments, StripePayments):
        return []
    told = {e["refund_id"] for e in store.provider_events() if e["status"] in ("failed", "canceled")
            or e["type"] == "refund.failed"}
    return reconcile_stripe(payments, store.approvals(status="approved", limit=-1), told)


def email_notes(outbox: Any) -> tuple[list[str], list[str]]:
    """(problems, notes) about SMTP mail: messages recorded but never marked sent (a crash
    between the record and the send, or a refusal: resume sends them), messages sent again
    after such a gap (the customer may have them twice), and messages the server refused at
    every earlier attempt, then took (sent once). Nothing for the stand-in."""
    unsent = getattr(outbox, "unsent", None)
    if unsent is None:
        return [], []
    refusals = outbox.refusals()
    problems = [f"The email for call {r['idempotency_key']} to {r['request']['to']} is "
                f"recorded in the outbox but was never marked sent (Message-ID "
                f"{r['message_id']}): " + (
                    f"the mail server refused it ({refusals[r['idempotency_key']]}). "
                    "`refund-agent resume` sends it again." if r["idempotency_key"] in refusals
                    else "the process stopped between the record and the send, or the server "
                    "refused it. `refund-agent resume` sends it; the customer may then have it "
                    "twice.") for r in unsent()]
    notes = [f"Note: the email for call {r['idempotency_key']} was sent again after a crash "
             f"between its record and its send (Message-ID {r['request']['message_id']}): the "
             "customer may have it twice." for r in outbox.resent()]
    notes += [f"Note: the email for call {r['idempotency_key']} was refused by the server "
              f"({r['refused_before']}x), then sent (Message-ID {r['request']['message_id']}): "
              "the customer has it once." for r in outbox.refused_then_sent()]
    return problems, notes


def read_records(store: Store, output_dir: Path, log: str) -> tuple[list[Entry], str | None]:
    """The records of one stand-in log ("refunds" or "outbox"), or the first bad one: the
    ledger table's rows on a shared store, else the JSONL file beside the SQLite store."""
    name, shape, what = LOGS[log]
    if store.shared:
        return read_rows(store, log, shape, what)
    return read_log(Path(output_dir) / name, shape, what)


def log_names(store: Store) -> tuple[str, str]:
    """How messages name the payment and email logs of this store."""
    if store.shared:
        return "the ledger table's refunds", "the ledger table's outbox"
    return "refunds.log", "outbox.log"


def read_rows(store: Store, log: str, shape: Callable[[dict[str, Any]], str | None], what: str
              ) -> tuple[list[Entry], str | None]:
    """The records of one log in the shared store's ledger table, or the first bad row.

    The stand-in writes each row in one transaction, so there are no torn rows: anything that
    is not a whole record was written by someone else.
    """
    source, entries = f"the ledger table's {log}", []
    for row_id, text in store.ledger_rows(log):
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            return [], (f"{source} row {row_id} is not JSON ({_preview(text)}): the stand-in "
                        "never writes such a row, so it was added or edited by hand.")
        wrong = f"is {_preview(text)}, not {what} record" if not isinstance(record, dict) \
            else shape(record)
        if wrong:
            return [], (f"{source} row {row_id} {wrong}: the stand-in never writes such a row, "
                        "so it was forged or edited by hand.")
        entries.append(Entry(row_id, record, source, "row"))
    return entries, None


# -- reading the logs -----------------------------------------------------------------------------

def read_log(path: Path, shape: Callable[[dict[str, Any]], str | None], what: str
             ) -> tuple[list[Entry], str | None]:
    """The log's records, read straight from the file, or the first line that is not one.

    The ledger's own cache skips what it cannot parse, which is right for paying once but would
    hide a garbled or forged line here, so the file is read afresh.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], None  # nothing was ever paid (or sent)
    *lines, tail = data.split(b"\n")  # tail is b"" when the file ends with a newline
    entries = []
    numbered = [(n, raw, True) for n, raw in enumerate(lines, 1)]
    if tail:
        numbered.append((len(lines) + 1, tail, False))
    for number, raw, whole in numbered:
        text = raw.decode("utf-8", errors="replace")
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past what json parses
            # A crash mid-write leaves a line cut short: at the end, or in the middle once a
            # later write started a fresh line after it (ledger.py does). It was never
            # acknowledged, so nothing else points to it: not tampering.
            if _torn(text):
                continue
            return [], (f"{path.name} line {number} is not JSON ({_preview(text)}): the ledger "
                        "never writes such a line, so it was added or edited by hand.")
        if not isinstance(record, dict):
            wrong = f"is {_preview(text)}, not {what} record"
        else:
            wrong = shape(record)
        if wrong:
            ending = "" if whole else " (its last line, without a newline)"
            return [], (f"{path.name} line {number}{ending} {wrong}: the ledger never writes "
                        "such a line, so it was forged or edited by hand.")
        entries.append(Entry(number, record, path.name))
    return entries, None


def _torn(text: str) -> bool:
    """Whether ``text`` could be the start of a ledger record whose write was cut short."""
    text = text.strip()
    return bool(text) and (text.startswith(_RECORD_START) or _RECORD_START.startswith(text))


def _preview(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _refund_shape(record: dict[str, Any]) -> str | None:
    """What a refund record lacks (see Payments.refund), or None."""
    request = record.get("request")
    if not _is_text(record.get("idempotency_key")):
        return "has no idempotency_key"
    if not _is_text(record.get("refund_id")):
        return "has no refund_id"
    if not isinstance(request, dict):
        return "has no request"
    if not _is_text(request.get("order_id")) or not _is_int(request.get("amount_cents")):
        return "has no order_id or amount_cents"
    lines = request.get("lines")
    if (not isinstance(lines, list) or not lines or not all(
            isinstance(x, dict) and _is_text(x.get("line")) and _is_int(x.get("amount_cents"))
            for x in lines)):
        return "has no order lines (line, amount_cents)"
    return None


def _email_shape(record: dict[str, Any]) -> str | None:
    """What an email record lacks (see Outbox.send), or None."""
    request = record.get("request")
    if not _is_text(record.get("idempotency_key")):
        return "has no idempotency_key"
    if not _is_text(record.get("message_id")):
        return "has no message_id"
    if not isinstance(request, dict) or not all(
            isinstance(request.get(k), str) for k in ("to", "subject", "body")):
        return "has no to, subject and body"
    return None


# The payment and email stand-ins' logs: the ledger table's name for each (on a shared store),
# its file beside an SQLite store, and what its records look like.
LOGS: dict[str, tuple[str, Callable[[dict[str, Any]], str | None], str]] = {
    "refunds": ("refunds.log", _refund_shape, "a refund"),
    "outbox": ("outbox.log", _email_shape, "an email"),
}


# -- small helpers --------------------------------------------------------------------------------

def _usd(cents: int | None) -> str:
    return "an unknown amount" if cents is None else f"${cents / 100:,.2f}"


def _cents(amount: float | None) -> int | None:
    """Audit amounts are dollars (floats); compare them in whole cents."""
    return None if amount is None else round(amount * 100)


def _pairs(lines: list[Any] | None) -> list[tuple[str, int]]:
    """(line, cents) of approval lines or of JSON lines, in a comparable order."""
    out = []
    for line in lines or []:
        data = line if isinstance(line, dict) else line.model_dump()
        out.append((data.get("line"), data.get("amount_cents")))
    return sorted(out, key=repr)


def _show(pairs: list[tuple[str, int]]) -> str:
    return ", ".join(f"{line} {_usd(cents)}" for line, cents in pairs) or "no lines"


def _output(call: Call | None) -> dict[str, Any]:
    """A call's output as a dict ({} while the call has none, or if it is not JSON)."""
    if call is None or call.output is None:
        return {}
    try:
        out = json.loads(call.output)
    except json.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}


def _send_calls(store: Store) -> dict[str, tuple[Call, Run]]:
    """Every send_customer_message call, by its key (the outbox's idempotency key), with the
    run that made it.

    A call is stored in its response's own transaction, with the response's timeline step, so
    every call in the table is one the model made in that run.
    """
    runs = {run.id: run for run in store.runs(limit=-1)}
    calls = [c for c in store.calls_named("send_customer_message")
             if c.run_id in runs and c.key]
    calls.sort(key=lambda c: runs[c.run_id].created_at)  # oldest run first, as problems are told
    return {call.key: (call, runs[call.run_id]) for call in calls}


# -- the checks, each yielding problems -----------------------------------------------------------

def _approvals_match_audit(approvals: dict[str, Approval], audit: list[AuditEntry]
                           ) -> Iterator[str]:
    """The approvals table is not hash-chained; its amounts must match the audit's entries.

    Checked first, so that a later disagreement between a refund and its approval can be
    blamed on the refund record.
    """
    first: dict[tuple[str | None, str], AuditEntry] = {}
    for e in audit:
        first.setdefault((e.approval_id, e.event), e)
    for a in sorted(approvals.values(), key=lambda a: a.requested_at):
        event = "requested" if a.status == "pending" else a.status
        entry, requested = first.get((a.id, event)), first.get((a.id, "requested"))
        if entry is None or requested is None:
            continue  # verify_audit already reports a missing entry
        if (a.order_id, a.amount_cents) != (entry.order_id, _cents(entry.amount)):
            yield (f"Approval {a.id} says {_usd(a.amount_cents)} on order {a.order_id}, but its "
                   f"'{event}' audit entry {entry.id} says {_usd(_cents(entry.amount))} on order "
                   f"{entry.order_id}: the approval was edited in the store.")
        elif a.proposed_cents != _cents(requested.amount):
            yield (f"Approval {a.id} says {_usd(a.proposed_cents)} was proposed, but its "
                   f"'requested' audit entry {requested.id} says "
                   f"{_usd(_cents(requested.amount))}: the approval was edited in the store.")
        elif a.status == "approved" and _pairs(a.kept) != _pairs(entry.lines):
            yield (f"Approval {a.id} approved {_show(_pairs(a.kept))}, but its 'approved' audit "
                   f"entry {entry.id} says {_show(_pairs(entry.lines))}: the approval's lines "
                   "were edited in the store.")


def _refunds_match_approvals(refunds: list[Entry], approvals: dict[str, Approval],
                             audit: list[AuditEntry], refund_calls: dict[str, Call]
                             ) -> Iterator[str]:
    """Every payment was approved by a person, for exactly what was paid, and audited."""
    money_events: dict[str | None, list[AuditEntry]] = {}
    for m in audit:
        if m.event in _MONEY_EVENTS:
            money_events.setdefault(m.approval_id, []).append(m)
    for e in refunds:
        req, refund_id = e.request, e.record["refund_id"]
        paid, pairs = req["amount_cents"], _pairs(req["lines"])
        where = f"{e.where} pays {_usd(paid)} on order {req['order_id']}"
        a = approvals.get(e.key)
        if a is None:
            yield f"{where} under key {e.key}, but no approval has that id: the record was forged."
            continue
        if a.status != "approved":
            yield f"{where}, but approval {a.id} was {a.status}: the record was forged."
        elif req["order_id"] != a.order_id:
            yield (f"{where}, but approval {a.id} is for order {a.order_id}: the record was "
                   "edited.")
        elif paid != a.amount_cents:
            yield (f"{where}, but approval {a.id} approved {_usd(a.amount_cents)}: the record "
                   "was edited.")
        elif pairs != _pairs(a.kept):
            yield (f"{where} for {_show(pairs)}, but approval {a.id} approved "
                   f"{_show(_pairs(a.kept))}: the record was edited.")
        money = money_events.get(a.id, [])
        # The issue_refund call behind an approval has the approval's id as its key.
        call = None if money else refund_calls.get(a.id)
        if call is not None and call.output is not None:
            # The call's output and the 'issued' entry are committed together; with the output
            # there, the audit should name this refund.
            yield (f"{where} as refund {refund_id}, but the audit log has no 'issued' entry for "
                   f"approval {a.id}: the record was forged.")
        # No output yet: paid just before a crash; resume records it (as 'reused').
        for m in money:
            if m.note != refund_id or _cents(m.amount) != paid:
                yield (f"{where} as refund {refund_id}, but audit entry {m.id} ('{m.event}') "
                       f"says refund {m.note} of {_usd(_cents(m.amount))}: the record was "
                       "edited or forged.")


def _unique_refunds(refunds: list[Entry]) -> Iterator[str]:
    """The ledger pays once per key, and the store holds each order line once."""
    keys: dict[str, int] = {}
    ids: dict[str, int] = {}
    lines: dict[tuple[str, str], int] = {}
    parts: dict[tuple[str, str], int | None] = {}   # units paid so far (None: the whole line)
    for e in refunds:
        where = e.where
        if e.key in keys:
            yield (f"{where} repeats idempotency key {e.key} of line {keys[e.key]}: the ledger "
                   "pays a key once, so the record was copied in (forged).")
        if e.record["refund_id"] in ids:
            yield (f"{where} repeats refund id {e.record['refund_id']} of line "
                   f"{ids[e.record['refund_id']]}: the record was forged.")
        for x in e.request["lines"]:
            paid = (e.request["order_id"], x["line"])
            # A record with units pays part of a line (x units of of_units); one without pays
            # all of it. Parts may add up over several records, never past the line.
            units, of = x.get("units"), x.get("of_units")
            part = _is_int(units) and _is_int(of) and 1 <= units <= of
            before = parts.get(paid)
            if paid in lines and not (part and before is not None
                                      and before + units <= of):
                yield (f"{where} pays {x['line']} on order {paid[0]} again (line {lines[paid]} "
                       "paid it already): a line is refunded at most once in full (or in parts "
                       "up to its units), so a record was forged.")
            parts[paid] = (before or 0) + units if part and (before is not None
                                                             or paid not in lines) else None
            lines.setdefault(paid, e.number)
        keys.setdefault(e.key, e.number)
        ids.setdefault(e.record["refund_id"], e.number)


def _money_events_have_refunds(audit: list[AuditEntry], refunds: list[Entry],
                               log: str = "refunds.log") -> Iterator[str]:
    """Every refund the audit says was paid is in the payment log."""
    paid = {e.key: e for e in refunds}
    for m in audit:
        if m.event in _MONEY_EVENTS and m.approval_id not in paid:
            yield (f"Audit entry {m.id} says refund {m.note} of {_usd(_cents(m.amount))} on order "
                   f"{m.order_id} was {m.event} for approval {m.approval_id}, but {log} "
                   "has no record of it: the record was removed.")


def _made_refunds_have_records(approvals: dict[str, Approval], refunds: list[Entry],
                               refund_calls: dict[str, Call], log: str = "refunds.log"
                               ) -> Iterator[str]:
    """Every refund the agent was told was made (its call output) is in the payment log."""
    paid = {e.key: e.record["refund_id"] for e in refunds}
    for a in sorted(approvals.values(), key=lambda a: a.requested_at):
        if a.status != "approved":
            continue
        out = _output(refund_calls.get(a.id))
        if out.get("status") == "refunded" and paid.get(a.id) != out.get("refund_id"):
            yield (f"Approval {a.id}'s issue_refund call says refund {out.get('refund_id')} of "
                   f"{_usd(a.amount_cents)} on order {a.order_id} was made, but {log} has "
                   "no record of it: the record was removed.")


def _emails_match_calls(emails: list[Entry], sends: dict[str, tuple[Call, Run]]
                        ) -> Iterator[str]:
    """Every email went out from a send_customer_message call, to that run's customer."""
    seen: dict[str, int] = {}
    for e in emails:
        to, message_id = e.request["to"], e.record["message_id"]
        where = f"{e.where} (message {message_id} to {to})"
        if e.key in seen:
            yield (f"{where} repeats key {e.key} of line {seen[e.key]}: the outbox sends a key "
                   "once, so the record was copied in (forged).")
        seen.setdefault(e.key, e.number)
        if e.key not in sends:
            yield (f"{where} has key {e.key}, but no send_customer_message call has that key: "
                   "the record was forged.")
            continue
        call, run = sends[e.key]
        if to != run.sender:
            yield (f"{where} is addressed to {to}, but call {call.call_id} belongs to run "
                   f"{run.id}, whose customer is {run.sender}: the record was edited.")
            continue
        if call.output is None:
            continue  # sent just before a crash; resume records it
        out = _output(call)
        if out.get("status") != "sent":
            yield (f"{where}, but call {call.call_id} says it was not sent "
                   f"({out.get('error') or out.get('status')}): the record was forged.")
        elif out.get("message_id") != message_id:
            yield (f"{where}, but call {call.call_id} says it sent {out.get('message_id')}: "
                   "the record was edited.")


def _sent_calls_have_emails(sends: dict[str, tuple[Call, Run]], emails: list[Entry],
                            log: str = "outbox.log") -> Iterator[str]:
    """Every email the agent was told was sent is in the outbox."""
    sent = {e.key: e.record["message_id"] for e in emails}
    for key, (call, run) in sends.items():
        out = _output(call)
        if out.get("status") == "sent" and sent.get(key) != out.get("message_id"):
            yield (f"Call {call.call_id} in run {run.id} says message {out.get('message_id')} was "
                   f"sent to {out.get('to')}, but {log} has no record of it: the record "
                   "was removed.")
