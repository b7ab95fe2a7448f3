"""``refund-agent`` commands as new processes forked from one warm interpreter.

A ``python -m refund_agent`` process spends about 1.2 s of CPU importing the openai SDK and the
package before it does anything, several times what the command itself costs; the crash matrix
starts four to six such processes per case. This server imports everything once, then forks a
child for every command: each child is a real process of its own (a new pid, no connection,
lease, thread or cache inherited, since the server never opens a store, a socket or a thread),
with the command's own environment, working folder, arguments, standard input (``/dev/null``)
and output files, which runs ``refund_agent.cli.main`` and exits through the interpreter's usual
shutdown. A crash point therefore kills the very process that runs the command with a real
SIGKILL (refund_agent/crash.py), and the caller sees the same return code (-9) and output as from
``subprocess.run``.

Run as ``python -u -m helpers.forkserver`` (tests/ on PYTHONPATH, the project as the working
folder). One JSON request per line on standard input, one JSON answer per line on standard
output: ``{"argv", "env", "cwd", "out", "err", "timeout"}`` -> ``{"rc", "pid", "timed_out"}``.
:class:`ForkServer` is the client side; ``helpers.cli.run_forked`` uses one per test session.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# -- the server ----------------------------------------------------------------------------------

def _preload() -> None:
    """What a command imports, once: the CLI pulls in the agent, the SDK, the store and the
    offline model; psycopg (PostgreSQL stores) and the Stripe adapter (the stripe library, a
    second of imports of its own) only where installed.

    The SDK imports its Responses resource, its stream helpers and the HTTP transport only on
    first use, and builds their pydantic models then: about 0.3 s of CPU that every forked
    ``run`` would otherwise spend again. A client made and closed here loads them without a
    socket or a thread (it connects only when asked to send), as does the stand-in's brain."""
    import encodings.idna  # noqa: F401 (the transport encodes host names with it)

    import openai
    import openai.lib.streaming.responses  # noqa: F401

    import refund_agent.cli  # noqa: F401
    import refund_agent.outside.smtp  # noqa: F401
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pass
    try:
        import refund_agent.outside.stripe  # noqa: F401
    except ImportError:
        pass
    client = openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9/v1", max_retries=0)
    client.responses  # noqa: B018 (the attribute's first read imports the resource)
    client.close()


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's wait status, killing it after ``timeout`` seconds (then ``timed_out``)."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        timed_out = not ready
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return status, timed_out
    finally:
        os.close(fd)


def _child(request: dict[str, Any], protocol: tuple[Any, Any]) -> None:
    """In the forked child: become the command's process, run it, exit as Python would."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for stream in protocol:
        stream.close()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    import refund_agent.cli as cli

    sys.argv = [str(Path(cli.__file__).with_name("__main__.py")), *request["argv"]]
    # As ``python -m refund_agent`` ends: SystemExit through the interpreter's own shutdown
    # (atexit, non-daemon threads joined, streams flushed); an uncaught error prints its
    # traceback and exits 1.
    sys.exit(cli.main(request["argv"]))


def serve() -> None:
    _preload()
    # What the preload made is moved out of the collector's reach (after collecting its
    # garbage): a child's collections, above all the last one as it exits, would otherwise
    # visit every inherited object and so copy nearly every page of the server's memory,
    # about 0.25 s of CPU per command. The child's own objects are collected as usual, and
    # what is frozen lives as long as the process in a fresh interpreter too (the modules).
    gc.collect()
    gc.freeze()
    running: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        # Asked to stop mid-command (the test was interrupted): the command goes too.
        for pid in running:
            os.kill(pid, signal.SIGKILL)
        os._exit(1)

    signal.signal(signal.SIGTERM, stop)
    # The protocol moves off fds 0 and 1, so a child holds no end of it once it closes these.
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    requests = os.fdopen(proto_in, "rb", buffering=0)
    answers = os.fdopen(proto_out, "wb", buffering=0)
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = requests.read(65536)
            if not chunk:
                return
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        request = json.loads(line)
        # A fork copies only the calling thread: with another thread alive (none is ever
        # started here) a child could inherit a lock held forever.
        assert threading.active_count() == 1, threading.enumerate()
        pid = os.fork()
        if pid == 0:
            _child(request, (requests, answers))
        running.append(pid)
        status, timed_out = _wait(pid, request["timeout"])
        running.clear()
        answer = {"rc": os.waitstatus_to_exitcode(status), "pid": pid, "timed_out": timed_out}
        answers.write(json.dumps(answer).encode() + b"\n")


# -- the client ----------------------------------------------------------------------------------

class ForkServer:
    """One warm server process, started on first use; commands run one at a time."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._tmp = Path(tempfile.mkdtemp(prefix="refund-agent-forkserver-"))
        self._count = 0

    def _server(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(PROJECT_ROOT / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])])}
            env.pop("REFUND_AGENT_CRASH_AT", None)
            self._proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "helpers.forkserver"], cwd=PROJECT_ROOT, env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return self._proc

    def fits(self, env: dict[str, str]) -> bool:
        """Whether a command with this environment can be forked from the server: its
        interpreter settings (``PYTHON*``, read at start-up) are the server's, and no other
        command is running now."""
        def python(e: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in e.items()
                    if k.startswith("PYTHON") and k != "PYTHONUNBUFFERED"}
        return python(env) == python(dict(os.environ)) and not self._lock.locked()

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
            ) -> subprocess.CompletedProcess[str]:
        """Like ``subprocess.run([python, -m, refund_agent, *argv], capture_output=True,
        text=True, timeout=timeout, env=env, cwd=cwd)``, in a forked process."""
        with self._lock:
            self._count += 1
            out, err = self._tmp / f"{self._count}.out", self._tmp / f"{self._count}.err"
            proc = self._server()
            request = {"argv": argv, "env": env, "cwd": str(cwd), "out": str(out),
                       "err": str(err), "timeout": timeout}
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(request).encode() + b"\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except BaseException:
                # Interrupted between a request and its answer (a test's timeout, Ctrl+C): the
                # answer would be read as the next command's, so this server goes.
                self._stop(kill=True)
                raise
            if not line:
                raise RuntimeError(f"the fork server ended (exit {proc.wait()})")
            answer = json.loads(line)
            stdout = out.read_text(errors="replace")
            stderr = err.read_text(errors="replace")
            out.unlink()
            err.unlink()
        args = [sys.executable, "-m", "refund_agent", *argv]
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(args, timeout, stdout, stderr)
        return subprocess.CompletedProcess(args, answer["rc"], stdout, stderr)

    def _stop(self, kill: bool = False) -> None:
        """End the server: its input closed (it ends after the command it runs), or killed."""
        if self._proc is None:
            return
        assert self._proc.stdin is not None
        if kill:
            self._proc.terminate()
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def close(self) -> None:
        self._stop()
        for path in self._tmp.glob("*"):
            path.unlink()
        self._tmp.rmdir()


if __name__ == "__main__":
    serve()
