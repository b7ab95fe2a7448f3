"""Issue 43, 10: dates and durations a person types are bounded, and a wrong one is answered
in one line, never with a traceback (``away --until 9999-12-31`` ended in an OverflowError;
``work --idle-exit nan`` never exited)."""

from __future__ import annotations

import time

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from refund_agent.desk.owners import AWAY_DAYS_MAX, away_problem

PASSWORD = "a-long-password"


def one_line(result) -> str:
    """The command's whole complaint, checked to be one line without a traceback."""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("usage:")
             and not line.startswith(" ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def desk(tmp_path_factory) -> object:
    """An output folder with two accounts, so `away` gets as far as reading its date."""
    out = tmp_path_factory.mktemp("desk") / "out"
    for name in ("Ana Ruiz", "Lee Park"):
        added = run_cli(out, "users", "add", name, "--role", "lead",
                        REFUND_AGENT_NEW_PASSWORD=PASSWORD)
        assert added.returncode == 0, added.stderr
    return out


@pytest.mark.parametrize(("until", "says"), [
    ("9999-12-31", "within a year"),           # old code: OverflowError, with its traceback
    ("9999-12-31 23:59", "within a year"),
    ("0001-01-01", "has passed"),              # old code: an OverflowError or OSError as well
    ("2024-02-30", "YYYY-MM-DD"),
])
def test_away_answers_a_date_out_of_range_in_one_line(desk, until, says):
    result = run_cli(desk, "away", "--to", "Lee Park", "--until", until, "--as", "Ana Ruiz",
                     REFUND_AGENT_PASSWORD=PASSWORD)
    assert result.returncode == 1, result.stdout   # refused, as a date in the wrong form is
    assert says in one_line(result)


@pytest.mark.parametrize("args", [
    ("work", "--idle-exit", "nan"),            # old code: worked for ever
    ("work", "--idle-exit", "-5"),
    ("work", "--idle-exit", "1e400"),
    ("receive", "--imap", "imaps://u:p@127.0.0.1:1/", "--every", "inf"),
    ("receive", "--imap", "imaps://u:p@127.0.0.1:1/", "--every", "0"),
])
def test_a_duration_out_of_range_is_a_usage_mistake(tmp_path, args):
    # The timeout is a hang guard (the old code never exited), not a measure of speed.
    result = run_cli(tmp_path / "out", *args, timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "seconds" in one_line(result)


def test_the_rule_bounds_how_long_someone_is_away():
    """The page's date picker and the terminal share the rule (desk/owners.py)."""
    now = time.time()
    assert away_problem("Ana", "Lee", now + 30 * 86400, now) is None
    assert "within a year" in away_problem("Ana", "Lee", now + (AWAY_DAYS_MAX + 2) * 86400,
                                           now)
    assert "within a year" in away_problem("Ana", "Lee", float("inf"), now)
    assert "has passed" in away_problem("Ana", "Lee", float("nan"), now)
