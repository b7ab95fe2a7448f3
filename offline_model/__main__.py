"""Run the offline Responses API server in the foreground.

Usage::

    python -m offline_model --port 8787 --state /tmp/offline.sqlite3 --latency 1.5
    python -m offline_model --host 0.0.0.0 --port 8787   # one stand-in for several hosts
    python -m offline_model --rate-limit 60/min           # 429s past 60 requests a minute

Its state (the responses it stored) goes where the refund agent keeps everything else: the
output folder, ``$REFUND_AGENT_OUTPUT`` or ``./output``, unless ``--state`` says otherwise.

Prints the base URL to pass as ``base_url`` to ``openai.OpenAI``; Ctrl+C (or
SIGTERM) stops it cleanly.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from .pacing import parse_rate
from .server import FAULTS_ENV, KNOWN_FAULTS, RATE_LIMIT_ENV, OfflineServer

# The file's name in the output folder: the one each refund agent process's own stand-in keeps
# there, so a run started on either continues on the other (the store is made to be shared by
# processes: WAL, and the key that seals reasoning kept in it).
STATE_NAME = "offline-model.sqlite3"


def default_state() -> Path:
    """``$REFUND_AGENT_OUTPUT/offline-model.sqlite3``, else under ``./output``: the
    output folder the refund agent uses (read from the environment here, as this package
    imports nothing from the agent), never the system's temp folder, which other users of the
    machine share and which is emptied at boot."""
    folder = os.environ.get("REFUND_AGENT_OUTPUT", "").strip()
    return (Path(folder) if folder else Path.cwd() / "output") / STATE_NAME


def _port(raw: str) -> int:
    """A TCP port, 0 (a free one) to 65535, or a usage error naming what is allowed."""
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65_535:
        raise argparse.ArgumentTypeError(
            f"must be a port from 0 (a free one) to 65535, got {raw!r}")
    return port


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m offline_model",
        description="Serve a local stand-in for the xAI/OpenAI Responses API (on 127.0.0.1 "
        "unless --host says otherwise).",
    )
    parser.add_argument(
        "--port", type=_port, default=0, help="port to listen on (default: 0, a free port)"
    )
    # Loopback by default: the stand-in has no keys or accounts. A shared one for several hosts
    # (REFUND_AGENT_OFFLINE_URL) must listen where they can reach it, on a trusted network.
    parser.add_argument(
        "--host", default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 lets other hosts reach it, "
        "for REFUND_AGENT_OFFLINE_URL on a trusted network)",
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=default_state(),
        help=f"SQLite file for stored responses (default: {default_state()})",
    )
    parser.add_argument(
        "--latency", type=float, default=0.0, help="seconds per reply, spread over streamed deltas"
    )
    parser.add_argument(
        "--faults",
        default=None,
        help=f"comma-separated fault queue, from {sorted(KNOWN_FAULTS)} (default: ${FAULTS_ENV})",
    )
    parser.add_argument(
        "--rate-limit",
        default=os.environ.get(RATE_LIMIT_ENV, "").strip() or None,
        help="answer 429, with the dialect's rate-limit headers, past this pace: 60/min, 10/s, "
        f"600/10min (default: ${RATE_LIMIT_ENV}, else no limit)",
    )
    parser.add_argument(
        "--dialect",
        choices=["xai", "openai"],
        default=None,
        help="the provider it answers like (default: $REFUND_AGENT_OFFLINE_DIALECT, else "
        "$REFUND_AGENT_PROVIDER, else xai)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Starts the server and blocks until interrupted.

    Returns:
        The process exit status.
    """
    args = parse_args(argv)
    if args.rate_limit:
        try:
            parse_rate(args.rate_limit)
        except ValueError as exc:
            print(f"error: --rate-limit: {exc}", file=sys.stderr)
            return 2
    faults = (
        [f.strip() for f in args.faults.split(",") if f.strip()]
        if args.faults is not None
        else None
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # SIGINT explicitly (a shell starts background jobs with it ignored, which would
    # disable KeyboardInterrupt) and SIGTERM so parent processes get a clean shutdown.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        dialect = (args.dialect or os.environ.get("REFUND_AGENT_OFFLINE_DIALECT", "").strip()
                   or os.environ.get("REFUND_AGENT_PROVIDER", "").strip().lower() or None)
        server = OfflineServer(
            args.state, latency=args.latency, faults=faults, port=args.port, dialect=dialect,
            host=args.host, rate_limit=args.rate_limit,
        ).start()
    except OSError as exc:
        # A host that does not resolve, an address not on this machine, a port in use, a state
        # file that cannot be made: one line that says which, never a traceback.
        print(f"error: cannot serve on {args.host}:{args.port} with state {args.state}: "
              f"{exc.strerror or exc}.", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with server:
        # The URL stays the word after " at ", followed by a space: scripts read it from there.
        listening = "" if args.host in ("127.0.0.1", "localhost") else f"listening on {args.host}, "
        print(
            f"Offline Responses API at {server.base_url} ({server.dialect} dialect, {listening}"
            f"{f'rate limit {args.rate_limit}, ' if args.rate_limit else ''}"
            f"state: {args.state}); Ctrl+C to stop.",
            flush=True,
        )
        stop.wait()
    print("Offline server stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
