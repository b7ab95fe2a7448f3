"""``refund-agent migrate``: the desk's store and its logs moved to an empty PostgreSQL database.

The copy itself is the loop's store's (store/migrate.py: every table, row for row, in one
transaction, leases cleared); what is the desk's is handed to it here:

- the check: :func:`~refund_agent.desk.reconcile.reconcile`, on the source (a copy would
  launder the damage) and on the copy before it commits;
- the logs: the payment and email stand-ins' (``refunds.log``, ``outbox.log``) read as
  reconcile reads them, a garbled or forged line refused, a torn one (a crash mid-write) not a
  record; and SMTP's sent marks (``outbox-sent.log``) when there are any. They become the
  ledger table's "refunds", "outbox" and "outbox-sent" rows, as the adapters write them on a
  shared store. Without the sent marks, every email sent over SMTP before the move would read
  as "recorded but never marked sent" there;
- the store: the desk's (:class:`~refund_agent.desk.records.DeskStore`) on the new database.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MigrationRefused
from ..store import Store
from ..store.migrate import Log, MigrationReport
from ..store.migrate import migrate as copy_store
from .reconcile import LOGS, read_log, read_records, reconcile
from .records import DeskStore

# SMTP's marks of the messages the server took (outside/smtp.py): not checked by reconcile,
# which compares the outbox with the calls, but copied so the mail stays marked sent.
SENT_MARKS = ("outbox-sent", "outbox-sent.log")


def migrate(source: Store, output_dir: Path, target_url: str,
            progress: Callable[[str], None] | None = None) -> MigrationReport:
    """Copy the desk's SQLite store ``source`` and its logs in ``output_dir`` into the empty
    PostgreSQL database at ``target_url`` (store/migrate.py:migrate, with the desk's check,
    logs and store)."""
    # reconcile is looked up at each call (tests replace it to see a copy rolled back).
    return copy_store(source, output_dir, target_url, progress,
                      check=lambda store, out: reconcile(store, out),
                      logs=desk_logs, open_target=DeskStore)


def desk_logs(source: Store, output_dir: Path) -> list[Log]:
    """The records of refunds.log and outbox.log, as reconcile reads them, and SMTP's sent marks
    when there are any.

    Raises:
        MigrationRefused: a line that is not a record the ledger wrote.
    """
    output_dir = Path(output_dir)
    logs = []
    for log, (name, _shape, _what) in LOGS.items():
        entries, problem = read_records(source, output_dir, log)
        if problem:  # reconcile just passed on the same files, under the store's lock
            raise MigrationRefused(f"{problem} Nothing was copied.")
        logs.append(Log(log, output_dir / name, [e.record for e in entries]))
    log, name = SENT_MARKS
    path = output_dir / name
    if path.exists():
        entries, problem = read_log(path, _sent_mark_shape, "a sent mark")
        if problem:
            raise MigrationRefused(f"{problem} Nothing was copied.")
        logs.append(Log(log, path, [e.record for e in entries]))
    return logs


def _sent_mark_shape(record: dict[str, Any]) -> str | None:
    """What is wrong with a line of outbox-sent.log, or None (outside/smtp.py writes them)."""
    if not isinstance(record.get("idempotency_key"), str):
        return "has no idempotency_key"
    return None
