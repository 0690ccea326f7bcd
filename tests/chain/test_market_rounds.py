"""Rounds: missed deadlines, workers all leaving, cancellation, start weights and final reports verified (never
voted in by a majority), refused commitments."""

from __future__ import annotations

import pytest

from market_helpers import MARKET_PARAMS, REWARD, STAKE, Market, assert_fails, commit_message, digest
from market_helpers import event_actions, final_message, market_snapshot, spec_bytes
from trolly.chain.accounts import get_supply
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import AlreadyCommitted, InvalidCommitment, NotMember, NotRequester, RoundClosed
from trolly.chain.market.errors import TaskEnded, TaskNotFound, TaskNotOpen
from trolly.chain.market.store import ESCROW
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.chain.proto import market_pb2 as pb

COLLATERAL = 4 * REWARD
PENALTY = COLLATERAL * 1_000 // 10_000  # missed_round_penalty_bps default


def make_market(make_chain, accounts=4, **params):
    return Market(make_chain(accounts=accounts, validators=1, params={"market": {**MARKET_PARAMS, **params}}))


def test_missed_round_drops_the_worker_and_burns_its_penalty(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    task_id = market.open_task(workers=2, collateral=COLLATERAL)
    late = market.workers[1]
    balance, supply = chain.balance(late), get_supply(chain.state)
    market.commit(task_id, 0, market.workers[:1])
    outputs = chain.advance(5)  # the round's deadline passes
    dropped = [a for o in outputs for a in event_actions(o, "dropped")]
    assert [(d["worker"], d["reason"], d["penalty"]) for d in dropped] == [
        (encode_address(late.address), "missed round", str(PENALTY))]
    assert chain.balance(late) == balance + COLLATERAL - PENALTY
    assert get_supply(chain.state) == supply - PENALTY
    view = market.task(task_id)
    assert view["active_members"] == 1 and view["phase"] in ("sampling", "verify")
    late_view = chain.query(f"/market/worker/{encode_address(late.address)}")
    assert late_view["tasks"] == [] and late_view["penalized"] == PENALTY


def test_task_whose_workers_all_leave_ends_and_refunds_the_unspent_budget(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    requester_balance = chain.balance(market.requester)
    task_id = market.open_task(workers=2, collateral=COLLATERAL, budget=7 * REWARD)
    chain.advance(5)
    view = market.task(task_id)
    assert view["status"] == "abandoned" and view["refunded"] == 7 * REWARD and view["escrow_remaining"] == 0
    assert chain.balance(market.requester) == requester_balance
    assert chain.query("/market/tasks/open")["tasks"] == []
    assert chain.balance(ESCROW) == 3 * STAKE


def test_task_abandoned_after_a_paid_round_refunds_only_the_rest(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    requester_balance = chain.balance(market.requester)
    task_id = market.open_task(workers=2, collateral=COLLATERAL, budget=7 * REWARD)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    market.vote(chain.operators, task_id)
    spent = REWARD + REWARD * 500 // 10_000  # both paid half; 2% + 3% fees on each half
    assert market.task(task_id)["paid_workers"] + market.task(task_id)["paid_fees"] == spent
    chain.advance(5)  # nobody commits round 1
    view = market.task(task_id)
    assert view["status"] == "abandoned" and view["refunded"] == 7 * REWARD - spent
    assert chain.balance(market.requester) == requester_balance - spent


def test_cancel_before_start_refunds_everything(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    market.register()
    requester_balance = chain.balance(market.requester)
    worker_balance = chain.balance(market.workers[0])
    task_id = market.submit(workers=2, collateral=COLLATERAL)
    market.join(task_id, market.workers[:1])
    assert_fails(chain.deliver(market.workers[0], pb.MsgCancelTask(task_id=task_id)), NotRequester)
    assert chain.deliver(market.requester, pb.MsgCancelTask(task_id=task_id)).ok
    assert chain.balance(market.requester) == requester_balance
    assert chain.balance(market.workers[0]) == worker_balance
    assert market.task(task_id)["status"] == "cancelled"
    assert_fails(chain.deliver(market.requester, pb.MsgCancelTask(task_id=task_id)), TaskEnded)
    assert_fails(chain.deliver(market.workers[1], pb.MsgJoinTask(task_id=task_id)), TaskNotOpen)


def test_cancel_mid_task_keeps_verified_rounds_paid_and_refunds_the_rest(make_chain):
    """Cancelled in round 1's commit phase before anyone committed: round 1 still runs and is paid, then the
    task ends; round 2 never starts."""
    market = make_market(make_chain)
    chain = market.chain
    requester_balance = chain.balance(market.requester)
    task_id = market.open_task(workers=2, collateral=COLLATERAL, budget=5 * REWARD, rounds=3,
                               spec=spec_bytes(rounds=3))
    worker_balances = [chain.balance(w) for w in market.workers[:2]]
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    market.vote(chain.operators, task_id)
    assert chain.deliver(market.requester, pb.MsgCancelTask(task_id=task_id)).ok
    assert market.task(task_id)["status"] == "running"
    market.commit(task_id, 1, market.workers[:2])
    chain.block()
    market.vote(chain.operators, task_id)
    half = REWARD // 2
    spent = 2 * 2 * (half + half * 200 // 10_000 + half * 300 // 10_000)
    view = market.task(task_id)
    assert view["status"] == "cancelled" and view["round"] == 1 and view["refunded"] == 5 * REWARD - spent
    assert chain.balance(market.requester) == requester_balance - spent
    for worker, before in zip(market.workers[:2], worker_balances):
        assert chain.balance(worker) == before + COLLATERAL + 2 * half  # collateral back in full, two rounds paid
    market.reveal(task_id)  # the verifier fees stay in escrow until the reveal window closes
    chain.advance(10)
    view = market.task(task_id)
    assert chain.balance(ESCROW) == 3 * STAKE
    chain.advance(6)  # no deadline of the cancelled task fires
    assert market.task(task_id) == view


def test_refused_commitments_leave_state_unchanged(make_chain):
    market = make_market(make_chain, accounts=5)
    chain = market.chain
    task_id = market.open_task(workers=2, round_blocks=50)
    member, outsider = market.workers[0], market.workers[3]
    before = market_snapshot(chain)
    cases = [
        (outsider, commit_message(task_id, 0, "x"), NotMember),
        (member, commit_message(task_id, 1, "x"), RoundClosed),
        (member, commit_message(task_id, 0, "x", steps=25), InvalidCommitment),  # more than inner_steps
        (member, commit_message(task_id, 0, "x", num_checkpoints=4), InvalidCommitment),
        (member, commit_message(task_id, 0, "x", samples_processed=1), InvalidCommitment),
        (member, commit_message(task_id, 0, "x", determinism_profile=""), InvalidCommitment),
        (member, commit_message(task_id, 0, "x", update_hash=b"\x01" * 31), InvalidCommitment),
        (member, commit_message(task_id, 0, "x", start_weights_hash=b""), InvalidCommitment),
        (member, final_message(task_id, 0), InvalidCommitment),  # round 0 is a training round
        (member, commit_message(task_id + 1, 0, "x"), TaskNotFound),
    ]
    for signer, message, error in cases:
        assert_fails(chain.deliver(signer, message), error)
    assert market_snapshot(chain) == before

    assert chain.deliver(member, commit_message(task_id, 0, "x")).ok
    assert_fails(chain.deliver(member, commit_message(task_id, 0, "y")), AlreadyCommitted)
    market.commit(task_id, 0, market.workers[1:2])  # the round closes
    assert_fails(chain.deliver(member, commit_message(task_id, 0, "z")), RoundClosed)
    late = market.workers[1]
    assert_fails(chain.deliver(late, commit_message(task_id, 1, "z")), RoundClosed)


def test_a_majority_start_is_not_adopted_every_member_is_sampled_and_the_passed_start_is_recorded(make_chain):
    """Issue 24 item 1: the two members with the most samples committing the same start does not make it the
    round's start nor drop the third; all three are sampled, and the chain records the start of the members
    whose round passed verification (here the lone member's), not the majority's."""
    market = make_market(make_chain, accounts=4)
    chain = market.chain
    task_id = market.open_task(workers=3, collateral=COLLATERAL)
    lone, majority = market.workers[0], market.workers[1:3]
    output = market.commit(task_id, 0, market.workers[:3], steps=[10, 15, 15],
                           starts=[digest("derived"), digest("chosen"), digest("chosen")])
    assert event_actions(output, "dropped") == []
    chain.block()
    sampled = {item["worker"] for item in market.to_verify(chain.operators[0])}
    assert sampled == {encode_address(w.address) for w in market.workers[:3]}
    assert market.task(task_id)["round_details"][0]["start_weights_hash"] == ""  # nothing recorded before settling
    market.vote(chain.operators, task_id, worker=encode_address(lone.address))
    for worker in majority:  # their verifiers derived another start: FAIL
        market.vote(chain.operators, task_id, VERDICT_FAIL, worker=encode_address(worker.address), strict=False)
    view = market.task(task_id)
    assert view["round"] == 1 and view["round_details"][0]["start_weights_hash"] == digest("derived").hex()
    outcomes = market.round_commitments(task_id, 0)
    assert outcomes[encode_address(lone.address)]["outcome"] == "passed"
    assert {outcomes[encode_address(w.address)]["outcome"] for w in majority} == {"failed"}


def at_the_final_report(make_chain, workers: int):
    """A one-round task of `workers` members whose round 0 passed: its final report phase is open."""
    market = make_market(make_chain, accounts=workers + 1)
    task_id = market.open_task(workers=workers, rounds=1, spec=spec_bytes(rounds=1))
    market.commit(task_id, 0, market.workers[:workers])
    market.chain.block()
    market.vote(market.chain.operators, task_id)
    return market, task_id


@pytest.mark.parametrize("honest_reporters", [2, 1])
def test_only_a_verified_final_hash_becomes_the_tasks_result_and_a_false_one_is_slashed(make_chain, honest_reporters):
    """Issue 24 item 2: each member's final report is sampled and verified like a segment; the members whose
    reported hash their committees find false (derived W_R differs) are slashed, whether they are a minority
    or the majority by samples, and only the verified hash becomes `final_weights_hash`."""
    market, task_id = at_the_final_report(make_chain, workers=3)
    chain = market.chain
    assert market.task(task_id)["round"] == 1 and market.task(task_id)["phase"] == "commit"
    assert_fails(chain.deliver(market.workers[0], commit_message(task_id, 1, "x")), InvalidCommitment)
    reported = [digest("W")] * honest_reporters + [digest("forged")] * (3 - honest_reporters)
    output = chain.block(*[chain.tx(w, final_message(task_id, 1, h)) for w, h in zip(market.workers[:3], reported)])
    assert all(r.ok for r in output.tx_results)
    view = market.task(task_id)
    assert view["status"] == "running" and view["final_weights_hash"] == ""  # nothing adopted before verification
    chain.block()  # the sampling block: one check per report
    checks = market.to_verify(chain.operators[0])
    assert sorted(item["worker"] for item in checks) == sorted(encode_address(w.address) for w in market.workers[:3])
    assert {item["segment"] for item in checks} == {0}
    for worker, digest_ in zip(market.workers[:3], reported):
        market.vote(chain.operators, task_id, VERDICT_PASS if digest_ == digest("W") else VERDICT_FAIL,
                    worker=encode_address(worker.address))
    view = market.task(task_id)
    assert view["status"] == "completed" and view["final_weights_hash"] == digest("W").hex()
    slashed = {m["worker"] for m in view["members"] if m["slashed"] > 0}
    assert slashed == {encode_address(w.address) for w, h in zip(market.workers[:3], reported) if h != digest("W")}
    assert view["escrow_remaining"] == 0 and view["refunded"] > 0


def test_a_final_report_nobody_verifies_leaves_the_task_without_a_result(make_chain):
    market, task_id = at_the_final_report(make_chain, workers=1)
    chain = market.chain
    assert chain.block(chain.tx(market.workers[0], final_message(task_id, 1, digest("W")))).tx_results[0].ok
    outputs = chain.advance(1 + MARKET_PARAMS["verification_window"] + 1)
    settled = [a for o in outputs for a in event_actions(o, "round_settled")]
    assert settled[-1]["unverified"] == "1" and settled[-1]["start_weights_hash"] == ""
    view = market.task(task_id)
    assert view["status"] == "completed" and view["final_weights_hash"] == "" and view["escrow_remaining"] == 0


def test_unfilled_task_expires_at_its_join_deadline_with_a_full_refund(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    market.register()
    requester_balance, worker_balance = chain.balance(market.requester), chain.balance(market.workers[0])
    task_id = market.submit(workers=2, join_blocks=3)
    market.join(task_id, market.workers[:1])
    chain.advance(1)
    assert market.task(task_id)["status"] == "open"
    chain.advance(1)
    assert market.task(task_id)["status"] == "expired"
    assert chain.balance(market.requester) == requester_balance
    assert chain.balance(market.workers[0]) == worker_balance
