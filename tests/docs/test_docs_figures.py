"""The docs' figures about the suite itself stay true: test counts are kept by a test, and
durations are measurements that say when and on what machine they were taken.

A count of tests is written "about N tests", N a round hundred within 5 % of the collected count
(the suite grows every week; a figure that had to be exact would be wrong by the next commit),
in a paragraph that names the lane it counts (`./dev test` for the whole suite,
`./dev test --fast` for the fast lane); the slow test below collects the suite as pytest would
and holds every such figure against it. A duration of the suite cannot be kept true by a test
(no test asserts on the wall clock), so each one stands in a paragraph that gives the date it
was measured and the machine (2 cores). docs/RELIABILITY.md is generated from the tests' own
output and keeps its own figures.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")
                             if p.name != "RELIABILITY.md")]
# Where the suite's durations are quoted (docs/PERFORMANCE.md's are the benchmarks', each with
# its method there).
DURATION_DOCS = ["README.md", "docs/TESTING.md"]
TOLERANCE = 0.05   # how far a quoted count may be from the collected one
FAST = "not slow and not browser and not postgres"   # ./dev test --fast's selection
COUNT = re.compile(r"\b(about )?(\d[\d,]*) tests\b")
KEPT = re.compile(r"^about (\d{1,2},)?\d00 tests$")
LANE = re.compile(r"\./dev test( --fast)?\b")
DURATION = re.compile(r"\b\d+(?:½)? minutes\b|\b\d+ min\b")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
MACHINE = re.compile(r"\b2 cores\b|\b2-core\b")


def _paragraphs(doc: str) -> list[tuple[int, str]]:
    """A doc's paragraphs (text between blank lines) with the line each starts on; a code block
    belongs to the paragraph after it, which says what its comments quote."""
    raw, number = [], 1
    for paragraph in (ROOT / doc).read_text().split("\n\n"):
        raw.append((number, paragraph))
        number += paragraph.count("\n") + 2
    out: list[tuple[int, str]] = []
    for index, (number, paragraph) in enumerate(raw):
        block = raw[index - 1][1].strip() if index else ""
        if block.startswith("```") and block.endswith("```"):
            number, paragraph = out[-1][0], f"{out.pop()[1]}\n\n{paragraph}"
        out.append((number, paragraph))
    return out


def _quoted_counts() -> list[tuple[str, str, int]]:
    """Every "about N tests" the docs quote: where, which lane ("whole"/"fast"), N."""
    quoted = []
    for doc in DOCS:
        for number, paragraph in _paragraphs(doc):
            for match in COUNT.finditer(paragraph):
                lanes = LANE.findall(paragraph[:match.start()])
                lane = ("fast" if lanes[-1] else "whole") if lanes else "?"
                quoted.append((f"{doc}:{number}", lane, int(match.group(2).replace(",", ""))))
    return quoted


def test_every_suite_figure_is_kept_by_a_test_or_dated():
    """Each count of tests is a rounded figure of a named lane (kept true below); each
    duration of the suite says when and on what machine it was measured."""
    wrong = []
    for doc in DOCS:
        for number, paragraph in _paragraphs(doc):
            for match in COUNT.finditer(paragraph):
                lanes = LANE.findall(paragraph[:match.start()])
                if not KEPT.match(match.group(0)) or not lanes:
                    wrong.append(f"{doc}:{number}: {match.group(0)!r} is not 'about N00 tests' "
                                 "after the ./dev test command it counts")
    for doc in DURATION_DOCS:
        for number, paragraph in _paragraphs(doc):
            if DURATION.search(paragraph) and not (DATE.search(paragraph)
                                                   and MACHINE.search(paragraph)):
                wrong.append(f"{doc}:{number}: {DURATION.search(paragraph).group(0)!r} with "
                             "no date (YYYY-MM-DD) or machine (2 cores) in its paragraph")
    assert not wrong, "\n".join(wrong)


def _collected() -> dict[str, int]:
    """How many tests `./dev test` and `./dev test --fast` run, as pytest collects them."""
    shown = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", FAST],
                           cwd=ROOT, text=True, capture_output=True, timeout=300,
                           stdin=subprocess.DEVNULL)
    last = shown.stdout.strip().splitlines()[-1] if shown.stdout.strip() else shown.stderr
    counts = re.match(r"(\d+)/(\d+) tests collected", last)
    assert counts, f"pytest --collect-only said: {last}"
    return {"fast": int(counts.group(1)), "whole": int(counts.group(2))}


@pytest.mark.slow   # collects the whole suite in a new process: about 10 s of CPU
def test_the_test_counts_the_docs_quote_are_the_collected_ones():
    collected = _collected()
    quoted = _quoted_counts()
    assert {lane for _, lane, _ in quoted} >= {"whole", "fast"}, quoted
    wrong = [f"{where}: about {n:,} tests, but the {lane} lane collects {collected[lane]:,} "
             f"(about {round(collected[lane], -2):,})"
             for where, lane, n in quoted
             if lane not in collected or abs(n - collected[lane]) > TOLERANCE * collected[lane]]
    assert not wrong, "\n".join(wrong)
