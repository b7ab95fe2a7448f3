"""Render docs/RELIABILITY.md from what the reliability tests measured.

The adversarial tests (crash matrix, soak, races, faults, hostile input, audit tampering,
decision re-checks, the PostgreSQL hosts) append one JSON line per case to the file named by
``REFUND_AGENT_RELIABILITY_LOG``; the money-invariant property test (Hypothesis) appends one line
per backend with how many generated histories and steps it tried. Each line names the backend
its case ran on (``"backend": "sqlite"`` or ``"postgresql"``; a line without one is from SQLite).
This script turns those lines into tables, one column or row per backend, so every number in
the document comes from a test run, not from someone's memory.

    python scripts/reliability_report.py --run                  # run the tests, then write it
    python scripts/reliability_report.py --run --soak-runs 200  # with a bigger soak
    python scripts/reliability_report.py --log results.jsonl    # render an existing log
    python scripts/reliability_report.py --run --log soak.jsonl # plus a big soak's lines
    python scripts/reliability_report.py --run --money-examples 2000  # more generated histories

``--run`` runs each test file in its own pytest process (timing each) with the log pointed at a
temporary file, then writes ``docs/RELIABILITY.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from refund_agent.desk.agent import CRASH_POINTS

ROOT = Path(__file__).resolve().parent.parent
# The test files that write to the log, below tests/ (the report names them so).
FILES = ["reliability/test_crash_matrix.py", "reliability/test_soak.py",
         "reliability/test_races.py", "desk/test_faults.py", "desk/test_hostile.py",
         "store/test_audit_chain.py", "desk/test_decision_recheck.py",
         "reliability/test_money_invariants.py", "desk/test_desk_fencing.py", "desk/test_edges.py",
         "store/test_postgres.py", "reliability/test_power_loss.py",
         "reliability/test_crash_matrix_outside.py"]
MONEY_FILE = "reliability/test_money_invariants.py"
# The backends a record can name ("backend"), in the order the tables show them.
BACKENDS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
DASH = "—"   # in a backend's column: no case of that kind ran there
# Suites whose lines count what was tried, not violations: left out of "What held".
# (power_loss_break: the deliberate break, whose violations are the test passing.)
NOT_VIOLATIONS = {"_file", "soak_total", "money_invariants", "power_loss_break"}
# What tests/reliability/test_money_invariants.py checks after every step of every generated
# history (a record may name its own list in "invariants").
MONEY_INVARIANTS = [
    "Each paid line at most what the policy allows for its units: the unit price times the "
    "units, less the return fee for a change of mind; shipping exactly what was paid for it, "
    "and only once every unit of every item was refunded as damaged",
    "Each order's refunds (earlier ones included) at most what the order paid",
    "Final-sale lines: nothing paid",
    "No line paid for more units than were bought, and no line held past its quantity by the "
    "refunds waiting or approved",
    "Payments log = approvals = audit: each payment is one approved approval with the same lines "
    "and amounts and one 'issued' entry; each decision has one audit entry with its lines; "
    "the audit chain verifies",
    "The desk status each run keeps is what desk_status.py computes from the run now",
]
# The counters a money_invariants record may carry, in the order they are shown.
MONEY_COUNTS = {"examples": "Histories (generated shops and histories)",
                "steps": "Steps (rules applied), invariants checked after each",
                "crashes": "Simulated process deaths at a crash point",
                "refunds": "Refunds paid", "partial": "Partial approvals (some lines kept)",
                "refused": "Refusals audited (policy, bad lines, bad amounts)"}
# Keys in a record that describe the case rather than count a violation.
DESCRIPTIVE = {"suite", "at", "scenario", "command", "point", "killed", "seed", "run", "kills",
               "point_kills", "timer_kills", "stale_owners", "stale_owners_fenced",
               "processes", "repeated_requests", "case", "rounds", "racers", "winners",
               "decisions_per_round", "advanced_per_round", "told_busy", "fault", "turn",
               "attempts", "kind", "calls", "bad_calls", "refused", "refunds", "caught",
               "file", "seconds", "result", "runs", "note", "backend", "hosts", "tickets",
               "decisions", "emails", "full", "states_built", "distinct",
               "recovered", "simulated_conversations_cut_short"}

# What each violation counter counts, in the order "What held" shows them.
LABELS = {
    "duplicate_refunds": "Refunds made twice for one approval",
    "extra_model_requests": "Model requests made by an owner that had lost its run",
    "replies_stored_twice": "Customer replies stored twice",
    "refused_replies_stored": "Replies refused yet stored",
    "tracebacks": "Tracebacks shown instead of a message",
    "lost_or_duplicated": "Work lost or done twice after bad input or a failed write",
    "duplicate_emails": "Emails sent twice for one send call",
    "lost_decisions": "Decisions lost or recorded twice in the audit log",
    "pending_approvals": "Approvals left pending at the end",
    "refunds_without_approval": "Refunds without an approval",
    "approved_not_refunded": "Approved refunds never paid",
    "runs_not_done": "Runs not finished (`done`) at the end",
    "calls_without_output": "Tool calls left without a saved output",
    "replies_not_sent": "Customer replies never sent to the model",
    "audit_chain_broken": "Audit chain failing verification",
    "integrity_not_ok": "`PRAGMA integrity_check` not ok",
    "torn_log_lines": "Torn lines in refunds.log / outbox.log",
    "emails_to_someone_else": "Emails to anyone but the sender",
    "timeline_differs_from_baseline": "Timelines differing from a crash-free run",
    "emails_differ_from_baseline": "Emails differing from a crash-free run",
    "refunds_differ_from_baseline": "Refunds differing from a crash-free run",
    "requests_differ_from_baseline": "Model requests differing from a crash-free run",
    "leaks": "Another customer's data reaching the model or the sender",
    "proposals_over_policy_or_not_owned": "Refunds proposed over the policy or on another's"
                                          " order",
    "decided_without_a_person": "Refunds decided without a person",
    "double_decisions": "Approvals decided twice in a race",
    "over_approved": "Approvals over the policy when approved at once",
    "half_executed": "Decisions half executed",
    "calls_run_twice": "Tool calls run twice after a model fault",
    "refund_reused_after_fault": "Refunds asked of the provider again after a model fault",
    "fewer_requests_than_baseline": "Model turns lost (fewer than a crash-free run)",
    "runs_differ_from_baseline": "Runs differing from a crash-free run",
    "decisions_differ_from_baseline": "Decisions differing from a crash-free run",
    "audit_requested_not_once": "Approvals without exactly one 'requested' audit line",
    "audit_refund_not_once": "Paid refunds without exactly one 'issued'/'reused' audit line",
    "refund_amount_mismatch": "Refunds for another amount than was approved",
    "emails_without_call": "Emails with no send call behind them",
    "send_calls_not_sent": "Send calls marked sent that the outbox never got",
    "timeline_refund_steps_off": "Refund entries in a timeline not matching the refunds",
    "refunds_without_a_person": "Refunds paid on a hostile run without a person",
    "run_failed": "Runs crashed by hostile input",
    "side_effects": "Side effects of malformed or unknown calls",
    "false_emails": "Emails promising a refund that was rejected",
    "over_policy": "Refunds over the policy from two calls in one response",
    "duplicate_requests": "Model requests made twice by racing processes",
    "failed_opens": "Processes failing to open a new store together",
    "runs_failed": "Runs failed by faults within the retry budget",
    "lost": "Bad input that changed or lost stored data",
    "runs_not_finished": "Runs neither done nor waiting on the customer at the end",
    "violations": "Power-loss crash states recovered with a promise broken",
}

# Issue 33 (trust, round three): each case that broke, the test that now holds it, and what
# that test showed on the code before the fix. Static: these are facts about the fix, not a run.
TRUST_CASES: list[tuple[str, str, str, str]] = [
    ('1',
     ('The two-person rule counted one proposal, not the order: one lead approved $48.00 with '
      '`--only`, then $32.95 on the same order, alone.'),
     ('`tests/desk/test_desk.py::test_two_people_count_what_the_order_was_paid_not_one_proposal`, '
      '`::test_two_approvals_racing_on_one_order_cannot_both_stay_under_the_amount` (SQLite and '
      "PostgreSQL); the money state machine's invariant `paid above the two-person amount by one "
      'person`'),
     ('$80.95 paid by one person; both racing approvals approved on both engines; the state machine'
      ' shrank it to two $0.01 lines')),
    ('2',
     ('An approver over her limit by what she approved before was stuck: approve said a lead must '
      'decide, handoff said it was within her limit.'),
     ('`tests/desk/test_money_limits.py::test_over_the_limit_by_what_she_approved_before_the_terminal_offers_the_hand_off`,'
      ' '
      '`tests/web/test_app.py::test_over_the_limit_with_what_she_approved_before_the_page_offers_a_lead`'),
     "the refusal named no way on; the page's card offered Approve…"),
    ('3',
     ('Look-alike account names (dotless ı, Latin alpha, an invisible U+034F, an accent) and the '
      'names stripe, smtp, webhooks were accepted.'),
     ('`tests/desk/test_identity.py::test_a_look_alike_of_an_account_name_is_refused_naming_whom_it_looks_like`,'
      " `::test_no_look_alike_or_invisible_character_makes_another_person` (Hypothesis, Unicode's "
      'confusables table), `::test_one_person_with_a_twin_account_cannot_be_both_people`'),
     ('all four names and all three actors accepted; a twin signed off and approved a two-person '
      'refund')),
    ('4',
     ("The sign-in throttle counted by client address: a stranger's wrong passwords locked the lead"
      ' out.'),
     ('`tests/desk/test_identity.py::test_a_strangers_wrong_passwords_never_lock_the_lead_out`, '
      '`::test_the_wait_grows_and_says_in_the_audit_whose_name_was_slowed`'),
     ('the lead locked out for 5 minutes, in the browser and the terminal; no audit line said who '
      'was slowed')),
    ('5',
     ("A custom agent's waiting run in the desk's store was finished by the desk's resume with the "
      'refund tools.'),
     ('`tests/desk/test_foreign_runs.py::test_the_desk_leaves_a_waiting_closure_run_alone_and_the_closer_finishes_it`,'
      ' `::test_the_desks_resume_worker_and_claim_never_pick_up_a_closure_run`'),
     ('resume ended the closure run done after 4 model requests, nothing closed, its approval '
      'pending for ever')),
    ('6',
     ('One failed Stripe refund (refund.failed and refund.updated) opened two escalations; thirty '
      'escalate calls opened thirty.'),
     ('`tests/desk/test_desk.py::test_thirty_escalate_calls_open_one_escalation_and_the_model_hears_it_is_with_a_lead`,'
      ' `::test_racing_failure_reports_for_one_refund_open_one_escalation`, '
      '`::test_at_most_one_open_escalation_per_ticket_kind_and_refund` (Hypothesis), '
      '`tests/outside/test_webhooks.py::test_refund_failed_then_refund_updated_for_one_refund_open_one_escalation`'),
     '30 open escalations; 2 for one refund; 8 from 8 racing reports'),
    ('7',
     ('The webhook server dropped malformed requests with a traceback and held a thread per slow '
      'client.'),
     ('`tests/outside/test_webhooks.py::test_a_malformed_delivery_is_answered_in_one_line_never_a_traceback`,'
      ' `::test_a_body_over_the_limit_gets_413_before_it_is_read`, '
      '`::test_slow_clients_are_dropped_after_the_read_timeout_while_events_get_through`'),
     'connections closed without an answer, with a traceback; slow clients never dropped'),
    ('8',
     'A key with a non-ASCII character ended doctor and the first run in a UnicodeEncodeError.',
     ('`tests/providers/test_settings.py::test_a_key_with_a_character_no_key_has_is_refused_naming_it_not_the_key`,'
      ' `::test_the_terminal_names_the_bad_character_in_one_line`'),
     'a traceback in both commands'),
    ('9',
     ("OpenAI's non-reasoning models were asked for encrypted reasoning, and the refusal was read "
      'as a tampered transcript.'),
     ('`tests/providers/test_providers.py::test_a_model_without_reasoning_is_never_asked_for_encrypted_reasoning`,'
      ' `::test_the_openai_stand_in_refuses_include_on_a_model_without_reasoning`, '
      '`::test_an_agent_on_gpt_4o_completes_a_ticket`, '
      '`tests/providers/test_doctor.py::test_the_doctor_sends_the_agents_own_parameter_set`'),
     ("include sent to gpt-4o; the error read as bad_reasoning; the doctor's request lacked the "
      "agent's parameters")),
    ('10',
     ("After the refund was paid, a refusal resume cannot fix (xAI's 422) left the customer never "
      'told.'),
     ('`tests/desk/test_faults.py::test_a_permanent_refusal_after_the_refund_hands_the_ticket_to_a_person`,'
      ' '
      '`tests/providers/test_providers.py::test_resume_is_promised_only_where_asking_again_can_help`'
      ' (Hypothesis)'),
     ('every case failed with "Resume retries from the last stored response"; no email, no '
      'escalation')),
    ('11',
     ('grok-4.3 and grok-4.5 were missing from the model table; doctor without a network blamed '
      'streaming.'),
     ('`tests/providers/test_providers.py::test_xais_current_models_get_the_effort_asked_for`, '
      '`tests/providers/test_doctor.py::test_no_network_names_the_host_it_could_not_reach`'),
     'no effort sent to grok-4.5; "the connection to the provider broke"'),
    ('12',
     'Tests asserted wall-clock budgets and failed on a busy machine.',
     ("`tests/standin/test_brain_linear.py` (this thread's CPU time), "
      '`::test_the_measure_does_not_count_a_busy_machine`; the budgets in the corpus, PostgreSQL '
      'and agent tests removed'),
     'wall time read 1.5 to 2.0x with a busy thread beside it'),
]


NOT_COVERED = """\
- **Power loss and the disk's honesty.** SIGKILL stops the process, not the
  machine. The power-loss states (tests/helpers/powerloss.py has the disk model) lose
  unsynced writes as any prefix per file, torn at a sector, and unsynced creations and
  unlinks; they do not reorder writes within one file, and a disk or virtual disk that
  acknowledges writes it has not made can still lose a committed decision. The payment and
  email logs are outside systems there (a provider keeps what it accepted), so their own
  directory entry, not fsynced when first created, is not put through a power loss.
