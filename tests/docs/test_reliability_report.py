"""scripts/reliability_report.py splits what it reports by backend, and the tests' log lines say
which backend they ran on.

The report is fed synthetic log lines with different numbers on SQLite and PostgreSQL, so a
table that merged the two, swapped them or dropped one would show the wrong figure here.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from helpers.crash import record

from refund_agent.config import PROJECT_ROOT

_spec = importlib.util.spec_from_file_location(
    "reliability_report", PROJECT_ROOT / "scripts" / "reliability_report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

DASH = "\u2014"


def _crash(backend: str | None, point: str, kills: int = 1, scenario: str = "angry",
           **metrics: int) -> dict:
    line = {"suite": "crash_matrix", "scenario": scenario, "command": "approve",
            "point": point, "killed": True, "kills": kills, "duplicate_refunds": 0,
            "duplicate_emails": 0, "integrity_not_ok": 0, **metrics}
    if backend:
        line["backend"] = backend
    return line


def _lines() -> list[dict]:
    points = sorted(report.CRASH_POINTS)
    lines = [_crash("sqlite", p, kills=2) for p in points]                    # 10 cases, 20 kills
    lines += [_crash("postgresql", p) for p in points[:3]]                    # 3 cases, 3 kills
    # A line from before records named their backend: SQLite.
    lines.append(_crash(None, points[0], scenario="reject"))
    lines.append(_crash("postgresql", points[1], duplicate_refunds=2))        # 2 problems on PG
    lines += [
        {"suite": "soak", "backend": "sqlite", "seed": 7, "run": i, "scenario": "approve",
         "kills": 3, "processes": 5, "stale_owners": 1, "stale_owners_fenced": 0,
         "duplicate_refunds": 0} for i in range(4)]
    lines += [
        {"suite": "soak", "backend": "postgresql", "seed": 7, "run": i, "scenario": "reject",
         "kills": 1, "processes": 2, "stale_owners": 2, "stale_owners_fenced": 1,
         "duplicate_refunds": 0} for i in range(2)]
    lines += [{"suite": "soak_total", "backend": "sqlite", "seed": 7, "runs": 4, "kills": 12,
               "seconds": 41.0},
              {"suite": "soak_total", "backend": "postgresql", "seed": 7, "runs": 2, "kills": 2,
               "seconds": 93.0}]
    lines += [{"suite": "races", "backend": "sqlite", "case": "decide one approval at once",
               "rounds": 30, "racers": 4, "double_decisions": 0},
              {"suite": "races", "backend": "postgresql", "case": "decide one approval at once",
               "rounds": 11, "racers": 4, "double_decisions": 0}]
    lines += [{"suite": "faults", "fault": "429", "turn": t, "attempts": 2,
               "calls_run_twice": 0} for t in range(5)]                       # no backend: SQLite
    lines += [{"suite": "many_hosts", "backend": "postgresql", "hosts": 3, "tickets": 200,
               "kills": 15, "decisions": 180, "refunds": 120, "emails": 200,
               "runs_not_finished": 0}]
    lines += [{"suite": "money_invariants", "backend": "sqlite", "examples": 500, "steps": 4000,
               "failures": 0, "seconds": 90.0},
              {"suite": "money_invariants", "backend": "postgresql", "examples": 100,
               "steps": 800, "failures": 0, "seconds": 60.0}]
    return lines


def _row(text: str, first: str) -> list[str]:
    """The cells of the first table row whose first cell starts with ``first``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith(first):
            return cells
    raise AssertionError(f"no row starting {first!r}")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end > 0 else None]


@pytest.fixture(scope="module")
def rendered() -> str:
    return report.render(_lines())


def test_the_summary_has_a_column_per_backend(rendered: str):
    summary = _section(rendered, "## Summary")
    assert _row(summary, "What") == ["What", "Tried on SQLite", "Tried on PostgreSQL",
                                     "Problems found"]
    crash = _row(summary, "Crash matrix")
    assert crash[1].startswith("11 cases (10 of 10 crash points x 2 scenarios")
    assert crash[1].endswith("; 21 kills")
    assert crash[2].startswith("4 cases (3 of 10 crash points x 1 scenario,")
    assert crash[2].endswith("; 4 kills")
    assert crash[3] == "2 (SQLite 0, PostgreSQL 2)"
    soak = _row(summary, "Soak")
    assert soak[1:] == ["4 runs, 12 kills, 20 processes (seeds 7)",
                        "2 runs, 2 kills, 4 processes (seeds 7)", "0"]
    assert _row(summary, "Races")[1:] == ["30 rounds in 1 test", "11 rounds in 1 test", "0"]
    stale = _row(summary, "Stale owners")
    assert stale[1] == "4 paused processes in the soak (0 stopped by the fence)"
    assert stale[2] == "4 paused processes in the soak (2 stopped by the fence)"
    assert _row(summary, "Money invariants")[1:] == [
        "500 histories, 4,000 steps, 6 invariants after every step",
        "100 histories, 800 steps, 6 invariants after every step", "0"]


def test_a_suite_that_ran_on_one_backend_shows_a_dash_for_the_other(rendered: str):
    summary = _section(rendered, "## Summary")
    assert _row(summary, "Model faults")[1:] == ["5 cases", DASH, "0"]
    hosts = _row(summary, "Three worker processes")
    assert hosts[1] == DASH and hosts[2].startswith("200 tickets on 3 hosts, 15 kills")
    assert _row(summary, "Hostile customer emails")[1:] == [DASH, DASH, DASH]   # not in the log
    # ...and says why, under the table.
    assert "REFUND_AGENT_PG_FULL_MATRIX=1" in summary
    assert "run on SQLite only" in summary


