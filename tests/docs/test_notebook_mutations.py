"""The notebooks fail when the pattern they teach is broken.

Each mutant below is one named break of the package, of the kind a careless change could make:
a reused refund reporting a new id, a process that lost its lease still paying, a decision not
priced again, reconciliation looking one way only, and so on; a few break the stand-in
(``../offline_model/``), the notebooks' helpers (``../notebooks/tutorial.py``) or a check in a
notebook's own cell (``walkthrough.ipynb``, ``beyond.ipynb``), where the check guards those.
For each one the package is copied to a temporary folder (the real files are never touched),
the break is applied to the copy, and the code cells of the notebook whose checks cover it run
with the copy first on PYTHONPATH, so the cells and every process they start import the broken
package. The run must fail, and its first failure must be the check written for the mutant
(``check(claim, holds)`` raising AssertionError with the mutant's claim), not an exception on
the way. A mutant with ``first`` is one an earlier check catches first: its run records failed
checks and goes on (notebook_runner.py --soft-checks), its first failed check must be ``first``
and the mutant's own check must fail later in the same run. The unbroken copy must pass both
notebooks, which shows that the copy is what ran.

The cells run as one plain Python process (notebook_runner.py), not under a Jupyter kernel and
nbval: CI runs the real notebooks under strict nbval anyway, and here only the first failing
check matters, so each run stops at the cell of its mutant's check. That halved the CPU time of
the 44 mutants there were when the runner replaced nbval (305 s to 162 s, one run each).

A mutant whose target text moved (other work reshapes the package) fails loudly, naming the text
to re-point: an edit's ``old`` text must occur exactly once in its file, or, when the file no
longer has it, exactly once in the whole package.

The runs go in parallel, two at a time (or one per CPU). Set REFUND_AGENT_MUTANTS=name,name to
run only some, and REFUND_AGENT_MUTATION_REPORT=path to write which cells caught which mutant
(a JSON file; the runs then go on past a failing cell, up to the mutant's check).
"""

from __future__ import annotations

import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {"walkthrough": ROOT / "notebooks" / "walkthrough.ipynb",
             "beyond": ROOT / "notebooks" / "beyond.ipynb"}
NOTEBOOK = NOTEBOOKS["walkthrough"]
PACKAGE = ROOT / "refund_agent"
RUNNER = Path(__file__).with_name("notebook_runner.py")

# A guard against a hang, not a measure of speed: the mutants take 5 to 13 minutes on 2 cores,
# depending on what else the machine runs.
pytestmark = pytest.mark.timeout(1800)


@dataclass(frozen=True)
class Mutant:
    """One named break: exact text replacements in files of the package (paths relative to it).

    ``notebook`` is the notebook whose checks catch it, and ``claim`` the start of the check
    that must fail (the text ``check`` prints and raises).
    """

    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...]
    notebook: str = "walkthrough"
    claim: str = ""
    # The same break written for another shape of the code (the loop split into agent.py,
    # turns.py and calls.py): the first set of edits whose texts are all found is applied.
    alternatives: tuple[tuple[tuple[str, str, str], ...], ...] = ()
    # A break an earlier check catches first (the start of its claim): the run goes on past
    # failed checks (notebook_runner.py --soft-checks), and ``claim`` must fail as well. This is
    # how the check at the end of a scenario is shown to fail on its own, not only to be
    # stopped in front of.
    first: str = ""


# Writes that no longer check the lease's epoch: beyond's fencing cells (its timeline and a
# worker's claim).
FENCING_REMOVED = (
    ("store/leases.py",
     '        if row is None or (row["lease_token"], row["lease_epoch"]) != '
     "(lease.token, lease.epoch):\n",
     "        if row is None:  # MUTANT\n"),
    # The write that carries its own fence (one UPDATE ... WHERE the lease is still ours).
    ("store/leases.py",
     '            where = (f"UPDATE runs {update} WHERE id = ? AND lease_token = ?'
     ' AND lease_epoch = ?"\n'
     '                     + (" RETURNING *" if returning else ""))\n'
     '            cursor = db.execute(where + (returning_also if returning else ""),\n'
     "                                (*args, lease.run_id, lease.token, lease.epoch))\n",
     '            where = (f"UPDATE runs {update} WHERE id = ?"  # MUTANT\n'
     '                     + (" RETURNING *" if returning else ""))\n'
     '            cursor = db.execute(where + (returning_also if returning else ""),\n'
     "                                (*args, lease.run_id))\n"),
)


# A decision that no longer compares-and-sets on 'pending': both clicks of a race win.
SECOND_APPROVAL_ACCEPTED = (
    ("store/approvals.py",
     '        if approval.status == "pending":\n            return approval\n',
     "        if True:  # MUTANT\n            return approval\n"),
    ("store/approvals.py",
     "amount_cents = ? WHERE id = ?\"\n                   \" AND status = 'pending'\",",
     'amount_cents = ? WHERE id = ?",  # MUTANT'),
)

# A stored response the API no longer has fails the run, instead of the transcript being resent
# (the edit for the loop in agent.py, then in loop.py).
STORED_RESPONSE_FALLBACK_REMOVED = (
    (("agent.py",
      "                if not missing or not self._response_gone(exc, missing):\n",
      "                if True:  # MUTANT: no fallback to the transcript\n"),),
    (("loop.py",
      "            if not missing or not response_gone(self.model.client, self.settings.provider,\n"
      "                                                exc, missing):\n",
      "            if True:  # MUTANT: no fallback to the transcript\n"),),
)


