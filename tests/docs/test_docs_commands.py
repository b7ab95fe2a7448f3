"""The docs name only commands, flags and settings that exist.

A reader copies a command from README.md or docs/*.md and expects it to run. These checks read
the docs' code (fenced ``bash``/``sh`` blocks and inline code spans) and hold each
``refund-agent`` / ``./dev cli`` command against the real argparse parser, each
``python -m offline_model`` command against the stand-in's parser, and each
``REFUND_AGENT_*``, ``STRIPE_*`` and ``SMTP_*`` setting against the code. They read files and
build parsers only: no process, no server (bar one loopback socket), well under a second.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from offline_model import __main__ as offline_main
from offline_model.server import OfflineServer
from refund_agent.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *(f"docs/{name}.md" for name in (
    "TOUR", "CONFIGURATION", "MANY-MACHINES", "PROVIDERS", "HOW-IT-WORKS", "OFFLINE-MODEL",
    "DESK", "OUTSIDE-SYSTEMS", "TESTING", "RELIABILITY", "EVAL", "TELEMETRY"))]
# Where settings are documented for users: every one the package reads is in one of these.
SETTINGS_DOCS = ["docs/CONFIGURATION.md", "docs/OUTSIDE-SYSTEMS.md"]
SETTING = re.compile(r"\b(?:REFUND_AGENT|STRIPE|SMTP)_[A-Z0-9_]*[A-Z0-9]\b")
# The command, not the package (`pip install 'refund-agent[stripe]'`).
CLI = re.compile(r"(?:\brefund-agent(?![\[\w-])|\./dev cli\b|python -m refund_agent(?![.\w]))")
OFFLINE = re.compile(r"python -m offline_model\b")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")   # a command substitution, not nested


def _code(doc: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """A doc's shell lines (fenced bash/sh blocks) and its inline code spans, with line numbers."""
    text = (ROOT / doc).read_text()
    shell, spans = [], []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(2)) + 1
        lines = list(enumerate(block.group(2).splitlines()))
        if block.group(1) == "console":   # "$ " starts a command; the rest is its output
            shell += [(first + i, line[2:]) for i, line in lines if line.startswith("$ ")]
        elif block.group(1) in ("bash", "sh", "shell"):
            shell += [(first + i, line) for i, line in lines]
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for number, line in enumerate(prose.splitlines(), 1):
        spans += [(number, m.group(1)) for m in SPAN.finditer(line)]
    return shell, spans


