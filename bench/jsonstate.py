"""FOR COMPARISON ONLY: the original guide's design, one JSON state file rewritten on every save.

This is not part of refund-agent. The guide this project re-creates kept every run, timeline
step, call and approval in ``output/state.json``, held in memory by one server process and
written out in full after each change, with the audit log appended to ``output/audit.log``.
:class:`JsonStateStore` re-implements that design minimally, with the subset of the
:class:`refund_agent.Store` interface the agent uses to start, advance and decide runs, so the
benchmark can drive the very same :class:`refund_agent.desk.Agent` over either store and compare.

Choices, all in the JSON design's favour except durability, which is kept equal:
- reads are served from memory (no file read per query), and an order's approvals (for the
  line ledger: which lines other refunds hold) are found through an in-memory index;
- the file is written as a whole on every save, to a temporary file that is fsynced and renamed
  over the old one, which is as durable as the SQLite store's ``synchronous=FULL`` commit;
- one process only: no locking between processes (the original had one server process).
  Within it, each write is one "transaction" under a lock: the lease check, the change and the
  save (the agent's heartbeat thread renews leases while the main thread writes).

Leases follow ``refund_agent.store``: ``acquire`` returns a :class:`~refund_agent.store.Lease`
whose epoch (kept in the run's record) grows with every acquisition, and every write made on
behalf of a run checks it before changing anything, raising ``LeaseLost`` if it is stale. A
lease's age is measured with this process's clock (there is no database clock to share).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from refund_agent.desk.policy import Held, Quote
from refund_agent.errors import (
    AlreadyDecided,
    DecisionRefused,
    LeaseLost,
    NotFound,
    RunBusy,
    RunNotReady,
)
from refund_agent.models import (
    Approval,
    Call,
    Reply,
    Run,
    RunStatus,
    Step,
    TranscriptEntry,
    call_key,
)
from refund_agent.store import LEASE_STALE_SECONDS, Lease, pid_alive
from refund_agent.store.responses import Output, Recorded

_RUN_FIELDS = ("id", "created_at", "kind", "sender", "sender_name", "subject", "email", "status",
               "last_response_id", "requests", "cost_ticks", "input_tokens", "cached_tokens",
               "output_tokens", "simulated_replies", "error", "lease_pid", "lease_token",
               "lease_at", "last_pid", "updated_at", "transcript_items", "transcript_bytes",
               "transcript_complete")


def empty_state() -> dict[str, Any]:
    return {"version": 3, "next_step_id": 1, "next_reply_id": 1, "runs": {}, "approvals": {}}


def _audit_lines(lines: list[Any]) -> list[dict[str, Any]]:
    """A refund's lines as the audit records them (as refund_agent.store does)."""
    out = []
    for line in lines:
        data = line if isinstance(line, dict) else line.model_dump()
        out.append({"line": data["line"], "reason": data["reason"],
                    "amount_cents": data["amount_cents"]})
    return out