MUTANTS = [
    # -- the ten the walkthrough has caught since it had mutants --------------------------------
    Mutant("reused_refund_new_id", "a reused refund reports a new refund id", ((
        "outside/payments.py",
        '        return self.log.once(request.key, request.record(),\n'
        '                             lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})\n',
        '        record, reused = self.log.once(request.key, request.record(),\n'
        '            lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})\n'
        '        if reused:  # MUTANT\n'
        '            record = {**record, "refund_id": "re_" + uuid.uuid4().hex[:16]}\n'
        '        return record, reused\n'),),
        claim="the run reports that same refund, as reused"),
    Mutant("verify_always_ok", "verify_audit and reconcile always answer that all is well", (
        ("store/auditlog.py",
         "        entries = self.audit() if entries is None else entries\n",
         "        return None  # MUTANT\n"
         "        entries = self.audit() if entries is None else entries\n"),
        ("reconcile.py",
         "    problem = store.verify_audit(audit, approval_list)\n    if problem:\n"
         "        return problem\n",
         "    return None  # MUTANT\n    problem = store.verify_audit(audit, approval_list)\n"
         "    if problem:\n        return problem\n"),
    ), notebook="beyond", claim="caught: a refund nobody approved"),
    Mutant("policy_line_checks_removed", "final-sale and already-held lines can be refunded", ((
        "policy.py",
        '    if item.final_sale:\n'
        '        return f"{item.name} ({line}) is final sale and is never refunded."\n'
        '    if units is not None and not 1 <= units <= item.quantity:\n',
        '    if units is not None and not 1 <= units <= item.quantity:  # MUTANT\n'), (
        "policy.py",
        '    left = item.quantity - held_units(order, line, holders)\n',
        '    left = item.quantity  # MUTANT: what other refunds hold is ignored\n'),),
        notebook="beyond", claim="the gift card is refused"),
    Mutant("outbox_not_idempotent", "the outbox sends again for a key it has seen", (
        ("outside/email.py", "import uuid\n", "import json\nimport uuid\n"),
        ("outside/email.py",
         '        record, reused = self.log.once(\n'
         '            key, request, lambda: {"message_id": "msg_" + uuid.uuid4().hex[:16],\n'
         '                                   **thread_fields(thread)})\n',
         '        record = {"idempotency_key": key, "request": request,  # MUTANT\n'
         '                  "message_id": "msg_" + uuid.uuid4().hex[:16],\n'
         '                  **thread_fields(thread)}\n'
         '        self.log.path.parent.mkdir(parents=True, exist_ok=True)\n'
         '        with open(self.log.path, "a", encoding="utf-8") as fh:\n'
         '            fh.write(json.dumps(record) + "\\n")\n'
         '        reused = False\n'),
    ), notebook="beyond", claim="one email, although its process died after sending"),
    Mutant("second_approval_accepted", "a decision no longer compares-and-sets on 'pending'",
           SECOND_APPROVAL_ACCEPTED, notebook="beyond", claim="exactly one click won"),
    Mutant("approval_wrong_response_id",
           "the approval records the response the turn continued from, not the one that "
           "made the call", ((
               "store/approvals.py",
               "            proposal = price(self._holds(db, subject))\n",
               "            proposal = price(self._holds(db, subject))\n"
               "            row = db.execute(  # MUTANT\n"
               '                "SELECT response_id FROM calls WHERE run_id = ? AND '
               'response_id != ?"\n'
               '                " ORDER BY rowid DESC LIMIT 1", (run_id, response_id)).fetchone()\n'
               "            response_id = row[0] if row else response_id\n"),),
           claim="the approval saved the three values"),
    Mutant("store_false", "requests are sent with store=False", ((
        "agent.py", '"store": not keep_nothing,', '"store": False,'),),
        claim="every request asked the API to store its response",
        alternatives=((("turns.py", '"store": not zero_retention,', '"store": False,'),),)),
    Mutant("partial_pays_unticked", "a partial approval pays the lines the person unticked", ((
        "calls.py", "quantity=line.quantity)\n        for line in approval.kept])",
        "quantity=line.quantity)\n        for line in approval.lines])  # MUTANT"),),
        notebook="beyond", claim="the payment holds the kept line only"),
    Mutant("fencing_removed", "writes no longer check the lease's epoch", FENCING_REMOVED,
           notebook="beyond", first="the stalled owner's write is refused", claim="epoch"),
    Mutant("saved_outputs_rerun", "a resumed run runs calls whose output was saved again", ((
        "agent.py", "                if call.output is not None:\n                    output = "
        "call.output\n",
        "                if False:  # MUTANT\n                    output = call.output\n"),),
        notebook="beyond", claim="3. no call ran twice"),
    # -- every other durable boundary and guarantee the notebooks state -------------------------
    # The loop checks the lease itself before any effect function runs (loop.py, _run_call):
    # these two break that check, one branch each. They replace the desk's own fence calls
    # before paying and emailing, which the loop's check made redundant (#44).
    Mutant("loop_lease_unchecked_before_paying", "the loop no longer checks the lease before an "
           "approved effect: a process that lost its run's lease still pays", ((
               "loop.py",
               "                self.store.check_lease(lease)   # a process that lost the run "
               "does nothing\n"
               "                outcome = tool.run(self.context(run, lease, call), args, "
               "approval)",
               "                outcome = tool.run(self.context(run, lease, call), args, "
               "approval)  # MUTANT: unfenced"),),
           notebook="beyond", claim="the process that lost the run paid nothing"),
    Mutant("loop_lease_unchecked_before_emailing", "the loop no longer checks the lease before "
           "an effect: a process that lost its run's lease still emails", ((
               "loop.py",
               "            if tool.has_effect:\n"
               "                self.store.check_lease(lease)   # a process that lost the run "
               "does nothing\n",
               "            if tool.has_effect:\n"
               "                pass  # MUTANT: the lease is not checked before an effect\n"),),
           notebook="beyond", claim="the process that lost the run sent no email"),
    Mutant("decision_not_repriced", "a decision pays the proposal's line amounts, not a new quote",
           (("agent.py", "requote=requote if approve else None,",
             "requote=None,  # MUTANT"),),
           notebook="beyond", claim="the kept line is priced again"),
    Mutant("reconcile_log_to_store_only",
           "reconciliation no longer checks that every approved payment has its refund", ((
               "reconcile.py",
               "        _money_events_have_refunds(audit, refunds, names[0]),\n"
               "        _made_refunds_have_records(approvals, refunds, refund_calls, names[0]),\n",
               "        # MUTANT: one direction only\n"),),
           notebook="beyond", claim="caught: an approved refund missing"),
    Mutant("reconcile_store_to_log_only",
           "reconciliation no longer checks that every refund in the log was approved", ((
               "reconcile.py",
               "        _refunds_match_approvals(refunds, approvals, audit, refund_calls),\n",
               "        # MUTANT: one direction only\n"),),
           notebook="beyond", claim="caught: a refund nobody approved"),
    Mutant("reconcile_skips_outbox", "reconciliation no longer compares the outbox with the calls",
           (("reconcile.py",
             "        _emails_match_calls(emails, sends),\n"
             "        _sent_calls_have_emails(sends, emails, names[1]),\n",
             "        # MUTANT: the outbox is not reconciled\n"),),
           notebook="beyond", claim="caught: an email no call sent"),
    Mutant("audit_hash_skips_actor", "an audit entry's hash leaves out who acted", ((
        "store.py", '_AUDIT_FIELDS = ("at", "event", "actor", "pid",',
        '_AUDIT_FIELDS = ("at", "event", "pid",  # MUTANT: no actor\n'),),
        notebook="beyond", claim="an edit of any of the"),
    Mutant("payment_audit_split",
           "a payment's audit line is written in its own step after the output", ((
               "agent.py",
               "        self.store.record_output(lease, call.call_id, text, steps, audit)\n"
               '        crash_point("after_tool", self._crash)\n',
               "        self.store.record_output(lease, call.call_id, text, steps)  # MUTANT\n"
               '        crash_point("after_tool", self._crash)\n'
               "        if audit:\n"
               "            self.store.record_output(lease, call.call_id, text, [], audit)\n"),),
           notebook="beyond", claim="killed right after paying: the payment has its audit line",
           alternatives=((
               ("loop.py",
                "self.store.record_output(lease, call.call_id, output.text, output.steps,"
                " output.audit)\n",
                "self.store.record_output(lease, call.call_id, output.text, output.steps)"
                "  # MUTANT\n"),
               ("agent.py",
                "        text = self._record(lease, call, outcome)\n"
                '        self._crash_at("after_tool")\n',
                "        text = self._record(lease, call, outcome)\n"
                '        self._crash_at("after_tool")\n'
                "        if outcome.audit:  # MUTANT: the audit line in a step of its own\n"
                "            self.store.record_output(lease, call.call_id, text, [], "
                "outcome.audit)\n")),)),
    Mutant("lookup_order_any_customer", "lookup_order shows another customer's order", ((
        "tools.py",
        "    def lookup_order(self, args: LookupOrder) -> dict[str, Any]:\n"
        "        order = self.owned_order(args.order_id)\n",
        "    def lookup_order(self, args: LookupOrder) -> dict[str, Any]:\n"
        "        order = self.shop.order(args.order_id) or self.owned_order(args.order_id)  "
        "# MUTANT\n"),),
        notebook="beyond", claim="the stranger's lookup found nothing"),
    Mutant("expiry_disabled", "approvals never expire", ((
        "loop.py", "        return self.store.expire(self.settings.approval_days * 86400, "
                   "agent=self.agent_name)\n",
        "        return []  # MUTANT: nothing ever expires\n"),),
        notebook="beyond", claim="at 7.1 days it expires"),
    Mutant("stored_response_fallback_removed",
           "a gone stored response fails the run instead of resending the transcript",
           STORED_RESPONSE_FALLBACK_REMOVED[0], alternatives=STORED_RESPONSE_FALLBACK_REMOVED[1:],
           notebook="beyond", claim="the gone response was replaced by the transcript"),
    # -- each durable boundary broken the way a careless change would (issue 35) --------------
    Mutant("run_and_email_split", "boundary 1: the customer's email saved in a transaction of its "
           "own, after the run", ((
               "store/runs.py",
               '            self._step(db, run_id, "email", {"from": sender, "name": sender_name,\n'
               '                                             "subject": subject, "body": email})\n'
               '        return self.run(run_id)\n',
               '        with self._tx() as db:  # MUTANT: the email in a transaction of its own\n'
               '            self._step(db, run_id, "email", {"from": sender, "name": sender_name,\n'
               '                                             "subject": subject, "body": email})\n'
               '        return self.run(run_id)\n'),),
           claim="1. the run and its email: one transaction",
           alternatives=((("store/runs.py",
               '        self._step(db, run_id, "email", {"from": sender, "name": sender_name,\n'
               '                                         "subject": subject, "body": email,'
               ' **(extra or {})})\n        return run_id\n',
               '        return run_id  # MUTANT: the email is written apart, below\n'),
              ("store/runs.py",
               '                                      raised_by=raised_by, agent=agent,\n'
               '                                      trace_context=trace_context)\n'
               '        return self.run(run_id)\n',
               '                                      raised_by=raised_by, agent=agent,\n'
               '                                      trace_context=trace_context)\n'
               '        with self._tx() as db:  # MUTANT: the email in a transaction of its own\n'
               '            self._step(db, run_id, "email", {"from": sender, "name": sender_name,\n'
               '                                             "subject": subject, "body": email})\n'
               '        return self.run(run_id)\n')),)),
    Mutant("response_and_calls_split", "boundary 2: the run's pointer to the response committed "
           "apart from the response's calls", ((
               "store/responses.py",
               "                returning_also=self._released_columns if finish is not None"
               " else \"\")\n"
               "            if resent is not None:\n",
               "                returning_also=self._released_columns if finish is not None"
               " else \"\")\n"
               "        with self._tx() as db:  # MUTANT: the calls in a transaction of their own\n"
               "            if resent is not None:\n"),),
           claim="2. each response and its calls: one transaction"),
    Mutant("approval_and_waiting_split", "boundary 4: the pending approval and the run's waiting "
           "status written in two transactions", ((
               "store/approvals.py",
               "                if release else \"\"), (RunStatus.WAITING, time.time()))\n",
               "                if release else \"\"), (RunStatus.WAITING, time.time()))\n"
               "        with self._tx() as db:  # MUTANT: the approval apart from the pause\n"),),
           claim="4. the approval, 'requested' and 'waiting': one transaction"),
    Mutant("approved_audit_after_commit", "boundary 5: the 'approved' audit line written after "
           "the decision committed", (
               ("store/approvals.py",
                '        self._audit(db, "approved", by, run_id=approval.run_id,'
                ' approval_id=approval.id,\n',
                "        self._late = by  # MUTANT: audited after the commit\n"
                "        self._late_kw = dict(run_id=approval.run_id, approval_id=approval.id,\n"),
               ("store/approvals.py",
                '                late = self._close(db, approval, "rejected", by, note)\n'
                "        if late:\n",
                '                late = self._close(db, approval, "rejected", by, note)\n'
                "        if approve and not late and getattr(self, '_late', None):  # MUTANT\n"
                "            with self._tx() as db:\n"
                '                self._audit(db, "approved", self._late, **self._late_kw)\n'
                "            self._late = None\n"
                "        if late:\n"),
           ), claim="5. the decision and its audit line: one transaction"),
    Mutant("idempotency_conflict_ignored", "boundary 6: the same key with other arguments gets "
           "the first record back instead of an error", ((
               "outside/ledger.py",
               '                    if record.get("request") != request:\n',
               "                    if False:  # MUTANT: a conflicting request is not refused\n"),),
           claim="the same key with another amount is refused"),
    Mutant("lease_epoch_not_bumped", "boundary 7: a takeover keeps the old fencing token",
           (("store/leases.py", '        epoch, now = row["lease_epoch"] + 1, time.time()\n',
             '        epoch, now = row["lease_epoch"], time.time()  # MUTANT\n'),),
           notebook="beyond", claim="7. the worker claimed the run under a fresh lease"),
    Mutant("hand_over_unfenced", "the hand-over email is sent before the lease is checked", ((
        "desk/actions.py",
        "    store.escalate_run(lease, CANNOT_CONTINUE, why)\n"
        '    _record, reused = outbox.send(f"{run_id}/follow-up", run.sender, f"Re: {run.subject}",'
        " body)\n",
        '    _record, reused = outbox.send(f"{run_id}/follow-up", run.sender, f"Re: {run.subject}",'
        " body)\n"
        "    store.escalate_run(lease, CANNOT_CONTINUE, why)  # MUTANT: fenced after sending\n"),),
        notebook="beyond", claim="nor can it hand the run over",
           alternatives=((("desk/actions.py",
        "    store.escalate_run(lease, CANNOT_CONTINUE, why)\n"
        '    _record, reused = send_on_thread(store, lease, outbox, f"{run_id}/follow-up", run,'
        " body)\n",
        '    _record, reused = send_on_thread(store, lease, outbox, f"{run_id}/follow-up", run,'
        " body)\n"
        "    store.escalate_run(lease, CANNOT_CONTINUE, why)  # MUTANT: fenced after\n"),),)),
    Mutant("expiry_by_process_clock", "expiry reads this process's clock, not the database's", ((
        "store/approvals.py",
        "requested_at < {self.now} - ?{mine}",
        "requested_at < {time.time()} - ?{mine}"),),
        notebook="beyond", claim="a process clock 8 days ahead expires nothing"),
    Mutant("approval_days_not_seven", "approvals expire after 3 days by default", (
        ("config.py", "APPROVAL_DAYS = 7.0\n", "APPROVAL_DAYS = 3.0  # MUTANT\n"),),
        notebook="beyond", claim="7 days by default"),
    Mutant("no_chain_after_resend", "after the transcript was resent once, later requests "
           "no longer chain from the stored response", ((
               "loop.py",
               "previous_response_id=run.last_response_id, zero_retention=keep_nothing,",
               "previous_response_id=None if any(s.kind == 'resent' for s in  # MUTANT\n"
               "                self.store.steps(run.id)) else run.last_response_id,\n"
               "            zero_retention=keep_nothing,"),),
           notebook="beyond", claim="and the next request chains from the new response"),
    Mutant("rejection_note_dropped", "the reviewer's note never reaches the rejected customer", ((
        "desk/actions.py",
        '"note": approval.note or "", "lines": lines}\n',
        '"note": "", "lines": lines}  # MUTANT\n'),),
        notebook="beyond", claim="the customer is told the reviewer's note"),
    Mutant("partial_note_dropped", "a partial approval's note is not passed on", ((
        "desk/actions.py", '        output["note"] = approval.note or ""\n',
        "        pass  # MUTANT: the note is dropped\n"),),
        notebook="beyond", claim="the customer is told which line stays"),
    Mutant("parallel_tool_calls", "requests allow parallel tool calls", ((
        "turns.py", '"parallel_tool_calls": False,', '"parallel_tool_calls": True,'),),
        claim="and for one call at a time"),
    Mutant("customer_reads_team_notes", "the simulated customer is sent the team's notes", ((
        "desk/customer.py", '        elif step.kind == "message":\n',
        '        elif step.kind == "decision" and step.data.get("note"):  # MUTANT\n'
        '            blocks.append(f"--- Email from support ---\\n{step.data[\'note\']}")\n'
        '        elif step.kind == "message":\n'),),
        notebook="beyond", claim="the simulated customer read the emails, never the team's note"),
    # -- more claims the walkthrough and beyond make, each with the break that fails it ---------
    Mutant("decision_not_in_output", "the resumed call's output leaves out who approved it", ((
        "desk/actions.py", '"amount": approval.amount, "approved_by": approval.decided_by,',
        '"amount": approval.amount,  # MUTANT: no approver'),),
        claim="its input is the call's output, with the decision"),
    Mutant("refund_keyed_by_call_id_alone", "the payment's idempotency key is the call id alone",
           (("desk/actions.py", "ctx.payments.refund(payment_request(approval.id,",
             "ctx.payments.refund(payment_request(approval.call_id,  # MUTANT\n"
             "            "),),
           claim="one refund, keyed by the run and the call"),
    Mutant("rejection_pays", "a rejected refund is paid", ((
        "loop.py", "            elif approval.status != ApprovalStatus.APPROVED or (",
        "            elif approval.status not in (ApprovalStatus.APPROVED,  # MUTANT\n"
        "                                         ApprovalStatus.REJECTED) or ("),),
        notebook="beyond", claim="rejected: nothing paid"),
    Mutant("reuse_audited_as_issued", "a reused refund is audited as a new one", ((
        "desk/actions.py", '"event": "reused" if reused else "issued"',
        '"event": "issued"  # MUTANT\n           '),),
        claim="audit: requested, approved, reused"),
    Mutant("late_click_not_audited", "the losing click of a race leaves no audit line", ((
        "store/approvals.py", "        if audit_late:\n", "        if False:  # MUTANT\n"),),
        notebook="beyond", claim="the late click is audited 'ignored'"),
    Mutant("declined_line_stays_held", "a line the approver unticked stays reserved", ((
        "store/approvals.py", "UPDATE approval_lines SET held = 0, decision = 'declined'",
        "UPDATE approval_lines SET held = 1, decision = 'declined'"),),
        notebook="beyond", claim="the declined line is free again"),
    Mutant("approver_limit_ignored", "an approver's limit is not checked", ((
        "store/approvals.py", "reason = None if limit_cents is None else limit_problem(",
        "reason = None if True else limit_problem(  # MUTANT"),),
        notebook="beyond", claim="Sam's $40 limit refuses"),
    Mutant("crash_points_disabled", "a named crash point does not kill the process", ((
        "crash.py", "        os.kill(os.getpid(), signal.SIGKILL)\n",
        "        pass  # MUTANT: the crash point does nothing\n"),),
        claim="the approving process was killed with SIGKILL"),
    Mutant("reconcile_misses_unsent_email", "reconciliation no longer checks that every sent "
           "call has its email", ((
               "desk/reconcile.py", "        _sent_calls_have_emails(sends, emails, names[1]),\n",
               "        # MUTANT: a sent call's missing email goes unnoticed\n"),),
           notebook="beyond", claim="caught: a sent email missing"),
    # -- the checks that had no break of their own (issue 35: every check can fail) ------------
    Mutant("pause_keeps_lease", "a run that pauses for a person keeps its lease", ((
        "store/approvals.py",
        "                if release else \"\"), (RunStatus.WAITING, time.time()))\n",
        "                if False else \"\"), (RunStatus.WAITING, time.time()))  # MUTANT\n"),),
        claim="the run waits, and no process holds it"),
    Mutant("resume_never_chains", "every turn sends the whole transcript again instead of "
           "chaining from the stored response", ((
               "loop.py", "        resent: dict[str, Any] | None = None\n        try:\n",
               "        resent: dict[str, Any] | None = None\n"
               '        if params.get("previous_response_id"):  # MUTANT: never chains\n'
               "            params = turns.resend_request(params, self._history(run), step.items)\n"
               "        try:\n"),),
           claim="the resume continues the response that made the call"),
    Mutant("reply_resends_transcript", "a customer's reply is sent with the whole transcript, "
           "not on top of the last stored response", ((
               "loop.py", "        resent: dict[str, Any] | None = None\n        try:\n",
               "        resent: dict[str, Any] | None = None\n"
               "        if step.reply_ids:  # MUTANT: a reply starts the conversation over\n"
               "            params = turns.resend_request(params, self._history(run), step.items)\n"
               "        try:\n"),),
           notebook="beyond", claim="the reply continues the last stored response"),
    Mutant("reply_resends_system_prompt", "a customer's reply goes with the system prompt again",
           (("turns.py",
             '    return NextInput([user_message(f"The customer wrote back:\\n\\n{r.text}") '
             'for r in replies],\n',
             '    return NextInput([{"role": "system", "content": "You answer customers."}] + [\n'
             '        user_message(f"The customer wrote back:\\n\\n{r.text}") for r in replies],'
             '  # MUTANT\n'),),
           notebook="beyond", claim="and is the only input"),
    Mutant("crash_after_refund_too_late", "CRASH_AFTER_REFUND kills the process after the "
           "refund's output was saved, not before", ((
               "config.py", '        crash.add("after_refund")\n',
               '        crash.add("after_tool")  # MUTANT: after the output is saved\n'),),
           claim="it paid, but never saved that it did"),
    Mutant("resume_misses_orphans", "resume leaves out runs whose process died mid-turn", ((
        "loop.py",
        "        runs = self.store.orphaned_runs(mine) + self.store.decided_but_waiting(mine)\n",
        "        runs = self.store.decided_but_waiting(mine)  # MUTANT: no orphaned runs\n"),),
        claim="a resume would pick the run up"),
    Mutant("payments_not_idempotent", "the payment stand-in pays again for a key it has seen", ((
        "outside/payments.py",
        '        return self.log.once(request.key, request.record(),\n'
        '                             lambda: {"refund_id": "re_" + uuid.uuid4().hex[:16]})\n',
        '        record = {"idempotency_key": request.key, "request": request.record(),\n'
        '                  "refund_id": "re_" + uuid.uuid4().hex[:16]}  # MUTANT: no key check\n'
        '        self.log.path.parent.mkdir(parents=True, exist_ok=True)\n'
        '        with open(self.log.path, "a", encoding="utf-8") as fh:\n'
        '            fh.write(__import__("json").dumps(record) + "\\n")\n'
        '        return record, False\n'),),
        claim="6. still one refund for the call"),
    Mutant("fencing_removed_walkthrough", "writes no longer check the lease's epoch (the "
           "stalled owner a worker's claim fenced off, once in the walkthrough)", FENCING_REMOVED,
           notebook="beyond", claim="the stalled owner's write is refused"),
    Mutant("return_fee_dropped", "a change of mind is refunded without the return fee", ((
        "desk/policy.py",
        "amount_cents=to_cents(item.price) * units - fees.get(item.sku, 0),",
        "amount_cents=to_cents(item.price) * units,  # MUTANT: no return fee\n"
        "                        "),),
        notebook="beyond", first="the kept line is priced again",
        claim="proposed exactly what the policy computes"),
    Mutant("expired_pays", "an expired refund is paid as if it were approved", ((
        "loop.py", "            elif approval.status != ApprovalStatus.APPROVED or (",
        "            elif approval.status not in (ApprovalStatus.APPROVED,  # MUTANT\n"
        "                                         ApprovalStatus.EXPIRED) or ("),),
        notebook="beyond", claim="the run told the customer and paid nothing"),
    Mutant("simulated_reply_not_marked", "the simulated customer's replies are saved as real ones",
           (("desk/customer.py", "simulated=True, lease=lease)",
             "simulated=False, lease=lease)  # MUTANT"),),
           notebook="beyond", claim="at most 3 simulated replies"),
    Mutant("second_approve_taken", "Loop.approve answers a second click with the approval "
           "instead of refusing it", ((
               "loop.py",
               "        return self.decide(approval_id, True, by=by, note=note, "
               "fingerprint=fingerprint)\n",
               "        try:  # MUTANT: a second approve is taken as done\n"
               "            return self.decide(approval_id, True, by=by, note=note, "
               "fingerprint=fingerprint)\n"
               "        except Exception:\n"
               "            return self.store.approval(approval_id)\n"),),
           # The race's clicks go through Loop.approve too (#44: fingerprints), so it sees
           # this first; the wire desk's double click must fail on its own as well.
           first="a stale fingerprint is refused",
           claim="the second click is refused, naming the wire and who approved it"),
    Mutant("stand_in_xai_takes_instructions", "the stand-in's xAI dialect accepts instructions "
           "with previous_response_id", ((
               "../offline_model/events.py",
               '    if dialect == XAI and body.get("previous_response_id") and '
               'body.get("instructions"):\n',
               "    if False:  # MUTANT: xAI's refusal is not imitated\n"),),
           notebook="beyond", claim="xAI refuses instructions with previous_response_id"),
    Mutant("transaction_check_weakened", "the notebook's one_transaction looks only for the "
           "first statement", ((
               "../notebooks/tutorial.py",
               "    return bool(with_first) and all(any(o in sql for sql in tx) for tx in "
               "with_first\n                                    for o in others)\n",
               "    return bool(with_first)  # MUTANT: the others are not looked for\n"),),
           claim="without transactions, the first check fails"),
    Mutant("restart_check_weakened", "the restart cell counts distinct calls, not runs of them",
           (("beyond.ipynb", "and len(ran) == len(set(ran)) == 3)",
             "and len(set(ran)) == 3)  # MUTANT: distinct calls"),),
           notebook="beyond", claim="the broken store fails the check"),
    Mutant("ask_question_dropped", "the approver's question never reaches the customer", ((
        "desk/actions.py", '"question": approval.note or "", "lines": lines,',
        '"question": "", "lines": lines,  # MUTANT'),),
        notebook="beyond", claim="the run waits on the customer, question sent"),
    Mutant("asked_lines_stay_held", "a proposal sent back with a question keeps its lines "
           "reserved", ((
               "store/approvals.py",
               '        db.execute("UPDATE approval_lines SET held = 0, decision = ? WHERE '
               'approval_id = ?",\n                   (status, approval.id))\n',
               "        db.execute(\"UPDATE approval_lines SET held = (? = 'asked'), decision = ?\""
               "  # MUTANT\n"
               '                   " WHERE approval_id = ?", (status, status, approval.id))\n'),),
           notebook="beyond", claim="the reply brings a new proposal, nothing paid yet"),
    Mutant("any_password_signs_in", "a wrong password signs in", ((
        "desk/accounts.py", "    return hmac.compare_digest(got, expected)\n",
        "    return True  # MUTANT: any password signs in\n"),),
        notebook="beyond", claim="a wrong password is refused"),
    Mutant("reconcile_counts_declined_lines", "reconciliation holds a partial refund to every "
           "line proposed, declined ones too", ((
               "desk/reconcile.py", "        elif pairs != _pairs(a.kept):\n",
               "        elif pairs != _pairs(a.lines):  # MUTANT: the declined lines too\n"),),
           notebook="beyond", claim="this desk's books agree"),
    # -- issue 35: every check can fail. The ends of scenarios: an earlier check catches each
    # break first; the run goes on (soft checks) and the scenario's own end check fails too ---
    Mutant("double_click_both_carried_out", "a decision no longer compares-and-sets on "
           "'pending': the run pays on the last of two decisions", SECOND_APPROVAL_ACCEPTED,
           notebook="beyond", first="exactly one click won",
           claim="the run pays once, on the one decision that won"),
    Mutant("stalled_owner_unfenced_end", "writes no longer check the lease's epoch: the stalled "
           "owner's hand-over email reaches the customer beside the new owner's answer",
           FENCING_REMOVED, notebook="beyond", first="the stalled owner's write is refused",
           claim="the new owner finishes and pays once; the customer got its one answer"),
    Mutant("customer_email_copied_to_shop", "every email to the customer is copied to the "
           "shop's support address", ((
               "desk/actions.py",
               '    ctx.crash("after_email")\n',
               '    ctx.outbox.send(f"{ctx.call.key}/copy",  # MUTANT: a copy for the shop\n'
               '                    ctx.shop.info.support_email, f"Re: {run.subject}", body)\n'
               '    ctx.crash("after_email")\n'),),
           notebook="beyond", first="the customer is told the reviewer's note",
           claim="the answer went to Maya only"),
    Mutant("rejection_reaches_effect", "the loop hands a rejected proposal to the effect "
           "function: an agent's effect that checks no decision carries it out (#44)", ((
               "loop.py", "            elif approval.status != ApprovalStatus.APPROVED or (",
               "            elif approval.status not in (ApprovalStatus.APPROVED,  # MUTANT\n"
               "                                         ApprovalStatus.REJECTED) or ("),),
           claim="rejected: send_wire never ran"),
    Mutant("stored_response_fallback_removed_end", "a gone stored response fails the run "
           "instead of resending the transcript: the run never pays",
           STORED_RESPONSE_FALLBACK_REMOVED[0], alternatives=STORED_RESPONSE_FALLBACK_REMOVED[1:],
           notebook="beyond", first="the gone response was replaced by the transcript",
           claim="the run finished and paid once"),
    Mutant("fencing_removed_end", "writes no longer check the lease's epoch: the process that "
           "lost the run also pays and emails", FENCING_REMOVED, notebook="beyond",
           first="the stalled owner's write is refused",
           claim="the new owner finishes: one refund, one email"),
    Mutant("order_any_sender", "the tools' ownership check is gone: whoever names an order has "
           "it (looked up, priced, proposed)", ((
               "desk/tools.py",
               "        if order is None or not same_address(order.customer.email, self.sender):\n",
               "        if order is None:  # MUTANT: whoever names the order may have it\n"),),
           notebook="beyond", first="the stranger's lookup found nothing",
           claim="no refund was proposed to the stranger"),
    # -- the settings' checks: each the first to fail -------------------------------------------
    Mutant("store_file_in_temp_folder", "the SQLite file goes in the temporary folder, not the "
           "settings' output folder (one file for every desk on the host)", ((
               "config.py", '        return self.output_dir / "refund-agent.sqlite3"\n',
               '        return Path(os.environ.get("TMPDIR", "/tmp")) / "refund-agent.sqlite3"'
               "  # MUTANT\n"),),
           notebook="beyond", claim="each desk runs on SQLite, the file in its output folder"),
    Mutant("postgres_scheme_short_only", "only a postgres:// URL opens PostgreSQL; a "
           "postgresql:// one opens a SQLite file of that name", ((
               "store/base.py",
               'target.startswith(("postgresql://", "postgres://"))',
               'target.startswith("postgres://")  # MUTANT: one spelling'),),
           notebook="beyond", claim="the store is chosen by the settings alone"),
]
MUTANTS += [
    # -- issue 45: the two planted bugs both notebooks let pass, and the decision's forms -------
    Mutant("claim_takes_live_run", "claim() takes a run whose lease a live process still holds",
           (("store/leases.py",
             '                if row["lease_token"] is None or not self._lease_live(db, row):\n',
             "                if True:  # MUTANT: a live holder's run is taken too\n"),),
           notebook="beyond", claim="7. a worker takes no run a live process holds"),
    Mutant("customer_reads_agent_notes", "the simulated customer is shown the agent's notes for "
           "the team and its reasoning, not only the emails", ((
               "desk/customer.py",
               '            blocks.append(f"--- Email from support ---\\n{step.data[\'body\']}")\n',
               '            blocks.append(f"--- Email from support ---\\n{step.data[\'body\']}")\n'
               '        elif step.kind in ("note", "reasoning"):  # MUTANT\n'
               '            blocks.append(f"--- Note ---\\n{step.data[\'text\']}")\n'),),
           notebook="beyond", claim="nor the agent's notes for the team or its reasoning"),
    Mutant("stale_fingerprint_accepted", "a decision naming a fingerprint the approval no longer "
           "has is applied anyway", ((
               "store/approvals.py",
               '        if approval.status == "pending" and fingerprint not in (None, '
               "approval.fingerprint):\n",
               "        if False:  # MUTANT: what was shown is not compared\n"),),
           claim="a stale fingerprint is refused"),
    Mutant("expiry_reaches_effect", "the loop hands an expired proposal to the effect function: "
           "an agent's effect that checks no decision carries it out", ((
               "loop.py", "            elif approval.status != ApprovalStatus.APPROVED or (",
               "            elif approval.status not in (ApprovalStatus.APPROVED,  # MUTANT\n"
               "                                         ApprovalStatus.EXPIRED) or ("),),
           claim="expired: send_wire never ran"),
    Mutant("wire_expiry_disabled", "nothing ever expires: the wire desk's proposal waits forever",
           (("loop.py", "        return self.store.expire(self.settings.approval_days * 86400, "
                        "agent=self.agent_name)\n",
             "        return []  # MUTANT: nothing ever expires\n"),),
           claim="expired after 7 days"),
]
CONTROL = Mutant("unbroken", "the package as it is", ())