- **Several machines sharing an SQLite store.** SQLite's locking is unreliable on network file
  systems: with SQLite, one host (or one container with one volume) is the supported shape.
  Several hosts share a PostgreSQL store instead, where leases record their host and expire by
  the database's clock; `tests/store/test_postgres.py` runs three worker processes with their own
  host ids and folders on one database, but on one machine: a network between them, and its
  partitions, are not tested.
- **The real payment provider and mail server.** The stand-ins are files with the same
  idempotency contract as real providers (same key: same result; same key, other arguments:
  refused). A real provider that forgets keys after some hours, or a mail server that
  delivers and then times out, is outside what these tests can show.
- **Grok itself.** Every test uses the offline stand-in model. The fault injection reproduces
  the failures the Responses API documents (429/5xx before the answer starts, a stream cut
  mid-answer, an expired stored response), not every way a hosted model can misbehave.
  Hostile model output is scripted, not generated.
- **The web front end.** The same `Agent` calls are exercised here through the terminal;
  `app.py` and its worker have their own tests.
- **Someone who can write every table.** The audit chain and its cross-checks catch an edited,
  reordered or removed entry, including a re-hashed edit, as long as the approvals table and
  the timeline were left alone. Someone who rewrites all of them consistently is caught only
  by an anchor outside the file (a copy of the latest hash elsewhere, or a signing key), which
  this project does not keep.
