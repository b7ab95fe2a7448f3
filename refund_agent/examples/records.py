"""What the example agents share, built only on the public API: a table of records each
owned by one address (an account, an invoice), looked up for the customer who wrote in.

An agent on it names its ``records`` (id -> record), the field holding each record's owner
and what a record is called; its tools get :class:`RecordsCall`, whose :meth:`owned` gives
the sender's own record, or one answer for an unknown record and someone else's alike (so a
stranger cannot probe which ids exist). Effects go through the loop's ``ctx.once``, keyed by
the call, in the agent's effect log (Loop.effect_log); :meth:`TableAgent.done` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from refund_agent import (
    Call,
    CallContext,
    Lease,
    Loop,
    ModelAccess,
    Outcome,
    Run,
    Settings,
    same_address,
)

Record = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class RecordsCall(CallContext):
    """A call's context with its agent's table of records."""

    records: Mapping[str, Record]
    owner_field: str
    noun: str

    def owned(self, record_id: str) -> Record | str:
        """The sender's own record, or why not (the same for unknown and someone else's)."""
        record = self.records.get(record_id)
        if record is None or not same_address(record[self.owner_field], self.run.sender):
            return f"No {self.noun} {record_id} was found for {self.run.sender}."
        return record


def look_up(id_field: str) -> Callable[[RecordsCall, Any], Outcome]:
    """A read-only tool function: the record its arguments' ``id_field`` names, if owned."""
    def run(ctx: RecordsCall, args: Any) -> Outcome:
        record = ctx.owned(getattr(args, id_field))
        return Outcome({"error": record} if isinstance(record, str) else dict(record), [])
    return run


class TableAgent(Loop):
    """A loop over one table of records (``records``, replaced by the ``records`` argument).

    Args:
        settings: configuration; read from the environment when omitted.
        model: an already opened model client.
        records: record id -> record (its ``owner_field`` is the address it belongs to).
    """

    records: ClassVar[Mapping[str, Record]] = {}
    owner_field: ClassVar[str] = "owner"
    record_noun: ClassVar[str] = "record"
    prompt: ClassVar[str] = ""

    def __init__(self, settings: Settings | None = None, *, model: ModelAccess | None = None,
                 records: Mapping[str, Record] | None = None) -> None:
        super().__init__(settings, model=model)
        self.table = self.records if records is None else records

    def system_prompt(self, run: Run) -> str:
        return self.prompt

    def context(self, run: Run, lease: Lease, call: Call) -> RecordsCall:
        return RecordsCall.extend(super().context(run, lease, call), records=self.table,
                                  owner_field=self.owner_field, noun=self.record_noun)

    def done(self) -> list[Record]:
        """Every effect made, one record per call's key (the effect log)."""
        return self.effects.records()