@dataclass
class Outcome:
    mutant: Mutant
    returncode: int
    failed_cells: list[str]
    seconds: float
    output: str
    package: str
    failed_claims: list[str]


def _selected() -> list[Mutant]:
    wanted = {n.strip() for n in os.environ.get("REFUND_AGENT_MUTANTS", "").split(",")
              if n.strip()}
    unknown = wanted - {m.name for m in MUTANTS}
    assert not unknown, f"unknown mutants {sorted(unknown)}"
    return [m for m in MUTANTS if not wanted or m.name in wanted]


def _find(package: Path, relative: str, old: str) -> Path | str:
    """The file to edit: ``relative`` if it has ``old`` once, else the one file that has it."""
    path = package / relative
    text = path.read_text() if path.is_file() else ""
    if text.count(old) == 1:
        return path
    # The code may have moved (store.py into store/, the loop out of agent.py): the same
    # text, once anywhere in the package, is the same break.
    where = [p for p in sorted(package.rglob("*.py")) if old in p.read_text()]
    if len(where) == 1 and where[0].read_text().count(old) == 1:
        return where[0]
    return (f"the text to replace is in {relative} {text.count(old)} time(s) and in "
            f"{len(where)} file(s) of the package; it must be exactly once:\n{old}")


def _apply(mutant: Mutant, package: Path, cells: dict[str, list[str]]) -> None:
    """Apply the mutant's edits to the copy, or fail saying which text to re-point.

    An edit of ``walkthrough.ipynb`` or ``beyond.ipynb`` replaces text in that notebook's code
    cells (``cells``, once in all of them); ``../offline_model/...`` and
    ``../notebooks/tutorial.py`` are the copies beside the package's."""
    problems = []
    for edits in (mutant.edits, *mutant.alternatives):
        found: list[tuple[Path | str, str, str]] = []
        for relative, old, new in edits:
            book = relative.removesuffix(".ipynb")
            if book in cells:
                count = sum(cell.count(old) for cell in cells[book])
                found.append((book if count == 1 else f"the text to replace is in {relative}'s "
                              f"code cells {count} time(s); it must be exactly once:\n{old}",
                              old, new))
            else:
                found.append((_find(package, relative, old), old, new))
        missing = [where for where, _old, _new in found
                   if isinstance(where, str) and where not in cells]
        if not missing:
            for where, old, new in found:
                if isinstance(where, str):
                    cells[where] = [cell.replace(old, new) for cell in cells[where]]
                else:
                    where.write_text(where.read_text().replace(old, new))
            return
        problems += missing
    raise AssertionError(f"mutant {mutant.name} ({mutant.what}): no version of it applies. "
                         "Re-point it at the code that now does this:\n" + "\n".join(problems))


