"""Issue 43, 9: every name the system signs the audit log (and escalations) with is reserved,
from one list (desk/identity.py's ``Actor``), so no person's account can take it: the
terminal refuses ``timeouts`` and ``Mail``; the code's own signatures are scanned; and the
actors a real desk signs with, collected from its store, are all on the list."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers.cli import DATA
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

import refund_agent
from refund_agent.desk.identity import RESERVED_ACTORS, Actor, name_problem
from refund_agent.desk.timeouts import TimeoutPolicy
from refund_agent.evals.runner import run_email

PACKAGE = Path(refund_agent.__file__).parent

# Where a call signs: the function's name -> (position, keyword) of the argument that names
# who signs. ``by=`` and ``actor=`` sign in any call.
SIGNING_CALLS = {"_audit": (2, "actor"), "raise_escalation": (5, "by"),
                 "record_provider_event": (1, "provider")}
SIGNING_KEYWORDS = ("by", "actor", "raised_by")


def _literal(node: ast.AST | None) -> str | None:
    """The text of a string literal (or of an f-string's fixed parts), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return None


def signed_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal the code signs an audit line or escalation with."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            signed = [k.value for k in node.keywords if k.arg in SIGNING_KEYWORDS]
            if name in SIGNING_CALLS:
                position, keyword = SIGNING_CALLS[name]
                signed += [k.value for k in node.keywords if k.arg == keyword]
                if len(node.args) > position:
                    signed.append(node.args[position])
            found += [(node.lineno, text) for arg in signed
                      if (text := _literal(arg)) is not None]
        elif isinstance(node, ast.Dict):   # an Output's audit dict (desk/actions.py)
            found += [(node.lineno, text) for key, value in zip(node.keys, node.values,
                                                                strict=True)
                      if _literal(key) == "actor" and (text := _literal(value)) is not None]
        elif isinstance(node, ast.FunctionDef):   # def expire(..., by="expiry")
            args = node.args.args[len(node.args.args) - len(node.args.defaults):]
            pairs = list(zip(args, node.args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults,
                                             strict=True) if d]
            found += [(node.lineno, text) for arg, default in pairs
                      if arg.arg in SIGNING_KEYWORDS and (text := _literal(default))]
    return sorted(found)


def test_the_scan_finds_a_signature_written_as_text():
    """The scan itself: each way the code has signed with a string of its own is found."""
    code = ('self._audit(db, "reminded", "timeouts", run_id=r)\n'
            'raise_escalation(db, k, r, K, note, "timeouts", a)\n'
            'agent.decide(a, approve=False, by="refund-agent eval")\n'
            'audit = {"event": "refused", "actor": "agent"}\n'
            'def expire(self, older_than, by="expiry"): pass\n'
            'store.record_provider_event(e, "stripe", kind)\n')
    assert [text for _, text in signed_literals(ast.parse(code))] == [
        "timeouts", "timeouts", "refund-agent eval", "agent", "expiry", "stripe"]


def test_every_signature_the_code_writes_is_reserved():
    """Old code: 'timeouts', 'mail' and 'refund-agent eval' signed audit lines and were not
    reserved, so a person could take them as account names."""
    loose = [f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for line, text in signed_literals(ast.parse(path.read_text(), str(path)))
             if text not in RESERVED_ACTORS]
    assert loose == [], "signed with names not in identity.Actor: " + ", ".join(loose)


def test_every_name_on_the_list_is_refused_as_a_person():
    assert {"timeouts", "mail", "refund-agent eval", "agent", "stripe"} <= RESERVED_ACTORS
    assert all(name_problem(actor) for actor in RESERVED_ACTORS)
    assert all(name_problem(actor.upper()) for actor in RESERVED_ACTORS)
    assert name_problem("page 203.0.113.9") and name_problem("page [2001:db8::1]")
    assert name_problem("Page Turner") is None and name_problem("Mailer Daemon") is None


@pytest.mark.parametrize("name", ["timeouts", "Mail", "Refund-Agent Eval", "page"])
def test_the_terminal_refuses_a_system_name_as_an_account(tmp_path, name):
    """Old code: `users add timeouts` and `users add Mail` made the accounts (exit 0)."""
    added = run_cli(tmp_path / "out", "users", "add", name, "--role", "lead",
                    REFUND_AGENT_NEW_PASSWORD="a-long-password")
    assert added.returncode == 1, added.stdout   # refused, as a name already taken is
    assert "the desk itself signs the audit log with" in added.stderr
    assert len(added.stderr.strip().splitlines()) == 1, added.stderr
    assert "Traceback" not in added.stderr


def test_the_actors_a_desk_really_signs_with_are_all_reserved(agent):
    """A desk at work (the model proposes, the eval rejects, the timeout policy reminds and
    escalates, approvals expire): every actor of its audit and escalations is on the list."""
    samples = json.loads((DATA / "sample-emails.json").read_text())["samples"]
    run_email(agent, samples[0])                 # proposed by the agent, rejected by the eval
    run = agent.start(samples[0]["from"], samples[0]["body"], subject=samples[0]["subject"])
    agent.advance(run.id)                        # proposed, left waiting
    agent.store.execute("UPDATE approvals SET requested_at = requested_at - 86400 * 3")
    agent.store.apply_timeouts(TimeoutPolicy(remind_after=3600, escalate_after=7200))
    agent.store.expire(3600)
    signed = {e.actor for e in agent.store.audit()}
    signed |= {e.raised_by for e in agent.store.escalations()}
    assert {Actor.AGENT, Actor.EVAL, Actor.TIMEOUTS, Actor.EXPIRY} <= signed
    assert signed <= RESERVED_ACTORS, signed - RESERVED_ACTORS
