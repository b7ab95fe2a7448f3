"""A second agent on the same loop: closing a customer's account, once a person approves.

Nothing here is about refunds, and it imports only what ``refund_agent`` exports. Two tools,
declared the way the refund desk declares its own:

- ``lookup_account`` is read-only: it runs again freely after a crash;
- ``close_account`` ``needs_approval``: its first call queues a proposal and the run pauses
  durably in the store; a person approves it (in any process, any day later); the next
  ``advance`` closes the account under the call's key (the run and the call id), so a crash
  after closing and before recording, or a second approval, closes it once.

    agent = ClosureAgent()                          # settings from the environment
    run = agent.start("ana@example.com", "Please close my account AC-1001.")
    agent.advance(run.id)                           # -> RunStatus.WAITING
    (pending,) = agent.store.approvals("pending")
    agent.approve(pending.id, pending.fingerprint, by="Dana Kim")   # any process, later
    agent.advance(run.id)                           # closes it, resumes the model: DONE
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from refund_agent import (
    LOOP_POINTS,
    Approval,
    ApprovalStatus,
    Call,
    CallContext,
    IdempotentLog,
    Lease,
    Loop,
    ModelAccess,
    Outcome,
    Run,
    Settings,
    Tool,
    ToolKind,
    Waiting,
    same_address,
    toolset,
)

AccountId = Annotated[str, StringConstraints(strip_whitespace=True, to_upper=True,
                                             max_length=32),
                      Field(description="The account number, for example AC-1001.")]

# The sample accounts (a real desk reads its own system of record).
ACCOUNTS: dict[str, dict[str, Any]] = {
    "AC-1001": {"account_id": "AC-1001", "owner": "ana.ruiz@example.com", "plan": "family",
                "status": "open", "balance_cents": 0},
    "AC-1002": {"account_id": "AC-1002", "owner": "leo.martins@example.com", "plan": "solo",
                "status": "open", "balance_cents": 1250},
}


class LookupAccount(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account_id: AccountId


class CloseAccount(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account_id: AccountId
    reason: Annotated[str, StringConstraints(max_length=500)] = Field(
        description="Why the customer wants the account closed, in their words.")


@dataclass(frozen=True, kw_only=True)
class ClosureCall(CallContext):
    """What the closure tools get for one call: the accounts and the closures log."""

    accounts: Mapping[str, dict[str, Any]]
    closures: IdempotentLog

    def owned(self, account_id: str) -> dict[str, Any] | str:
        """The sender's account, or one answer for unknown and someone else's alike."""
        account = self.accounts.get(account_id)
        if account is None or not same_address(account["owner"], self.run.sender):
            return f"No account {account_id} was found for {self.run.sender}."
        return account


def lookup_account(ctx: ClosureCall, args: LookupAccount) -> Outcome:
    account = ctx.owned(args.account_id)
    return Outcome({"error": account} if isinstance(account, str) else dict(account), [])


def propose_closure(ctx: ClosureCall, args: CloseAccount) -> Waiting | Outcome:
    """Queue the closure for a person: an approval that moves no money."""
    account = ctx.owned(args.account_id)
    if isinstance(account, str):
        return Outcome({"error": account}, [])
    return ctx.propose(f"Close account {args.account_id}: {args.reason}",
                       subject=args.account_id)


def close_account(ctx: ClosureCall, args: CloseAccount, approval: Approval) -> Outcome:
    """The person decided: close the account once (keyed by the call), or say why not."""
    if approval.status != ApprovalStatus.APPROVED:
        return Outcome({"status": str(approval.status), "decided_by": approval.decided_by,
                        "note": approval.note or ""}, [])
    ctx.fence()   # a process that lost the run closes nothing
    record, reused = ctx.closures.once(
        approval.id, {"account_id": args.account_id, "reason": args.reason},
        lambda: {"closure_id": "cl_" + uuid.uuid4().hex[:12], "closed_at": time.time()})
    ctx.crash("after_closure")
    return Outcome({"status": "closed", "account_id": args.account_id,
                    "closure_id": record["closure_id"], "approved_by": approval.decided_by,
                    "already_closed": reused}, [])


TOOLS = toolset(
    Tool("lookup_account", "Look up a customer's account: its plan, status and balance. "
         "Only accounts of the customer who wrote in are visible.", LookupAccount,
         run=lookup_account),
    Tool("close_account", "Close the account for good. A person must approve it first; the "
         "output says whether it was closed, or rejected with the reviewer's note.",
         CloseAccount, ToolKind.NEEDS_APPROVAL, run=close_account, propose=propose_closure,
         done_status="closed"),
)

PROMPT = ("You close customer accounts. Look the account up first, then call close_account "
          "with what the look-up returned. A person approves every closure.")


class ClosureAgent(Loop):
    """An account-closure desk on the refund desk's loop and model; its runs are kept in
    ``closures.sqlite3`` in the output folder (or in the shared PostgreSQL store, by name).

    Args:
        settings: configuration; read from the environment when omitted.
        model: an already opened model client.
        accounts: account id -> record (``owner`` is the address that may close it).
    """

    # Its own name on its runs, and its own SQLite file beside the desk's: the desk's resume and
    # worker never see its runs, and where a store is shared (PostgreSQL) the name keeps them
    # apart (agent.foreign_run).
    agent_name = "closure"
    store_file = "closures.sqlite3"
    tools = TOOLS
    crash_points = {**LOOP_POINTS, "after_closure": "the account was closed; the run has not "
                                                    "recorded it"}
    default_subject = "Close my account"

    def __init__(self, settings: Settings | None = None, *, model: ModelAccess | None = None,
                 accounts: Mapping[str, dict[str, Any]] | None = None) -> None:
        super().__init__(settings, model=model)
        self.accounts = ACCOUNTS if accounts is None else accounts
        self.closures = IdempotentLog(Path(self.settings.output_dir) / "closures.log")

    def system_prompt(self, run: Run) -> str:
        return PROMPT

    def context(self, run: Run, lease: Lease, call: Call) -> ClosureCall:
        return ClosureCall(run, lease, call, self.store, self._crash_at,
                           accounts=self.accounts, closures=self.closures)

    def closed(self) -> list[dict[str, Any]]:
        """Every closure made, one record per idempotency key."""
        return self.closures.records()
