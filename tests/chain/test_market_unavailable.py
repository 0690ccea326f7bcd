"""Nobody profits from calling a worker unavailable: an UNAVAILABLE vote (which anyone able to flood a worker's
blob port can make true) still counts toward a fail, but earns no verifier fee and no share of the slash that
follows; its share is burned. FAIL voters, who replayed and found the fault, are paid theirs when their reveals
check out."""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, REWARD, event_actions
from test_market_verdicts import COLLATERAL, reveal_all, setup, votes_block
from trolly.chain.accounts import get_supply
from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS, VERDICT_UNAVAILABLE

PAY = REWARD // 2  # two workers with equal samples
VALIDATOR_FEE, VERIFIER_FEE = PAY * 200 // 10_000, PAY * 300 // 10_000
TO_VERIFIERS = COLLATERAL * MARKET_PARAMS.get("slash_verifier_bps", 5_000) // 10_000


def test_a_slash_decided_by_unavailable_votes_alone_pays_no_validator_and_burns_the_whole_collateral(make_chain):
    chain, market, task_id, items = setup(make_chain)
    withheld, honest = [encode_address(w.address) for w in market.workers[:2]]
    ops = chain.operators
    supply = get_supply(chain.state)
    balances = [chain.holdings(op) for op in ops]

    votes = [(op, items[withheld][0], VERDICT_UNAVAILABLE) for op in ops[:2]]
    votes += [(op, item, VERDICT_PASS) for item in items[honest] for op in ops[:2]]
    output = votes_block(chain, task_id, votes)

    slash = event_actions(output, "slash")
    assert [(s["worker"], s["amount"], s["held_for_verifiers"], s["burned"]) for s in slash] == \
        [(withheld, str(COLLATERAL), "0", str(COLLATERAL))]
    assert get_supply(chain.state) == supply - COLLATERAL
    gains = [chain.holdings(op) - b for op, b in zip(ops, balances)]
    assert sum(gains) == VALIDATOR_FEE  # the honest worker's validator fee, nothing of the slash


def test_an_unavailable_voter_s_share_of_a_slash_is_burned_and_a_fail_voter_keeps_its_own(make_chain):
    chain, market, task_id, items = setup(make_chain)
    cheater, honest = [encode_address(w.address) for w in market.workers[:2]]
    ops = chain.operators
    supply = get_supply(chain.state)
    balances = [chain.holdings(op) for op in ops]

    votes = [(ops[0], items[cheater][0], VERDICT_FAIL), (ops[1], items[cheater][0], VERDICT_UNAVAILABLE)]
    votes += [(op, item, VERDICT_PASS) for item in items[honest] for op in ops[:2]]
    output = votes_block(chain, task_id, votes)

    replayed_share = TO_VERIFIERS // 2  # equal powers: split_by_power gives each half exactly
    slash = event_actions(output, "slash")
    assert [(s["held_for_verifiers"], s["burned"]) for s in slash] == \
        [(str(replayed_share), str(COLLATERAL - replayed_share))]
    assert get_supply(chain.state) == supply - (COLLATERAL - replayed_share)
    # The FAIL voter's share is held until its reveal checks out (test_market_reveals), then paid.
    reveal_all(chain, task_id, votes)
    chain.advance(10)
    gains = [chain.holdings(op) - b for op, b in zip(ops, balances)]
    assert sum(gains) == replayed_share + VALIDATOR_FEE + VERIFIER_FEE
    assert gains[0] - gains[1] == replayed_share  # the same fee parts each (equal powers, both PASS voters)


def test_unavailable_votes_on_a_passed_round_earn_no_verifier_fee(make_chain):
    """Four validators: three PASS decide each segment, the fourth votes UNAVAILABLE; when the reveal window
    closes the held verifier fees go to the PASS voters alone, to the last utrl."""
    chain, market, task_id, items = setup(make_chain, validators=4)
    ops = chain.operators
    every_item = [item for worker_items in items.values() for item in worker_items]
    unavailable = [(ops[3], item, VERDICT_UNAVAILABLE) for item in every_item]
    votes_block(chain, task_id, unavailable)  # first, so that the segments are still pending
    passing = [(op, item, VERDICT_PASS) for item in every_item for op in ops[:3]]
    votes_block(chain, task_id, passing)
    assert market.task(task_id)["round"] == 1
    balances = [chain.balance(op) for op in ops]
    reveal_all(chain, task_id, passing + unavailable)
    chain.advance(10)
    gains = [chain.balance(op) - b for op, b in zip(ops, balances)]
    assert gains[3] == 0
    assert sum(gains) == 2 * VERIFIER_FEE
