"""The refund desk: one agent on the loop (loop.py), and the only place refunds are known.

- ``agent.py``: :class:`Agent`, the loop with the refund tools, a shop and its outside systems;
- ``tools.py`` and ``actions.py``: what its five tools accept, and what they do;
- ``shop.py``, ``policy.py`` and ``rules.py``: the shop's data, what the policy allows, and
  what a decision checks (limits, two people), as pure functions;
- ``status.py``: a ticket's status in a lead's words; ``identity.py`` and ``accounts.py``: who
  decides; ``customer.py``: the simulated customer; ``prompts.py``; ``reconcile.py``: the
  audit's cross-checks.
"""