class JsonStateStore:
    """All state in one dict, saved to ``path`` in full after every change."""

    shared = False   # one process's file: effects keep their JSONL log beside it (Loop.effects)

    def __init__(self, path: Path, lease_seconds: float = LEASE_STALE_SECONDS) -> None:
        self.path = Path(path)
        self.audit_path = self.path.parent / "audit.log"
        self.pid = os.getpid()
        self.lease_seconds = lease_seconds
        self.saves = 0
        # One write at a time (check, change, save), as the one server process would.
        self._lock = threading.RLock()
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
        # In-memory index only (never saved): an order's approvals, built on first use.
        self._by_order: dict[str, list[dict[str, Any]]] | None = None

    # -- persistence ------------------------------------------------------------------------

    def save(self) -> None:
        """Rewrite the whole state file: temp file, fsync, rename (atomic and durable)."""
        with self._lock:  # one temp file: two threads must not write it at once
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

    # -- leases -----------------------------------------------------------------------------

    def _lease_live(self, run: dict[str, Any]) -> bool:
        """Whether someone holds this run: a live process that renewed its lease recently."""
        if run.get("lease_token") is None:
            return False
        age = time.time() - (run.get("lease_at") or 0)
        return age < self.lease_seconds and pid_alive(run.get("lease_pid"))

    def _fence(self, lease: Lease) -> dict[str, Any]:
        """The run, if ``lease`` still holds it; else LeaseLost (nothing is changed)."""
        run = self.state["runs"].get(lease.run_id)
        if run is None or (run.get("lease_token"), run.get("lease_epoch", 0)) != (
                lease.token, lease.epoch):
            raise LeaseLost(lease.run_id, run.get("lease_pid") if run else None)
        return run

    def acquire(self, run_id: str, token: str) -> Lease:
        """Take the run's lease, with a fencing epoch one higher than before.

        Raises:
            RunBusy: another live process (or thread) holds the lease.
        """
        return self.acquire_run(run_id, token)[0]

    def acquire_run(self, run_id: str, token: str, agent: str | None = None
                    ) -> tuple[Lease, Run]:
        """acquire, and the run as it left it (RunNotReady for another agent's run)."""
        with self._lock:
            run = self._run(run_id)
            if agent is not None and (
                    problem := self._as_run(run).owner_problem(agent, "advance")):
                raise RunNotReady(problem)
            if run.get("lease_token") not in (None, token) and self._lease_live(run):
                raise RunBusy(run_id, run["lease_pid"])
            if run["last_pid"] not in (None, self.pid):
                self._step(run, "restart", {"previous_pid": run["last_pid"], "pid": self.pid})
            epoch = run.get("lease_epoch", 0) + 1
            run.update(lease_pid=self.pid, lease_token=token, lease_at=time.time(),
                       lease_epoch=epoch, last_pid=self.pid, status=RunStatus.WORKING.value,
                       error=None, updated_at=time.time())
            self.save()
            return Lease(run_id, token, epoch), self._as_run(run)

    def check_lease(self, lease: Lease) -> None:
        """Raise LeaseLost unless ``lease`` still holds its run (before an outside effect)."""
        with self._lock:
            self._fence(lease)

    def renew(self, lease: Lease) -> None:
        """The heartbeat: push the lease's expiry forward, if it is still ours."""
        with self._lock:
            run = self._fence(lease)
            run["lease_at"] = time.time()
            self.save()

    def release(self, lease: Lease, status: RunStatus, error: str | None = None,
                step: tuple[str, dict[str, Any]] | None = None) -> Run:
        """Give up the lease and set the run's status (with an optional timeline step);
        returns the run as it is left, as the store's release does."""
        with self._lock:
            run = self._fence(lease)
            run.update(lease_pid=None, lease_token=None, lease_at=None, status=status.value,
                       error=error, updated_at=time.time())
            if step:
                self._step(run, *step)
            self.save()
            return self._as_run(run)

    # -- runs -------------------------------------------------------------------------------

    def create_run(self, *, sender: str, sender_name: str, subject: str, email: str,
                   kind: str = "custom", raised_by: str | None = None,
                   agent: str = "refunds") -> Run:
        # raised_by (the desk account that typed a ticket in) matters only to the desk's
        # own-ticket rule, which this comparison store does not model.
        now = time.time()
        run = {"id": "run_" + uuid.uuid4().hex[:12], "created_at": now, "kind": kind,
               "agent": agent,
               "sender": sender, "sender_name": sender_name, "subject": subject, "email": email,
               "status": RunStatus.WORKING.value, "last_response_id": None, "requests": 0,
               "cost_ticks": 0, "input_tokens": 0, "cached_tokens": 0, "output_tokens": 0,
               "simulated_replies": 0, "error": None, "lease_pid": None, "lease_token": None,
               "lease_at": None, "lease_epoch": 0, "last_pid": self.pid, "updated_at": now,
               "transcript_items": 0, "transcript_bytes": 0, "transcript_complete": True,
               "steps": [], "calls": [], "replies": [], "transcript": []}
        with self._lock:
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

    # -- responses and calls ----------------------------------------------------------------

    def record_response(self, lease: Lease, *, response_id: str,
                        calls: list[tuple[str, str, str]], steps: list[tuple[str, dict[str, Any]]],
                        usage: dict[str, int], replies_sent: list[int],
                        transcript: Sequence[tuple[str, dict[str, Any]]] = (),
                        resent: dict[str, Any] | None = None,
                        outputs: Mapping[str, Output] | None = None,
                        finish: RunStatus | None = None, effects: bool = False) -> Recorded:
        # ``effects``: whether the store's commit would be synced; this store saves every
        # change in full anyway.
        with self._lock:
            run = self._fence(lease)
            if finish is not None:   # the run's end, saved with the response (one save)
                run.update(lease_pid=None, lease_token=None, lease_at=None,
                           status=finish.value, error=None)
            if resent is not None:
                self._step(run, "resent", {**resent, "response_id": response_id})
                self._audit("resent", "agent", run_id=run["id"],
                            note=f"stored response {resent['missing']} was not found; sent the "
                                 f"transcript instead, continuing as {response_id}")
            # The guide's design keeps the transcript in the same file, like everything else.
            for seq, (origin, item) in enumerate(transcript, start=len(run["transcript"])):
                text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
                run["transcript"].append({"seq": seq, "response_id": response_id,
                                          "origin": origin, "item": item})
                run["transcript_items"] += 1
                run["transcript_bytes"] += len(text.encode())
            self._record_response(run, response_id, calls, steps, usage, replies_sent)
            for call_id, output in (outputs or {}).items():   # calls that already ran
                self._save_output(run, call_id, output.text, output.steps, output.audit,
                                  save=False)
            if outputs:
                self.save()
            return Recorded(self._as_run(run), self.calls(response_id))

    def transcript(self, run_id: str) -> list[TranscriptEntry]:
        return [TranscriptEntry.model_validate(entry)
                for entry in self._run(run_id).get("transcript", [])]

    def _record_response(self, run: dict[str, Any], response_id: str,
                         calls: list[tuple[str, str, str]], steps: list[tuple[str, dict[str, Any]]],
                         usage: dict[str, int], replies_sent: list[int]) -> None:
        run_id = run["id"]
        for seq, (call_id, name, arguments) in enumerate(calls):
            call = {"call_id": call_id, "run_id": run_id, "response_id": response_id, "seq": seq,
                    "name": name, "arguments": arguments, "output": None,
                    "key": call_key(run_id, call_id)}
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
        run["updated_at"] = time.time()
        if run["lease_token"] is not None:
            run["lease_at"] = run["updated_at"]
        self.save()

    def add_cost(self, lease: Lease, usage: dict[str, int], step: tuple[str, dict] | None
                 ) -> None:
        """Count a side request (the simulated customer) toward the run's requests and cost."""
        with self._lock:
            run = self._fence(lease)
            run["requests"] += 1
            for key in ("cost_ticks", "input_tokens", "cached_tokens", "output_tokens"):
                run[key] += usage.get(key, 0)
            run["updated_at"] = time.time()
            if step:
                self._step(run, *step)
            self.save()

    def calls(self, response_id: str) -> list[Call]:
        return [Call.model_validate({k: c.get(k) for k in ("call_id", "run_id", "response_id",
                                                           "name", "arguments", "output", "key")})
                for c in self._calls_by_response.get(response_id, [])]

    def record_output(self, lease: Lease, call_id: str, output: str,
                      steps: list[tuple[str, dict[str, Any]]],
                      audit: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._save_output(self._fence(lease), call_id, output, steps, audit)

    def _save_output(self, run: dict[str, Any], call_id: str, output: str,
                     steps: list[tuple[str, dict[str, Any]]], audit: dict[str, Any] | None,
                     save: bool = True) -> None:
        for call in run["calls"]:
            if call["call_id"] == call_id and call["output"] is None:
                call["output"] = output
        for kind, data in steps:
            self._step(run, kind, data)
        run["updated_at"] = time.time()
        if run["lease_token"] is not None:
            run["lease_at"] = run["updated_at"]
        if save:
            self.save()
        if audit:
            self._audit(run_id=run["id"], **audit)

    # -- approvals --------------------------------------------------------------------------
    # An approval is a dict shaped like refund_agent.models.Approval, its "lines" included; each
    # line also has "held" (pending or approved: the line is taken), as approval_lines does in
    # SQLite. An in-memory index (never saved) finds an order's approvals without a scan.

    def _order_approvals(self, order_id: str) -> list[dict[str, Any]]:
        if self._by_order is None:
            self._by_order = {}
            for row in self.state["approvals"].values():
                self._by_order.setdefault(row["order_id"], []).append(row)
        return self._by_order.setdefault(order_id, [])

    def _held(self, order_id: str, except_id: str | None = None) -> dict[str, Held]:
        return {line["line"]: Held(line["reason"],
                                   "refunded" if row["status"] == "approved" else "pending",
                                   f"approval {row['id']}", line["amount_cents"])
                for row in self._order_approvals(order_id) if row["id"] != except_id
                for line in row["lines"] if line["held"]}

    def held_lines(self, order_id: str, except_id: str | None = None) -> dict[str, Held]:
        return self._held(order_id, except_id)

    def mail_thread(self, run_id: str) -> None:
        """No mail in or out here (schema 14's table is the real store's): plain answers."""
        return None

    def queue_approval(self, lease: Lease, *, response_id: str, call_id: str, subject: str,
                       title: str, customer: str,
                       price: Callable[[dict[str, Held]], Quote | str],
                       release: bool = False) -> Approval | str:
        """A pending approval holding its lines, priced against what other refunds hold.

        ``price`` runs under the lock, after the lease check, as Store.queue_approval runs it
        inside its transaction: two tickets cannot both reserve the same line. ``release``:
        the pause gives up the lease too, in the same save.
        """
        with self._lock:
            return self._queue_approval(self._fence(lease), response_id, call_id, subject,
                                        title, customer, price, release)

    def _queue_approval(self, run: dict[str, Any], response_id: str, call_id: str,
                        order_id: str, summary: str, customer: str,
                        price: Callable[[dict[str, Held]], Quote | str],
                        release: bool = False) -> Approval | str:
        run_id = run["id"]
        approval_id = call_key(run_id, call_id)   # as the store's (see callrecords.py)
        if approval_id in self.state["approvals"]:
            return self.approval(approval_id)
        quote = price(self._held(order_id))
        if isinstance(quote, str):
            return quote
        row = {"id": approval_id, "run_id": run_id, "response_id": response_id, "call_id": call_id,
               "order_id": quote.order_id, "amount_cents": quote.total_cents,
               "proposed_cents": quote.total_cents, "summary": summary, "customer": customer,
               "status": "pending", "requested_at": time.time(), "requested_pid": self.pid,
               "decided_by": None, "decided_at": None, "decided_pid": None, "note": None,
               "lines": [{**q.model_dump(), "decision": None, "held": True}
                         for q in quote.lines]}
        self._order_approvals(quote.order_id).append(row)
        self.state["approvals"][approval_id] = row
        lines = _audit_lines(quote.lines)
        self._step(run, "approval", {"approval_id": approval_id, "order_id": quote.order_id,
                                     "amount": quote.amount, "summary": summary, "lines": lines})
        run["status"], run["updated_at"] = RunStatus.WAITING.value, time.time()
        if release:
            run.update(lease_pid=None, lease_token=None, lease_at=None, error=None)
        self.save()
        self._audit("requested", "agent", run_id=run_id, approval_id=approval_id,
                    order_id=quote.order_id, amount=quote.amount, note=summary, lines=lines)
        return self.approval(approval_id)

    def approval(self, approval_id: str) -> Approval:
        try:
            return Approval.model_validate(self.state["approvals"][approval_id])
        except KeyError:
            raise NotFound(f"No refund approval with id {approval_id!r}.") from None

    def approval_run(self, approval_id: str) -> Run:
        return self.run(self.approval(approval_id).run_id)

    def latest_decision(self, run_id: str) -> tuple[str, float | None] | None:
        approvals = self.run_approvals(run_id)
        return (approvals[-1].status, approvals[-1].decided_at) if approvals else None

    def find_approval(self, key: str) -> Approval | None:
        row = self.state["approvals"].get(key)
        return Approval.model_validate(row) if row else None

    def approvals(self, status: str | None = "pending", limit: int = 200) -> list[Approval]:
        rows = [a for a in self.state["approvals"].values()
                if status is None or a["status"] == status]
        rows.sort(key=lambda a: a["requested_at"], reverse=status is None)
        return [Approval.model_validate(a) for a in rows[:limit]]

    def run_approvals(self, run_id: str) -> list[Approval]:
        """The run's proposals, oldest first (a scan: this design keeps no index)."""
        rows = [a for a in self.state["approvals"].values() if a["run_id"] == run_id]
        rows.sort(key=lambda a: a["requested_at"])
        return [Approval.model_validate(a) for a in rows]

    def decide(self, approval_id: str, approve: bool, by: str, note: str | None,
               keep: list[str] | None = None, *, fingerprint: str | None = None,
               requote: Callable[[Approval, list[str], dict[str, Held]], Quote | str] | None
               = None, limit_cents: int | None = None,
               two_person_above_cents: int | None = None, noun: str = "proposal") -> Approval:
        """The same rules as ``Store.decide`` (but the desk's two-person rule, which the
        benches, one person deciding, never reach): compare-and-set on pending, partial approval,
        the kept lines re-priced against what other refunds hold, the approver's limit."""
        with self._lock:
            return self._decide(approval_id, approve, by, note, keep, requote, limit_cents,
                                fingerprint, noun)

    def _decide(self, approval_id: str, approve: bool, by: str, note: str | None,
                keep: list[str] | None,
                requote: Callable[[Approval, list[str], dict[str, Held]], Quote | str] | None,
                limit_cents: int | None, fingerprint: str | None = None,
                noun: str = "proposal") -> Approval:
        row = self.state["approvals"].get(approval_id)
        if row is None:
            raise NotFound(f"No refund approval with id {approval_id!r}.")
        approval = Approval.model_validate(row)
        where = {"run_id": row["run_id"], "approval_id": approval_id,
                 "order_id": row["order_id"]}
        if row["status"] != "pending":
            self._audit("ignored", by, **where, amount=approval.amount)
            raise AlreadyDecided(approval_id, row["status"], row["decided_by"] or "",
                                 row["decided_at"], noun=noun)
        if fingerprint not in (None, approval.fingerprint):   # what you see is what you sign
            self._audit("refused", by, **where, amount=approval.amount)
            raise DecisionRefused("Cannot approve this approval: it changed since it was shown.")
        lines = {line["line"]: line for line in row["lines"]}
        if approve:
            proposed = [line.line for line in approval.item_lines]
            kept = proposed if keep is None else [line.strip() for line in keep]
            if not kept or set(kept) - set(proposed):
                raise DecisionRefused(f"Keep at least one of the proposed lines "
                                      f"({', '.join(proposed)}).")
            quote: Quote | str | None = None
            if requote is not None:
                quote = requote(approval, kept, self._held(row["order_id"], approval_id))
                if isinstance(quote, Quote) and quote.total_cents > row["proposed_cents"]:
                    quote = "the kept lines now come to more than was proposed."
            if isinstance(quote, str):
                self._audit("refused", by, **where, amount=approval.amount, note=quote)
                raise DecisionRefused(f"Cannot approve: {quote}")
            paid = ({q.line: (q.amount_cents, q.fee_cents) for q in quote.lines}
                    if quote is not None else
                    {line.line: (line.amount_cents, line.fee_cents) for line in approval.lines
                     if line.line in kept or line.reason == "shipping"})
            total = sum(cents for cents, _ in paid.values())
            if limit_cents is not None and total > limit_cents:
                reason = f"${total / 100:.2f} is above {by}'s approval limit."
                self._audit("refused", by, **where, amount=total / 100, note=reason)
                raise DecisionRefused(f"Cannot approve: {reason}")
            for line_id, line in lines.items():
                if line_id in paid:
                    line.update(decision="approved", amount_cents=paid[line_id][0],
                                fee_cents=paid[line_id][1])
                else:
                    line.update(decision="declined", held=False)
            status, amount_cents = "approved", sum(cents for cents, _ in paid.values())
        else:
            for line in lines.values():
                line.update(decision="rejected", held=False)
            status, amount_cents = "rejected", row["amount_cents"]
        row.update(status=status, decided_by=by, decided_at=time.time(), decided_pid=self.pid,
                   note=note, amount_cents=amount_cents)
        self._step(self._run(row["run_id"]), "decision", {"approval_id": approval_id,
                                                          "decision": status, "by": by,
                                                          "note": note})
        self.save()
        audited = [line for line in row["lines"] if status == "rejected" or line["held"]]
        self._audit(status, by, **where, amount=amount_cents / 100, note=note,
                    lines=_audit_lines(audited))
        return self.approval(approval_id)

    # -- replies and timeline ---------------------------------------------------------------

    def add_reply(self, run_id: str, text: str, simulated: bool, lease: Lease | None = None
                  ) -> Reply:
        """Save a customer's reply and mark the run as having work again, or refuse it.

        As ``Store.add_reply``: without a lease, accepted only while the run is finished and
        nobody holds a live lease (checked under the same lock as the change); with one, fenced.

        Raises:
            RunNotReady: the run is not finished, or a process is working on it.
        """
        with self._lock:
            if lease is not None:
                run = self._fence(lease)
            else:
                run = self._run(run_id)
                if run["status"] != RunStatus.DONE or self._lease_live(run):
                    raise RunNotReady(
                        f"Run {run_id} is {run['status']}; a customer can write back once the "
                        "agent has finished. The reply was not saved; send it again then.")
            reply_id = self.state.get("next_reply_id", 1)
            self.state["next_reply_id"] = reply_id + 1
            reply = {"id": reply_id, "run_id": run_id, "at": time.time(), "text": text,
                     "simulated": simulated, "response_id": None}
            run["replies"].append(reply)
            self._step(run, "reply", {"text": text, "simulated": simulated})
            run["status"], run["updated_at"] = RunStatus.WORKING.value, time.time()
            if simulated:
                run["simulated_replies"] += 1
            self.save()
        return Reply.model_validate(reply)

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
