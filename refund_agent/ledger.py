"""An append-only JSON-lines file keyed by idempotency key, shared safely between processes.

Both stand-ins for outside systems (payments and email) behave like real providers that take an
``Idempotency-Key``: the first request with a key does the work, a later request with the same
key gets the first result back, and the same key with different arguments is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import IdempotencyConflict, LedgerError


class IdempotentLog:
    """A JSONL file where each line is one record with a unique ``idempotency_key``.

    Parsed records are kept in memory and only the lines appended since the last read are
    parsed, so a lookup costs the same with ten records or a hundred thousand. The file is only
    ever appended to; if it is replaced or truncated, the cache starts over from the new file.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        self._by_key: dict[str, dict[str, Any]] = {}
        self._offset = 0  # bytes of complete lines already parsed
        self._file_id: tuple[int, int] | None = None
        self._tail: list[dict[str, Any]] = []  # a last line without its newline, if it parses
        self._torn = False  # the file ends in a line without its newline
        #: Bumped whenever the cache starts over, so derived indexes know to start over too.
        self.generation = 0

    def scan(self) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        """Read what was appended since the last call: (generation, records, tail).

        ``records`` is the cache itself (oldest first; callers must not modify it): it only
        grows until ``generation`` changes. ``tail`` holds the file's last line when it has no
        newline yet (a crash mid-write) but parses anyway, which the file's readers count.
        """
        with self._lock:
            try:
                fh = open(self.path, "rb")
            except FileNotFoundError:
                self._start_over(None)
                return self.generation, self._records, []
            with fh:
                st = os.fstat(fh.fileno())
                file_id = (st.st_dev, st.st_ino)
                if file_id != self._file_id or st.st_size < self._offset:
                    self._start_over(file_id)
                fh.seek(self._offset)
                chunk = fh.read()
            end = chunk.rfind(b"\n") + 1
            for line in chunk[:end].split(b"\n"):
                record = _parse(line)
                if record is not None:
                    self._records.append(record)
                    self._by_key.setdefault(record.get("idempotency_key"), record)
            self._offset += end
            self._torn = end < len(chunk)
            tail = _parse(chunk[end:])
            self._tail = [tail] if tail is not None else []
            return self.generation, self._records, self._tail

    def _start_over(self, file_id: tuple[int, int] | None) -> None:
        if self._offset or self._records or file_id != self._file_id:
            self.generation += 1
        self._records, self._by_key, self._tail, self._torn = [], {}, [], False
        self._offset, self._file_id = 0, file_id

    def records(self) -> list[dict[str, Any]]:
        """Every record, oldest first (a torn last line from a crash is skipped)."""
        _, records, tail = self.scan()
        return [*records, *tail]

    def find(self, key: str) -> dict[str, Any] | None:
        """The first record with this idempotency key, or None."""
        _, _, tail = self.scan()
        with self._lock:
            record = self._by_key.get(key)
        if record is None:
            record = next((r for r in tail if r.get("idempotency_key") == key), None)
        return record

    def once(self, key: str, request: dict[str, Any],
             make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """Do ``make`` once per key; returns (record, reused).

        Raises:
            IdempotencyConflict: the key was used before with a different ``request``.
        """
        try:
            return self._once(key, request, make)
        except OSError as exc:  # a full disk, a read-only folder, an I/O error
            raise LedgerError(
                f"Could not write to {self.path}: {exc.strerror or exc}. Nothing was recorded "
                "there; fix that (free space, permissions) and run `refund-agent resume`, "
                "which carries on exactly once.") from None

    def _once(self, key: str, request: dict[str, Any],
              make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # An exclusive lock on the file itself serialises check-then-append across processes.
        with open(self.path, "a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                record = self.find(key)  # reads the file's new lines, under the file lock
                if record is not None:
                    if record.get("request") != request:
                        raise IdempotencyConflict(
                            f"Idempotency key {key} was already used with other arguments.")
                    return record, True
                record = {"idempotency_key": key, "request": request, **make(),
                          "created_at": time.time(), "pid": os.getpid()}
                # A crash mid-write can leave a last line without its newline; start a fresh
                # line so this record is not glued to it (and lost with it).
                fh.write(("\n" if self._torn else "") + json.dumps(record) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
                return record, False
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _parse(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None

