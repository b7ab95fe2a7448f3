"""A customer's reply that arrives while its run works or waits on a person is held; once the
run can take it (a person decided and a terminal command finished the run), whichever worker
runs adds it and continues the run: the page's worker or ``refund-agent work``, not only a
running ``receive``."""

from __future__ import annotations

from helpers.cli import run_forked
from helpers.mail import mail, wait_until

from refund_agent.desk import Agent
from refund_agent.models import RunStatus
from refund_agent.outside.mailin.intake import take
from refund_agent.web.worker import Worker

REPLY = "<second@maya.example>"


def held_reply(agent: Agent) -> str:
    """A mailed ticket whose customer wrote again while it waited for approval, then approved
    and finished in a terminal (nothing there releases the reply); the run's id."""
    store = agent.store
    ticket = take(store, bytes(mail()), agent.agent_name)
    assert agent.advance(ticket.run_id).status == RunStatus.WAITING
    again = mail(message_id=REPLY, In_Reply_To="<first@maya.example>",
                 References="<first@maya.example>", subject="Re: Cracked carafe",
                 body="Also: could the refund go back to my card, please?")
    assert take(store, bytes(again), agent.agent_name).kind == "held"
    [approval] = store.approvals("pending")
    agent.decide(approval.id, True, "Dana Kim",
                 fingerprint=agent.store.approval(approval.id).fingerprint)
    assert agent.advance(ticket.run_id).status == RunStatus.DONE
    assert [m.kind for m in store.mail(kind="held")] == ["held"]
    return ticket.run_id


def continued(agent: Agent, run_id: str) -> bool:
    """The held reply was added to its run and the run answered it (finished again)."""
    store = agent.store
    replies = [s for s in store.steps(run_id) if s.kind == "reply"]
    return (store.mail(kind="held") == [] and len(replies) == 1
            and replies[0].data.get("message_id") == REPLY
            and store.run(run_id).status == RunStatus.DONE
            and store.replies(run_id, unsent_only=True) == [])


def test_the_pages_worker_releases_a_held_reply(agent: Agent):
    run_id = held_reply(agent)
    worker = Worker(agent)
    worker.start()
    try:
        wait_until(lambda: continued(agent, run_id) and not worker.is_active(run_id),
                   "the page's worker to add the held reply and continue the run", timeout=30)
    finally:
        worker.shutdown()


def test_refund_agent_work_releases_a_held_reply(agent: Agent):
    run_id = held_reply(agent)
    worked = run_forked(agent.settings.output_dir, "work", "--idle-exit", "1")
    assert worked.returncode == 0, worked.stdout + worked.stderr
    assert f"{REPLY}: the held reply was added to {run_id}" in worked.stdout
    assert f"{run_id}: done" in worked.stdout and continued(agent, run_id), worked.stdout
