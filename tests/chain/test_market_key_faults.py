"""A requester cannot make an honest worker lose anything through its private task's data key (issue 32 item 3).

A member whose box is bad reports it (`MsgReportBadKey`) and is released with its collateral and a compensation
the requester pays; a report against a good box is refused; a member whose key did not come in time is released
the same way at the round's deadline, while one that got it in time and did not commit forfeits its whole
collateral; validators whose keys are missing or bad owe no vote, and a segment they left undecidable is paid.
"""

from __future__ import annotations

import pytest

from key_helpers import (COLLATERAL, COMPENSATION, DATA_KEY, KEY_DELIVERY_BLOCKS, PRIVATE_ROUND_BLOCKS, deliver,
                         key_market, new_key, report, running_private_task, sign_something)
from market_helpers import MARKET_PARAMS, Market, assert_fails, event_actions
from trolly.chain.market.errors import KeyBoxGood, KeyReportRefused, NoKeyBox
from trolly.chain.market.store import ESCROW
from trolly.chain.proto import market_pb2 as pb


@pytest.fixture
def market(make_chain) -> Market:
    return key_market(make_chain)


def test_a_junk_box_is_reported_the_worker_loses_nothing_and_the_requester_pays(market):
    """Attack (issue 32 item 3): a requester keys a started task with junk; its workers cannot train, miss the
    round and pay the penalty. Now each reports its box, is released with its collateral and compensated out of
    the requester's escrow, and its slot reopens."""
    task_id, workers = running_private_task(market)
    before = {w.address: market.chain.balance(w) for w in workers}
    escrow = market.task(task_id)["escrow_remaining"]
    deliver(market, task_id, workers, key=new_key())  # not the key the task committed to
    for worker in workers:
        assert report(market, task_id, worker).ok
    for worker in workers:
        view = market.member(task_id, worker)
        assert view["status"] == "left" and view["reason"] == "bad data key" and view["penalized"] == 0
        assert view["compensated"] == COMPENSATION
        assert market.chain.balance(worker) == before[worker.address] + COLLATERAL + COMPENSATION
    view = market.task(task_id)  # nobody left: the task ends, the rest of the budget goes back
    assert view["status"] == "abandoned" and view["refunded"] == escrow - 2 * COMPENSATION


def test_a_report_against_a_good_box_is_refused(market):
    """A worker that read the key cannot claim junk to walk away: the chain opens the box with the proven shared
    secret and refuses the report when it holds the committed key."""
    task_id, workers = running_private_task(market)
    deliver(market, task_id, workers)
    assert_fails(report(market, task_id, workers[0]), KeyBoxGood)
    assert market.member(task_id, workers[0])["status"] == "active"
    assert_fails(market.chain.deliver(market.workers[2], pb.MsgReportBadKey(task_id=task_id, proof=bytes(96))),
                 NoKeyBox)


def test_a_member_that_committed_this_round_cannot_report(market):
    task_id, workers = running_private_task(market)
    deliver(market, task_id, workers[:1], key=new_key())
    market.commit(task_id, 0, workers[:1])  # committed work it could not have trained honestly
    assert_fails(report(market, task_id, workers[0]), KeyReportRefused)


def test_no_key_by_the_deadline_releases_the_members_without_penalty(market):
    """Attack (issue 32 item 3): a requester that withholds keys after the start makes its workers miss the
    round. Now a member whose key did not come releases at the deadline with its collateral and compensation."""
    task_id, workers = running_private_task(market)
    before = {w.address: market.chain.balance(w) for w in workers}
    market.chain.advance(PRIVATE_ROUND_BLOCKS)
    for worker in workers:
        view = market.member(task_id, worker)
        assert (view["status"], view["reason"], view["penalized"]) == ("left", "no data key in time", 0)
        assert market.chain.balance(worker) == before[worker.address] + COLLATERAL + COMPENSATION
    assert market.task(task_id)["status"] == "abandoned"


def test_a_late_key_releases_a_member_that_did_not_commit_and_a_timely_one_forfeits(market):
    task_id, workers = running_private_task(market)
    timely, late = workers
    deliver(market, task_id, [timely])
    market.chain.advance(KEY_DELIVERY_BLOCKS)
    deliver(market, task_id, [late])  # past the round's start + key_delivery_blocks
    before = {w.address: market.chain.balance(w) for w in workers}
    market.chain.advance(PRIVATE_ROUND_BLOCKS)
    assert market.member(task_id, late)["reason"] == "no data key in time"
    assert market.chain.balance(late) == before[late.address] + COLLATERAL + COMPENSATION
    assert market.member(task_id, timely)["penalized"] == COLLATERAL  # it held the key and let the round pass
    assert market.chain.balance(timely) == before[timely.address]


def committed_round_with_validators_keyed(market: Market, key_for_validators: bytes | None) -> tuple[int, list]:
    """A running private task whose workers got their keys and committed round 0, sampled; the validators get a
    box of `key_for_validators` (None: none)."""
    task_id, workers = running_private_task(market)
    sign_something(market, *market.chain.operators)
    deliver(market, task_id, workers)
    market.commit(task_id, 0, workers)
    market.chain.block()  # sampled: both validators sit on every committee
    if key_for_validators is not None:
        deliver(market, task_id, market.chain.operators, key=key_for_validators)
    return task_id, workers


def settle_unvoted(market: Market) -> list:
    """Let the verification window and its escalation's pass without a vote; the blocks' outputs."""
    return market.chain.advance(2 * MARKET_PARAMS["verification_window"] + 2)


def test_junk_boxes_to_validators_still_pay_the_workers(market):
    """Attack (issue 32 item 3): junk boxes to the validators alone left every round unverified, unpaid. Now each
    validator reports its box and owes no vote; a segment nobody with a usable key could decide is paid."""
    task_id, workers = committed_round_with_validators_keyed(market, new_key())
    for operator in market.chain.operators:
        assert report(market, task_id, operator).ok
    settle_unvoted(market)
    commitments = market.round_commitments(task_id, 0)
    assert {c["outcome"] for c in commitments.values()} == {"unverified"}
    assert all(c["paid"] > 0 for c in commitments.values())
    assert all(market.member(task_id, w)["collateral"] == COLLATERAL for w in workers)


def test_validators_given_no_key_still_pay_the_workers(market):
    task_id, _ = committed_round_with_validators_keyed(market, None)
    settle_unvoted(market)
    assert all(c["paid"] > 0 for c in market.round_commitments(task_id, 0).values())


def test_validators_keyed_who_do_not_vote_leave_the_round_unpaid(market):
    """The requester did its part: silence is nobody's fault it pays for (the rule as for a public task)."""
    task_id, _ = committed_round_with_validators_keyed(market, DATA_KEY)
    output = settle_unvoted(market)
    assert all(c["paid"] == 0 for c in market.round_commitments(task_id, 0).values())
    assert not [e for o in output for e in event_actions(o, "released")]
    assert market.chain.balance(ESCROW) > 0
