"""Power-loss crash states built from the file operations the store really made.

A process killed with ``kill -9`` loses nothing the kernel already has; a power cut loses what
never reached the disk. This module records what a scenario's processes write (``strace``), and
builds the disk states a power loss at any point of that recording could leave, after the work
on application-level crash consistency (ALICE, "All File Systems Are Not Created Equal", OSDI
2014; Jepsen's LazyFS).

The disk model (documented here because every verdict depends on it):

* What a file held when it was last ``fsync``/``fdatasync``-ed survives. Both are taken to
  persist the file's data and size (Linux's fdatasync persists the size when the data needs it).
* The writes and truncations made to a file after its last sync survive as any prefix of them,
  in the order they were made; the last one kept may be torn at a 512-byte sector boundary (its
  bytes up to some sector boundary inside it reached the disk, the rest did not). Each file's
  prefix is chosen independently, so one file may keep later writes while another loses earlier
  ones (reordering *across* files is covered; reordering *within* a file is not).
* Creations, renames and unlinks in a directory survive once that directory is fsynced (SQLite
  does this when it first syncs a new WAL or journal); those made after its last sync survive as
  any prefix of them, in order. A file whose creation is lost is gone, even if its data was
  fsynced; a file whose unlink is lost is back, with whatever of its data survived.
* The outside systems (the payment and email stand-ins' JSONL logs and their key indexes, the
  offline model provider's database) do not lose power with us: a remote provider keeps what it
  accepted. They are rebuilt exactly as they were at the moment of the crash.
* SQLite's ``-shm`` wal-index is shared memory (``mmap``), invisible to ``strace`` and never
  synced; after a power loss the first connection rebuilds it from the WAL, so it is left out of
  every crash state (a stale one on disk is reset by SQLite before use).

Not covered: reordering of writes within one file (a later sector of a file reaching the disk
before an earlier one that was written before it), torn writes that are not a prefix of their
sectors, ext4 ``data=ordered`` or ``auto_da_alloc`` specifics (this model is weaker than ext4,
so what passes here passes there), lying disks that drop fsynced data, and writes through
``mmap``.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SECTOR = 512

# The system calls the recorder asks strace for: everything that changes a file or its name.
TRACED = ("open,openat,creat,write,pwrite64,writev,pwritev,lseek,ftruncate,truncate,fsync,"
          "fdatasync,rename,renameat,renameat2,unlink,unlinkat,close")

DB_NAME = "refund-agent.sqlite3"


def is_local(name: str) -> bool:
    """Files that live on this machine's disk and lose power with it: the store and its WAL
    and rollback journal. Everything else in the output folder belongs to an outside system."""
    return name.startswith(DB_NAME)


def is_ignored(name: str) -> bool:
    """Shared-memory files: mmap'd, rebuilt by SQLite after a power loss (see the module doc)."""
    return name.endswith("-shm")


@dataclass(frozen=True)
class Op:
    """One recorded file operation, in the order the kernel completed it.

    ``kind``: create (a name now points to a new, empty inode), write, trunc, sync (an inode's
    data and size reached the disk), dirsync (the folder's names reached the disk), unlink,
    rename, say (the terminal printed ``data``; ``name`` is the command's index).
    """

    kind: str
    ino: int = -1
    name: str = ""
    new: str = ""
    offset: int = 0
    data: bytes = b""
    length: int = 0
    command: int = 0


# -- reading an strace log ---------------------------------------------------------------------

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|\?)(.*)$", re.S)
_FD = re.compile(r"^(-?\d+|AT_FDCWD)(?:<(.*)>)?$", re.S)


def _unhex(text: str) -> str:
    return bytes.fromhex(text.replace("\\x", "")).decode("utf-8", "surrogateescape")


def _args(text: str) -> list[str]:
    """Split strace's argument list at top-level commas (strings and brackets kept whole)."""
    out, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "[{<(":
            depth += 1
        elif c in "]}>)":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
        i += 1
    out.append(text[start:].strip())
    return out


def _string(arg: str) -> bytes:
    if arg.endswith("..."):
        raise ValueError(f"strace cut a string short (raise -s): {arg[:60]}")
    assert arg.startswith('"') and arg.endswith('"'), arg
    return bytes.fromhex(arg[1:-1].replace("\\x", ""))


def _fd(arg: str) -> tuple[str, str | None]:
    m = _FD.match(arg)
    assert m, arg
    return m.group(1), (_unhex(m.group(2)) if m.group(2) else None)


