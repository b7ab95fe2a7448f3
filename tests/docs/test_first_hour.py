"""A newcomer's first hour: the README's Quick start, `./dev --help` and what the tests need.

The Quick start is two commands, one for the desk and one for the tests; the second runs the
whole suite (about half an hour on 2 cores), so the README says so, offers the fast lane beside
it and points at `./dev --help`, which says what each subcommand runs and how long it takes.
The Debian packages .ci/run installs for the tests are the ones the README names, so a machine
set up from the README skips nothing CI runs. These read files and run `./dev --help` (which
installs nothing): no server, well under a second.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# A duration as the README and `./dev --help` quote it: "about 25 minutes".
DURATION = re.compile(r"about (\d+) minutes")


def _dev(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "dev"), *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


def _section(title: str) -> str:
    """A README section's text, from its ``## title`` to the next ``## ``."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _quick_start_commands() -> list[str]:
    block = re.search(r"^```bash\n(.*?)^```", _section("Quick start"), re.S | re.M)
    assert block, "the Quick start has no bash block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()
            if line.split("#", 1)[0].strip()]


def _lane_minutes(text: str, lane: str) -> set[str]:
    """The "about N minutes" figures ``text`` gives ``lane`` ("whole" or "fast"): each figure
    belongs to the ./dev command named last before it."""
    found = set()
    for match in DURATION.finditer(text):
        named = re.findall(r"\./dev (\w+)( --fast)?", text[:match.start()])
        if named and named[-1][0] == "test" and (lane == "fast") == bool(named[-1][1]):
            found.add(match.group(1))
    return found


@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_dev_help_says_what_each_subcommand_runs_and_how_long(flag):
    shown = _dev(flag)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    for command in ("./dev web", "./dev test --fast", "./dev test", "./dev cli", "./dev lab"):
        assert re.search(rf"^  {re.escape(command)}\b", text, re.M), (command, text)
    assert _lane_minutes(text, "whole") and _lane_minutes(text, "fast"), text
    assert re.search(r"20\d\d-\d\d-\d\d", text) and "2 cores" in text, "measured when, on what"


def test_an_unknown_subcommand_is_a_usage_line_and_exit_2():
    shown = _dev("tset")
    assert shown.returncode == 2
    assert shown.stderr.startswith("usage: ./dev") and "./dev --help" in shown.stderr


def test_the_quick_start_is_two_commands_and_says_how_long_the_tests_take():
    assert _quick_start_commands() == ["./dev web", "./dev test"]
    quick = _section("Quick start")
    assert "`./dev test --fast`" in quick and "`./dev --help`" in quick
    help_text = _dev("--help").stdout
    for lane in ("whole", "fast"):
        quoted = _lane_minutes(quick, lane)
        assert quoted and quoted == _lane_minutes(help_text, lane), (lane, quoted)


def _ci_debian_packages() -> set[str]:
    """Every package an ``apt-get install`` line of .ci/run installs."""
    packages = set()
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        for match in re.finditer(r"apt-get install ([^)>|;&]*)", line):
            packages |= {w for w in match.group(1).split() if not w.startswith("-")}
    return packages


def test_every_debian_package_ci_installs_is_named_in_the_readme():
    packages = _ci_debian_packages()
    assert {"chromium", "postgresql"} <= packages, packages   # the reader works
    named = set(re.findall(r"`([^`\n]+)`", README.read_text()))
    words = {w for span in named for w in span.split()}
    missing = sorted(packages - words)
    assert not missing, f".ci/run installs {missing}, which README.md does not name in code"