def _commands(line: str, start: re.Pattern[str]) -> list[tuple[int, list[str]]]:
    """The argument lists of the commands ``start`` begins in a line of shell.

    ``queue | runs | show RUN_ID`` (the docs' shorthand for several commands) gives one list
    per piece, each with its place after the first (0, 1, ...): a later piece is a command of
    ours only when it starts with a subcommand's name (``| head -1`` is another program).
    """
    found = []
    for match in start.finditer(line):
        rest = line[match.end():].split("#", 1)[0]
        rest = re.split(r"\s&&|\s&\s|\s&$|;", rest, maxsplit=1)[0]
        pieces = rest.split("|")
        for index, piece in enumerate(pieces):
            piece = piece.replace("[", "").replace("]", "").strip()
            try:
                words = shlex.split(piece)
            except ValueError:
                words = piece.split()
            if index == 0 or words:
                found.append((index, words))
    return found


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _where(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser a command's words reach (``users add`` -> its own) and the words it takes."""
    parser, rest = build_parser(), list(words)
    while rest and rest[0].rstrip(":,.") in _subcommands(parser):
        parser = _subcommands(parser)[rest.pop(0).rstrip(":,.")]
    return parser, rest


def _parse(parser: argparse.ArgumentParser, words: list[str]) -> str:
    """'' when argparse takes the words, else its complaint."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(words)
        except SystemExit as stop:
            return err.getvalue().strip().splitlines()[-1] if stop.code else ""
    return ""


def _unnested(line: str) -> list[str]:
    """A line with each ``"$(...)"`` in it a word of its own (``SUBSTITUTED``), then the
    commands those ran: ``show "$(./dev cli runs ...)"`` is two commands of ours."""
    inner = SUBSTITUTION.findall(line)
    outer = re.sub(r"\"?\$\([^()]*\)\"?", "SUBSTITUTED", line)
    return [outer, *inner]


def _cli_commands(kind: str) -> list[tuple[str, list[str]]]:
    out = []
    for doc in DOCS:
        shell, spans = _code(doc)
        for number, whole in shell if kind == "shell" else spans:
            for line in _unnested(whole):
                out += [(f"{doc}:{number}", words) for index, words in _commands(line, CLI)
                        if index == 0 or words[0] in _subcommands(build_parser())]
    return out


def test_every_command_in_a_shell_block_parses():
    """A command a reader copies from a ``bash`` block is taken by the real parser as it is."""
    parser = build_parser()
    top = _subcommands(parser)
    wrong = []
    for where, words in _cli_commands("shell"):
        if words and not words[0].startswith("-") and words[0] not in top:
            wrong.append(f"{where}: no subcommand {words[0]!r} in {shlex.join(words)}")
            continue
        complaint = _parse(parser, words)
        if complaint:
            wrong.append(f"{where}: refund-agent {shlex.join(words)}: {complaint}")
    assert not wrong, "\n".join(wrong)


def test_every_command_named_inline_exists_with_its_flags():
    """An inline `refund-agent users add ... --role` names a real subcommand and real flags."""
    wrong = []
    for where, words in _cli_commands("spans"):
        parser, rest = _where(words)
        for word in rest:
            flag = word.split("=", 1)[0]
            if flag.startswith("--") and flag not in _flags(parser):
                wrong.append(f"{where}: {parser.prog} has no {flag} ({shlex.join(words)})")
    assert not wrong, "\n".join(wrong)


def test_every_offline_server_command_parses():
    """``python -m offline_model --port ... --state ...`` as the docs write it."""
    wrong, seen = [], 0
    for doc in DOCS:
        shell, spans = _code(doc)
        for number, line in shell + spans:
            for _, words in _commands(line, OFFLINE)[:1]:
                seen += 1
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    try:
                        offline_main.parse_args(words)
                    except SystemExit:
                        wrong.append(f"{doc}:{number}: {shlex.join(words)}: {err.getvalue()}")
    assert seen >= 3 and not wrong, "\n".join(wrong)


def _literals(folders: list[str]) -> set[str]:
    """Every setting name that appears in quotes in the Python files under ``folders``."""
    names: set[str] = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(re.findall(r"[\"']((?:REFUND_AGENT|STRIPE|SMTP)_[A-Z0-9_]*[A-Z0-9])[\"']",
                                    path.read_text()))
    return names


def test_every_setting_the_docs_name_is_read_somewhere():
    """A setting a reader sets (REFUND_AGENT_*, STRIPE_*, SMTP_*) is one the code reads."""
    read = _literals(["refund_agent", "tests", "bench"])
    wrong = sorted({f"{doc}: {name}" for doc in DOCS
                    for name in SETTING.findall((ROOT / doc).read_text()) if name not in read})
    assert not wrong, "named in the docs but read nowhere:\n" + "\n".join(wrong)


def test_every_setting_the_package_reads_is_documented():
    """What refund_agent/ reads from the environment is in CONFIGURATION or OUTSIDE-SYSTEMS."""
    documented = {name for doc in SETTINGS_DOCS
                  for name in SETTING.findall((ROOT / doc).read_text())}
    missing = sorted(_literals(["refund_agent"]) - documented)
    assert not missing, f"read by refund_agent/ but in neither {SETTINGS_DOCS}: {missing}"


def _outside_address() -> str | None:
    """An IPv4 address of this machine other than loopback, if it has one."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))   # TEST-NET-1: no packet is sent for a UDP connect
        address = probe.getsockname()[0]
        if not address.startswith("127."):
            return address
    return None


def test_the_shared_stand_in_listens_where_other_hosts_can_reach_it(tmp_path):
    """MANY-MACHINES.md: one stand-in every host reaches. ``--host 0.0.0.0`` binds every
    interface (loopback stays the default), and its base URL still works on this machine."""
    assert offline_main.parse_args([]).host == "127.0.0.1"
    args = offline_main.parse_args(["--host", "0.0.0.0", "--port", "0"])
    shared = OfflineServer(tmp_path / "state.sqlite3", host=args.host, port=args.port)
    with shared.start() as server:
        assert server._httpd.server_address[0] == "0.0.0.0"
        port = server._httpd.server_address[1]
        assert httpx.get(f"{server.base_url}/responses/nope").status_code == 404
        outside = _outside_address()
        if outside is None:
            pytest.skip("this machine has no address but loopback")
        assert httpx.get(f"http://{outside}:{port}/v1/responses/nope").status_code == 404


PATH_SPAN = re.compile(
    r"`((?:tests|bench|refund_agent|notebooks|data|docs|scripts)/[\w./*-]*?)(?:::(\w+))?`")
TEST_SPAN = re.compile(r"`(?:::)?(test_\w+)`")


def test_every_file_and_test_the_docs_name_exists():
    """`tests/test_x.py::test_y`, `refund_agent/store/schema.py`, a bare `test_y`: all there."""
    defined = {name for path in (ROOT / "tests").rglob("*.py")
               for name in re.findall(r"def (test_\w+)", path.read_text())}
    wrong = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for match in PATH_SPAN.finditer(text):
            path, name = match.group(1).rstrip("/"), match.group(2)
            if not (any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
                wrong.append(f"{doc}: no file {path}")
            if name and name not in defined:
                wrong.append(f"{doc}: no test {name} (in {path})")
        wrong += [f"{doc}: no test {name}" for name in TEST_SPAN.findall(text)
                  if name not in defined]
    assert not wrong, "\n".join(wrong)


# -- README lines a person pastes ---------------------------------------------------------------

# Words that join or end commands in a line of shell, as shlex splits them with punctuation.
_JOINERS = {"|", "||", "&&", ";", "&", "(", ")"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a line of shell, as bash would run them: split at pipes, ``&&``,
    ``;`` and the like, with each ``$(...)`` inside a word a command of its own, and leading
    ``NAME=value`` assignments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.commenters = "#"
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in _JOINERS:
            commands.append([])
            continue
        for inner in SUBSTITUTION.findall(token):
            commands += _simple_commands(inner)
        if commands[-1] or not _ASSIGNMENT.match(token):
            commands[-1].append(token)
    return [words for words in commands if words]


def _dev_subcommands() -> set[str]:
    """The subcommands ``./dev`` runs: the labels of its second ``case`` (the dispatch)."""
    labels = re.findall(r"^  ([\w|-]+)\)", (ROOT / "dev").read_text(), re.M)
    return {name for label in labels for name in label.split("|")}


def _runnable(word: str) -> bool:
    """A command name bash finds: a file of the checkout, a builtin or a program on PATH (with
    the project's .venv/bin first, where `./dev` puts refund-agent and python)."""
    if "/" in word:
        return (ROOT / word).is_file()
    path = f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"
    found = subprocess.run(["bash", "-c", 'type -t -- "$1"', "bash", word], text=True,
                           capture_output=True, env={**os.environ, "PATH": path})
    return found.returncode == 0


def _readme_shell_lines() -> list[tuple[int, str]]:
    shell, _ = _code("README.md")
    return [(number, line) for number, line in shell if line.split("#", 1)[0].strip()]


def test_every_readme_shell_line_runs_as_pasted():
    """Each line of a README ``bash`` block is valid bash on its own, every command it runs
    exists, ``./dev X`` is a subcommand of ./dev and ``./dev cli X`` one of refund-agent's
    (``./dev cli queue | runs`` pasted once ran ``runs`` as a program of its own)."""
    top = _subcommands(build_parser())
    dev = _dev_subcommands()
    assert {"web", "test", "cli", "lab"} <= dev, dev
    wrong = []
    for number, line in _readme_shell_lines():
        syntax = subprocess.run(["bash", "-n", "-c", line], text=True, capture_output=True)
        if syntax.returncode:
            wrong.append(f"README.md:{number}: not bash: {syntax.stderr.strip()}")
            continue
        for words in _simple_commands(line):
            if not _runnable(words[0]):
                wrong.append(f"README.md:{number}: no command {words[0]!r} ({line.strip()})")
            elif words[0] == "./dev" and len(words) > 1 and words[1] not in dev:
                wrong.append(f"README.md:{number}: ./dev has no {words[1]!r}")
            elif words[:2] == ["./dev", "cli"] and len(words) > 2 and not (
                    words[2] in top or words[2].startswith("-")):
                wrong.append(f"README.md:{number}: refund-agent has no {words[2]!r}")
    assert not wrong, "\n".join(wrong)


def test_a_placeholder_in_a_readme_command_says_where_it_comes_from():
    """A README line names no ``RUN_ID``-style placeholder a reader must replace: pasted, it
    would run with the placeholder itself."""
    wrong = [f"README.md:{number}: {line.strip()}" for number, line in _readme_shell_lines()
             if re.search(r"\b[A-Z][A-Z0-9]*_(?:ID|NAME)\b", line.split("#", 1)[0])]
    assert not wrong, "placeholders in lines a reader pastes:\n" + "\n".join(wrong)
