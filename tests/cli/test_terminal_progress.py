"""Issue 43, 11: on a real terminal `refund-agent eval` redraws its progress line in place
(the escaping stream printed the two characters ``\\r`` instead, ~80 wrapped lines), and
still nothing unescaped from untrusted text reaches the terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.cli import PROJECT_ROOT, cli_env

from refund_agent.cli.output import EscapedStream
from refund_agent.evals.runner import progress_bar

CORPUS = PROJECT_ROOT / "tests" / "corpus"


def small_corpus(folder: Path, how_many: int = 3) -> Path:
    """The test corpus's shop and its first few emails, as `eval --emails` reads them."""
    shutil.copytree(CORPUS / "shop", folder / "shop")
    emails = json.loads((CORPUS / "emails.json").read_text())["emails"][:how_many]
    (folder / "emails.json").write_text(json.dumps({"emails": emails}))
    return folder


def on_a_terminal(args: list[str], env: dict[str, str], timeout: float = 120) -> bytes:
    """Everything a command writes to stdout and stderr, both a pseudo-terminal (so the
    command's streams say they are one, as in a person's shell)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=follower,
                               stderr=follower, env=env, cwd=PROJECT_ROOT)
    os.close(follower)
    seen = bytearray()
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:   # EIO: the command ended and closed its side
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
        process.wait(timeout=timeout)
    assert process.returncode in (0, 1), seen.decode(errors="replace")
    return bytes(seen)


def test_eval_redraws_its_progress_line_on_a_terminal(tmp_path):
    """Old code: the bar's carriage returns came out as the two characters backslash, r."""
    corpus = small_corpus(tmp_path / "corpus")
    shown = on_a_terminal([sys.executable, "-m", "refund_agent", "eval", "--emails",
                           str(corpus)], cli_env(tmp_path / "out"))
    assert b"\\r" not in shown, shown
    assert b"\r[" in shown and b"3/3 runs" in shown, shown
    # The terminal turns each \n into \r\n; every other \r is the bar's redraw.
    assert shown.count(b"\r[") == 3, shown
    # Issue 43, 17: the stand-in's cost per email is labelled as costing nothing.
    assert b"$/email: simulated; the stand-in costs nothing." in shown, shown


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_redraw_escapes_everything_but_its_own_carriage_return():
    terminal = FakeTerminal()
    stream = EscapedStream(terminal)
    stream.write("Customer wrote: \x1b[2J\rApproved by Dana\n")   # untrusted text
    stream.redraw("[##..] 1/2 \x1b[31mruns\r")
    assert terminal.getvalue() == ("Customer wrote: \\x1b[2J\\rApproved by Dana\n"
                                   "\r[##..] 1/2 \\x1b[31mruns\\r")


def test_the_bar_redraws_through_the_escaping_stream_and_a_line_per_tenth_elsewhere():
    terminal = FakeTerminal()
    show = progress_bar(EscapedStream(terminal), width=4)
    for done in (1, 2):
        show(done, 2)
    assert terminal.getvalue() == "\r[##..] 1/2 runs\r[####] 2/2 runs\n"
    piped = io.StringIO()
    show = progress_bar(EscapedStream(piped), width=4)
    for done in (1, 2):
        show(done, 2)
    assert piped.getvalue() == "[##..] 1/2 runs\n[####] 2/2 runs\n"
