"""FOR COMPARISON ONLY: the original guide's design, one JSON state file rewritten on every save.

This is not part of refund-agent. The guide this project re-creates kept every run, timeline
step, call and approval in ``output/state.json``, held in memory by one server process and
written out in full after each change, with the audit log appended to ``output/audit.log``.
:class:`JsonStateStore` re-implements that design minimally, with the subset of the
:class:`refund_agent.Store` interface the agent uses to start, advance and decide runs, so the
benchmark can drive the very same :class:`refund_agent.Agent` over either store and compare.

Choices, all in the JSON design's favour except durability, which is kept equal:
- reads are served from memory (no file read per query);
- the file is written as a whole on every save, to a temporary file that is fsynced and renamed
  over the old one, which is as durable as the SQLite store's ``synchronous=FULL`` commit;
- one process only: no locking between processes (the original had one server process).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from refund_agent.errors import AlreadyDecided, DecisionRefused, NotFound
from refund_agent.models import Approval, Call, Reply, Run, RunStatus, Step

_RUN_FIELDS = ("id", "created_at", "kind", "sender", "sender_name", "subject", "email", "status",
               "last_response_id", "requests", "cost_ticks", "input_tokens", "cached_tokens",
               "output_tokens", "simulated_replies", "error", "lease_pid", "lease_token",
               "lease_at", "last_pid", "updated_at")


def empty_state() -> dict[str, Any]:
    return {"version": 1, "next_step_id": 1, "runs": {}, "approvals": {}}


class JsonStateStore:
    """All state in one dict, saved to ``path`` in full after every change."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.audit_path = self.path.parent / "audit.log"
        self.pid = os.getpid()
        self.saves = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.state = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.state = empty_state()
        # In-memory index only (never saved): which calls a response made.
        self._calls_by_response: dict[str, list[dict[str, Any]]] = {}
        for run in self.state["runs"].values():
            for call in run["calls"]:
                self._calls_by_response.setdefault(call["response_id"], []).append(call)

    # -- persistence ------------------------------------------------------------------------

    def save(self) -> None:
        """Rewrite the whole state file: temp file, fsync, rename (atomic and durable)."""
        tmp = self.path.with_suffix(".tmp")
        text = json.dumps(self.state)  # one string, then one write: faster than json.dump
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self.saves += 1

    def _audit(self, event: str, actor: str, **fields: Any) -> None:
        line = {"at": time.time(), "event": event, "actor": actor, "pid": self.pid, **fields}
        with open(self.audit_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _step(self, run: dict[str, Any], kind: str, data: dict[str, Any]) -> None:
        step_id = self.state["next_step_id"]
        self.state["next_step_id"] = step_id + 1
        run["steps"].append({"id": step_id, "run_id": run["id"], "at": time.time(),
                             "pid": self.pid, "kind": kind, "data": data})

    def _run(self, run_id: str) -> dict[str, Any]:
        try:
            return self.state["runs"][run_id]
        except KeyError:
            raise NotFound(f"No run with id {run_id!r}.") from None

    @staticmethod
    def _as_run(run: dict[str, Any]) -> Run:
        return Run.model_validate({k: run.get(k) for k in _RUN_FIELDS})

    # -- runs -------------------------------------------------------------------------------

    def create_run(self, *, sender: str, sender_name: str, subject: str, email: str,
                   kind: str = "custom") -> Run:
        now = time.time()
        run = {"id": "run_" + uuid.uuid4().hex[:12], "created_at": now, "kind": kind,
               "sender": sender, "sender_name": sender_name, "subject": subject, "email": email,
               "status": RunStatus.WORKING.value, "last_response_id": None, "requests": 0,
               "cost_ticks": 0, "input_tokens": 0, "cached_tokens": 0, "output_tokens": 0,
               "simulated_replies": 0, "error": None, "lease_pid": None, "lease_token": None,
               "lease_at": None, "last_pid": self.pid, "updated_at": now,
               "steps": [], "calls": [], "replies": []}
        self.state["runs"][run["id"]] = run
        self._step(run, "email", {"from": sender, "name": sender_name, "subject": subject,
                                  "body": email})
        self.save()
        return self._as_run(run)

    def run(self, run_id: str) -> Run:
        return self._as_run(self._run(run_id))

    def runs(self, limit: int = 100) -> list[Run]:
        runs = sorted(self.state["runs"].values(), key=lambda r: r["created_at"], reverse=True)
        return [self._as_run(r) for r in runs[:limit]]

    def acquire(self, run_id: str, token: str) -> bool:
        run = self._run(run_id)
        moved = run["last_pid"] not in (None, self.pid)
        if moved:
            self._step(run, "restart", {"previous_pid": run["last_pid"], "pid": self.pid})
        run.update(lease_pid=self.pid, lease_token=token, lease_at=time.time(),
                   last_pid=self.pid, status=RunStatus.WORKING.value, error=None,
                   updated_at=time.time())
        self.save()
        return moved

    def release(self, run_id: str, token: str, status: RunStatus, error: str | None = None,
                step: tuple[str, dict[str, Any]] | None = None) -> None:
        run = self._run(run_id)
        if run["lease_token"] == token:
            run.update(lease_pid=None, lease_token=None, lease_at=None, status=status.value,
                       error=error, updated_at=time.time())
            if step:
                self._step(run, *step)
        self.save()

    # -- responses and calls ----------------------------------------------------------------

    def record_response(self, run_id: str, *, response_id: str, calls: list[tuple[str, str, str]],
                        steps: list[tuple[str, dict[str, Any]]], usage: dict[str, int],
                        replies_sent: list[int]) -> None:
        run = self._run(run_id)
        for seq, (call_id, name, arguments) in enumerate(calls):
            call = {"call_id": call_id, "run_id": run_id, "response_id": response_id, "seq": seq,
                    "name": name, "arguments": arguments, "output": None}
            run["calls"].append(call)
            self._calls_by_response.setdefault(response_id, []).append(call)
        for kind, data in steps:
            self._step(run, kind, data)
        for reply in run["replies"]:
            if reply["id"] in replies_sent:
                reply["response_id"] = response_id
        run["last_response_id"] = response_id
        run["requests"] += 1
        for key in ("cost_ticks", "input_tokens", "cached_tokens", "output_tokens"):
            run[key] += usage.get(key, 0)
        run["lease_at"] = run["updated_at"] = time.time()
        self.save()

    def calls(self, response_id: str) -> list[Call]:
        return [Call.model_validate({k: c[k] for k in ("call_id", "run_id", "response_id", "name",
                                                       "arguments", "output")})
                for c in self._calls_by_response.get(response_id, [])]

    def record_output(self, run_id: str, call_id: str, output: str,
                      steps: list[tuple[str, dict[str, Any]]],
                      audit: dict[str, Any] | None = None) -> None:
        run = self._run(run_id)
        for call in run["calls"]:
            if call["call_id"] == call_id and call["output"] is None:
                call["output"] = output
        for kind, data in steps:
            self._step(run, kind, data)
        run["lease_at"] = run["updated_at"] = time.time()
        self.save()
        if audit:
            self._audit(run_id=run_id, **audit)

    # -- approvals --------------------------------------------------------------------------

    def queue_approval(self, *, run_id: str, response_id: str, call_id: str, order_id: str,
                       amount: float, reason: str, customer: str) -> Approval:
        run = self._run(run_id)
        self.state["approvals"].setdefault(call_id, {
            "id": call_id, "run_id": run_id, "response_id": response_id, "call_id": call_id,
            "order_id": order_id, "amount": amount, "reason": reason, "customer": customer,
            "status": "pending", "requested_at": time.time(), "requested_pid": self.pid,
            "decided_by": None, "decided_at": None, "decided_pid": None, "note": None})
        self._step(run, "approval", {"approval_id": call_id, "order_id": order_id,
                                     "amount": amount, "reason": reason})
        run["status"], run["updated_at"] = RunStatus.WAITING.value, time.time()
        self.save()
        self._audit("requested", "agent", run_id=run_id, approval_id=call_id, order_id=order_id,
                    amount=amount, note=reason)
        return self.approval(call_id)

    def approval(self, approval_id: str) -> Approval:
        try:
            return Approval.model_validate(self.state["approvals"][approval_id])
        except KeyError:
            raise NotFound(f"No refund approval with id {approval_id!r}.") from None

    def find_approval(self, call_id: str) -> Approval | None:
        row = self.state["approvals"].get(call_id)
        return Approval.model_validate(row) if row else None

    def approvals(self, status: str | None = "pending", limit: int = 200) -> list[Approval]:
        rows = [a for a in self.state["approvals"].values()
                if status is None or a["status"] == status]
        rows.sort(key=lambda a: a["requested_at"], reverse=status is None)
        return [Approval.model_validate(a) for a in rows[:limit]]

    def approved_unpaid(self, order_id: str, except_id: str) -> list[tuple[str, float]]:
        out = []
        for a in self.state["approvals"].values():
            if a["order_id"] == order_id and a["status"] == "approved" and a["id"] != except_id:
                calls = self._run(a["run_id"])["calls"]
                if not any(c["call_id"] == a["call_id"] and c["output"] for c in calls):
                    out.append((a["id"], a["amount"]))
        return out

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None,
               check: Callable[[Approval], str | None] | None = None) -> Approval:
        row = self.state["approvals"].get(approval_id)
        if row is None:
            raise NotFound(f"No refund approval with id {approval_id!r}.")
        if approve and check and row["status"] == "pending":
            problem = check(Approval.model_validate(row))
            if problem:
                self._audit("refused", by, run_id=row["run_id"], approval_id=approval_id,
                            note=problem)
                raise DecisionRefused(f"Cannot approve: {problem}")
        if row["status"] != "pending":
            self._audit("ignored", by, run_id=row["run_id"], approval_id=approval_id)
            raise AlreadyDecided(approval_id, row["status"], row["decided_by"])
        status = "approved" if approve else "rejected"
        row.update(status=status, decided_by=by, decided_at=time.time(), decided_pid=self.pid,
                   note=note)
        self._step(self._run(row["run_id"]), "decision", {"approval_id": approval_id,
                                                          "decision": status, "by": by,
                                                          "note": note})
        self.save()
        self._audit(status, by, run_id=row["run_id"], approval_id=approval_id,
                    order_id=row["order_id"], amount=row["amount"], note=note)
        return self.approval(approval_id)

    # -- replies and timeline ---------------------------------------------------------------

    def replies(self, run_id: str, unsent_only: bool = False,
                reply_id: int | None = None) -> list[Reply]:
        rows = [r for r in self._run(run_id)["replies"]
                if not (unsent_only and r["response_id"]) and reply_id in (None, r["id"])]
        return [Reply.model_validate(r) for r in rows]

    def steps(self, run_id: str, after: int = 0) -> list[Step]:
        return [Step.model_validate(s) for s in self._run(run_id)["steps"] if s["id"] > after]

    def last_step_id(self, run_id: str) -> int:
        steps = self._run(run_id)["steps"]
        return steps[-1]["id"] if steps else 0

    def close(self) -> None:
        pass