- **Pid reuse within the lease window.** A lease whose holder died is taken over at once if the
  pid is gone; if the pid was reused by an unrelated process, the lease is treated as live
  until it is stale (15 minutes by default). A process paused past its lease is fenced: its
  next write is refused, which the stale-owner cases above and the soak's paused processes
  exercise.
- **A read-only disk and a wall clock that jumps.** A full disk under `refunds.log` is simulated
  (a clear message; resume then pays once); a read-only folder is simulated by a database that
  refuses writes, since the tests may run as root. Lease expiry is read from the database's
  clock, so processes whose clocks disagree agree on it; the 30-day expiry of stored responses
  still uses the wall clock.
- **SIGTERM, Ctrl+C and Stop.** Covered elsewhere (the CLI and agent tests stop a run mid-stream
  and resume it); here every death is SIGKILL, which gives the process no chance to clean up.
- **The simulated customer's own request.** A process killed while the model writes the
  simulated customer's reply is resumed (the conversation continues), but that request is then
  counted twice in the run's request total and cost.
"""


# Issue 43 (trust, round four): each case, the test that now holds it, and what that test
# showed on the code before the fix. Static, as TRUST_CASES.
TRUST_CASES_4: list[tuple[str, str, str, str]] = [
    ('1',
     ('One unreadable message stopped IMAP intake for good: a From whose encoded name '
      'holds CR/LF, 1,000 nested multiparts, a quoted-printable `=00` on PostgreSQL; never '
      'marked seen, so every restart died on it again.'),
     ('`tests/outside/test_mailin_unreadable.py::test_a_mailbox_message_that_cannot_be_re'
      'ad_is_recorded_and_the_next_one_taken` (SQLite and PostgreSQL, Dovecot), '
      '`::test_a_quoted_printable_nul_is_taken_on_postgresql`, '
      '`::test_take_records_each_unreadable_message_once`'),
     ('`receive --imap` exited with `ValueError: ... cannot contain CR or LF`; '
      '`StoreError: ... cannot contain NUL` on PostgreSQL; the good message behind them '
      'never taken')),
    ('2',
     ('Over SMTP the same messages got `451 try again later` for ever, a traceback each '
      'time, and were never recorded.'),
     ('`tests/outside/test_mailin_unreadable.py::test_over_smtp_a_message_that_cannot_be_'
      'read_gets_250_once_recorded` (SQLite and PostgreSQL, aiosmtpd), '
      '`::test_a_store_that_cannot_record_leaves_the_message_unacknowledged`'),
     ('`451 4.3.0 Not recorded, try again later (ValueError)` on every try; a store '
      'failure printed a traceback and ended the receiver')),
    ('3',
     ('Mail loops: an auto-responder that does not label itself got an answer to every '
      "reply; the desk's mail carried no `Auto-Submitted`."),
     ('`tests/outside/test_mail_loops.py::test_an_unlabelled_auto_responder_gets_at_most_'
      'the_cap_then_a_person` (a real `receive --smtp` and a scripted responder), '
      '`::test_never_more_than_the_cap_in_any_window` (Hypothesis), '
      '`::test_a_held_reply_is_judged_again_when_released`, '
      '`::test_a_responder_that_never_threads_is_capped_per_address`, '
      '`::test_a_message_that_answers_no_mail_is_labelled_auto_generated`'),
     ("the desk answered the responder 13 times (stopped by the test's brake), no "
      'escalation, no `Auto-Submitted` header')),
    ('4',
     ('The sender was read from the display name: `From: maya.chen@example.com '
      '<evil@x.test>` was taken as Maya.'),
     ('`tests/outside/test_mailin_sender.py::test_a_from_that_clients_read_otherwise_is_n'
      'ever_the_customer` (7 Froms), '
      '`::test_whatever_the_display_name_says_the_sender_is_the_address_clients_read` '
      '(Hypothesis against `email.headerregistry`)'),
     ("the look-alike From and a message with two From headers continued Maya's thread; "
      'Hypothesis found a counterexample')),
    ('5',
     ('A second sender reusing an existing Message-ID got 250 and was dropped: no ticket, '
      'no audit line.'),
     ('`tests/outside/test_mailin_sender.py::test_a_message_id_reused_by_another_sender_i'
      's_recorded_and_flagged`'),
     'the second message came back as a redelivery (`new=False`): no row, no audit line'),
    ('6',
     ('A customer\'s first message whose subject looked automatic ("Out of office chair '
      'arrived cracked", "Returned mail: ...") was filed as automatic and never answered.'),
     ('`tests/outside/test_mailin_parse.py::test_a_customers_first_message_is_never_autom'
      'atic_by_its_subject` (4 subjects), `::test_headers_show_a_robot_on_any_message`'),
     'all four subjects filed as automatic'),
    ('7',
     ('Connections that used up the file descriptors made both listeners write tens of '
      'thousands of tracebacks.'),
     ('`tests/outside/test_listener_limits.py::test_smtp_listener_refuses_connections_pas'
      't_its_cap_with_421`, '
      '`::test_webhook_server_refuses_connections_past_its_cap_with_503` (real processes, '
      'the open-file limit lowered to 256, 320 connections), '
      '`::test_refusals_are_said_once_per_interval_with_how_many`'),
     ('the extra connections got no answer; a manual flood logged 1,340 tracebacks (SMTP) '
      "and 7,172 (webhooks, with a 500 from Stripe's library)")),
    ('8',
     "The SMTP listener's login had no throttle (2,266 wrong passwords a second).",
     ('`tests/outside/test_listener_limits.py::test_smtp_logins_are_throttled_per_name_as'
      '_the_desk_sign_in_is`'),
     '200 rapid wrong passwords each answered 535 at once; nothing counted or audited'),
    ('9',
     ('`timeouts`, `mail` and other names the system signs with were accepted as account '
      'names.'),
     ('`tests/desk/test_system_actors.py::test_the_terminal_refuses_a_system_name_as_an_a'
      'ccount`, `::test_every_signature_the_code_writes_is_reserved` (a scan of every '
      'signing site), `::test_the_actors_a_desk_really_signs_with_are_all_reserved`'),
     ('`users add timeouts` and `users add Mail` made accounts; the scan found '
      '`refund-agent eval`, `mail` and `timeouts` unreserved')),
    ('10',
     '`away --until 9999-12-31` ended in an `OverflowError` traceback.',
     ('`tests/cli/test_typed_times.py::test_away_answers_a_date_out_of_range_in_one_line`, '
      '`::test_a_duration_out_of_range_is_a_usage_mistake`'),
     ('an `OverflowError` traceback; `work --idle-exit nan` never exited; `receive --every '
      'inf` was accepted')),
    ('11',
     ('`refund-agent eval` printed the two characters `\\r` instead of redrawing its '
      'progress line.'),
     ('`tests/cli/test_terminal_progress.py::test_eval_redraws_its_progress_line_on_a_ter'
      'minal` (a pseudo-terminal)'),
     'a literal backslash-r in the output, no redraw'),
    ('12',
     ('`./dev test` (the whole suite) came with no word of its length; `./dev --help` '
      'exited 2 with a usage line.'),
     ('`tests/docs/test_first_hour.py::test_dev_help_says_what_each_subcommand_runs_and_h'
      'ow_long`, `::test_the_quick_start_is_two_commands_and_says_how_long_the_tests_take`'),
     'usage line only, exit 2; no fast lane in the Quick start'),
    ('13',
     'Stale figures in the docs (a 2½-minute fast lane, 1,111 tests).',
     ('`tests/docs/test_docs_figures.py::test_every_suite_figure_is_kept_by_a_test_or_dat'
      'ed`, `::test_the_test_counts_the_docs_quote_are_the_collected_ones` (collects the '
      'suite)'),
     '1,633 and 1,111 quoted where 2,049 and 1,455 were collected; four undated durations'),
    ('14',
     'README lines failed when pasted (`./dev cli queue | runs | show RUN_ID`).',
     ('`tests/docs/test_docs_commands.py::test_every_readme_shell_line_runs_as_pasted`, '
      '`::test_a_placeholder_in_a_readme_command_says_where_it_comes_from`'),
     "`README.md:82: no command 'runs'` (and `show`, `audit`); `RUN_ID` unexplained"),
    ('15',
     'A 40-line setuptools "Package would be ignored" warning on the first install.',
     ('`tests/cli/test_install.py::test_every_folder_that_ships_data_is_a_package_of_its_'
      'own`, `::test_the_wheel_builds_without_warnings_and_carries_the_data`'),
     ("`refund_agent.evals.brain_corpus.shop` not a package; the warning in `pip wheel`'s "
      'output')),
    ('16',
     'The README named Chromium and PostgreSQL but not `dovecot-imapd` or `strace`.',
     ('`tests/docs/test_first_hour.py::test_every_debian_package_ci_installs_is_named_in_'
      'the_readme`'),
     '`dovecot-imapd` and `strace` missing'),
    ('17',
     ('The stand-in showed a cost with no label; `python -m offline_model` kept its state '
      'in the system temp folder.'),
     ('`tests/cli/test_cost_labels.py::test_the_terminal_labels_the_stand_ins_cost`, '
      '`::test_the_page_labels_the_ticket_cost_and_each_request`, '
      '`::test_the_stand_ins_server_keeps_its_state_in_the_output_folder`'),
     '`$0.0117` unlabelled; state in `/tmp/refund_agent_offline/responses.sqlite3`'),
    ('stand-in',
     ("On unseen emails the stand-in over-proposed where a thread's later message narrowed "
      'the claim, where "only one of the four survived" meant three damaged, and where the '
      'email told it to ignore its instructions.'),
     ('`tests/standin/test_brain_corpus.py::test_no_email_is_over_proposed` (15 held-out '
      'emails, `added_for` 43), `tests/standin/test_reading_toward_asking.py` (Hypothesis '
      'phrasings)'),
     '8 of the 15 over-proposed ($375.50 too much); 15 of the 23 reading tests failed'),
]


def _load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _backend(record: dict[str, Any]) -> str:
    """The backend a record ran on; lines from before records named one ran on SQLite."""
    return str(record.get("backend") or "sqlite")


def _name(backend: str) -> str:
    return BACKENDS.get(backend, backend)


def _violations(record: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in record.items()
            if k not in DESCRIPTIVE and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _broken(rs: list[dict[str, Any]]) -> int:
    return sum(sum(_violations(r).values()) for r in rs)


def _sum_of(rs: list[dict[str, Any]], key: str) -> int:
    return sum(r.get(key, 0) for r in rs)


def _problems(per: dict[str, Any]) -> Any:
    """One "Problems found" cell from each backend's count (only the backends that ran)."""
    if not per:
        return DASH
    if all(isinstance(v, int) for v in per.values()):
        total = sum(per.values())
        if total and len(per) > 1:
            return f"{total} (" + ", ".join(f"{_name(b)} {v}" for b, v in per.items()) + ")"
        return total
    return "; ".join(f"{_name(b)}: {v}" for b, v in per.items())