def calls(log: str) -> Iterator[tuple[str, list[str], int, str]]:
    """(name, args, result, the path strace resolved the result to) per completed call."""
    pending: dict[str, str] = {}
    for raw in log.splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        pid, rest = m.groups()
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")].rstrip()
            continue
        if rest.startswith("<..."):
            head = pending.pop(pid, None)
            if head is None:
                continue
            rest = head + rest[rest.index("resumed>") + len("resumed>"):]
        c = _CALL.match(rest)
        if not c or c.group(3) == "?":
            continue   # exit notices, signals, a call cut off by the process's end
        name, args, result, tail = c.groups()
        if int(result) < 0:
            continue   # failed: changed nothing
        path = None
        t = tail.strip()
        if t.startswith("<") and ">" in t:
            path = _unhex(t[1:t.index(">")])
        yield name, _args(args), int(result), path or ""


class Recording:
    """The file operations of a scenario's commands on one output folder, and the terminal's.

    Built from strace logs, one per command (``add``), in the order the commands ran.
    """

    def __init__(self, output: Path) -> None:
        self.output = str(Path(output).resolve())
        self.ops: list[Op] = []
        self._names: dict[str, int] = {}   # name in the folder -> inode, as the kernel had it
        self._next = 0

    def _rel(self, path: str) -> str | None:
        path = path.removesuffix(" (deleted)")
        if path == self.output:
            return "."
        prefix = self.output + "/"
        return path[len(prefix):] if path.startswith(prefix) else None

    def _inode(self, name: str) -> int:
        if name not in self._names:
            self._next += 1
            self._names[name] = self._next
            self.ops.append(Op("create", self._next, name))
        return self._names[name]

    def add(self, log: str, command: int, terminal: str) -> None:
        """Append one command's operations (``terminal``: the file its stdout went to)."""
        fds: dict[int, tuple[int, bool]] = {}   # fd -> (inode, O_APPEND)
        offsets: dict[int, int] = {}
        sizes = self.sizes()
        for name, args, result, path in calls(log):
            if name in ("open", "openat", "creat"):
                rel = self._rel(path)
                if rel is None or rel == ".":
                    continue
                flags = args[2 if name == "openat" else 1] if name != "creat" else "O_CREAT|O_TRUNC"
                ino = self._inode(rel)
                fds[result] = (ino, "O_APPEND" in flags)
                offsets[result] = 0
                if "O_TRUNC" in flags and sizes.get(ino):
                    self.ops.append(Op("trunc", ino, rel, length=0, command=command))
                    sizes[ino] = 0
                continue
            if name == "close" or not args:
                continue
            if name in ("unlink", "unlinkat", "rename", "renameat", "renameat2"):
                self._namespace(name, args, command)
                continue
            fdno, fpath = _fd(args[0])
            if fpath is not None and fpath == terminal and name == "write":
                self.ops.append(Op("say", data=_string(args[1])[:result], name=str(command),
                                   command=command))
                continue
            rel = self._rel(fpath or "")
            if rel is None:
                continue
            fd = int(fdno)
            if rel == ".":
                if name in ("fsync", "fdatasync"):
                    self.ops.append(Op("dirsync", name=".", command=command))
                continue
            if name == "truncate":
                continue
            ino, append = fds.get(fd) or (self._inode(rel), False)
            if name == "lseek":
                offsets[fd] = result
            elif name == "write":
                at = sizes.get(ino, 0) if append else offsets.get(fd, 0)
                data = _string(args[1])[:result]
                self.ops.append(Op("write", ino, rel, offset=at, data=data, command=command))
                offsets[fd] = at + len(data)
                sizes[ino] = max(sizes.get(ino, 0), at + len(data))
            elif name == "pwrite64":
                at, data = int(args[3]), _string(args[1])[:result]
                self.ops.append(Op("write", ino, rel, offset=at, data=data, command=command))
                sizes[ino] = max(sizes.get(ino, 0), at + len(data))
            elif name == "ftruncate":
                self.ops.append(Op("trunc", ino, rel, length=int(args[1]), command=command))
                sizes[ino] = int(args[1])
            elif name in ("fsync", "fdatasync"):
                self.ops.append(Op("sync", ino, rel, command=command))
            elif name in ("writev", "pwritev"):
                raise ValueError(f"{name} on {rel}: the recorder does not decode it")

    def _namespace(self, name: str, args: list[str], command: int) -> None:
        if name.startswith("unlink"):
            path = (_path_arg(args[1], args[0]) if name == "unlinkat" else _path_arg(args[0]))
            rel = self._rel(path)
            if rel is not None and rel in self._names:
                ino = self._names.pop(rel)
                self.ops.append(Op("unlink", ino, rel, command=command))
            return
        if name == "rename":
            src, dst = self._rel(_path_arg(args[0])), self._rel(_path_arg(args[1]))
        else:
            src = self._rel(_path_arg(args[1], args[0]))
            dst = self._rel(_path_arg(args[3], args[2]))
        if src is not None and dst is not None and src in self._names:
            ino = self._names.pop(src)
            self._names[dst] = ino
            self.ops.append(Op("rename", ino, src, new=dst, command=command))

    def sizes(self) -> dict[int, int]:
        return {ino: len(data) for ino, data in replay(self.ops).contents.items()}


