"""A member leaves a task (`MsgLeaveTask`, docs/protocol.md 4.1c), so its slot opens for a replacement.

With no commitment in the current round it leaves at once as a drop with reason "left" (the missed-round
penalty burned, the rest returned) and the round stops waiting for it; with a commitment awaiting verification
it leaves when that round settles, paid and with its collateral in full, or slashed if the round failed it.
A member of a task not yet started leaves with its collateral in full. Anyone else is refused, changing
nothing. The autouse invariants fixture checks escrow and supply after every test."""

from __future__ import annotations

from market_helpers import REWARD, SLOT_COLLATERAL, SLOT_PENALTY, Market, assert_fails, commit_message, event_actions
from market_helpers import final_message, market_snapshot, settle_round, slot_market, slot_task
from trolly.chain.crypto import encode_address
from trolly.chain.errors import InvalidRequest
from trolly.chain.market.errors import LeavePending, NotMember, RoundClosed, TaskEnded, TaskNotFound, TaskNotOpen
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.chain.proto import market_pb2 as pb

def leave(market: Market, worker, task_id: int):
    return market.chain.deliver(worker, pb.MsgLeaveTask(task_id=task_id))


def test_leaving_before_committing_burns_the_penalty_and_the_round_stops_waiting(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, leaver, replacement = market.workers[:3]
    market.commit(task_id, 0, [first])
    assert market.task(task_id)["phase"] == "commit"  # still waiting for `leaver`
    balance = chain.balance(leaver)
    result = leave(market, leaver, task_id)
    assert result.ok, result.log
    dropped = event_actions(result, "dropped")
    assert [(d["reason"], d["penalty"], d["returned"]) for d in dropped] == [
        ("left", str(SLOT_PENALTY), str(SLOT_COLLATERAL - SLOT_PENALTY))]
    assert chain.balance(leaver) == balance + SLOT_COLLATERAL - SLOT_PENALTY
    gone = market.member(task_id, leaver)
    assert (gone["status"], gone["reason"], gone["left_round"], gone["collateral"], gone["penalized"]) == (
        "dropped", "left", 0, 0, SLOT_PENALTY)
    view = market.task(task_id)
    assert (view["phase"], view["active_members"], view["open_slots"]) == ("sampling", 1, 0)  # closed, not waiting
    assert_fails(chain.deliver(leaver, commit_message(task_id, 0, "late")), RoundClosed)
    assert_fails(leave(market, leaver, task_id), NotMember)  # gone already

    settle_round(market, task_id)
    view = market.task(task_id)
    assert (view["round"], view["phase"], view["open_slots"]) == (1, "commit", 1)  # the slot opens with round 1
    market.join(task_id, [replacement])
    fresh = market.member(task_id, replacement)
    assert (fresh["index"], fresh["first_round"]) == (gone["index"], 2)


def test_leaving_after_committing_takes_effect_at_settlement_paid_and_collateral_back(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, leaver, replacement = market.workers[:3]
    market.commit(task_id, 0, [leaver])
    balance = chain.balance(leaver)
    result = leave(market, leaver, task_id)
    assert result.ok, result.log
    assert [e["round"] for e in event_actions(result, "leave_requested")] == ["0"]
    pending = market.member(task_id, leaver)
    assert (pending["status"], pending["leaving"], pending["collateral"]) == ("active", 1, SLOT_COLLATERAL)
    assert chain.balance(leaver) == balance
    before = market_snapshot(chain)
    assert_fails(leave(market, leaver, task_id), LeavePending)
    assert market_snapshot(chain) == before
    assert market.task(task_id)["phase"] == "commit"  # it committed: the round still waits for `first` only

    market.commit(task_id, 0, [first])
    chain.block()  # the sampling block
    output = market.vote(market.chain.operators, task_id, VERDICT_PASS)  # decides both: the round settles
    left = event_actions(output, "left")
    assert [(e["round"], e["returned"]) for e in left] == [("0", str(SLOT_COLLATERAL))]
    market.reveal(task_id)
    gone = market.member(task_id, leaver)
    assert (gone["status"], gone["reason"], gone["left_round"], gone["paid"], gone["penalized"]) == (
        "left", "left", 0, REWARD // 2, 0)
    assert chain.balance(leaver) == balance + SLOT_COLLATERAL + REWARD // 2
    view = market.task(task_id)
    assert (view["round"], view["active_members"], view["open_slots"]) == (1, 1, 1)
    market.join(task_id, [replacement])
    assert market.member(task_id, replacement)["index"] == gone["index"]


def test_a_leaver_whose_round_fails_verification_is_slashed_all_the_same(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, cheat = market.workers[:2]
    market.commit(task_id, 0, [first, cheat])
    balance = chain.balance(cheat)
    assert leave(market, cheat, task_id).ok  # in the sampling phase: its commitment awaits verification
    settle_round(market, task_id, {encode_address(cheat.address): VERDICT_FAIL})
    gone = market.member(task_id, cheat)
    assert (gone["status"], gone["slashed"], gone["paid"], gone["collateral"]) == ("slashed", SLOT_COLLATERAL, 0, 0)
    assert chain.balance(cheat) == balance
    view = market.task(task_id)
    assert (view["round"], view["active_members"], view["open_slots"]) == (1, 1, 1)


def test_the_last_member_leaving_abandons_the_task(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, second = market.workers[:2]
    requester = chain.balance(market.requester)
    assert leave(market, first, task_id).ok
    assert leave(market, second, task_id).ok
    chain.block()  # the round closes at the end of the last leave's block
    view = market.task(task_id)
    assert (view["status"], view["active_members"]) == ("abandoned", 0)
    assert chain.balance(market.requester) > requester  # the whole budget refunded


def test_leaving_an_open_task_returns_the_collateral_in_full_and_reopens_the_place(make_chain):
    market = slot_market(make_chain)
    chain = market.chain
    market.register()
    task_id = market.submit(workers=3, collateral=SLOT_COLLATERAL)
    first, second, third, fourth = market.workers[:4]
    market.join(task_id, [first, second])
    balance = chain.balance(first)
    result = leave(market, first, task_id)
    assert result.ok, result.log
    assert [e["returned"] for e in event_actions(result, "left")] == [str(SLOT_COLLATERAL)]
    assert chain.balance(first) == balance + SLOT_COLLATERAL
    view = market.task(task_id)
    assert (view["status"], view["workers_joined"], view["active_members"]) == ("open", 1, 1)
    assert [(m["worker"], m["index"]) for m in view["members"]] == [(encode_address(second.address), 0)]
    market.join(task_id, [third, first])  # its place reopened: it may even come back
    view = market.task(task_id)
    assert view["status"] == "running"
    assert [m["index"] for m in view["members"]] == [0, 1, 2]
    assert_fails(chain.deliver(fourth, pb.MsgJoinTask(task_id=task_id)), TaskNotOpen)


def test_leaving_is_refused_to_non_members_and_ended_tasks_and_changes_nothing(make_chain):
    market, chain, task_id = slot_task(make_chain, rounds=1)
    first, second, outsider = market.workers[:3]
    before = market_snapshot(chain)
    assert_fails(leave(market, outsider, task_id), NotMember)
    assert_fails(leave(market, market.requester, task_id), NotMember)
    assert_fails(leave(market, first, 999), TaskNotFound)
    assert_fails(leave(market, first, 0), InvalidRequest)
    assert market_snapshot(chain) == before

    market.commit(task_id, 0, [first, second])
    settle_round(market, task_id)
    market.report_final(task_id, 1, [first, second], [b"W" * 32, b"W" * 32])
    assert market.task(task_id)["status"] == "completed"
    before = market_snapshot(chain)
    assert_fails(leave(market, first, task_id), TaskEnded)
    assert market_snapshot(chain) == before

    cancelled = market.submit(workers=2, collateral=SLOT_COLLATERAL)
    assert chain.deliver(market.requester, pb.MsgCancelTask(task_id=cancelled)).ok
    chain.advance(3)  # the completed task's reveal window closes: its held fees are paid
    before = market_snapshot(chain)
    assert_fails(leave(market, first, cancelled), TaskEnded)
    assert market_snapshot(chain) == before


def test_a_replacement_leaving_before_its_first_round_pays_the_penalty_and_its_slot_opens_again(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, leaver, replacement = market.workers[:3]
    market.commit(task_id, 0, [first])
    assert leave(market, leaver, task_id).ok
    settle_round(market, task_id)
    market.join(task_id, [replacement])  # round 1: trains from round 2
    balance = chain.balance(replacement)
    assert leave(market, replacement, task_id).ok
    gone = market.member(task_id, replacement)
    assert (gone["status"], gone["reason"], gone["penalized"]) == ("dropped", "left", SLOT_PENALTY)
    assert chain.balance(replacement) == balance + SLOT_COLLATERAL - SLOT_PENALTY
    assert market.task(task_id)["phase"] == "commit"  # `first` has not committed round 1 yet
    market.commit(task_id, 1, [first])
    settle_round(market, task_id)
    view = market.task(task_id)
    assert (view["round"], view["open_slots"], view["active_members"]) == (2, 1, 1)


def test_a_leaver_in_the_final_report_finishes_with_the_others_when_the_task_completes(make_chain):
    market, chain, task_id = slot_task(make_chain, rounds=1)
    first, second = market.workers[:2]
    market.commit(task_id, 0, [first, second])
    settle_round(market, task_id)
    assert chain.deliver(first, final_message(task_id, 1, b"W" * 32)).ok
    balance = chain.balance(first)
    assert leave(market, first, task_id).ok
    assert chain.deliver(second, final_message(task_id, 1, b"W" * 32)).ok
    chain.block()  # the sampling block
    market.vote(chain.operators, task_id, VERDICT_PASS)
    market.reveal(task_id)
    view = market.task(task_id)
    assert view["status"] == "completed"
    finished = market.member(task_id, first)
    assert (finished["status"], finished["collateral"], finished["paid"]) == ("finished", 0, REWARD // 2)
    assert chain.balance(first) == balance + SLOT_COLLATERAL


def test_a_leaver_in_a_cancelled_round_is_paid_and_released_as_the_task_ends(make_chain):
    market, chain, task_id = slot_task(make_chain)
    first, second = market.workers[:2]
    market.commit(task_id, 0, [first])
    balance = chain.balance(first)
    assert leave(market, first, task_id).ok
    assert chain.deliver(market.requester, pb.MsgCancelTask(task_id=task_id)).ok
    market.commit(task_id, 0, [second])
    settle_round(market, task_id)
    view = market.task(task_id)
    assert view["status"] == "cancelled"
    statuses = {m["worker"]: (m["status"], m["paid"]) for m in view["members"]}
    assert statuses == {encode_address(first.address): ("left", REWARD // 2),
                        encode_address(second.address): ("finished", REWARD // 2)}
    assert chain.balance(first) == balance + SLOT_COLLATERAL + REWARD // 2
