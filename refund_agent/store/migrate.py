"""Move an SQLite store to an empty PostgreSQL database: the generic copy.

What moves: every table, row for row, ids and values unchanged, so the audit chain and its
anchor verify there as they did here; and the JSONL logs the agent names (:class:`Log`: the
refund desk's are the payment and email stand-ins' logs, see desk/migrate.py, which
``refund-agent migrate`` runs), whose records become the ``ledger`` table's rows exactly as the
adapters write them on a shared store (keyed by idempotency key, the record as JSON; a torn
last line left by a crash is not a record, and is counted). Leases are cleared, since no process
on the new database holds them, but keep their fencing epoch, which must only grow.

What the agent hands in, as this store knows no agent: ``check``, its own consistency check
(the desk: reconcile), run on the source and on the copy before it commits; ``logs``, its logs
read from the output folder; ``open_target``, its store class (the desk's ``DeskStore``).

What is refused, with nothing written to the target: a source that does not pass the check (a
copy would launder the damage), a source run that a live process is advancing, and a target that
already holds anything. The copy is one PostgreSQL transaction, reconciled on PostgreSQL before
it commits and rolled back if that fails. The source is only read, under its write lock, so no
decision can land in it halfway through.

Once the copy committed, the SQLite store is marked as moved (still under its write lock): it
refuses every write from then on with a message naming the new database, so a page, a worker
or a cron ``expire`` left on the old settings cannot decide or pay on both. It stays readable.

What stays behind: the offline model's stored responses (its own file in ``output/``). A run
whose stored response is not found continues from its transcript; the report lists unfinished
runs whose transcript does not reach their last response, which cannot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MigrationRefused, StoreError
from ..models import RunStatus
from . import TABLES, BulkLoad, Store, is_postgres_url

Progress = Callable[[str], None]
# An agent's check of a store and the logs in its output folder: the first problem, or None.
Check = Callable[[Store, Path], str | None]


@dataclass(frozen=True)
class Log:
    """One JSONL log of idempotent records (outside/ledger.py) that becomes ledger rows.

    Attributes:
        name: the ledger's name for it ("refunds"), as the adapters write it on a shared store.
        path: its file beside the SQLite store (named in the progress lines; the lines it holds
            beyond ``records`` are counted as torn).
        records: its records, each with its ``idempotency_key``.
    """

    name: str
    path: Path
    records: list[dict[str, Any]]


# The logs an agent moves into the ledger table, read from the output folder (under the source's
# write lock); raises MigrationRefused for a log it cannot take.
ReadLogs = Callable[[Store, Path], list[Log]]

# Copied from the source's tables; the ledger table is filled from the JSONL logs instead.
COPIED = tuple(table for table in TABLES if table != "ledger")
_LEASE = ("lease_pid", "lease_token", "lease_at", "lease_host")
# How refusals name what a non-empty target holds, in the order they are looked for.
_HOLDS = {"runs": ("run", "runs"), "audit": ("audit entry", "audit entries"),
          "accounts": ("account", "accounts"), "ledger": ("ledger record", "ledger records")}


@dataclass(frozen=True)
class MigrationReport:
    """What ``migrate`` copied, checked and noticed.

    Attributes:
        source: the SQLite file.
        target: the PostgreSQL URL without its password.
        rows: rows copied per table (every table but ``ledger``).
        ledger: records written to the ledger table per log (the desk's: "refunds", "outbox",
            and "outbox-sent" when SMTP marked mail sent).
        torn: lines of the logs skipped as torn (a write cut short by a crash, never
            acknowledged).
        leases_cleared: runs whose (abandoned) lease was cleared; their fencing epoch was kept.
        pending: approvals still waiting for a decision, carried over as they are.
        without_transcript: unfinished runs whose transcript does not reach their last response:
            they continue only while the model still has their stored response.
        seconds: how long it took, checks included.
        timings: seconds per stage ("check source", "copy", "check target").
    """

    source: str
    target: str
    rows: dict[str, int]
    ledger: dict[str, int]
    torn: int = 0
    leases_cleared: int = 0
    pending: int = 0
    without_transcript: tuple[str, ...] = ()
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return self.rows.get("runs", 0)


def migrate(source: Store, output_dir: Path, target_url: str,
            progress: Progress | None = None, *, check: Check | None = None,
            logs: ReadLogs | None = None,
            open_target: Callable[[str], Store] = Store) -> MigrationReport:
    """Copy ``source`` (SQLite) and the logs in ``output_dir`` into the empty PostgreSQL
    database at ``target_url``, in one transaction; ``progress`` gets a line per stage.

    Args:
        check: the agent's check of a store and its logs (None: the tables alone are copied
            and counted), on the source and on the copy before it commits.
        logs: the agent's JSONL logs to move into the ledger table (None: none).
        open_target: opens the target as the agent's store (it makes the schema there).

    Raises:
        MigrationRefused: the target URL is not PostgreSQL, the source does not pass the check
            or a live process holds one of its runs, the target is not empty, or the copy did
            not pass the check on PostgreSQL (then it was rolled back). Nothing was written to
            the target.
        StoreError: a database could not be reached or read (nothing was written either).
    """
    say = progress or (lambda _line: None)
    started = time.monotonic()
    if not is_postgres_url(target_url):
        shown = target_url.split("://", 1)[0] + "://..." if "://" in target_url \
            else repr(target_url[:40])
        raise MigrationRefused(
            f"The target must be a postgresql:// URL (got {shown}), for example "
            "postgresql://refunds:secret@db.internal:5432/refunds.")
    if source.shared:
        raise MigrationRefused(f"The source {source.path} is already PostgreSQL; migrate copies "
                               "an SQLite store (output/) into PostgreSQL.")
    moved = source.moved_to()
    if moved:
        raise MigrationRefused(f"{source.path} was already moved to {moved}; nothing was copied.")
    output_dir = Path(output_dir)
    check = check or (lambda _store, _output_dir: None)
    target = open_target(target_url)  # reaches it, and makes the schema in an empty database
    _check_schema(source, target)
    timings: dict[str, float] = {}
    try:
        with source.writers_held_off():
            say(f"Checking {source.path} and its logs (reconcile) ...")
            tick = time.monotonic()
            leases_cleared = _check_source(source, output_dir, check)
            moving = logs(source, output_dir) if logs else []
            torn = sum(_torn_lines(log.path, len(log.records)) for log in moving)
            pending = len(source.approvals("pending", limit=-1))
            stranded = tuple(r.id for r in source.runs_without_transcript()
                             if r.status != RunStatus.DONE)
            timings["check source"] = time.monotonic() - tick
            with target.bulk_load() as load:
                _check_empty(load, target.path)
                say(f"Copying into {target.path} (one transaction):")
                tick = time.monotonic()
                rows = _copy_tables(source, load, say)
                ledger = {}
                for log in moving:
                    ledger[log.name] = load.copy(
                        "ledger", ("log", "key", "record"),
                        ((log.name, record["idempotency_key"], json.dumps(record))
                         for record in log.records))
                names = {log.name: log.path.name for log in moving}
                say(f"  {'ledger':<15}{sum(ledger.values()):>10,} rows ("
                    + ", ".join(f"{n:,} from {names[log]}" for log, n in ledger.items()) + ")")
                load.reset_sequences()
                load.analyze()
                _check_counts(load, rows, ledger)
                timings["copy"] = time.monotonic() - tick
                say("Reconciling the copy on PostgreSQL ...")
                tick = time.monotonic()
                problem = check(target, output_dir)
                timings["check target"] = time.monotonic() - tick
                if problem:
                    raise MigrationRefused(
                        "The copy did not reconcile on PostgreSQL, so it was rolled back and "
                        f"nothing was written: {problem}")
            # The copy committed; still under the source's write lock, the source is marked
            # moved, so no page, worker or cron job decides or pays there again.
            _mark_moved(source, target.path)
    finally:
        target.close()
    return MigrationReport(
        source=str(source.path), target=str(target.path), rows=rows, ledger=ledger, torn=torn,
        leases_cleared=leases_cleared, pending=pending, without_transcript=stranded,
        seconds=time.monotonic() - started, timings=timings)


def _mark_moved(source: Store, where: str) -> None:
    try:
        source.mark_moved(where)
    except StoreError as exc:
        raise StoreError(
            f"The copy in {where} is complete, but {source.path} could not be marked as moved "
            f"({exc}). Stop every page and worker that uses it before using the new database, "
            "so nothing is decided on both.") from None


def _check_source(source: Store, output_dir: Path, check: Check) -> int:
    """Refuse a source a process is working on, or one that does not pass the agent's check;
    returns how many runs hold an abandoned lease (cleared on the copy)."""
    live = source.leased_runs()
    if live:
        named = ", ".join(f"{run.id} (process {run.lease_pid})" for run in live[:5])
        more = f" and {len(live) - 5} more" if len(live) > 5 else ""
        raise MigrationRefused(
            f"{len(live)} run{'s are' if len(live) != 1 else ' is'} being advanced right now "
            f"({named}{more}); stop what runs {'them' if len(live) != 1 else 'it'} (Ctrl+C in "
            "its terminal, or stop the page and `refund-agent work`) or let it finish, then "
            "migrate again.")
    extra = source.row_counts()["ledger"]
    if extra:
        raise MigrationRefused(
            f"The SQLite store {source.path} has {extra} row(s) in its ledger table, which "
            "only a PostgreSQL store writes; it is not a store this version made, so it was "
            "not copied.")
    problem = check(source, output_dir)
    if problem:
        raise MigrationRefused(
            f"The SQLite store in {output_dir} does not reconcile, and copying it would carry "
            f"the damage over as if it were sound, so nothing was copied: {problem}")
    return len(source.leased_runs(live=False))


def _torn_lines(path: Path, kept: int) -> int:
    """How many lines of the log at ``path`` were not kept as records."""
    if not path.exists():
        return 0
    *lines, tail = path.read_bytes().split(b"\n")
    return len(lines) + (1 if tail else 0) - kept


def _check_empty(load: BulkLoad, where: str) -> None:
    counts = load.store.row_counts()   # inside the load's transaction (same thread)
    held = [t for t in (*_HOLDS, *TABLES) if t != "audit_anchor" and counts.get(t)]
    if held:
        first = held[0]
        one, many = _HOLDS.get(first, (f"row in its {first} table", f"rows in its {first} table"))
        raise MigrationRefused(
            f"The target database {where} already has {counts[first]:,} "
            f"{one if counts[first] == 1 else many}; migrate only "
            "into an empty database (nothing was written).")
    load.clear("audit_anchor")  # the new schema's (0 entries); the source's replaces it


def _check_schema(source: Store, target: Store) -> None:
    """Every table and column the source has, the target has: a store whose agent added tables
    of its own (the desk's) is copied into that agent's store (``open_target``), never into
    one that would drop them."""
    have = target.tables()
    for table in source.tables():
        lacking = [c for c in source.columns(table)
                   if table not in have or c not in target.columns(table)]
        if lacking:
            raise MigrationRefused(
                f"The target's schema has no {table}.{lacking[0]}, which {source.path} holds: "
                "open the target as the store of the agent that made the source (open_target); "
                "nothing was copied.")


def _copy_tables(source: Store, load: BulkLoad, say: Progress) -> dict[str, int]:
    rows: dict[str, int] = {}
    kept = source.tables()   # a loop store alone has none of the desk's
    for table in (t for t in COPIED if t in kept):
        columns = source.columns(table)
        batches: Iterator[list[tuple[Any, ...]]] = source.table_rows(table, columns)
        if table == "runs":
            batches = _without_leases(batches, columns)
        rows[table] = load.copy(table, columns, (row for batch in batches for row in batch))
        say(f"  {table:<15}{rows[table]:>10,} rows")
    return rows


def _without_leases(batches: Iterator[list[tuple[Any, ...]]], columns: list[str]
                    ) -> Iterator[list[tuple[Any, ...]]]:
    """Runs with their lease cleared: nobody on the new database holds one. ``lease_epoch`` is
    kept, so the next lease taken there gets a higher fencing token than any before."""
    cleared = [i for i, name in enumerate(columns) if name in _LEASE]
    for batch in batches:
        out = []
        for row in batch:
            values = list(row)
            for i in cleared:
                values[i] = None
            out.append(tuple(values))
        yield out


def _check_counts(load: BulkLoad, rows: dict[str, int], ledger: dict[str, int]) -> None:
    """Every row copied arrived (a cheap check before the reconcile)."""
    counts = load.store.row_counts()
    expected = {**rows, "ledger": sum(ledger.values())}
    wrong = [t for t in expected if counts[t] != expected[t]]
    if wrong:
        table = wrong[0]
        raise MigrationRefused(
            f"The {table} table has {counts[table]:,} rows on PostgreSQL after copying "
            f"{expected[table]:,}, so the copy was rolled back and nothing was written.")
