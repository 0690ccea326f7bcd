"""Rounds: missed deadlines, workers all leaving, cancellation, the weights agreement, refused commitments."""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, REWARD, STAKE, Market, assert_fails, commit_message, digest
from market_helpers import event_actions, final_message, market_snapshot, spec_bytes
from trolly.chain.accounts import get_supply
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import AlreadyCommitted, InvalidCommitment, NotMember, NotRequester, RoundClosed
from trolly.chain.market.errors import TaskEnded, TaskNotFound, TaskNotOpen
from trolly.chain.market.store import ESCROW
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.market.records import VERDICT_FAIL

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


def test_final_report_puts_the_agreed_final_weights_hash_on_chain(make_chain):
    market = make_market(make_chain, accounts=4)
    chain = market.chain
    task_id = market.open_task(workers=3, rounds=1, spec=spec_bytes(rounds=1))
    market.commit(task_id, 0, market.workers[:3])
    chain.block()
    market.vote(chain.operators, task_id)
    assert market.task(task_id)["round"] == 1 and market.task(task_id)["phase"] == "commit"
    assert_fails(chain.deliver(market.workers[0], commit_message(task_id, 1, "x")), InvalidCommitment)
    output = chain.block(*[chain.tx(w, final_message(task_id, 1, h)) for w, h in
                           zip(market.workers[:3], [digest("W"), digest("W"), digest("other")])])
    assert all(r.ok for r in output.tx_results)
    view = market.task(task_id)
    assert view["status"] == "completed" and view["final_weights_hash"] == digest("W").hex()
    assert [d["worker"] for d in event_actions(output, "dropped")] == [encode_address(market.workers[2].address)]


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
