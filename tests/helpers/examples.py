"""How many examples a property test in the fast subset draws.

``./dev test --fast`` is the quick loop run after every change, and sets
``REFUND_AGENT_FAST_TESTS=1``; there a property test draws a smaller sample. The whole suite
(``./dev test``, CI) always draws the full count, so nothing CI checks is reduced.
"""

from __future__ import annotations

import os

FAST = os.environ.get("REFUND_AGENT_FAST_TESTS") == "1"


def examples(full: int, fast: int) -> int:
    """``full`` examples in the whole suite, ``fast`` in ``./dev test --fast``."""
    return fast if FAST else full
