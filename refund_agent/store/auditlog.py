"""The audit log as the store reads it; appending is ``StoreCore._audit``, judging is
``audit.py``'s pure functions."""

from __future__ import annotations

import json

from ..models import Approval, AuditEntry
from .audit import chain_problem, facts_problem
from .core import StoreCore


class AuditLog(StoreCore):
    """Reading and verifying the chained audit log."""

    def audit(self, limit: int | None = None) -> list[AuditEntry]:
        sql = "SELECT * FROM audit ORDER BY id"
        rows = self._read(sql) if limit is None else self._read(
            "SELECT * FROM (SELECT * FROM audit ORDER BY id DESC LIMIT ?) AS recent ORDER BY id",
            (limit,))
        return [AuditEntry.model_validate({**dict(r), "lines": json.loads(r["lines"])
                                           if r["lines"] else None}) for r in rows]

    def audit_head(self) -> tuple[int, int]:
        """(number of entries, id of the newest): cheap, to notice that the log changed."""
        count, last = self._read("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM audit")[0]
        return count, last

    def verify_audit(self, entries: list[AuditEntry] | None = None,
                     approvals: list[Approval] | None = None) -> str | None:
        """Check the audit chain; None if intact, else a sentence naming the first bad entry.

        The chain catches an edited, reordered or removed entry anywhere but at the end; the
        anchor, the newest entries removed. The facts the log records (approvals, their
        decisions, refunds in the timeline) are then checked against it (see audit.py).

        ``entries`` and ``approvals``: the whole audit and every approval, when the caller has
        already read them (reconcile does), so a large store is not read twice.
        """
        entries = self.audit() if entries is None else entries
        anchor = self._read("SELECT entries, head FROM audit_anchor")
        problem = chain_problem(entries, (anchor[0]["entries"], anchor[0]["head"])
                                if anchor else None)
        if problem:
            return problem
        if approvals is None:
            approvals = self.approvals(status=None, limit=-1)  # type: ignore[attr-defined]
        refunds = ((row["run_id"], json.loads(row["data"]).get("refund_id")) for row in
                   self._read("SELECT run_id, data FROM steps WHERE kind = 'refund' ORDER BY id"))
        return facts_problem(entries, approvals, refunds)
