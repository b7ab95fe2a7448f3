"""A store-credit agent, written as a learner would write one on the public API only (the
package's ``__all__``): the loop's own tests run on it, so they need nothing of the refund
desk. Its effect function forgets what the loop must not: it checks no decision and no
lease (``ctx.fence()``), so the tests show the loop does both.

``CreditDesk``: ``issue_credit`` needs approval (a person decides each credit).
``InstantCredit``: the same tool as a plain effect (no approval), for the fence's tests.
The effect is keyed by the call (``ctx.once``) in ``credits.log`` beside the agent's store.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from refund_agent import (
    LOOP_POINTS,
    Approval,
    CallContext,
    Loop,
    Outcome,
    Run,
    Tool,
    ToolKind,
    Waiting,
    same_address,
    toolset,
)

ANA = "ana.ruiz@example.com"
STRANGER = "mallory@example.com"   # owns no account: sees none, is credited nothing
EMAIL = "Hi,\n\nPlease credit my account CR-1001 for the late delivery.\n\nAna"
AccountId = Annotated[str, StringConstraints(strip_whitespace=True, to_upper=True,
                                             max_length=32),
                      Field(description="The credit account, for example CR-1001.")]
ACCOUNTS = {"CR-1001": {"account_id": "CR-1001", "owner": ANA, "amount_cents": 2500}}


class LookupAccount(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account_id: AccountId


class IssueCredit(LookupAccount):
    amount_cents: int = Field(ge=1, description="The credit, in cents.")


def lookup_account(ctx: CallContext, args: LookupAccount) -> Outcome:
    account = ACCOUNTS.get(args.account_id)
    if account is None or not same_address(account["owner"], ctx.run.sender):
        return Outcome({"error": f"No account {args.account_id}."}, [])
    return Outcome(dict(account), [])


def propose_credit(ctx: CallContext, args: IssueCredit) -> Waiting | Outcome:
    return ctx.propose(f"Store credit of {args.amount_cents} cents on {args.account_id}",
                       subject=args.account_id, amount_cents=args.amount_cents)


def issue_credit(ctx: CallContext, args: IssueCredit, approval: Approval | None = None
                 ) -> Outcome:
    """The slip: no look at ``approval.status``, no ``ctx.fence()``."""
    record, reused = ctx.once(args.model_dump(),
                              lambda: {"credit_id": "sc_" + uuid.uuid4().hex[:10]})
    ctx.crash("after_credit")
    return Outcome({"status": "credited", "credit_id": record["credit_id"],
                    "again": reused}, [])


LOOKUP = Tool("lookup_account", "Look up a customer's store-credit account: what it is owed. "
              "Only the accounts of the customer who wrote in are visible.", LookupAccount,
              run=lookup_account)


class CreditDesk(Loop):
    agent_name = "store-credit"
    proposal_noun = "store credit"
    store_file = "credits.sqlite3"
    effect_log = "credits"
    crash_points = {**LOOP_POINTS, "after_credit": "the credit was made; its output is not saved"}
    tools = toolset(LOOKUP, Tool(
        "issue_credit", "Issue a store credit once a person approves it.", IssueCredit,
        ToolKind.NEEDS_APPROVAL, run=issue_credit, propose=propose_credit,
        done_status="credited"))

    def system_prompt(self, run: Run) -> str:
        return "You issue the store credits customers are owed. A person approves each one."

    def credits(self) -> list[dict[str, Any]]:
        return self.effects.records()


class InstantCredit(CreditDesk):
    agent_name = "instant-credit"
    tools = toolset(LOOKUP, Tool("issue_credit", "Issue a store credit at once.", IssueCredit,
                                 ToolKind.EFFECT, run=issue_credit))