def _claims(output: str) -> list[str]:
    """The claims of the checks that failed (check() raises AssertionError(claim))."""
    return re.findall(r"^FAILED Cell \d+: AssertionError: (.+)$", output, re.MULTILINE)


def _last_cell(book: str, claim: str) -> int:
    """The code cell whose stored output prints the check ``claim`` (the last one to run: a
    mutant is caught there or not at all); every cell for an empty claim."""
    cells = [c for c in json.loads(NOTEBOOKS[book].read_text())["cells"]
             if c["cell_type"] == "code"]
    if not claim:
        return len(cells) - 1
    for number, cell in enumerate(cells):
        printed = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
        if re.search(r"^\s*" + re.escape(claim) + r".*: True$", printed, re.MULTILINE):
            return number
    return len(cells) - 1   # test_every_mutant_names_a_check_its_notebook_makes says why


def broken_copy(mutant: Mutant, home: Path) -> dict[str, list[str]]:
    """The package, the stand-in and tutorial.py copied into ``home`` with the mutant's edits
    applied; the notebooks' code cells, edited where the mutant edits them."""
    shutil.copytree(PACKAGE, home / "refund_agent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "offline_model", home / "offline_model",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (home / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "tutorial.py", home / "notebooks" / "tutorial.py")
    (home / "tmp").mkdir()
    # config.PROJECT_ROOT is the copy's parent: a checkout (pyproject.toml) whose data/ holds
    # the sample shop (config.shipped_folder).
    (home / "data").symlink_to(ROOT / "data")
    (home / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
    cells = {book: ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                    if c["cell_type"] == "code"] for book, path in NOTEBOOKS.items()}
    _apply(mutant, home / "refund_agent", cells)
    return cells


def _run(mutant: Mutant, scratch: Path) -> Outcome:
    """Run the mutant's notebook (both, unbroken) against a broken copy of the package.

    The code cells run in one plain Python process (notebook_runner.py), up to the cell of the
    mutant's check; the notebooks' own nbval run (strict, outputs compared) is CI's, not this
    test's: here only the first failing check matters."""
    home = scratch / mutant.name
    cells = broken_copy(mutant, home)
    # Compiled once here and read by every process the run starts (the cells' and their
    # commands'): with PYTHONDONTWRITEBYTECODE, set below, each would compile the copy again.
    compileall.compile_dir(home, quiet=1)
    # The environment notebooks/conftest.py gives the notebooks' kernel under nbval.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(home), str(home / "notebooks"), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(home / "tmp"), "XAI_API_KEY": ""}
    for name in ("REFUND_AGENT_MUTANTS", "REFUND_AGENT_MUTATION_REPORT", "PYTEST_ADDOPTS",
                 "REFUND_AGENT_CRASH_AT", "CRASH_AFTER_REFUND", "REFUND_AGENT_OFFLINE_FAULTS",
                 "REFUND_AGENT_MODEL", "REFUND_AGENT_REASONING_EFFORT", "REFUND_AGENT_DATA"):
        env.pop(name, None)
    started = time.monotonic()
    # A mutant needs only its first failing cell, so the run stops there, unless a report
    # wants them all.
    report = bool(os.environ.get("REFUND_AGENT_MUTATION_REPORT"))
    books = list(NOTEBOOKS) if mutant is CONTROL else [mutant.notebook]
    returncode, output = 0, ""
    for book in books:
        (home / f"{book}.json").write_text(json.dumps(cells[book]))
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(home / f"{book}.json"),
             str(_last_cell(book, mutant.claim)), *(["--keep-going"] if report else []),
             *(["--soft-checks"] if mutant.first else [])],
            cwd=NOTEBOOKS[book].parent, env=env, capture_output=True, text=True, timeout=600)
        returncode = returncode or done.returncode
        output += done.stdout + done.stderr
    failed = re.findall(r"^FAILED (Cell \d+):", output, re.MULTILINE)
    package = (re.findall(r"^PACKAGE (.*)$", output, re.MULTILINE) or [""])[-1]
    tail = "\n".join(line for line in output.splitlines()[-80:])
    return Outcome(mutant, returncode, failed, time.monotonic() - started, tail, package,
                   _claims(output))


