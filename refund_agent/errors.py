"""Every exception the project raises, in one place.

Everything raised on purpose derives from :class:`AgentError` (``RefundAgentError`` is the
same class under its older name), so a front end can catch one type and show its message
instead of a traceback. Problems the *model* can recover from
(a wrong order number, an amount above the policy) are not raised at all: they go back to the
model as the tool's output. Programming errors raise as they are.

    AgentError (alias: RefundAgentError)
    ├── ConfigError          settings or data files missing or invalid
    ├── NotFound             no run, approval or order with that id
    ├── AlreadyDecided       someone decided first (the web's 409; audited as 'ignored')
    ├── DecisionRefused      a decision the rules refuse (audited as 'refused')
    │   └── (stale fingerprint, over a limit, four eyes, a note missing, ...)
    ├── NothingToDecide      approve/reject found nothing waiting
    ├── SignInFailed         a wrong name or password
    ├── RunBusy              another live process advances the run
    ├── LeaseLost            this process lost the run to another; it wrote nothing more
    ├── RunNotReady          a reply or a continue the run cannot take now
    ├── StoreError           the database cannot be read or written
    ├── LedgerError          an idempotency record cannot be written
    ├── IdempotencyConflict  a key reused with other arguments
    ├── MigrationRefused     `refund-agent migrate` copied nothing
    ├── PaymentRefused       the provider refused the refund
    ├── PaymentUncertain     the provider's answer never came back
    └── EmailNotSent         the mail server did not take the message
    ValueError
    └── IdentityError        a name or address that passes for another
    Exception (control flow, never shown to people)
    ├── Stopped              someone pressed Stop (inside a turn)
    ├── NoTranscript         the transcript does not reach the first request
    ├── EndRun               a follow-up (Loop.advance) ends the run as it says
    └── Undone               a store write not needed after all: its transaction rolls back
"""

from datetime import datetime


class AgentError(Exception):
    """Base class for every error this package raises deliberately."""


# The name the base had before the loop was lifted out of the refund desk; kept so code that
# catches it keeps working.
RefundAgentError = AgentError


class ConfigError(AgentError):
    """Settings or data files are missing, unreadable or invalid."""


class NotFound(AgentError):
    """A run, approval or order with the given id does not exist."""


class AlreadyDecided(AgentError):
    """A decision arrived for an approval that someone already decided.

    ``noun`` is what the agent calls its proposals ("refund", "store credit": Loop.
    proposal_noun), so the message speaks of the person's own kind of decision.

    Attributes:
        status: the decision that won (approved, rejected, asked, expired).
        decided_by: who made it.
        decided_at: when (a Unix time), if known.
    """

    # How each outcome reads in "This <noun> was already ...".
    PHRASES = {"asked": "sent back to the customer with a question",
               "expired": "closed as expired (not decided in time)"}

    def __init__(self, approval_id: str, status: str, decided_by: str,
                 decided_at: float | None = None, tried_by: str | None = None, *,
                 noun: str = "proposal") -> None:
        self.approval_id, self.status, self.decided_by = approval_id, status, decided_by
        self.decided_at, self.tried_by = decided_at, tried_by
        when = ""
        if decided_at:
            when = f" at {datetime.fromtimestamp(decided_at):%Y-%m-%d %H:%M:%S}"
        done = self.PHRASES.get(status, status)
        if tried_by and tried_by == decided_by:
            # A second click (or a second tab) of the same person: not someone else's doing.
            message = f"You already {_active(status)} this {noun}{when}; nothing more to do."
        else:
            message = f"This {noun} was already {done} by {decided_by}{when}."
        super().__init__(message)


def _active(status: str) -> str:
    return {"approved": "approved", "rejected": "rejected",
            "asked": "asked the customer about"}.get(status, status)


class DecisionRefused(AgentError):
    """A decision cannot be carried out (bad input, or the policy no longer allows it)."""


class RunBusy(AgentError):
    """Another live process is advancing this run right now."""

    def __init__(self, run_id: str, pid: int) -> None:
        self.run_id, self.pid = run_id, pid
        super().__init__(
            f"Run {run_id} is being advanced by process {pid}; try again when it stops.")


class LeaseLost(AgentError):
    """This process no longer holds the run it was advancing; another one took it over.

    Raised at the first write after the takeover (each write checks the lease's fencing token),
    so the process stops before any further side effect; the new owner finishes the run.
    """

    def __init__(self, run_id: str, holder_pid: int | None) -> None:
        self.run_id, self.holder_pid = run_id, holder_pid
        holder = f"process {holder_pid}" if holder_pid else "another process"
        super().__init__(
            f"Run {run_id} was taken over by {holder} while this process was paused or slow; "
            "this process stopped without doing anything more, and the run continues there.")


class RunNotReady(AgentError):
    """The run is in a state where the requested action makes no sense."""


class StoreError(AgentError):
    """The SQLite store is corrupt, locked for too long, or not a database."""


class LedgerError(AgentError):
    """The payment or email stand-in could not write its log (disk full, read-only folder)."""


class IdempotencyConflict(AgentError):
    """An idempotency key was reused with different arguments (as payment providers refuse)."""


class MigrationRefused(AgentError):
    """``refund-agent migrate`` would not copy the store (the message says why); nothing was
    written to the target database."""


class PaymentRefused(AgentError):
    """The payment provider refused the refund (no such payment, more than is left, a bad key):
    nothing was refunded and nothing is recorded as paid. Fix the cause, then resume."""


class PaymentUncertain(AgentError):
    """The refund request reached the provider but its answer never came back (a timeout,
    a dropped connection), and reading it back did not settle it: the refund may or may not
    exist. Nothing is recorded as paid; resume reads it back again before creating anything."""


class IdentityError(ValueError):
    """A name or address that cannot be told apart from another one."""


class SignInFailed(AgentError):
    """A wrong name or password, or an account that no longer exists."""


class EmailNotSent(AgentError):
    """The mail server could not be reached or refused the message; it is recorded in the outbox
    but not marked sent, and resume sends it."""


class NothingToDecide(AgentError):
    """approve or reject found no refund waiting (exit code 4)."""


class Stopped(Exception):
    """Raised inside a turn when someone pressed Stop."""


class NoTranscript(Exception):
    """The run needs its transcript, but it does not go back to the first request."""


class EndRun(Exception):  # noqa: N818 - an order, not an error
    """Raised by a follow-up that cannot go on (Loop.advance): the run ends with ``status``
    (a RunStatus: failed, stopped) and ``error``, its message for people, and advance
    returns it."""

    def __init__(self, status: str, error: str) -> None:
        super().__init__(error)
        self.status, self.error = status, error


class Undone(Exception):  # noqa: N818 - not an error: an answer whose transaction is undone
    """Raised inside a store transaction to roll it back and hand ``answer`` out: the write
    turned out not to be needed (store/approvals.py: queue_approval queues nothing)."""

    def __init__(self, answer: object) -> None:
        super().__init__()
        self.answer = answer
