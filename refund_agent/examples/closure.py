"""A second agent on the same loop: closing a customer's account, once a person approves.

Nothing here is about refunds, and it imports only what ``refund_agent`` exports (and the
table of records the examples share, records.py). Two tools, declared the way the refund desk
declares its own:

- ``lookup_account`` is read-only: it runs again freely after a crash;
- ``close_account`` ``needs_approval``: its first call queues a proposal and the run pauses
  durably in the store; a person approves it (in any process, any day later); the next
  ``advance`` closes the account under the call's key (the run and the call id), so a crash
  after closing and before recording, or a second approval, closes it once. A rejection never
  reaches ``close_account``: the loop tells the model the decision and its note.

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
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from refund_agent import LOOP_POINTS, Approval, Outcome, Tool, ToolKind, Waiting, toolset

from .records import RecordsCall, TableAgent, look_up

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


class CloseAccount(LookupAccount):
    reason: Annotated[str, StringConstraints(max_length=500)] = Field(
        description="Why the customer wants the account closed, in their words.")


def propose_closure(ctx: RecordsCall, args: CloseAccount) -> Waiting | Outcome:
    """Queue the closure for a person: an approval that moves no money."""
    account = ctx.owned(args.account_id)
    if isinstance(account, str):
        return Outcome({"error": account}, [])
    return ctx.propose(f"Close account {args.account_id}: {args.reason}",
                       subject=args.account_id)


def close_account(ctx: RecordsCall, args: CloseAccount, approval: Approval) -> Outcome:
    """A person approved it: close the account once (keyed by the call)."""
    record, reused = ctx.once(
        {"account_id": args.account_id, "reason": args.reason},
        lambda: {"closure_id": "cl_" + uuid.uuid4().hex[:12], "closed_at": time.time()})
    ctx.crash("after_closure")
    return Outcome({"status": "closed", "account_id": args.account_id,
                    "closure_id": record["closure_id"], "approved_by": approval.decided_by,
                    "already_closed": reused}, [])


TOOLS = toolset(
    Tool("lookup_account", "Look up a customer's account: its plan, status and balance. "
         "Only accounts of the customer who wrote in are visible.", LookupAccount,
         run=look_up("account_id")),
    Tool("close_account", "Close the account for good. A person must approve it first; the "
         "output says whether it was closed, or rejected with the reviewer's note.",
         CloseAccount, ToolKind.NEEDS_APPROVAL, run=close_account, propose=propose_closure,
         done_status="closed"),
)


class ClosureAgent(TableAgent):
    """An account-closure desk on the refund desk's loop and model; its runs are kept in
    ``closures.sqlite3`` in the output folder (or in the shared PostgreSQL store, by name),
    its closures in ``closures.log`` (the store's ledger where hosts share it)."""

    # Its own name on its runs, and its own SQLite file beside the desk's: the desk's resume and
    # worker never see its runs, and where a store is shared (PostgreSQL) the name keeps them
    # apart (Run.owner_problem).
    agent_name = "closure"
    proposal_noun = "account closure"
    store_file = "closures.sqlite3"
    effect_log = "closures"
    tools = TOOLS
    crash_points = {**LOOP_POINTS, "after_closure": "the account was closed; the run has not "
                                                    "recorded it"}
    default_subject = "Close my account"
    records, record_noun = ACCOUNTS, "account"
    prompt = ("You close customer accounts. Look the account up first, then call close_account "
              "with what the look-up returned. A person approves every closure.")

    def closed(self) -> list[dict[str, Any]]:
        """Every closure made, one record per idempotency key."""
        return self.done()
