"""A throwaway PostgreSQL cluster for the tests: initdb and pg_ctl in a temporary folder.

No system service and no fixed port: the cluster listens on 127.0.0.1 on a free port, lives in a
folder the session deletes, and is stopped when the session ends. Debian's binaries refuse to
run as root, so as root they run as the ``postgres`` user (``runuser``), on a folder it owns.
Where the binaries are missing the PostgreSQL tests skip, saying why; CI installs them.

The crash matrix copies a whole store between steps; on PostgreSQL a copy is ``CREATE DATABASE
... TEMPLATE``, and each output folder gets its own database, named after the folder (see
:class:`Backend`).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN_GLOBS = ("/usr/lib/postgresql/*/bin",)


def find_bin() -> Path | None:
    """The folder holding initdb and pg_ctl, newest version first, or None."""
    for pattern in PG_BIN_GLOBS:
        for folder in sorted(glob.glob(pattern), reverse=True):
            if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
                return Path(folder)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """One PostgreSQL server in a temporary folder, for one test session.

    ``durable``: keep the server's own defaults (fsync and full-page writes on), as a benchmark
    that times commits wants; the tests turn both off, since they never crash the server.
    """

    def __init__(self, bin_dir: Path, durable: bool = False, options: str = "") -> None:
        self.bin = bin_dir
        self.durable = durable
        self.options = options   # more server settings, e.g. a small lock table
        self.root = Path(tempfile.mkdtemp(prefix="refund-agent-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        self._admin = None

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              cwd=self.root)

    def start(self) -> Cluster:
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
            os.chmod(self.root, 0o700)
        init = self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                         "-E", "UTF8", "--no-sync", "--no-instructions")
        if init.returncode:
            raise RuntimeError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
        # fsync off: the tests kill clients, never this server, and it is deleted afterwards.
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} "
                   f"-c unix_socket_directories={self.root} -c max_connections=200")
        if not self.durable:
            options += " -c fsync=off -c full_page_writes=off"
        options += f" {self.options}"
        started = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"),
                            "-o", options, "-w", "-t", "60", "start")
        if started.returncode:
            log = (self.root / "log").read_text() if (self.root / "log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed:\n{started.stderr}\n{log}")
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        """Run one statement on the maintenance database (CREATE/DROP DATABASE)."""
        import psycopg
        with psycopg.connect(self.url(), autocommit=True) as conn:
            for attempt in range(50):
                try:
                    conn.execute(sql)
                    return
                except psycopg.errors.ObjectInUse:
                    # A process that just exited may still be leaving the source database.
                    if attempt == 49:
                        raise
                    time.sleep(0.1)

    def create(self, name: str, template: str | None = None) -> str:
        """A new empty database (or a copy of ``template``); returns its URL."""
        extra = f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else ""
        self.admin(f'CREATE DATABASE "{name}"{extra}')
        return self.url(name)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def database_for(output: Path) -> str:
    """The database that stands beside an output folder (a name PostgreSQL accepts)."""
    return "t_" + hashlib.sha1(str(Path(output).resolve()).encode()).hexdigest()[:20]


class Backend:
    """Where a test's store lives: "sqlite" (the output folder) or "postgresql" (a database
    of the session's cluster, one per output folder)."""

    def __init__(self, name: str, cluster: Cluster | None = None) -> None:
        self.name = name
        self.cluster = cluster

    @property
    def postgres(self) -> bool:
        return self.cluster is not None

    def url(self, output: Path) -> str:
        assert self.cluster is not None
        return self.cluster.url(database_for(output))

    def prepare(self, output: Path) -> dict[str, str]:
        """Make the store for a new output folder; returns the environment that selects it."""
        if self.cluster is None:
            return {}
        self.cluster.create(database_for(output))
        return self.env(output)

    def env(self, output: Path) -> dict[str, str]:
        return {"REFUND_AGENT_DATABASE_URL": self.url(output)} if self.cluster else {}

    def copy(self, src: Path, dst: Path) -> None:
        """Copy the store of ``src`` to stand beside ``dst`` (the folder itself is copied by
        the caller)."""
        if self.cluster is not None:
            self.cluster.create(database_for(dst), template=database_for(src))

    def target(self, output: Path) -> Path | str:
        """What Store() opens for this output folder."""
        return self.url(output) if self.cluster else Path(output) / "refund-agent.sqlite3"