def _code_cells(notebook: Path) -> dict[str, str]:
    """nbval's cell names ("Cell 12" is the 13th code cell) -> section and first line."""
    names, section, n = {}, "", 0
    for cell in json.loads(notebook.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            headings = re.findall(r"^#+ (.+)$", source, re.MULTILINE)
            section = headings[-1] if headings else section
        else:
            first = next((line for line in source.splitlines() if line.strip()), "")
            names[f"Cell {n}"] = f"[{section}] {first[:60]}"
            n += 1
    return names


@pytest.fixture(scope="module")
def outcomes() -> Iterator[dict[str, Outcome]]:
    scratch = Path(tempfile.mkdtemp(prefix="refund-agent-mutants-"))
    try:
        # Longest first (the walkthrough's later cells run crashed processes), so the two
        # workers finish together instead of one waiting on a long run started last.
        todo = [CONTROL, *sorted(_selected(), key=lambda m: (
            m.notebook != "walkthrough", -_last_cell(m.notebook, m.claim)))]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            results = {o.mutant.name: o for o in pool.map(lambda m: _run(m, scratch), todo)}
        report = os.environ.get("REFUND_AGENT_MUTATION_REPORT")
        if report:
            Path(report).write_text(json.dumps({
                "seconds": round(time.monotonic() - started, 1),
                "runs": {name: {"what": o.mutant.what, "notebook": o.mutant.notebook,
                                "returncode": o.returncode, "seconds": round(o.seconds, 1),
                                "failed_claims": o.failed_claims,
                                "failed_cells": [
                                    f"{c}: {_code_cells(NOTEBOOKS[o.mutant.notebook]).get(c)}"
                                    for c in o.failed_cells]}
                         for name, o in results.items()}}, indent=1) + "\n")
        yield results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_unbroken_copy_passes(outcomes: dict[str, Outcome]) -> None:
    control = outcomes[CONTROL.name]
    assert "refund-agent-mutants-" in control.package, control.package
    assert control.returncode == 0, f"the notebooks fail without any break:\n{control.output}"


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_the_notebook_catches(mutant: Mutant, outcomes: dict[str, Outcome]) -> None:
    if mutant.name not in outcomes:
        pytest.skip("not selected in REFUND_AGENT_MUTANTS")
    if outcomes[CONTROL.name].returncode != 0:
        pytest.skip("the notebooks fail without any break (see test_the_unbroken_copy_passes), "
                    "so their failing here would prove nothing")
    outcome = outcomes[mutant.name]
    assert "refund-agent-mutants-" in outcome.package, outcome.package
    # Exit code 1 with failed cells: the notebook ran and a cell failed. Anything else (a usage
    # error, a kernel that never started) would not be the notebook catching the break.
    assert outcome.returncode == 1 and outcome.failed_cells, (
        f"{mutant.name} ({mutant.what}) was not caught by {mutant.notebook}.ipynb:\n"
        f"{outcome.output}")
    # And by the check written for it, first, not by a trace line that happened to change.
    first = mutant.first or mutant.claim
    assert outcome.failed_claims and outcome.failed_claims[0].startswith(first), (
        f"{mutant.name} ({mutant.what}) made {mutant.notebook}.ipynb fail, but its first failed "
        f"check is not {first!r}; failed checks: {outcome.failed_claims}:\n{outcome.output}")
    # A break caught first by an earlier check: the run went on, and its own check failed too.
    assert any(claim.startswith(mutant.claim) for claim in outcome.failed_claims), (
        f"{mutant.name} ({mutant.what}): {first!r} failed first, as expected, but the run went "
        f"on and {mutant.claim!r} held; failed checks: {outcome.failed_claims}:\n"
        f"{outcome.output}")


def test_every_mutant_names_a_check_its_notebook_makes() -> None:
    """A mutant's claim starts a check its notebook prints as passing, so a renamed or removed
    check is seen here, without running anything."""
    for mutant in MUTANTS:
        printed = "".join("".join(o.get("text", "")) for c in json.loads(
            NOTEBOOKS[mutant.notebook].read_text())["cells"] for o in c.get("outputs", []))
        for claim in filter(None, (mutant.claim, mutant.first)):
            assert re.search(r"^\s*" + re.escape(claim) + r".*: True$", printed, re.MULTILINE), (
                f"{mutant.name}: {mutant.notebook}.ipynb prints no check {claim!r}...: True")
        assert mutant.claim, f"{mutant.name} names no check"


@pytest.mark.parametrize("notebook", NOTEBOOKS.values(), ids=NOTEBOOKS.keys())
def test_markdown_has_no_bare_dollars(notebook: Path) -> None:
    """Two $ in a markdown cell render as LaTeX in JupyterLab ("the $7.50 fee, so $18.50").

    Escaping with a backslash is not enough there: JupyterLab still pairs \\$ signs
    (jupyterlab/jupyterlab#8645), and a double backslash shows up in other viewers. Amounts go in
    code spans instead (`$7.50`), which every viewer renders as written.
    """
    cells = json.loads(notebook.read_text())["cells"]
    bare = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # fenced code renders as code
        text = re.sub(r"`[^`]*`", "", text)                     # and so do code spans
        bare += [f"cell {i}: ...{text[max(0, m.start() - 30):m.end() + 10]}..."
                 for m in re.finditer(r"\$", text)]
    assert not bare, "a $ outside code in markdown (write `$7.50`):\n" + "\n".join(bare)
