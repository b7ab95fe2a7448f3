"""Evals: the corpus of emails with the outcome each one's shop policy owes, run against any
provider, and scored (``refund-agent eval``, docs/EVAL.md).

    corpus.py   loading and checking an emails folder (the built-in corpus or a team's own)
    scoring.py  pure scoring: what the policy owes, one run's verdict, leaks, pass^k
    runner.py   running emails k times through the real agent, the table, the CSV
"""

from .corpus import Corpus, hashed_part, load
from .scoring import VERDICTS, Outcome, Proposed, Verdict, classify, owed_cents, pass_hat_k

__all__ = ["VERDICTS", "Corpus", "Outcome", "Proposed", "Verdict", "classify",
           "hashed_part", "load", "owed_cents", "pass_hat_k"]