Rows = Callable[[str], list[dict[str, Any]]]   # suite -> its records on one backend


def _crash_tried(of: Rows) -> str | None:
    crash = of("crash_matrix")
    if not crash:
        return None
    named = [r for r in crash if r["point"] in CRASH_POINTS]
    extra = [r for r in crash if r["point"] not in CRASH_POINTS]
    points = {r["point"] for r in named}
    scenarios = {r["scenario"] for r in named}
    return (f"{_plural(len(named), 'case')} ({len(points)} of {len(CRASH_POINTS)} crash points x "
            f"{_plural(len(scenarios), 'scenario')}, each point in every command that passes "
            f"it) + {len(extra)} extra (repeated crashes, a kill outside the named points); "
            f"{sum(r.get('kills', 1) for r in crash)} kills")


def _soak_tried(of: Rows) -> str | None:
    soak = of("soak")
    if not soak:
        return None
    seeds = sorted({r["seed"] for r in soak})
    return (f"{len(soak)} runs, {_sum_of(soak, 'kills')} kills, {_sum_of(soak, 'processes')} "
            f"processes (seeds {', '.join(map(str, seeds))})")


def _hostile(of: Rows, kind: str) -> list[dict[str, Any]]:
    return [r for r in of("hostile") if r.get("kind") == kind]


