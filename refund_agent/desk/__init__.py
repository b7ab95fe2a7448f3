"""The refund desk: one agent on the loop (loop.py), and the only place refunds are known.

Import it as ``refund_agent.desk`` (``from refund_agent.desk import Agent``); ``import
refund_agent`` is the loop alone and loads none of this.

- ``agent.py``: :class:`Agent`, the loop with the refund tools, a shop and its outside systems;
- ``tools.py`` and ``actions.py``: what its five tools accept, and what they do;
- ``shop.py``, ``policy.py`` and ``rules.py``: the shop's data, what the policy allows, and
  what a decision checks (limits, two people), as pure functions;
- ``status.py``: a ticket's status in a lead's words; ``identity.py`` and ``accounts.py``: who
  decides; ``customer.py``: the simulated customer; ``prompts.py``; ``reconcile.py``: the
  audit's cross-checks; ``migrate.py``: the store and its logs moved to PostgreSQL;
- ``records/``: the desk's own records, in :class:`DeskStore`, which stands on the loop's store.
"""

from .actions import DeskCall
from .agent import Agent
from .customer import converse
from .policy import PolicyFacts, Quote, QuotedLine, policy_facts, quote_refund
from .records import DeskStore, open_desk_store
from .shop import Order, PolicyTerms, Shop, canonical_order_id
from .tools import tool_schemas

__all__ = [
    "Agent", "DeskCall", "DeskStore", "Order", "PolicyFacts", "PolicyTerms", "Quote",
    "QuotedLine", "Shop", "canonical_order_id", "converse", "open_desk_store", "policy_facts",
    "quote_refund", "tool_schemas",
]
