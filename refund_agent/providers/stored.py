"""Why a turn failed, in words a person can act on (the loop decides what to do with it)."""

from __future__ import annotations

import openai

from .client import provider_error
from .table import ProviderError

# How a run's failure says that a person has the ticket now (calls.hand_over writes it): the
# terminal does not then tell anyone that resuming retries (cli/output.py:run_summary).
HANDED_OVER = "A person needs to take this ticket over"


def handed_over(error: str | None) -> bool:
    """Whether a run's failure says the ticket went to a person."""
    return bool(error) and HANDED_OVER in error


def refused_after_payment(error: ProviderError) -> str:
    """The provider refused a request for good after the run's refund was paid.

    Resuming sends the same request and meets the same refusal (issue 33 item 10: xAI's 422 on
    a transcript sent after the stored response expired), so the run is not left for a resume
    that cannot help, and the customer, whose money moved, is not left untold.
    """
    return (f"{error.said()}. The refund was already paid, and sending the request again meets "
            "the same refusal, so the run stopped here rather than leave the customer "
            "without an answer.")


def response_gone(client: openai.OpenAI, provider: str, exc: openai.APIStatusError,
                  missing: str) -> bool:
    """Whether a refused continuation means the stored response ``missing`` is gone.

    Recognised in every form providers use: a 404 or 400 naming the id anywhere in its
    body, OpenAI's or xAI's ``previous_response_not_found`` code; a bare 404 (xAI's flat
    body says only "Error code: 404") is confirmed by asking for the response itself.
    """
    if provider_error(exc, provider, missing).kind == "response_gone":
        return True
    if exc.status_code != 404:
        return False
    try:
        client.responses.retrieve(missing)
    except openai.NotFoundError:
        return True
    except openai.APIError:
        return False
    return False  # the response is there: the 404 was about something else


def refused_transcript(error: ProviderError) -> str:
    """The provider refused the transcript's encrypted reasoning: say so plainly."""
    return ("The model refused this run's transcript: the encrypted reasoning kept in the "
            f"store does not verify ({error.message}). The transcript was changed after the "
            "model wrote it, or was written under another key or provider, so the run "
            "stopped here rather than continue without its reasoning. Restore the store "
            "from a backup, or start a new ticket.")


def still_gone(previous: str | None, error: ProviderError) -> str:
    """The stored response is gone and the request sent from the transcript failed too."""
    then = ("resume retries." if error.retry else "sending it again meets the same refusal, so "
            "resuming helps only once what it names is changed.")
    return (f"The stored response {previous} is gone, and the request sent from the run's "
            f"transcript instead was refused too ({error.message or error.code}); {then}")