def _fencing_tried(of: Rows) -> str | None:
    fencing, soak = of("fencing"), of("soak")
    parts = [_plural(len(fencing), "case")] if fencing else []
    if soak:
        parts.append(f"{_sum_of(soak, 'stale_owners')} paused processes in the soak "
                     f"({_sum_of(soak, 'stale_owners_fenced')} stopped by the fence)")
    return " + ".join(parts) or None


def _hosts_tried(of: Rows) -> str | None:
    hosts = of("many_hosts")
    if not hosts:
        return None
    return (f"{_sum_of(hosts, 'tickets')} tickets on {max(r.get('hosts', 0) for r in hosts)} "
            f"hosts, {_sum_of(hosts, 'kills')} kills: {_sum_of(hosts, 'decisions')} decisions, "
            f"{_sum_of(hosts, 'refunds')} refunds, {_sum_of(hosts, 'emails')} emails")


def _money_tried(of: Rows) -> str | None:
    money = of("money_invariants")
    if not money:
        return None
    return (f"{_money_sum(money, 'examples'):,} histories, {_money_sum(money, 'steps'):,} "
            f"steps, {len(_money_invariants(money))} invariants after every step")


def _count(suite: str, word: str) -> Callable[[Rows], str | None]:
    """"N <word>": how many records the suite has on a backend."""
    def tried(of: Rows) -> str | None:
        rs = of(suite)
        return f"{len(rs)} {word}" if rs else None
    return tried


def _power_tried(of: Rows) -> str | None:
    power, broken = of("power_loss"), of("power_loss_break")
    if not power:
        return None
    text = (f"{_sum_of(power, 'states_built'):,} crash states built "
            f"({_sum_of(power, 'distinct'):,} distinct), {_sum_of(power, 'recovered'):,} "
            f"recovered "
            f"({', '.join(sorted({r['scenario'] for r in power}))}"
            f"{'; full exploration' if any(r.get('full') for r in power) else ''})")
    if broken:
        text += (f"; the deliberate break (decision committed without a sync) caught in "
                 f"{_sum_of(broken, 'violations')} of {_sum_of(broken, 'recovered')} states")
    return text


# The summary's rows: what, what was tried on a backend (None: nothing there), and the problems
# found there (None: the money test's own count, see _money_problems).
SUMMARY: list[tuple[str, Callable[[Rows], str | None], Callable[[Rows], Any] | None]] = [
    ("Crash matrix: real CLI process killed (SIGKILL) at a named point, then resumed",
     _crash_tried, lambda of: _broken(of("crash_matrix"))),
    ("Soak: random crash points and timed SIGKILLs, restart until done",
     _soak_tried, lambda of: _broken(of("soak"))),
    ("Races between processes (decide one approval; advance one run; lease takeover)",
     lambda of: (f"{_sum_of(of('races'), 'rounds')} rounds in {_plural(len(of('races')), 'test')}"
                 if of("races") else None),
     lambda of: _broken(of("races"))),
    ("Model faults (429, 500, cut stream at every turn; malformed and parallel calls)",
     _count("faults", "cases"), lambda of: _broken(of("faults"))),
    ("Hostile customer emails",
     lambda of: f"{len(_hostile(of, 'email'))} emails" if _hostile(of, "email") else None,
     lambda of: _broken(_hostile(of, "email"))),
    ("Hostile model output (scripted tool calls)",
     lambda of: (f"{sum(r.get('calls', 1) for r in _hostile(of, 'model'))} calls"
                 if _hostile(of, "model") else None),
     lambda of: _broken(_hostile(of, "model"))),
    ("Bad input at the terminal (ids, names, notes, encodings, sizes, database, data files,"
     " settings)",
     lambda of: f"{len(_hostile(of, 'cli'))} cases" if _hostile(of, "cli") else None,
     lambda of: _broken(_hostile(of, "cli"))),
    ("Audit log tampering (edit, delete, reorder, re-hash)",
     lambda of: (f"{len(of('audit'))} tampered logs, {_sum_of(of('audit'), 'caught')} caught"
                 if of("audit") else None),
     lambda of: len(of("audit")) - _sum_of(of("audit"), "caught")),
    ("Policy re-checked when a person decides", _count("decision_recheck", "cases"),
     lambda of: _broken(of("decision_recheck"))),
    ("Stale owners: a process paused past its lease wakes after a takeover, a clock 16 "
     "minutes ahead, two replies at once (fencing tokens)",
     _fencing_tried, lambda of: _broken(of("fencing"))),
    ("Broken surroundings and hostile text: header injection, escape sequences, a full "
     "disk, a store refusing writes, a closed pipe", _count("edges", "cases"),
     lambda of: _broken(of("edges"))),
    ("Three worker processes standing for three hosts on one database, a worker SIGKILLed "
     "about every second", _hosts_tried, lambda of: _broken(of("many_hosts"))),
    ("Power loss: disk states a power cut could leave, built from the store's writes "
     "recorded with strace, each recovered by fresh processes (resume, the web worker)",
     _power_tried, lambda of: _broken(of("power_loss"))),
    ("Money invariants over generated shops and histories (Hypothesis): approve, partial "
     "approve, reject, ask the customer, expire, race, crash, resume", _money_tried, None),
]

# Counters a record carries on a backend where they check nothing (shown as "n/a" there).
NOT_APPLICABLE = {"postgresql": {"integrity_not_ok", "torn_log_lines"}}
NOT_APPLICABLE_WHY = (
    "n/a: the check means nothing on that backend. On PostgreSQL the store does not run "
    "`PRAGMA integrity_check` (the server checks its own pages), and payments and emails are "
    "rows of the ledger table, where a key is stored once, not lines in `refunds.log` and "
    "`outbox.log`.")

