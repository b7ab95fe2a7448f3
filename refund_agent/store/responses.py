"""The model's responses, their calls and the run's transcript: boundary 2 (a response and its
calls are saved before any call runs) and boundary 3 (a call's output is saved as it returns)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import Actor, Call, Run, RunStatus, TranscriptEntry, call_key, order_id_in
from .core import StoreCore
from .leases import Lease


@dataclass(frozen=True)
class Output:
    """A call's output as the store saves it: its text (what the model is sent), its timeline
    steps (the result first) and an audit line, if the call wants one."""

    text: str
    steps: list[tuple[str, dict[str, Any]]]
    audit: dict[str, Any] | None = None


@dataclass(frozen=True)
class Recorded:
    """What record_response committed: the run's row as its transaction left it (its desk
    status aside, which the commit refreshes) and the response's calls, in order."""

    run: Run
    calls: list[Call]


class Responses(StoreCore):
    """Recording what the model answered and what its calls returned."""

    def record_response(self, lease: Lease, *, response_id: str,
                        calls: list[tuple[str, str, str]], steps: list[tuple[str, dict[str, Any]]],
                        usage: dict[str, int], replies_sent: list[int],
                        transcript: Sequence[tuple[str, dict[str, Any]]] = (),
                        resent: dict[str, Any] | None = None,
                        outputs: Mapping[str, Output] | None = None,
                        finish: RunStatus | None = None, effects: bool = False) -> Recorded:
        """Boundary 2: a response, its calls and its timeline steps, before any call with an
        effect runs (the read-only calls it starts with may have run: ``outputs``).

        Returns the run and the calls as this transaction wrote them (:class:`Recorded`), so
        the loop carries on without reading them back.

        Args:
            transcript: ("input" or "output", item) pairs to append to the run's transcript:
                the items this request sent that were new, then the response's output items.
            resent: set when the run's stored response was gone and the transcript was sent
                instead: ``missing`` (the response id), ``items`` and ``bytes`` sent. The
                timeline and the audit log record it with the response, in this transaction.
            outputs: by call id, outputs of this response's calls that already ran (the
                loop runs the read-only calls a response starts with before committing it):
                saved with their calls, steps and audit lines, as :meth:`record_output` would.
                A call that repeats an id gets its error instead, and nothing of its output.
            finish: the response ends the run (it has no calls, and nothing else waits to be
                sent): the run gets this status and the lease is given up in the same
                transaction, committed synced, as :meth:`release` would (one commit, not two).
                The returned run is then read as :meth:`release` reads it.
            effects: some call of it has an outside effect done at once (a ToolKind.EFFECT
                tool's, which the loop knows and the store does not); its commit is synced.
        """
        run_id = lease.run_id
        # Durable only before an effect (an email, a credit): its call id is the effect's
        # idempotency key, and a response lost with the power would be asked for again and
        # bring a new call id. A proposal is not one: it only queues an approval, itself a
        # durable commit. Anything else is re-done safely (the request sent again, read-only
        # calls re-run). The run's end is reported to people: durable, as release() makes it.
        durable = finish is not None or effects
        lease_now = (" lease_pid = NULL, lease_token = NULL, lease_at = NULL, status = ?,"
                     " error = NULL" if finish is not None else f" lease_at = {self.now}")
        with self._tx(durable=durable) as db:
            texts = [(origin, _item_text(item)) for origin, item in transcript]
            items, size = len(texts), sum(len(text.encode()) for _, text in texts)
            row = self._fence(
                db, lease,
                "SET last_response_id = ?, requests = requests + 1,"
                " cost_ticks = cost_ticks + ?, input_tokens = input_tokens + ?,"
                " cached_tokens = cached_tokens + ?, output_tokens = output_tokens + ?,"
                " transcript_items = transcript_items + ?, transcript_bytes = transcript_bytes + ?,"
                f" updated_at = ?,{lease_now}",
                (response_id, usage.get("cost_ticks", 0), usage.get("input_tokens", 0),
                 usage.get("cached_tokens", 0), usage.get("output_tokens", 0), items, size,
                 time.time(), *([finish] if finish is not None else [])), returning=True,
                returning_also=self._released_columns if finish is not None else "")
            if resent is not None:
                self._step(db, run_id, "resent", {**resent, "response_id": response_id})
                self._audit(db, "resent", Actor.AGENT, run_id=run_id,
                            note=f"stored response {resent['missing']} was not found (expired "
                                 f"or deleted); sent the run's transcript instead "
                                 f"({resent['items']} items, {resent['bytes']:,} bytes), "
                                 f"continuing as {response_id}")
            self._append_transcript(db, run_id, response_id, texts, counted=True)
            saved, answered, kept = self._save_calls(db, run_id, response_id, calls,
                                                     outputs or {})
            self._steps(db, run_id, [*steps, *answered])
            for output in kept:
                self._output_kept(db, run_id, output.steps)
                if output.audit:
                    self._audit(db, run_id=run_id, **output.audit)
            for reply_id in replies_sent:
                db.execute("UPDATE replies SET response_id = ? WHERE id = ?",
                           (response_id, reply_id))
        return Recorded(self._released_run(dict(row)) if finish is not None
                        else Run.model_validate(dict(row)), saved)

    def _save_calls(self, db: Any, run_id: str, response_id: str,
                    calls: list[tuple[str, str, str]], outputs: Mapping[str, Output]
                    ) -> tuple[list[Call], list[tuple[str, dict[str, Any]]], list[Output]]:
        """Insert a response's calls, each with its key, the order id its arguments name and
        its output if it already ran (``outputs``); returns them as saved, the timeline steps
        of the calls answered (in order), and the outputs kept.

        A call whose id the run already used (in an earlier response, or earlier in this one)
        is saved with an error for its output and no key, so it never runs: running it would
        reach the approval, refund or email of the call that had the id first.
        """
        answered: list[tuple[str, dict[str, Any]]] = []
        saved, kept = [], []
        for seq, (call_id, name, arguments) in enumerate(calls):
            error = (f"This call repeats call id {call_id!r} of an earlier call in this run, so "
                     "it was not run. Make the call again.")
            ran = outputs.get(call_id)
            # One statement: the call is a repeat when its id is already saved in the run (an
            # earlier response, or earlier in this one: each INSERT sees the ones before it);
            # a repeat is saved with the error for its output and no key.
            key = db.execute(
                "INSERT INTO calls(call_id, run_id, response_id, seq, name, arguments, output,"
                " key, order_id) SELECT ?, ?, ?, ?, ?, ?, CASE WHEN r.again THEN ? ELSE ? END,"
                " CASE WHEN r.again THEN NULL ELSE ? END, ? FROM (SELECT EXISTS (SELECT 1 FROM"
                " calls WHERE run_id = ? AND call_id = ?) AS again) AS r RETURNING key",
                (call_id, run_id, response_id, seq, name, arguments, json.dumps({"error": error}),
                 ran and ran.text, call_key(run_id, call_id), order_id_in(arguments), run_id,
                 call_id)).fetchall()[0][0]
            if key is None:
                output: str | None = json.dumps({"error": error})
                answered.append(("result", {"call_id": call_id, "name": name,
                                            "output": {"error": error}}))
            else:
                output = ran and ran.text
                if ran is not None:
                    answered += ran.steps
                    kept.append(ran)
            saved.append(Call(call_id=call_id, run_id=run_id, response_id=response_id, name=name,
                              arguments=arguments, output=output, key=key,
                              order_id=order_id_in(arguments)))
        return saved, answered, kept

    def _append_transcript(self, db: Any, run_id: str, response_id: str,
                           entries: Sequence[tuple[str, dict[str, Any] | str]],
                           counted: bool = False) -> None:
        """Append items (or their stored text) to a run's transcript and count them on the
        run (``counted``: the caller's own update of the run already counts them)."""
        if not entries:
            return
        rows = [(origin, item if isinstance(item, str) else _item_text(item))
                for origin, item in entries]
        for chunk in (rows[i:i + 100] for i in range(0, len(rows), 100)):   # one statement each
            # Numbered after the run's last item by the statement itself (both engines read
            # the table as it was before the statement, so the numbers do not shift under it).
            db.execute("INSERT INTO transcript(run_id, seq, response_id, origin, item)"
                       " SELECT ?, last.seq + v.column1, ?, v.column2, v.column3 FROM (VALUES "
                       + ",".join(["(?,?,?)"] * len(chunk)) + ") AS v, (SELECT COALESCE(MAX(seq),"
                       " -1) + 1 AS seq FROM transcript WHERE run_id = ?) AS last",
                       (run_id, response_id,
                        *(v for offset, (origin, text) in enumerate(chunk)
                          for v in (offset, origin, text)), run_id))
        if not counted:
            db.execute("UPDATE runs SET transcript_items = transcript_items + ?,"
                       " transcript_bytes = transcript_bytes + ? WHERE id = ?",
                       (len(rows), sum(len(text.encode()) for _, text in rows), run_id))

    def transcript(self, run_id: str) -> list[TranscriptEntry]:
        """A run's transcript, oldest first (empty for a run that has made no request)."""
        rows = self._read("SELECT seq, response_id, origin, item FROM transcript"
                          " WHERE run_id = ? ORDER BY seq", (run_id,))
        return [TranscriptEntry(seq=r["seq"], response_id=r["response_id"], origin=r["origin"],
                                item=json.loads(r["item"])) for r in rows]

    def runs_without_transcript(self) -> list[Run]:
        """Runs that made a request but whose transcript does not reach their last response
        (started before transcripts were kept, or edited): they can continue only from the
        provider's stored response, never from their own transcript (see Agent._history)."""
        rows = self._read(
            "SELECT * FROM runs WHERE last_response_id IS NOT NULL AND (transcript_complete = 0"
            " OR COALESCE((SELECT t.response_id FROM transcript t WHERE t.run_id = runs.id"
            " ORDER BY t.seq DESC LIMIT 1), '') != last_response_id) ORDER BY created_at")
        return [Run.model_validate(dict(r)) for r in rows]

    def add_cost(self, lease: Lease, usage: dict[str, int], step: tuple[str, dict] | None
                 ) -> None:
        """Count a side request (the simulated customer) toward the run's requests and cost."""
        run_id = lease.run_id
        with self._tx(durable=False) as db:
            self._fence(db, lease)
            db.execute(
                "UPDATE runs SET requests = requests + 1, cost_ticks = cost_ticks + ?,"
                " input_tokens = input_tokens + ?, cached_tokens = cached_tokens + ?,"
                " output_tokens = output_tokens + ?, updated_at = ? WHERE id = ?",
                (usage.get("cost_ticks", 0), usage.get("input_tokens", 0),
                 usage.get("cached_tokens", 0), usage.get("output_tokens", 0), time.time(),
                 run_id))
            if step:
                self._step(db, run_id, *step)

    def calls(self, response_id: str) -> list[Call]:
        rows = self._read("SELECT call_id, run_id, response_id, name, arguments, output, key,"
                          " order_id FROM calls WHERE response_id = ? ORDER BY seq",
                          (response_id,))
        return [Call.model_validate(dict(r)) for r in rows]

    def calls_named(self, name: str) -> list[Call]:
        """Every call to one tool, across all runs, oldest response first (one query)."""
        rows = self._read("SELECT call_id, run_id, response_id, name, arguments, output, key,"
                          " order_id FROM calls WHERE name = ? ORDER BY run_id, response_id, seq",
                          (name,))
        return [Call.model_validate(dict(r)) for r in rows]

    def record_output(self, lease: Lease, call_id: str, output: str,
                      steps: list[tuple[str, dict[str, Any]]],
                      audit: dict[str, Any] | None = None) -> None:
        """Boundary 3: a call's output is saved the moment the call returns."""
        run_id = lease.run_id
        # Not durable: lost with the power, the call runs again and its stand-in hands back
        # what it did the first time (same idempotency key); read-only calls just re-run.
        with self._tx(durable=False) as db:
            self._fence(db, lease, f"SET lease_at = {self.now}, updated_at = ?", (time.time(),))
            db.execute("UPDATE calls SET output = ? WHERE run_id = ? AND call_id = ?"
                       " AND output IS NULL", (output, run_id, call_id))
            self._steps(db, run_id, list(steps))
            self._output_kept(db, run_id, steps)
            if audit:
                self._audit(db, run_id=run_id, **audit)


def _item_text(item: dict[str, Any]) -> str:
    """A transcript item as stored: compact JSON, as the provider would read it back."""
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))
