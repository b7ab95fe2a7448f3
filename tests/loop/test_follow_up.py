"""Loop.advance's follow_up: asked under the run's lease each time a run would end done; it
may add input and go on (with a fresh turn budget), let the run end, or end it its own way
(EndRun). The simulated customer (desk/customer.py) is one; these use the loop alone, on a
small agent that is not the desk (tests/helpers/credit.py; the desk: test_desk_follow_up.py)."""

from __future__ import annotations

from helpers.credit import ANA, EMAIL

from offline_model import Reply
from refund_agent import EndRun, RunStatus


def test_a_follow_up_that_adds_a_reply_gets_it_answered_in_the_same_advance(scripted_credit):
    agent, brain, _server = scripted_credit(Reply("Answer.", text="Hi Ana, we are on it."),
                                            Reply("Answer again.", text="Hi Ana, glad to help."))
    run = agent.start(ANA, EMAIL)
    asked: list[tuple[RunStatus, bool]] = []

    def follow_up(run, lease) -> bool:
        [(held,)] = agent.store.query("SELECT lease_token FROM runs WHERE id = ?", (run.id,))
        asked.append((run.status, held == lease.token))
        if len(asked) > 1:
            return False
        agent.store.add_reply(run.id, "Thanks! When will I see it?", simulated=True,
                              lease=lease)
        return True

    run = agent.advance(run.id, follow_up=follow_up)
    assert run.status == RunStatus.DONE and run.lease_pid is None
    # Asked twice, each time on a run still held by this advance's lease (not let go first).
    assert asked == [(RunStatus.WORKING, True), (RunStatus.WORKING, True)]
    assert [r.response_id is not None for r in agent.store.replies(run.id)] == [True]
    assert "When will I see it?" in str(brain.seen[-1])


def test_a_follow_up_that_raises_endrun_ends_the_run_as_it_says(scripted_credit):
    agent, _brain, _server = scripted_credit(Reply("Answer.", text="Hi Ana, we are on it."))
    run = agent.start(ANA, EMAIL)

    def follow_up(run, lease) -> bool:
        raise EndRun(RunStatus.FAILED, "The other side went quiet; resume asks again.")

    run = agent.advance(run.id, follow_up=follow_up)   # returned, not raised
    assert run.status == RunStatus.FAILED and run.lease_pid is None
    assert run.error == "The other side went quiet; resume asks again."
    errors = [s.data["message"] for s in agent.store.steps(run.id) if s.kind == "error"]
    assert errors == [run.error]