def test_what_held_counts_cases_per_backend(rendered: str):
    held = _section(rendered, "## What held")
    assert _row(held, "Invariant") == ["Invariant", "Cases on SQLite", "Total on SQLite",
                                       "Cases on PostgreSQL", "Total on PostgreSQL"]
    # Crash matrix 11 + soak 4 on SQLite; crash matrix 4 + soak 2 on PostgreSQL, 2 found there.
    assert _row(held, "Refunds made twice for one approval")[1:] == ["15", "0", "6", "2"]
    assert _row(held, "Emails sent twice")[1:] == ["11", "0", "4", "0"]
    assert _row(held, "Tool calls run twice after a model fault")[1:] == ["5", "0", DASH, DASH]
    assert _row(held, "Runs neither done nor waiting")[1:] == [DASH, DASH, "1", "0"]
    # PostgreSQL has no PRAGMA integrity_check: its zeros there would claim a check never made.
    assert _row(held, "`PRAGMA integrity_check`")[1:] == ["11", "0", "n/a", "n/a"]
    assert "the server checks its own pages" in held
    # What a case describes is not an invariant.
    for described in ("Hosts", "Tickets", "Decisions", "Emails |"):
        assert f"| {described}" not in held


def test_the_other_tables_are_split_too(rendered: str):
    grid = _section(rendered, "## Crash matrix")
    sqlite, postgres = grid.split("### On SQLite")[1].split("### On PostgreSQL")
    first = f"`{sorted(report.CRASH_POINTS)[0]}`"
    assert _row(sqlite, first) == [first, "1 (2)", "1 (1)"]        # angry, reject
    assert _row(postgres, first) == [first, "1 (1)"]               # angry only
    soak = _section(rendered, "## Soak")
    assert _row(soak, "SQLite")[:6] == ["SQLite", "7", "4", "20", "12", "41 s"]
    assert _row(soak, "PostgreSQL")[:6] == ["PostgreSQL", "7", "2", "4", "2", "93 s"]
    races = _section(rendered, "## Races")
    rows = [line for line in races.splitlines() if line.startswith("| decide one")]
    assert [r.split("|")[2].strip() for r in rows] == ["SQLite", "PostgreSQL"]
    assert [r.split("|")[3].strip() for r in rows] == ["30", "11"]
    assert "## Model faults (SQLite)" in rendered
    money = _section(rendered, "## Money invariants")
    assert _row(money, "Histories")[1:] == ["500", "100"]
    assert _row(money, "Wall time")[1:] == ["90 s", "60 s"]
    assert _row(money, "Final-sale lines")[1:] == ["held after each of 4,000 steps",
                                                   "held after each of 800 steps"]


def test_the_rest_of_the_document_is_kept(rendered: str):
    assert "python scripts/reliability_report.py --run" in rendered
    assert "## What these tests do not cover" in rendered
    assert "Power loss and the disk's honesty" in rendered


def test_the_command_line_renders_a_log(tmp_path: Path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in _lines()))
    out = tmp_path / "RELIABILITY.md"
    assert report.main(["--log", str(log), "--out", str(out)]) == 0
    assert "| Crash matrix" in out.read_text()
    with pytest.raises(SystemExit) as exc:
        report.main(["--help"])
    assert exc.value.code == 0 and "--log" in capsys.readouterr().out


def test_a_record_names_the_backend_of_a_test_without_one(tmp_path: Path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("REFUND_AGENT_RELIABILITY_LOG", str(log))
    record("edges", case="x", tracebacks=0)
    record("many_hosts", backend="postgresql", hosts=3)
    assert [json.loads(line)["backend"] for line in log.read_text().splitlines()] == [
        "sqlite", "postgresql"]


@pytest.mark.parametrize("backend", ["postgresql"])   # stands for the conftest fixture's param
def test_a_record_names_the_backend_the_test_runs_on(backend: str, tmp_path: Path,
                                                     monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("REFUND_AGENT_RELIABILITY_LOG", str(log))
    record("races", case="x", rounds=1)
    assert json.loads(log.read_text())["backend"] == "postgresql"


def test_the_report_runs_every_test_file_that_writes_to_its_log():
    """``--run`` runs the files in FILES: each must exist (a moved one used to be skipped with
    a line on stderr, and the report then failed on an empty log), and every test file that
    records cases for the report must be among them."""
    tests = PROJECT_ROOT / "tests"
    assert [f for f in report.FILES if not (tests / f).is_file()] == []
    recording = {str(path.relative_to(tests)) for path in tests.rglob("test_*.py")
                 if path.parent.name != "docs" and _imports_record(path)}
    assert len(recording) >= 13, recording   # the finder finds them (multi-line imports too)
    assert recording - set(report.FILES) == set()
    assert report.MONEY_FILE in report.FILES


def _imports_record(path: Path) -> bool:
    """Whether the test file imports the report's ``record`` from helpers.crash."""
    import ast
    return any(isinstance(node, ast.ImportFrom) and node.module == "helpers.crash"
               and any(alias.name == "record" for alias in node.names)
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