# Under the summary: why a suite runs on one backend only (tests/test_*.py, README "Tests").
WHERE_THEY_RUN = (
    "A dash means the log holds no case of that kind on that backend. The crash matrix, the "
    "soak, the races and the money test run on both backends, with two differences: on "
    "PostgreSQL the crash matrix runs only the angry customer's cases, which pass every crash "
    "point (`REFUND_AGENT_PG_FULL_MATRIX=1` runs every case there, about four minutes more on "
    "2 cores), and its zero-retention cases run on SQLite only; the money test tries "
    "`REFUND_AGENT_MONEY_EXAMPLES_PG` histories on PostgreSQL (100 by default, since each "
    "makes and drops a database) and `REFUND_AGENT_MONEY_EXAMPLES` on SQLite (500). Model "
    "faults, hostile input, audit tampering, the decision-time re-check, the stale-owner cases "
    "and broken surroundings run on SQLite only: those tests are not parametrized by backend, "
    "and several work on the SQLite file itself (the tampering edits its rows with `sqlite3`; "
    "the bad input includes a garbage, truncated or locked database file; the store refusing "
    "writes is a trigger in that file); the soak's paused processes put the fence through "
    "PostgreSQL as well. The three hosts sharing one database run on PostgreSQL only "
    "(`tests/store/test_postgres.py`), the backend meant for several hosts. Without Debian's "
    "`postgresql` binaries the PostgreSQL tests skip, and their column is all dashes.")


