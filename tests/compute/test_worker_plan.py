"""The worker loop's decisions (`compute/worker/plan.py`), on task views produced by the real market module.

The views come from `/market/task/<id>` and its rounds' pages of an in-process chain driven by
`market_helpers.Market`, assembled into the `TaskView` the worker reads, so the decision code is tested against the very JSON the worker reads from a node.
"""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, Market, final_message

from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.compute.worker import plan
from trolly.compute.weights_follower import agreed_start_hash, round_updates
from trolly.wallet.market_views import TaskView


def market_with_task(make_chain, workers: int = 2):
    chain = make_chain(accounts=4, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    market.register()
    task_id = market.submit(workers=workers)
    return chain, market, task_id


def task_view(market, task_id: int) -> TaskView:
    return TaskView.from_answer(market.task(task_id))


def me(market, index: int) -> str:
    return encode_address(market.workers[index].address)


def test_open_task_waits_for_workers_and_a_stranger_finishes(make_chain):
    chain, market, task_id = market_with_task(make_chain)
    market.join(task_id, market.workers[:1])
    view = task_view(market, task_id)
    action = plan.decide(view, me(market, 0))
    assert action.kind == plan.WAIT and "1 of 2" in action.reason
    assert plan.decide(view, me(market, 2)).kind == plan.FINISH


def test_running_task_trains_round_zero_then_waits_once_committed(make_chain):
    chain, market, task_id = market_with_task(make_chain)
    market.join(task_id, market.workers[:2])
    assert plan.decide(task_view(market, task_id), me(market, 0)) == plan.Action(plan.TRAIN, 0, "round 0")
    market.commit(task_id, 0, market.workers[:1])
    view = task_view(market, task_id)
    waiting = plan.decide(view, me(market, 0))
    assert waiting.kind == plan.WAIT and waiting.mirror_round == 0
    assert plan.decide(view, me(market, 1)).kind == plan.TRAIN


def test_sampling_and_verification_wait_and_mirror_the_round(make_chain):
    chain, market, task_id = market_with_task(make_chain)
    market.join(task_id, market.workers[:2])
    market.commit(task_id, 0, market.workers[:2])
    view = task_view(market, task_id)
    assert view.phase in ("sampling", "verify")
    action = plan.decide(view, me(market, 1))
    assert (action.kind, action.round, action.mirror_round) == (plan.WAIT, 0, 0)
    updates = round_updates(view, 0)
    assert [u.worker_index for u in updates] == [0, 1]
    assert all(u.outcome == "pending" and u.samples_processed > 0 and len(u.update_hash) == 64 for u in updates)
    assert updates[0].blob_url.startswith("http://127.0.0.1:")


def test_next_round_trains_and_outcomes_decide_what_is_aggregated(make_chain):
    chain, market, task_id = market_with_task(make_chain)
    market.join(task_id, market.workers[:2])
    market.commit(task_id, 0, market.workers[:2])
    chain.advance(1)  # the block whose hash seeds sampling
    market.vote(chain.operators, task_id, VERDICT_PASS, worker=me(market, 0))
    market.vote(chain.operators, task_id, VERDICT_FAIL, worker=me(market, 1), strict=False)  # one FAIL decides
    chain.advance(1)
    view = task_view(market, task_id)
    assert view.round == 1
    outcomes = {u.worker_index: u.outcome for u in round_updates(view, 0)}
    assert outcomes == {0: "passed", 1: "failed"}
    assert agreed_start_hash(view, 0) == view.round_details[0].start_weights_hash != ""
    assert plan.decide(view, me(market, 0)) == plan.Action(plan.TRAIN, 1, "round 1")
    slashed = plan.decide(view, me(market, 1))
    assert slashed.kind == plan.FINISH and slashed.reason.startswith("slashed")


def test_final_round_reports_and_a_completed_task_finishes(make_chain):
    chain, market, task_id = market_with_task(make_chain, workers=1)
    market.join(task_id, market.workers[:1])
    for round_ in range(2):
        market.commit(task_id, round_, market.workers[:1])
        chain.advance(1)
        market.vote(chain.operators, task_id, VERDICT_PASS)
        chain.advance(1)
    view = task_view(market, task_id)
    assert view.round == 2 and view.phase == "commit"
    assert plan.decide(view, me(market, 0)) == plan.Action(plan.REPORT_FINAL, 2, "final report")
    assert round_updates(view, 2) == []  # the final report carries no update
    output = chain.block(chain.tx(market.workers[0], final_message(task_id, 2)))
    assert all(r.ok for r in output.tx_results)
    view = task_view(market, task_id)
    assert view.status == "running" and plan.decide(view, me(market, 0)).kind == plan.WAIT  # being verified
    chain.advance(1)
    market.vote(chain.operators, task_id, VERDICT_PASS)
    view = task_view(market, task_id)
    assert view.status == "completed"
    assert plan.decide(view, me(market, 0)) == plan.Action(plan.FINISH, reason="task completed")


def test_a_member_that_missed_its_round_is_told_to_finish(make_chain):
    chain, market, task_id = market_with_task(make_chain)
    market.join(task_id, market.workers[:2])
    market.commit(task_id, 0, market.workers[:1])
    chain.advance(6)  # past round_blocks: worker 1 missed round 0 and is dropped
    view = task_view(market, task_id)
    action = plan.decide(view, me(market, 1))
    assert action.kind == plan.FINISH and "dropped" in action.reason and "missed round" in action.reason
    assert plan.decide(view, me(market, 0)).kind != plan.FINISH


def test_a_replacement_waits_mirroring_until_its_first_round_and_only_an_open_slot_takes_workers(make_chain):
    from market_helpers import spec_bytes
    from trolly.chain.proto import market_pb2 as pb
    from trolly.wallet.market_views import TaskPage

    chain = make_chain(accounts=4, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    market.register()
    task_id = market.submit(workers=2, rounds=3, spec=spec_bytes(rounds=3), round_blocks=20)

    def listed() -> bool:
        page = TaskPage.from_answer(chain.query("/market/tasks/open"))
        return plan.takes_workers(next(t for t in page.tasks if t.id == task_id))

    assert listed()  # open with places left
    market.join(task_id, market.workers[:2])
    assert not listed()  # running, every slot filled
    market.commit(task_id, 0, market.workers[:1])
    chain.advance(20)  # worker 1 misses round 0
    market.vote(chain.operators, task_id)
    assert task_view(market, task_id).round == 1 and listed()  # its slot is open from round 1
    assert chain.deliver(market.workers[2], pb.MsgJoinTask(task_id=task_id)).ok
    assert not listed()
    action = plan.decide(task_view(market, task_id), me(market, 2))
    assert (action.kind, action.mirror_round) == (plan.WAIT, 1) and "from round 2" in action.reason
    market.commit(task_id, 1, market.workers[:1])
    chain.block()
    market.vote(chain.operators, task_id)
    action = plan.decide(task_view(market, task_id), me(market, 2))
    assert (action.kind, action.round) == (plan.TRAIN, 2)
