"""The two listeners that face other machines, under more connections than the process may
hold, and the SMTP listener's login under a guessing machine (issue 43, items 7 and 8).

Each listener runs as ``refund-agent`` does (a real process), with its open-file limit
(RLIMIT_NOFILE) lowered in the child so that a test can open more connections than the
process could hold. Before: each new connection past the limit made asyncio or Tornado log a
traceback, thousands a second, and the extra clients hung unanswered. Now each listener holds
at most its cap of connections (REFUND_AGENT_MAX_CONNECTIONS, by default derived from the
limit), answers the rest at once (SMTP 421, HTTP 503) and says so in one line per minute.

The login's throttle is the desk's (desk/accounts.py): its state is read from the store, and
its waits are passed by moving the recorded failures back in time, never by sleeping.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import resource
import smtplib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.cli import PROJECT_ROOT, cli_env
from helpers.mail import DESK, MAYA, deliver, mail
from helpers.outside_servers import free_port, wait_for

pytest.importorskip("aiosmtpd")

from refund_agent.desk.records import DeskStore  # noqa: E402

# The open-file limit the listeners run under here, and how many connections the test opens:
# well past the limit, so that without a cap the process runs out of descriptors.
OPEN_FILES = 256
CONNECTIONS = 320
SECRET = "whsec_test_limits"


def lowered_limit() -> None:
    """In the child, before it starts: a small open-file limit."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


@contextmanager
def command(out: Path, *args: str, **env: str) -> Iterator[subprocess.Popen]:
    """``refund-agent ARGS`` as a real process under the lowered open-file limit, its
    output (stdout and stderr) read when the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "refund_agent", *args],
                            env=cli_env(out, **env), cwd=PROJECT_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lowered_limit)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def many_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections to ``port``, opened at once and closed when the block ends."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        yield socks
    finally:
        for sock in socks:
            sock.close()


def until_silent(socks: list[socket.socket], ask) -> list:
    """``ask(sock)`` for each socket in turn, stopping after the first that got no answer
    (the ones after it would only wait as long again)."""
    answers = []
    for sock in socks:
        answers.append(ask(sock))
        if "no answer" in str(answers[-1]):
            break
    return answers


def once_room(attempt):
    """``attempt()``'s result once it is not refused: the listener learns that the held
    connections closed only as it reads their ends, a moment after the client closed them."""
    for _ in range(100):
        try:
            return attempt()
        except (smtplib.SMTPConnectError, Refused):
            time.sleep(0.1)
    raise AssertionError("still refused long after the held connections closed")


class Refused(Exception):
    pass


def first_line(sock: socket.socket) -> str:
    """What the server says first on ``sock`` (its greeting or refusal), or why nothing."""
    data = b""
    try:
        while b"\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as exc:   # a timeout: the server never answered this one
        return f"no answer ({type(exc).__name__})"
    return data.decode("utf-8", "replace").split("\n")[0].strip() or "closed unanswered"


def faults(log: str, listener: str) -> list[str]:
    """The listener's fault lines (a refusal, an accept the system refused) in ``log``."""
    return [line for line in log.splitlines()
            if listener in line and (" refused " in line or "could not" in line)]


def cap_said(log: str) -> int:
    """The cap the listener's fault line names."""
    return int(re.search(r"holds at most (\d+) at once", log).group(1))


# -- item 7: connections past the cap are refused cleanly, in one line a minute ------------------

def test_smtp_listener_refuses_connections_past_its_cap_with_421(tmp_path):
    """Before: the extra connections were never greeted (the process had no descriptor left
    to accept them with) and the log filled with tracebacks ("socket.accept() out of system
    resource"). Now: the first ones are greeted, the others get 421 and are closed; a client
    that comes once they closed delivers its message; the log has one fault line."""
    out, port = tmp_path / "out", free_port()
    with command(out, "receive", "--smtp", f"127.0.0.1:{port}", "--no-work") as proc:
        wait_for(port, proc, "refund-agent receive --smtp")
        with many_connections(port, CONNECTIONS) as socks:
            answers = until_silent(socks, first_line)
        codes = sorted({a.split(" ", 1)[0] for a in answers})
        assert codes == ["220", "421"], sorted(set(answers))[:5]
        greeted = sum(a.startswith("220") for a in answers)
        once_room(lambda: deliver(port, mail()))   # the held ones closed: a client gets in
        store = DeskStore(out / "refund-agent.sqlite3")
        assert [m.message_id for m in store.mail()] == ["<first@maya.example>"]
        store.close()
    log = proc.stdout.read()
    assert "Traceback" not in log, log[:2000]
    assert 1 <= len(faults(log, "The SMTP listener")) <= 3, log[-2000:]
    # The cap is below the limit; one more may be greeted as wait_for's probe closes.
    assert greeted <= cap_said(log) + 1 and cap_said(log) < OPEN_FILES


