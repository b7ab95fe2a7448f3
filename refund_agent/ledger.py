"""An append-only JSON-lines file keyed by idempotency key, shared safely between processes.

Both stand-ins for outside systems (payments and email) behave like real providers that take an
``Idempotency-Key``: the first request with a key does the work, a later request with the same
key gets the first result back, and the same key with different arguments is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import IdempotencyConflict


class IdempotentLog:
    """A JSONL file where each line is one record with a unique ``idempotency_key``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def records(self) -> list[dict[str, Any]]:
        """Every record, oldest first (a torn last line from a crash is skipped)."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def once(self, key: str, request: dict[str, Any],
             make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """Do ``make`` once per key; returns (record, reused).

        Raises:
            IdempotencyConflict: the key was used before with a different ``request``.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # An exclusive lock on the file itself serialises check-then-append across processes.
        with open(self.path, "a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                for record in self.records():
                    if record.get("idempotency_key") == key:
                        if record.get("request") != request:
                            raise IdempotencyConflict(
                                f"Idempotency key {key} was already used with other arguments.")
                        return record, True
                record = {"idempotency_key": key, "request": request, **make(),
                          "created_at": time.time(), "pid": os.getpid()}
                fh.write(json.dumps(record) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
                return record, False
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
