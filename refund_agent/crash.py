"""Named crash points: places where a test (or a curious user) can make the process die.

Each sits at a durable boundary. ``REFUND_AGENT_CRASH_AT=after_refund`` (or the shorthand
``CRASH_AFTER_REFUND=1``) kills the process there with SIGKILL, exactly as ``kill -9`` or a
power cut would: no ``finally`` blocks, no atexit handlers, no flushing of anything unsaved.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping

# The loop's own points, at the boundaries every agent shares. An agent declares these plus
# its own (``Loop.crash_points``); the refund desk's are in desk/agent.py, the outside
# systems' adapters' in outside/__init__.py, each example agent's in its module.
LOOP_POINTS: dict[str, str] = {
    "after_run_created": "the run and its email are saved; no model request yet",
    "after_response": "a model response and its calls are saved; none of the calls ran",
    "before_tool": "a saved call is about to run",
    "after_tool": "a call ran and its output is saved",
    "after_approval_queued": "the proposal is queued for a person and the run is waiting",
    "after_decision": "a person's decision is saved; the run has not continued yet",
}


def undeclared(enabled: frozenset[str], declared: Mapping[str, str]) -> str | None:
    """Why ``enabled`` cannot be honoured by an agent that declares ``declared``, or None.

    Checked when the agent is made, before anything runs: a point no code of the agent
    reaches would let a crash test pass without crashing."""
    unknown = sorted(enabled - set(declared))
    if not unknown:
        return None
    return (f"REFUND_AGENT_CRASH_AT names {', '.join(unknown)}, which this agent does not "
            f"declare; it declares {', '.join(sorted(declared))}.")


def crash_point(name: str, enabled: frozenset[str]) -> None:
    """Kill this process with SIGKILL if ``name`` is one of the enabled crash points.

    Never raises: it often sits right after an outside effect, where an error would turn a
    done effect into a failed run. Which names an agent may enable is checked up front
    (:func:`undeclared`)."""
    if name in enabled:
        sys.stdout.flush()
        sys.stderr.write(f"\n[crash point {name}: killing process {os.getpid()}]\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