def render(records: list[dict[str, Any]]) -> str:
    records = [{**r, "backend": _backend(r)} for r in records]
    backends = [*BACKENDS, *sorted({r["backend"] for r in records} - set(BACKENDS))]
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_suite[r["suite"]].append(r)
    files = {r["file"]: r for r in by_suite.pop("_file", [])}
    soak_seconds = {(r["backend"], r["seed"]): r["seconds"]
                    for r in by_suite.pop("soak_total", [])}
    crash, soak = by_suite.get("crash_matrix", []), by_suite.get("soak", [])
    races, faults = by_suite.get("races", []), by_suite.get("faults", [])
    hostile, audit = by_suite.get("hostile", []), by_suite.get("audit", [])
    recheck = by_suite.get("decision_recheck", [])
    money = by_suite.get("money_invariants", [])

    def on(backend: str) -> Rows:
        return lambda suite: [r for r in by_suite.get(suite, []) if r["backend"] == backend]

    def in_order(rs: list[dict[str, Any]]) -> list[str]:
        return [b for b in backends if any(r["backend"] == b for r in rs)]

    out = ["# Reliability: what was tried, and what held", ""]
    out += ["Generated by `scripts/reliability_report.py` from the JSON lines the tests "
            "wrote while they ran (`REFUND_AGENT_RELIABILITY_LOG`); regenerate with "
            "`python scripts/reliability_report.py --run`. Every count of problems below is a "
            "count the tests measured, and each test also fails if it is not zero. Each line "
            "of the log names the backend its case ran on, SQLite or PostgreSQL, and the "
            "tables below give the two separately.",
            "", "The CI-sized soak is small; a larger one is run on its own and added with "
            "`--log`:", "", "```",
            "REFUND_AGENT_RELIABILITY_LOG=/tmp/soak.jsonl REFUND_AGENT_SOAK_RUNS=150 "
            "REFUND_AGENT_SOAK_SEED=1000 python -m pytest tests/reliability/test_soak.py -q -s",
            "python scripts/reliability_report.py --run --log /tmp/soak.jsonl", "```"]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out += ["", f"Last generated {stamp} on {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs.", ""]

    # -- summary -----------------------------------------------------------------------
    rows = []
    for what, tried, problems in SUMMARY:
        cells, found = [], {}
        for b in backends:
            text = tried(on(b))
            cells.append(DASH if text is None else text)
            if text is not None:
                found[b] = (problems(on(b)) if problems else
                            _money_problems(on(b)("money_invariants"), files))
        rows.append([what, *cells, _problems(found)])
    out += ["## Summary", "",
            _table(["What", *[f"Tried on {_name(b)}" for b in backends], "Problems found"],
                   rows), "", WHERE_THEY_RUN, ""]

    # -- what held ----------------------------------------------------------------------
    totals: dict[str, Counter[str]] = {b: Counter() for b in backends}
    seen: dict[str, Counter[str]] = {b: Counter() for b in backends}
    for r in records:
        if r["suite"] in NOT_VIOLATIONS:
            continue
        for k, v in _violations(r).items():
            totals[r["backend"]][k] += v
            seen[r["backend"]][k] += 1
    measured = {k for b in backends for k in seen[b]}
    order = [k for k in LABELS if k in measured] + sorted(measured - set(LABELS))
    def cells(b: str, k: str) -> tuple[Any, Any]:
        if not seen[b][k]:
            return DASH, DASH
        return ("n/a", "n/a") if k in NOT_APPLICABLE.get(b, ()) else (seen[b][k], totals[b][k])

    held = [[LABELS.get(k, k.replace("_", " ").capitalize()),
             *[c for b in backends for c in cells(b, k)]] for k in order]
    shown_na = any(seen[b][k] for b, keys in NOT_APPLICABLE.items() if b in seen for k in keys)
    out += ["## What held", "",
            "Each invariant, how many test cases measured it on each backend, and the total it "
            "came to there. A dash: no case on that backend measured it (the summary says which "
            "suites run where).", "",
            _table(["Invariant", *[h for b in backends
                                   for h in (f"Cases on {_name(b)}", f"Total on {_name(b)}")]],
                   held), ""]
    if shown_na:
        out += [NOT_APPLICABLE_WHY, ""]

    # -- crash matrix grid -------------------------------------------------------------
    if crash:
        out += ["## Crash matrix", "",
                "Cases per crash point and scenario, with the kills they made in brackets. A "
                "scenario is a chain of commands; a point is tried in every command of the "
                "chain that reaches it. After the kill, `resume` runs with the same crash point "
                "again, dying at each later occurrence (or, for a point the next process "
                "reaches again, once more at the same spot); then a clean `resume` and the rest "
                "of the chain run, and the result is compared with a crash-free run of the "
                "same scenario, on the same backend: same model requests, timeline, emails, "
                "refunds and decisions.", ""]
        for b in in_order(crash):
            out += [f"### On {_name(b)}", "", _crash_grid(on(b)("crash_matrix")), ""]

    # -- soak -------------------------------------------------------------------------------
    if soak:
        per: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
        by_seed: dict[tuple[str, Any], list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in sorted(soak, key=lambda r: backends.index(r["backend"])):
            row = per[(r["backend"], r["scenario"])]
            row[0] += 1
            row[1] += r.get("processes", 0)
            row[2] += r["kills"]
            row[3] += r.get("point_kills", 0)
            row[4] += r.get("timer_kills", 0)
            row[5] += r.get("repeated_requests", 0)
            seed = by_seed[(r["backend"], r["seed"])]
            seed[0] += 1
            seed[1] += r.get("processes", 0)
            seed[2] += r["kills"]
        out += ["## Soak", "",
                "Each soak is reproducible from its seed: `REFUND_AGENT_SOAK_SEED=<seed> "
                "REFUND_AGENT_SOAK_RUNS=<runs> python -m pytest tests/reliability/test_soak.py "
                "-q -s` (one "
                "soak per backend, with the same seed).", "",
                _table(["Backend", "Seed", "Runs", "Processes", "Kills", "Wall time"],
                       [[_name(b), seed, *v,
                         f"{soak_seconds[(b, seed)]:.0f} s" if (b, seed) in soak_seconds else ""]
                        for (b, seed), v in sorted(by_seed.items(), key=lambda x: (
                            backends.index(x[0][0]), -x[1][0]))]),
                "",
                _table(["Backend", "Scenario", "Runs", "Processes", "Kills", "at a crash point",
                        "by a timed SIGKILL", "Extra requests counted"],
                       [[_name(b), s, *v] for (b, s), v in sorted(
                           per.items(), key=lambda x: (backends.index(x[0][0]), x[0][1]))]), "",
                "Extra requests counted: the simulated customer's reply asked for again after "
                "a kill (its cost is counted twice; no tool call is repeated). A stream cut off "
                "by a kill is never recorded, so it is not counted at all.", ""]

    # -- races ---------------------------------------------------------------------------------
    if races:
        cases = list(dict.fromkeys(r["case"] for r in races))
        ordered = sorted(races, key=lambda r: (cases.index(r["case"]),
                                               backends.index(r["backend"])))
        out += ["## Races", "", _table(
            ["Race", "Backend", "Rounds", "Processes at once", "Outcome"],
            [[r["case"], _name(r["backend"]), r["rounds"], r["racers"],
              "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in r.items()
                        if k in ("decisions_per_round", "advanced_per_round", "told_busy",
                                 "failed_opens",
                                 "lost_decisions", "double_decisions", "duplicate_requests",
                                 "duplicate_refunds"))]
             for r in ordered]), ""]

    # -- faults, hostile, audit, recheck: one backend each unless the log says otherwise ----------
    def section(title: str, rs: list[dict[str, Any]], header: list[str],
                row: Callable[[list[dict[str, Any]]], list[Any]],
                key: Callable[[dict[str, Any]], Any] = id) -> list[str]:
        """A table of ``rs`` grouped by ``key``; a Backend column if they ran on several."""
        ran = in_order(rs)
        groups: dict[tuple[str, Any], list[dict[str, Any]]] = defaultdict(list)
        for r in rs:
            groups[(r["backend"], key(r))].append(r)
        ordered = sorted(groups.items(), key=lambda g: backends.index(g[0][0]))
        if len(ran) == 1:
            return [f"## {title} ({_name(ran[0])})", "",
                    _table(header, [row(g) for _k, g in ordered]), ""]
        return [f"## {title}", "", _table(["Backend", *header],
                                          [[_name(b), *row(g)] for (b, _k), g in ordered]), ""]

    if faults:
        out += section("Model faults", faults, ["Fault", "Cases", "Problems"],
                       lambda g: [g[0]["fault"], len(g), _broken(g)], key=lambda r: r["fault"])
    if hostile:
        out += section("Hostile and bad input", hostile, ["Kind", "Case", "Problems"],
                       lambda g: [g[0]["kind"], g[0]["case"], _broken(g)])
    if audit:
        out += section("Audit tampering", audit, ["Tampering", "Caught by `audit --verify`"],
                       lambda g: [g[0]["case"], "yes" if g[0]["caught"] else "**no**"])
    if recheck:
        out += section("Policy re-checked at decision time", recheck, ["Case", "Problems"],
                       lambda g: [g[0]["case"], _broken(g)])

    if money:
        out += _money_section(money, files, backends)

    # -- runtimes -----------------------------------------------------------------------------
    if files:
        out += ["## Test files", "", _table(
            ["File", "Wall time", "Result"],
            [[f"`tests/{f}`", f"{r['seconds']:.0f} s", r["result"]] for f, r in files.items()]),
            ""]

    out += ["## Trust, round three (issue 33)", "",
            "Each case broke on the code before it, as its test showed there; each test runs "
            "in the normal suite.", "",
            _table(["#", "What broke", "Test now", "On the old code"],
                   [list(case) for case in TRUST_CASES]), ""]
    out += ["## Trust, round four (issue 43)", "",
            "Each case broke on the code before it, as its test showed there; each test runs "
            "in the normal suite.", "",
            _table(["#", "What broke", "Test now", "On the old code"],
                   [list(case) for case in TRUST_CASES_4]), ""]
    out += ["## What these tests do not cover", "", NOT_COVERED]
    return "\n".join(out)


def _crash_grid(crash: list[dict[str, Any]]) -> str:
    """The crash matrix on one backend: cases (kills) per crash point and scenario."""
    named = [r for r in crash if r["point"] in CRASH_POINTS]
    extra = [r for r in crash if r["point"] not in CRASH_POINTS]
    scenarios = sorted({r["scenario"] for r in crash})
    grid: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in crash:
        grid[r["point"]][r["scenario"]][0] += 1
        grid[r["point"]][r["scenario"]][1] += r.get("kills", 1)

    def cell(p: str, s: str) -> str:
        cases, kills = grid[p][s]
        return f"{cases} ({kills})" if cases else ""

    rows = [[f"`{p}`", *[cell(p, s) for s in scenarios]]
            for p in sorted({r["point"] for r in named})]
    rows += [[p, *[cell(p, s) for s in scenarios]] for p in sorted({r["point"] for r in extra})]
    return _table(["Crash point", *scenarios], rows)


# -- the money invariants (tests/reliability/test_money_invariants.py) ----------------------------

def _number(value: Any) -> int | float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _money_sum(records: list[dict[str, Any]], key: str) -> int | float:
    return sum(_number(r.get(key)) for r in records)


def _money_invariants(records: list[dict[str, Any]]) -> list[str]:
    for r in records:
        if isinstance(r.get("invariants"), list) and r["invariants"]:
            return [str(x) for x in r["invariants"]]
    return MONEY_INVARIANTS


