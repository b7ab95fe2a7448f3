"""What you see is what you sign, in the terminal (issue 34.2): ``queue`` and ``show`` print a
waiting approval's fingerprint; ``approve``, ``reject`` and ``ask`` sign the one given with
``--fingerprint`` (what a script read), else the approval as the command read it. An approval
that changed since is refused (exit 1, one line, audited 'refused'), never decided.

In this process (``main``), as tests/desk/test_money_limits.py drives the terminal: the
refusals never reach the model, and one sample run is all the model work.
"""

from __future__ import annotations

import re

import pytest
from helpers.cli import DATA

from refund_agent.cli import main
from refund_agent.desk.agent import Agent
from refund_agent.desk.records import DeskStore
from refund_agent.store import Store

NEW_TITLE = "Refund on order A1043: the coffee maker, and the espresso machine as well."


def _terminal(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(out))
    monkeypatch.setenv("REFUND_AGENT_DATA", str(DATA))

    def command(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        said = capsys.readouterr()
        return code, said.out, said.err

    assert command()[0] == 0           # the damaged-item sample: $48.00 waits for approval
    return out, command


def _retitle(store: Store, approval_id: str) -> None:
    """The approval as stored changes under the person who read it (its title, here)."""
    store.execute("UPDATE approvals SET summary = ? WHERE id = ?", (NEW_TITLE, approval_id))


def _shown(queue: str) -> tuple[str, str]:
    """The one waiting approval's id and fingerprint, as ``queue`` lists them."""
    (approval_id,) = [line.split()[0] for line in queue.splitlines() if line.startswith("run_")]
    (fingerprint,) = re.findall(r"^    fingerprint: ([0-9a-f]{16})$", queue, re.M)
    return approval_id, fingerprint


def _events(store: Store) -> list[tuple[str, str]]:
    return [(e.event, e.actor) for e in store.audit()]


def test_a_stale_fingerprint_is_refused_and_the_one_shown_approves(tmp_path, monkeypatch,
                                                                  capsys):
    out, command = _terminal(tmp_path, monkeypatch, capsys)
    store = DeskStore(out / "refund-agent.sqlite3")
    approval_id, read = _shown(command("queue")[1])
    approval = store.approval(approval_id)
    assert read == approval.fingerprint
    assert f"  ** Waiting for approval ({approval_id})\n  ** fingerprint: {read}\n" in \
        command("show", approval.run_id)[1]

    _retitle(store, approval_id)
    for args, verb in ((("approve",), "approve"), (("reject", "--note", "No."), "reject"),
                       (("ask", "A photo, please?"), "ask the customer about")):
        code, said, err = command(*args, "--id", approval_id, "--fingerprint", read,
                                  "--as", "Dana Kim")
        assert code == 1, (args, said, err)
        assert err.startswith(f"error: Cannot {verb} this approval: it changed since it was "
                              f"shown to Dana Kim (fingerprint {read}, now ")
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "Continuing run" not in said and "handoff" not in err
    assert store.approval(approval_id).status == "pending"
    assert not (out / "refunds.log").exists() and not (out / "outbox.log").exists()
    assert _events(store) == [("requested", "agent")] + [("refused", "Dana Kim")] * 3

    # Read again, it shows what it says now; that fingerprint approves it, and it is paid once.
    queue = command("queue")[1]
    assert NEW_TITLE in queue
    again, now = _shown(queue)
    assert again == approval_id and now != read
    code, said, err = command("approve", "--fingerprint", now, "--as", "Dana Kim")
    assert code == 0, err
    assert "Approved $48.00 for A1043 (maya.chen@example.com) as Dana Kim" in said
    assert len((out / "refunds.log").read_text().splitlines()) == 1
    assert _events(store)[-2:] == [("approved", "Dana Kim"), ("issued", "payments")]


def test_without_a_fingerprint_a_decision_signs_the_approval_as_the_command_read_it(
        tmp_path, monkeypatch, capsys):
    """The approval changes between the command's read and its decision: refused, not paid."""
    out, command = _terminal(tmp_path, monkeypatch, capsys)
    store = DeskStore(out / "refund-agent.sqlite3")
    decide = Agent.decide

    def changed_meanwhile(self, approval_id, *args, **kwargs):  # noqa: ANN001, ANN202
        _retitle(store, approval_id)
        return decide(self, approval_id, *args, **kwargs)

    monkeypatch.setattr(Agent, "decide", changed_meanwhile)
    code, said, err = command("approve", "--as", "Dana Kim")
    assert code == 1, (said, err)
    assert "error: Cannot approve this approval: it changed since it was shown" in err
    assert store.approvals("pending")[0].summary == NEW_TITLE
    assert not (out / "refunds.log").exists()
    assert _events(store) == [("requested", "agent"), ("refused", "Dana Kim")]


def test_a_mistyped_fingerprint_is_a_usage_mistake(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(tmp_path / "out"))
    with pytest.raises(SystemExit) as stop:
        main(["approve", "--fingerprint", "776c879b1c99bb4", "--as", "Dana Kim"])
    assert stop.value.code == 2
    assert "--fingerprint: must be the 16 hex digits `queue` or `show` prints" in \
        capsys.readouterr().err
