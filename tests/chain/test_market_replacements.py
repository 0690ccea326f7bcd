"""Replacements mid-task (docs/protocol.md 4.1c): the slot of a member who was dropped or slashed opens when the
next round starts; a worker joining the running task into it locks the same collateral, takes the slot's worker
index and trains from the round after the one in which it joined; everyone is paid for its own verified rounds."""

from __future__ import annotations

from market_helpers import REWARD, Market, assert_fails, commit_message, event_actions
from market_helpers import SLOT_COLLATERAL, SLOT_PENALTY, SLOT_ROUND_BLOCKS, SLOT_ROUNDS, market_snapshot
from market_helpers import settle_round, slot_task
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import AlreadyMember, RoundClosed, TaskNotOpen
from trolly.chain.market.records import VERDICT_FAIL
from trolly.chain.proto import market_pb2 as pb

def join(market: Market, worker, task_id: int):
    return market.chain.deliver(worker, pb.MsgJoinTask(task_id=task_id))


def test_a_dropped_members_slot_opens_at_the_next_round_and_the_replacement_trains_from_the_round_after(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, leaving, replacement = market.workers[:3]
    market.commit(task_id, 0, [first])
    chain.advance(SLOT_ROUND_BLOCKS)  # round 0's deadline: `leaving` is dropped
    assert market.member(task_id, leaving)["status"] == "dropped"
    view = market.task(task_id)
    assert view["round"] == 0 and view["open_slots"] == 0  # the slot opens only when round 1 starts
    assert_fails(join(market, replacement, task_id), TaskNotOpen)

    settle_round(market, task_id)
    view = market.task(task_id)
    assert (view["round"], view["phase"], view["open_slots"]) == (1, "commit", 1)
    balance = chain.balance(replacement)
    result = join(market, replacement, task_id)
    assert result.ok, result.log
    joined = event_actions(result, "joined")
    assert (joined[0]["index"], joined[0]["first_round"]) == ("1", "2")
    assert chain.balance(replacement) == balance - SLOT_COLLATERAL
    fresh = market.member(task_id, replacement)
    assert (fresh["index"], fresh["first_round"], fresh["status"], fresh["collateral"]) == \
        (1, 2, "active", SLOT_COLLATERAL)
    view = market.task(task_id)
    assert (view["open_slots"], view["replacements"], view["workers_joined"], view["active_members"]) == (0, 1, 3, 2)

    # Round 1, joined mid-round: the replacement may not commit, and the round closes without waiting for it.
    assert_fails(chain.deliver(replacement, commit_message(task_id, 1, "r")), RoundClosed)
    output = market.commit(task_id, 1, [first])
    chain.block()
    assert market.task(task_id)["phase"] in ("sampling", "verify")
    assert event_actions(output, "dropped") == []
    settle_round(market, task_id)
    assert market.member(task_id, replacement)["status"] == "active"

    for round_ in (2, 3):  # the replacement trains from round 2
        market.commit(task_id, round_, [first, replacement])
        settle_round(market, task_id)
    market.report_final(task_id, SLOT_ROUNDS, [first, replacement], [b"W" * 32, b"W" * 32])
    view = market.task(task_id)
    assert view["status"] == "completed"
    half = REWARD // 2
    paid = {m["worker"]: (m["paid"], m["rounds_passed"]) for m in view["members"]}
    assert paid[encode_address(first.address)] == (2 * REWARD + 2 * half, 4)  # alone in rounds 0 and 1
    assert paid[encode_address(replacement.address)] == (2 * half, 2)  # only its own verified rounds
    assert paid[encode_address(leaving.address)] == (0, 0)
    assert chain.balance(replacement) == balance + 2 * half  # its collateral back in full
    commitments = market.task(task_id)["round_details"][2]["commitments"]
    assert [c["worker"] for c in commitments] == [encode_address(first.address), encode_address(replacement.address)]


def test_a_slashed_members_slot_opens_when_the_next_round_starts(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, cheat, replacement = market.workers[:3]
    market.commit(task_id, 0, [first, cheat])
    settle_round(market, task_id, {encode_address(cheat.address): VERDICT_FAIL})
    assert market.member(task_id, cheat)["status"] == "slashed"
    view = market.task(task_id)
    assert (view["round"], view["open_slots"]) == (1, 1)
    assert join(market, replacement, task_id).ok
    fresh = market.member(task_id, replacement)
    assert (fresh["index"], fresh["first_round"]) == (1, 2)


def test_joining_a_running_task_without_an_open_slot_or_twice_is_refused_and_changes_nothing(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, leaving, replacement, other = market.workers[:4]
    before = market_snapshot(chain)
    assert_fails(join(market, replacement, task_id), TaskNotOpen)  # running and full
    assert_fails(join(market, first, task_id), AlreadyMember)
    assert market_snapshot(chain) == before

    market.commit(task_id, 0, [first])
    chain.advance(SLOT_ROUND_BLOCKS)
    settle_round(market, task_id)
    assert_fails(join(market, leaving, task_id), AlreadyMember)  # a member who left cannot come back
    assert join(market, replacement, task_id).ok
    before = market_snapshot(chain)
    assert_fails(join(market, replacement, task_id), AlreadyMember)
    assert_fails(join(market, other, task_id), TaskNotOpen)  # the one slot is taken
    assert market_snapshot(chain) == before


def test_a_slot_open_in_the_last_training_round_takes_no_replacement(make_chain):
    market, chain, task_id = slot_task(make_chain, rounds=2)
    first, leaving, replacement = market.workers[:3]
    market.commit(task_id, 0, [first])
    chain.advance(SLOT_ROUND_BLOCKS)
    settle_round(market, task_id)
    view = market.task(task_id)
    assert (view["round"], view["open_slots"]) == (1, 1)
    before = market_snapshot(chain)
    assert_fails(join(market, replacement, task_id), TaskNotOpen)  # round 1 is the last: nothing left to train
    assert market_snapshot(chain) == before


def test_a_replacement_that_misses_its_first_round_is_dropped_and_its_slot_opens_again(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, leaving, replacement, other = market.workers[:4]
    market.commit(task_id, 0, [first])
    chain.advance(SLOT_ROUND_BLOCKS)
    settle_round(market, task_id)
    assert join(market, replacement, task_id).ok
    market.commit(task_id, 1, [first])
    settle_round(market, task_id)
    balance = chain.balance(replacement)
    market.commit(task_id, 2, [first])
    chain.advance(SLOT_ROUND_BLOCKS)  # the replacement misses round 2, its first
    dropped = market.member(task_id, replacement)
    assert (dropped["status"], dropped["left_round"], dropped["penalized"]) == ("dropped", 2, SLOT_PENALTY)
    assert chain.balance(replacement) == balance + SLOT_COLLATERAL - SLOT_PENALTY
    settle_round(market, task_id)
    view = market.task(task_id)
    assert (view["round"], view["open_slots"]) == (3, 1)
    assert_fails(join(market, other, task_id), TaskNotOpen)  # round 3 is the last training round


def test_a_task_takes_at_most_workers_wanted_replacements(make_chain):
    """Each replacement that misses its first round opens the slot again; after `workers` (2) replacements the
    task takes no more, so its member list stays within 2 x workers."""
    market, chain, task_id = slot_task(make_chain, rounds=8, accounts=6)
    first, leaving, *newcomers = market.workers[:5]
    market.commit(task_id, 0, [first])
    chain.advance(SLOT_ROUND_BLOCKS)  # `leaving` misses round 0
    settle_round(market, task_id)
    for newcomer in newcomers[:2]:
        round_ = market.task(task_id)["round"]
        assert join(market, newcomer, task_id).ok
        market.commit(task_id, round_, [first])
        settle_round(market, task_id)
        market.commit(task_id, round_ + 1, [first])
        chain.advance(SLOT_ROUND_BLOCKS)  # the newcomer misses its first round
        settle_round(market, task_id)
        assert market.member(task_id, newcomer)["status"] == "dropped"
    view = market.task(task_id)
    assert (view["round"], view["open_slots"], view["replacements"], view["workers_joined"]) == (5, 1, 2, 4)
    before = market_snapshot(chain)
    assert_fails(join(market, newcomers[2], task_id), TaskNotOpen)
    assert market_snapshot(chain) == before
