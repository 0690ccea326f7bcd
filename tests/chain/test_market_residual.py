"""The error-feedback residual's hash in `MsgCommitRound` (issue 19 item 1, chain side).

A training commitment must carry it (32 bytes), the final report must not; it is shown with the commitment,
and the verification listing gives each sampled segment both the round's residual hash and the one the same
worker committed in the round before, which is what a verifier needs to recompute the update.
"""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, REWARD, Market, assert_fails, commit_message, digest, market_snapshot
from market_helpers import spec_bytes
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import InvalidCommitment
from trolly.chain.proto import market_pb2 as pb

COLLATERAL = 4 * REWARD


def make_market(make_chain):
    return Market(make_chain(accounts=4, validators=1, params={"market": dict(MARKET_PARAMS)}))


def test_commitment_without_a_32_byte_residual_hash_is_refused(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    task_id = market.open_task(workers=2, collateral=COLLATERAL)
    member = market.workers[0]
    before = market_snapshot(chain)
    for residual in (b"", b"\x02" * 31, b"\x02" * 33):
        assert_fails(chain.deliver(member, commit_message(task_id, 0, "x", residual_hash=residual)), InvalidCommitment)
    assert market_snapshot(chain) == before


def test_final_report_with_a_residual_hash_is_refused(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    task_id = market.open_task(workers=2, collateral=COLLATERAL, rounds=1,
                               spec=spec_bytes(rounds=1))
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    market.vote(chain.operators, task_id)
    assert market.task(task_id)["round"] == 1
    report = pb.MsgCommitRound(task_id=task_id, round=1, start_weights_hash=digest("W"), residual_hash=digest("r"))
    assert_fails(chain.deliver(market.workers[0], report), InvalidCommitment)


def test_verify_listing_gives_the_round_and_previous_round_residual_hashes(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    task_id = market.open_task(workers=2, collateral=COLLATERAL)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    first = market.to_verify(chain.operators[0])
    assert first and all(item["previous_residual_hash"] == "" for item in first)
    for item in first:
        label = next(w.address.hex() for w in market.workers if encode_address(w.address) == item["worker"])
        assert item["residual_hash"] == digest(f"residual/{label}/0").hex()
    market.vote(chain.operators, task_id)
    market.commit(task_id, 1, market.workers[:2])
    chain.block()
    second = market.to_verify(chain.operators[0])
    assert second and all(item["round"] == 1 for item in second)
    for item in second:
        label = next(w.address.hex() for w in market.workers if encode_address(w.address) == item["worker"])
        assert item["residual_hash"] == digest(f"residual/{label}/1").hex()
        assert item["previous_residual_hash"] == digest(f"residual/{label}/0").hex()
    shown = market.round_commitments(task_id, 1)
    assert {c["residual_hash"] for c in shown.values()} == {i["residual_hash"] for i in second}