def _path_arg(arg: str, dirfd: str = "") -> str:
    """A path argument, made absolute with its directory fd's path (strace -y shows it)."""
    path = _string(arg).decode("utf-8", "surrogateescape")
    if not path.startswith("/"):
        base = _fd(dirfd)[1] if dirfd else None
        if base is None:
            raise ValueError(f"relative path {path!r} without a resolved directory")
        path = f"{base}/{path}"
    return path


# -- replaying and crashing ----------------------------------------------------------------------

@dataclass
class Disk:
    """A folder's names and files: what ``materialise`` writes out."""

    names: dict[str, int] = field(default_factory=dict)
    contents: dict[int, bytearray] = field(default_factory=dict)

    def apply(self, op: Op, tear: int | None = None) -> None:
        """Apply one operation; ``tear`` keeps only that many bytes of a write."""
        if op.kind == "create":
            self.names[op.name] = op.ino
            self.contents.setdefault(op.ino, bytearray())
        elif op.kind == "unlink":
            self.names.pop(op.name, None)
        elif op.kind == "rename":
            self.names.pop(op.name, None)
            self.names[op.new] = op.ino
        elif op.kind == "write":
            buf = self.contents.setdefault(op.ino, bytearray())
            data = op.data if tear is None else op.data[:tear]
            end = op.offset + len(data)
            if len(buf) < op.offset:
                buf.extend(b"\0" * (op.offset - len(buf)))
            buf[op.offset:end] = data
        elif op.kind == "trunc":
            buf = self.contents.setdefault(op.ino, bytearray())
            if op.length < len(buf):
                del buf[op.length:]
            else:
                buf.extend(b"\0" * (op.length - len(buf)))

    def files(self) -> dict[str, bytes]:
        return {name: bytes(self.contents.get(ino, b"")) for name, ino in self.names.items()
                if not is_ignored(name)}


def replay(ops: list[Op]) -> Disk:
    """The folder as the kernel had it after ``ops``: what a kill -9 leaves."""
    disk = Disk()
    for op in ops:
        disk.apply(op)
    return disk


NAMESPACE = {"create", "unlink", "rename"}
DATA = {"write", "trunc"}


@dataclass(frozen=True)
class Pending:
    """What a power loss at ``point`` could still lose, under the module's disk model."""

    point: int
    synced_names: int                       # ops index: the folder's names as of here survive
    names: list[int]                        # local namespace ops after that, in order
    synced_data: dict[int, int]             # inode -> index of its last sync (-1: never)
    data: dict[int, list[int]]              # inode -> its data ops after that, in order


def pending(ops: list[Op], point: int) -> Pending:
    """What is not yet durable when the power goes just before ``ops[point]``."""
    last_dirsync = -1
    last_sync: dict[int, int] = {}
    for i, op in enumerate(ops[:point]):
        if op.kind == "dirsync":
            last_dirsync = i
        elif op.kind == "sync":
            last_sync[op.ino] = i
    names = [i for i in range(last_dirsync + 1, point)
             if ops[i].kind in NAMESPACE and is_local(ops[i].name)]
    data: dict[int, list[int]] = {}
    for i in range(point):
        op = ops[i]
        if op.kind in DATA and is_local(op.name) and i > last_sync.get(op.ino, -1):
            data.setdefault(op.ino, []).append(i)
    return Pending(point, last_dirsync, names, last_sync, data)


@dataclass(frozen=True)
class Choice:
    """One crash state: how many pending namespace ops, and per inode how many pending data
    ops survive, and whether the last kept write is cut to ``tears[ino]`` bytes."""

    names: int
    data: tuple[tuple[int, int], ...]        # (inode, how many of its pending ops survive)
    tears: tuple[tuple[int, int], ...] = ()  # (inode, bytes of its last kept write)
    label: str = ""