def webhook_request(body: bytes) -> bytes:
    at = int(time.time())
    mac = hmac.new(SECRET.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    head = ("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Stripe-Signature: t={at},v1={mac}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


def http_status(sock: socket.socket, data: bytes) -> tuple[int, str]:
    """Send ``data`` on ``sock``; the status and message of the answer (0: none)."""
    import http.client

    try:
        sock.sendall(data)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, json.loads(answer.read())["message"]
    except (OSError, http.client.HTTPException) as exc:
        return 0, f"no answer ({type(exc).__name__})"


def test_webhook_server_refuses_connections_past_its_cap_with_503(tmp_path):
    """Before: past the limit Tornado's accept raised "Too many open files" on every turn of
    the loop (a traceback each, the CPU busy) and the extra clients hung. Now: held
    connections up to the cap, a 503 in one line for the others, one fault line, and a
    delivery once they closed is answered."""
    pytest.importorskip("stripe")
    out, port = tmp_path / "out", free_port()
    ignored = json.dumps({"id": "evt_later", "object": "event", "type": "charge.succeeded",
                          "created": int(time.time()), "data": {"object": {}}}).encode()
    with command(out, "webhooks", "--port", str(port), STRIPE_WEBHOOK_SECRET=SECRET) as proc:
        wait_for(port, proc, "refund-agent webhooks")
        with many_connections(port, CONNECTIONS) as socks:
            answers = until_silent(
                socks, lambda sock: http_status(sock, webhook_request(ignored)))
        statuses = sorted({status for status, _ in answers})
        assert statuses == [200, 503], sorted(set(answers))[:5]
        assert all("too many connections" in m.lower() for s, m in answers if s == 503)

        def post() -> int:
            with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
                status = http_status(sock, webhook_request(ignored))[0]
            if status == 503:
                raise Refused
            return status

        assert once_room(post) == 200   # the held ones closed: a delivery gets in
    log = proc.stdout.read()
    assert "Traceback" not in log, log[:2000]
    assert 1 <= len(faults(log, "The webhook server")) <= 3, log[-2000:]
    assert cap_said(log) < OPEN_FILES


# -- item 8: the SMTP login's throttle ----------------------------------------------------------

LISTENER_USER, LISTENER_PASSWORD = "mta", "listener pass 7f3a"


def auth_plain(client: smtplib.SMTP, user: str, password: str) -> int:
    """One AUTH PLAIN on ``client``: the server's code (one try, unlike smtplib's login,
    which tries every mechanism the server offers)."""
    token = base64.b64encode(f"\0{user}\0{password}".encode()).decode()
    return client.docmd("AUTH", f"PLAIN {token}")[0]


def backdate(out: Path, seconds: float) -> None:
    """Move every recorded failed login ``seconds`` into the past: the wait they imposed is
    over without the test sleeping through it."""
    store = DeskStore(out / "refund-agent.sqlite3")
    store.execute("UPDATE sign_in_failures SET at = at - ?", (seconds,))
    store.close()


def test_smtp_logins_are_throttled_per_name_as_the_desk_sign_in_is(tmp_path):
    """Before: every wrong password was answered 535 at once, as many a second as a client
    could send, and nothing was counted or audited. Now each wrong password for a name (past
    the first three) makes that name wait twice as long before its password is checked again
    (454 meanwhile, unchecked and uncounted), audited by whose name it slowed; the listener's
    own login, tried by its real user at the same time, is never slowed."""
    out, port = tmp_path / "out", free_port()
    with command(out, "receive", "--smtp", f"127.0.0.1:{port}", "--no-work",
                 REFUND_AGENT_RECEIVE_USER=LISTENER_USER,
                 REFUND_AGENT_RECEIVE_PASSWORD=LISTENER_PASSWORD) as proc:
        wait_for(port, proc, "refund-agent receive --smtp")
        codes = []
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as guesser:
            guesser.ehlo()
            for _ in range(3):   # free
                codes.append(auth_plain(guesser, "postmaster", "guess"))
            for _ in range(200):   # a guessing machine: all refused unchecked, none counted
                codes.append(auth_plain(guesser, "postmaster", "guess"))
            counted = []
            for delay in (2, 4, 8, 16):   # each wait passed: one more checked guess, then a
                backdate(out, delay + 1)   # longer wait
                codes.append(auth_plain(guesser, "postmaster", "guess"))
                codes.append(auth_plain(guesser, "postmaster", "guess"))
                store = DeskStore(out / "refund-agent.sqlite3")
                counted.append(sum(e.event == "sign_in_failed" for e in store.audit()))
                store.close()
            # Meanwhile the real sender logs in at once and delivers.
            with smtplib.SMTP("127.0.0.1", port, timeout=30) as sender:
                sender.ehlo()
                assert auth_plain(sender, LISTENER_USER, LISTENER_PASSWORD) == 235
                sender.sendmail(MAYA, [DESK], bytes(mail()))
        assert codes[:3] == [535] * 3 and set(codes[3:203]) == {454}
        assert codes[203:] == [535, 454] * 4
        assert counted == [4, 5, 6, 7]   # counted only when checked
        from refund_agent.desk.accounts import SIGN_IN_WINDOW, smtp_logins
        store = DeskStore(out / "refund-agent.sqlite3")
        throttle = smtp_logins(store)
        assert throttle.tries(LISTENER_USER).failures == 0
        assert throttle.tries("postmaster").wait > 0
        slowed = [(e.actor, e.note) for e in store.audit() if e.event == "sign_in_slowed"]
        assert [actor for actor, _ in slowed] == ["postmaster"] * 5
        assert [note.split(" after ")[0] for _, note in slowed] == [
            f"SMTP logins as postmaster wait {s}" for s in ("2 s", "4 s", "8 s", "16 s", "32 s")]
        assert all(note.endswith("(the latest from smtp 127.0.0.1)") for _, note in slowed)
        failed = [e for e in store.audit() if e.event == "sign_in_failed"]
        assert len(failed) == 7 and {e.actor for e in failed} == {"postmaster"}
        # The desk's sign-in is a different door: its throttle does not count these.
        from refund_agent.desk.identity import name_key
        assert store.sign_in_failures(name_key("postmaster"), SIGN_IN_WINDOW)[0] == 0
        assert [m.message_id for m in store.mail()] == ["<first@maya.example>"]
        store.close()
    log = proc.stdout.read()
    assert LISTENER_PASSWORD not in log and "guess" not in log and "Traceback" not in log
    assert "Warning" not in log   # aiosmtpd's AUTH-without-TLS warning, once per connection


# -- the pure parts: the cap, and one line per interval -------------------------------------------

def test_the_cap_is_derived_from_the_limit_and_a_setting_the_limit_cannot_hold_is_refused():
    from refund_agent.errors import ConfigError
    from refund_agent.outside.config import outside_settings
    from refund_agent.outside.listening import connection_cap

    assert connection_cap(1024) == 1024 - 256   # a quarter kept for the rest of the process
    assert connection_cap(128) == 128 - 64       # at least 64
    assert connection_cap(1 << 20) == 1000             # never more by default
    assert connection_cap(256, 50) == 50
    with pytest.raises(ConfigError, match="REFUND_AGENT_MAX_CONNECTIONS is 500, but with an "
                                          "open-file limit of 256"):
        connection_cap(256, 500)
    with pytest.raises(ConfigError, match="too low to listen"):
        connection_cap(64)
    assert outside_settings({"REFUND_AGENT_MAX_CONNECTIONS": "40"}).max_connections == 40
    with pytest.raises(ConfigError, match="must be a whole number above 0"):
        outside_settings({"REFUND_AGENT_MAX_CONNECTIONS": "lots"})


def test_refusals_are_said_once_per_interval_with_how_many():
    from refund_agent.outside.listening import Gate

    lines: list[str] = []
    now = [0.0]
    gate = Gate("The SMTP listener", 2, lines.append, every=60.0, clock=lambda: now[0])
    assert [gate.enter() for _ in range(1000)] == [True, True] + [False] * 998
    assert len(lines) == 1 and lines[0].startswith("The SMTP listener refused 1 connection:")
    now[0] = 61.0
    assert not gate.enter()
    assert len(lines) == 2 and "refused 998 connections in the last 1 min" in lines[1]
    gate.leave()
    assert gate.enter() and len(lines) == 2   # room again: taken, nothing said
    gate.out_of_files(OSError(24, "Too many open files"))
    assert "could not accept 1 connection: Too many open files" in lines[2]


def test_a_login_name_is_made_fit_for_the_audit():
    from refund_agent.outside.mailin.smtp import login_name

    assert login_name(b"post\x1b[2Jmaster\r\n  x") == "post [2Jmaster x"
    assert login_name("Dana Kím".encode()) == "Dana Kím"
    assert login_name(b"\xff" * 200) == "\ufffd" * 64