def _money_problems(records: list[dict[str, Any]], files: dict[str, dict[str, Any]]) -> Any:
    """Problems found: from the records if they count them, else from the test file's result.

    The test records what it tried whether or not an invariant broke (a broken one fails the
    test), so without a count in the record the file's pytest result decides.
    """
    counted = [r[k] for r in records for k in ("failures", "violations", "failed")
               if k in r and isinstance(r[k], (int, bool))]
    if counted:
        return sum(int(c) for c in counted)
    result = (files.get(MONEY_FILE) or {}).get("result")
    if result is None:
        return "not in the log (a broken one fails the test)"
    return "**test failed**" if any(w in result for w in ("failed", "error")) else 0


def _rules(records: list[dict[str, Any]]) -> tuple[Counter[str], list[str]]:
    """The rules the state machine ran: counts per rule (a dict) and/or names (a list)."""
    counts: Counter[str] = Counter()
    names: list[str] = []
    for r in records:
        rules = r.get("rules")
        if isinstance(rules, dict):
            counts.update({str(k): _number(v) for k, v in rules.items()})
        elif isinstance(rules, (list, tuple)):
            names += [str(x) for x in rules if str(x) not in names]
        elif isinstance(rules, str) and rules not in names:
            names += [x.strip() for x in rules.split(",") if x.strip()]
    return counts, [n for n in names if n not in counts]


def _money_section(records: list[dict[str, Any]], files: dict[str, dict[str, Any]],
                   backends: list[str]) -> list[str]:
    per = {b: [r for r in records if _backend(r) == b] for b in backends}

    def each(value: Callable[[list[dict[str, Any]]], Any]) -> list[Any]:
        """One cell per backend: ``value`` of its records, or a dash where it did not run."""
        return [value(per[b]) if per[b] else DASH for b in backends]

    rows = [[label, *each(lambda rs, key=key: f"{_money_sum(rs, key):,}")]
            for key, label in MONEY_COUNTS.items() if any(key in r for r in records)]
    shown = {*MONEY_COUNTS, "suite", "at", "seed", "rules", "invariants", "seconds",
             "failures", "violations", "failed", "backend"}
    rows += [[key.replace("_", " ").capitalize(),
              *each(lambda rs, key=key: f"{_money_sum(rs, key):,}")]
             for key in sorted({k for r in records for k, v in r.items()
                                if k not in shown and _number(v)})]
    if any("seconds" in r for r in records):
        rows.append(["Wall time", *each(lambda rs: f"{_money_sum(rs, 'seconds'):.0f} s")])

    def seeds(rs: list[dict[str, Any]]) -> str:
        found = sorted({str(r["seed"]) for r in rs if r.get("seed") is not None})
        return ", ".join(found) if found else "random (Hypothesis' own)"

    rows.append(["Seeds", *each(seeds)])

    def result(rs: list[dict[str, Any]]) -> str:
        problems = _money_problems(rs, files)
        steps = _money_sum(rs, "steps")
        word = ("held" if problems == 0 else "**broken**" if isinstance(problems, int)
                else "**test failed**" if problems == "**test failed**" else "not in the log")
        return f"{word} after each of {steps:,} steps" if steps else f"{word} after every step"

    names = [_name(b) for b in backends]
    out = ["## Money invariants", "",
           "`tests/reliability/test_money_invariants.py` is a Hypothesis state machine: it "
           "generates a shop "
           "(prices in cents, quantities, final-sale lines, shipping, delivery ages, a return "
           "fee per item or per refund) and a history against it: a scripted model asks for "
           "refunds with any lines, reasons, amounts and order-id spellings; people approve, "
           "approve some lines, reject or race to decide; the process dies at a crash point; "
           "runs are resumed. The invariants are read from the payments log, the store and "
           "the audit log after every step. The same machine runs with its store on each "
           "backend (a database per history on PostgreSQL). "
           "`REFUND_AGENT_MONEY_EXAMPLES=<n>` sets how many histories are tried on SQLite, "
           "`REFUND_AGENT_MONEY_EXAMPLES_PG=<n>` on PostgreSQL.", "",
           _table(["Tried", *[f"On {n}" for n in names]], rows), ""]
    out += [_table(["Invariant", *[f"On {n}" for n in names]],
                   [[text, *each(result)] for text in _money_invariants(records)]), ""]
    rule_counts = {b: _rules(per[b]) for b in backends}
    if any(c or n for c, n in rule_counts.values()):
        every = list(dict.fromkeys(
            [k for c, _n in rule_counts.values() for k, _v in c.most_common()]
            + [n for _c, ns in rule_counts.values() for n in ns]))

        def times(b: str, rule: str) -> str:
            counts, listed = rule_counts[b]
            if not per[b]:
                return DASH
            return f"{counts[rule]:,}" if rule in counts else "" if rule in listed else "0"

        out += [_table(["Rule", *[f"Times applied on {n}" for n in names]],
                       [[f"`{k}`", *[times(b, k) for b in backends]] for k in every]), ""]
    return out


def run_tests(log: Path, soak_runs: int | None, money_examples: int | None = None) -> None:
    env = {**os.environ, "REFUND_AGENT_RELIABILITY_LOG": str(log)}
    if soak_runs:
        env["REFUND_AGENT_SOAK_RUNS"] = str(soak_runs)
    if money_examples:
        env["REFUND_AGENT_MONEY_EXAMPLES"] = str(money_examples)
    missing = [name for name in FILES if not (ROOT / "tests" / name).exists()]
    if missing:
        # A moved test file would silently leave its rows out of the report.
        raise SystemExit(f"Not in tests/: {', '.join(missing)}. Update FILES in {__file__}.")
    for name in FILES:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", f"tests/{name}", "-q"],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - started
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        result = lines[-1].strip("= ") if lines else f"exit {proc.returncode}"
        print(f"{name}: {result} ({seconds:.0f} s)", file=sys.stderr)
        with log.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"suite": "_file", "file": name, "seconds": seconds,
                                 "result": result}) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, action="append", default=[],
                        help="a JSON-lines file to include (repeatable; e.g. a big soak's)")
    parser.add_argument("--run", action="store_true", help="run the tests first")
    parser.add_argument("--soak-runs", type=int, help="REFUND_AGENT_SOAK_RUNS for --run")
    parser.add_argument("--money-examples", type=int,
                        help="REFUND_AGENT_MONEY_EXAMPLES for --run (generated histories)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "RELIABILITY.md")
    args = parser.parse_args(argv)
    if not args.run and not args.log:
        parser.error("give --run, or --log FILE")
    logs = list(args.log)
    if args.run:
        logs.append(Path(tempfile.mkdtemp()) / "reliability.jsonl")
        run_tests(logs[-1], args.soak_runs, args.money_examples)
    text = render([r for log in logs for r in _load(log)])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} from {', '.join(map(str, logs))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