def crash_state(ops: list[Op], p: Pending, choice: Choice) -> tuple[dict[str, bytes], str]:
    """The folder after a power loss at ``p.point`` that ``choice`` describes, and the terminal.

    Outside files are as the kernel had them at the crash; local files follow the disk model.
    """
    keep_data = dict(choice.data)
    tears = dict(choice.tears)
    kept_names = set(p.names[: choice.names])
    dropped: set[int] = set()
    for ino, idxs in p.data.items():
        dropped.update(idxs[keep_data.get(ino, len(idxs)):])
    torn_at = {p.data[ino][keep_data[ino] - 1]: n for ino, n in tears.items()
               if keep_data.get(ino)}
    disk = Disk()
    terminal: dict[str, bytes] = {}
    for i, op in enumerate(ops[: p.point]):
        if op.kind == "say":
            terminal[op.name] = terminal.get(op.name, b"") + op.data
            continue
        if op.kind in NAMESPACE and is_local(op.name) and i > p.synced_names \
                and i not in kept_names:
            if op.kind == "create":
                disk.contents.setdefault(op.ino, bytearray())   # its data may be synced
            continue
        if i in dropped:
            continue
        disk.apply(op, torn_at.get(i))
    text = "".join(terminal.get(str(c), b"").decode("utf-8", "replace") + "\x00"
                   for c in range(max((op.command for op in ops), default=0) + 1))
    return disk.files(), text


def sector_tears(op: Op) -> list[int]:
    """The byte counts a write may be torn to: each sector boundary strictly inside it."""
    first = (op.offset // SECTOR + 1) * SECTOR
    return [b - op.offset for b in range(first, op.offset + len(op.data), SECTOR)]


def choices(ops: list[Op], p: Pending, rng: random.Random, samples: int) -> list[Choice]:
    """The crash states tried at one point: nothing pending kept, everything kept, each pending
    namespace prefix, and ``samples`` random ones (a prefix per file, sometimes torn)."""
    inos = sorted(p.data)
    out = [Choice(0, tuple((i, 0) for i in inos), label="synced only"),
           Choice(len(p.names), tuple((i, len(p.data[i])) for i in inos), label="all")]
    for n in range(1, len(p.names)):
        out.append(Choice(n, tuple((i, len(p.data[i])) for i in inos), label=f"names {n}"))
    for _ in range(samples):
        keep = tuple((i, rng.randint(0, len(p.data[i]))) for i in inos)
        tears = []
        for ino, k in keep:
            last = ops[p.data[ino][k - 1]] if k else None
            if last is not None and last.kind == "write" and rng.random() < 0.5:
                cuts = sector_tears(last)
                if cuts:
                    tears.append((ino, rng.choice(cuts)))
        out.append(Choice(rng.randint(0, len(p.names)), keep, tuple(tears), label="random"))
    return out


def points(ops: list[Op], rng: random.Random, between: int) -> list[int]:
    """Where the power goes: just before and just after every sync, just after everything the
    terminal printed, the end, and ``between`` random points between consecutive syncs."""
    marks = {len(ops)}
    syncs = [i for i, op in enumerate(ops) if op.kind in ("sync", "dirsync")]
    for i in syncs:
        marks.update((i, i + 1))
    marks.update(i + 1 for i, op in enumerate(ops) if op.kind == "say")
    edges = [0, *syncs, len(ops)]
    for a, b in itertools.pairwise(edges):
        if b - a > 2:
            marks.update(rng.randint(a + 1, b - 1) for _ in range(between))
    return sorted(marks)


def digest(files: dict[str, bytes], terminal: str) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    h.update(terminal.encode())
    return h.hexdigest()


def materialise(files: dict[str, bytes], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


# -- recording -------------------------------------------------------------------------------------

def record_command(argv: list[str], env: dict[str, str], cwd: Path, log: Path,
                   terminal: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` under strace; its stdout goes to ``terminal`` (recorded as what it said)."""
    strace = ["strace", "-f", "-y", "-xx", "-qq", "-s", "4194304", "-e", f"trace={TRACED}",
              "-o", str(log)]
    with open(terminal, "w") as out:
        proc = subprocess.run([*strace, *argv], stdout=out, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=cwd, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{shlex.join(argv)} exited {proc.returncode}:\n{proc.stderr}")
    return proc
