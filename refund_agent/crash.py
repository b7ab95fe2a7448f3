"""Named crash points: places where a test (or a curious user) can make the process die.

Each sits at a durable boundary. ``REFUND_AGENT_CRASH_AT=after_refund`` (or the shorthand
``CRASH_AFTER_REFUND=1``) kills the process there with SIGKILL, exactly as ``kill -9`` or a
power cut would: no ``finally`` blocks, no atexit handlers, no flushing of anything unsaved.
"""

from __future__ import annotations

import os
import signal
import sys

CRASH_POINTS: dict[str, str] = {
    "after_run_created": "the run and its email are saved; no model request yet",
    "after_response": "a model response and its calls are saved; none of the calls ran",
    "before_tool": "a saved call is about to run",
    "after_tool": "a call ran and its output is saved",
    "after_approval_queued": "the refund approval is queued and the run is waiting",
    "after_decision": "a person's decision is saved; the run has not continued yet",
    "before_refund": "the approved refund is about to go to the payment provider",
    "after_refund": "the payment provider made the refund; the run has not recorded it",
    "after_email": "the email was sent; the run has not recorded it",
    "after_simulated_reply": "a simulated customer reply is saved; the next turn has not run",
}

# Points inside the real outside systems' adapters (refund_agent/outside/): they fire only with
# Stripe or SMTP configured, so the stand-ins' matrix (tests/test_crash_matrix.py) covers
# CRASH_POINTS and tests/test_crash_matrix_outside.py, against localstripe and aiosmtpd, both.
OUTSIDE_CRASH_POINTS: dict[str, str] = {
    "after_provider_refund": "Stripe made the refund; neither the refunds log nor the run "
                             "recorded it",
    "email_recorded": "the outbox recorded the email; it was not handed to the mail server",
    "after_smtp_send": "the mail server took the email; the outbox has not marked it sent",
}

# Crash points of the agents in refund_agent/examples/, which the refund desk's crash matrix
# (tests/test_crash_matrix.py) does not reach; tests/test_second_agent.py kills at each.
EXAMPLE_POINTS: dict[str, str] = {
    "after_closure": "the account was closed; the run has not recorded it",
}


def crash_point(name: str, enabled: frozenset[str]) -> None:
    """Kill this process with SIGKILL if ``name`` is one of the enabled crash points."""
    assert name in CRASH_POINTS or name in OUTSIDE_CRASH_POINTS or name in EXAMPLE_POINTS, name
    if name in enabled:
        sys.stdout.flush()
        sys.stderr.write(f"\n[crash point {name}: killing process {os.getpid()}]\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
