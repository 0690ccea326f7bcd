"""The honest path: every worker paid exactly its share by samples processed, validators and verifiers their
fees, the rest refunded, to the last utrl; supply untouched; escrow back to just the worker stakes."""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, REWARD, STAKE, Market, digest
from trolly.chain.accounts import get_supply
from trolly.chain.crypto import encode_address
from trolly.chain.market.store import ESCROW

VALIDATOR_FEE_BPS, VERIFIER_FEE_BPS = 200, 300  # the defaults


def expected_round(steps: list[int]) -> tuple[list[int], int, int]:
    """(pay per worker, validator fees, verifier fees) for one round, computed from the rules by hand."""
    total = sum(steps)  # samples = steps x batch, and the batch cancels out
    pays = [REWARD * s // total for s in steps]
    return pays, sum(p * VALIDATOR_FEE_BPS // 10_000 for p in pays), sum(p * VERIFIER_FEE_BPS // 10_000 for p in pays)


def test_honest_task_pays_exact_shares_fees_and_refund(make_chain):
    chain = make_chain(accounts=4, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    requester, workers, operator = market.requester, market.workers[:3], chain.operators[0]
    supply = get_supply(chain.state)
    before = {k.address: chain.holdings(k) for k in [requester, operator, *workers]}
    budget = 10 * REWARD

    task_id = market.open_task(workers=3, budget=budget)
    steps_by_round = [[20, 10, 5], [20, 20, 7]]
    paid = [0, 0, 0]
    fees = 0
    for round_, steps in enumerate(steps_by_round):
        market.commit(task_id, round_, workers, steps=steps)
        chain.block()  # the sampling block
        assert len(market.to_verify(operator)) == sum(min(2, -(-s // 5)) for s in steps)
        market.vote([operator], task_id)
        market.reveal(task_id)  # the verifier fee is held until the reveal window closes
        pays, validator_fees, verifier_fees = expected_round(steps)
        paid = [a + b for a, b in zip(paid, pays)]
        fees += validator_fees + verifier_fees
        view = market.task(task_id)
        assert view["paid_workers"] == sum(paid) and view["paid_fees"] == fees
        assert view["escrow_remaining"] == budget - sum(paid) - fees

    market.report_final(task_id, 2, workers, [digest("final")] * 3)
    view = market.task(task_id)
    assert view["status"] == "completed"
    assert view["final_weights_hash"] == digest("final").hex()
    refund = budget - sum(paid) - fees
    assert view["refunded"] == refund and view["escrow_remaining"] == 0

    assert chain.balance(requester) == before[requester.address] - budget + refund
    chain.advance(10)  # the last round's reveal window closes: its held verifier fee is paid
    for worker, pay in zip(workers, paid):
        assert chain.balance(worker) == before[worker.address] - STAKE + pay  # stake still bonded
    assert chain.holdings(operator) == before[operator.address] + fees  # sole validator and verifier
    assert get_supply(chain.state) == supply
    assert chain.balance(ESCROW) == 3 * STAKE
    members = {m["worker"]: m for m in view["members"]}
    for worker, pay in zip(workers, paid):
        member = members[encode_address(worker.address)]
        assert (member["status"], member["paid"], member["collateral"], member["rounds_passed"]) == ("finished", pay, 0, 2)
    assert chain.query(f"/market/worker/{encode_address(workers[0].address)}")["earned"] == paid[0]


def test_round_closes_in_the_block_of_the_last_commit_and_samples_the_next(make_chain):
    chain = make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    task_id = market.open_task(workers=2)
    market.commit(task_id, 0, market.workers[:1])
    assert market.task(task_id)["phase"] == "commit"
    output = market.commit(task_id, 0, market.workers[1:2])
    closed = [e for e in output.events if dict(e.attributes).get("action") == "round_closed"]
    assert len(closed) == 1 and market.task(task_id)["phase"] == "sampling"
    assert market.task(task_id)["phase_deadline"] == chain.height + 1
    chain.block()
    assert market.task(task_id)["phase"] == "verify"
