"""The market's arithmetic: collateral from the honesty condition, exact splits, cost bounds."""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given, strategies as st

from trolly.chain.market.economics import detection_probability, fee_of, minimum_collateral, split_by_power
from trolly.chain.market.economics import split_evenly, split_round_pay, task_cost


def test_documented_example_two_samples_of_five_segments_needs_twice_the_pay():
    # market.params: n = 5, s = 2, V = R -> S >= 2R.
    assert minimum_collateral(reward_per_round=1_000_000, workers=1, segments=5, samples=2, value_at_risk_bps=10_000,
                              floor=0) == 2_000_000


def test_sampling_every_segment_leaves_only_the_value_at_risk():
    assert detection_probability(5, 5, 1) == (1, 1)
    assert minimum_collateral(1_000_000, 1, 5, 5, 10_000, floor=123) == 1_000_000  # k = n: C + V - R = V
    assert minimum_collateral(1_000_000, 1, 5, 5, 0, floor=123) == 123


@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 10**12), st.integers(1, 64), st.integers(0, 20_000))
def test_minimum_collateral_satisfies_the_honesty_condition_for_every_cheat(segments, samples, reward, workers, v_bps):
    collateral = minimum_collateral(reward, workers, segments, samples, v_bps, floor=0)
    pay = reward // workers
    value = pay * v_bps // 10_000
    for faked in range(1, segments + 1):
        s = min(samples, segments)
        p = 1 - Fraction(math.comb(segments - faked, s), math.comb(segments, s))
        assert p * (pay + collateral) >= Fraction(faked, segments) * pay + value
    # and it is the smallest such integer (unless zero suffices)
    if collateral > 0:
        smaller = collateral - 1
        assert any(
            (1 - Fraction(math.comb(segments - k, min(samples, segments)), math.comb(segments, min(samples, segments))))
            * (pay + smaller) < Fraction(k, segments) * pay + value
            for k in range(1, segments + 1)
        )


@given(st.integers(1, 10**15), st.lists(st.tuples(st.integers(1, 10**9), st.booleans()), min_size=1, max_size=64),
       st.integers(0, 10_000), st.integers(0, 10_000))
def test_a_rounds_payouts_never_exceed_its_share_of_the_cost(reward, workers, vbps, fbps):
    shares = [(i.to_bytes(20, "big"), samples, ok) for i, (samples, ok) in enumerate(workers)]
    payouts = split_round_pay(reward, shares, vbps, fbps)
    total = sum(samples for _, samples, _ in shares)
    for payout, (_, samples, _) in zip(payouts, [s for s in shares if s[2]]):
        assert payout.pay == reward * samples // total
    spent = sum(p.pay + p.validator_fee + p.verifier_fee for p in payouts)
    assert spent <= task_cost(1, reward, vbps, fbps)
    assert sum(p.pay for p in payouts) <= reward


@given(st.integers(0, 10**15), st.lists(st.binary(min_size=20, max_size=20), min_size=1, max_size=50, unique=True))
def test_even_split_hands_out_everything(amount, recipients):
    shares = split_evenly(amount, recipients)
    assert sum(s for _, s in shares) == amount
    assert max(s for _, s in shares) - min(s for _, s in shares) <= 1


@given(st.integers(0, 10**15), st.lists(st.tuples(st.binary(min_size=20, max_size=20), st.integers(0, 10**6)),
                                         min_size=1, max_size=50, unique_by=lambda t: t[0]))
def test_split_by_power_hands_out_everything_proportionally(amount, recipients):
    shares = dict(split_by_power(amount, recipients))
    assert sum(shares.values()) == amount
    total = sum(p for _, p in recipients)
    if total:
        for who, power in recipients:
            assert abs(shares[who] - Fraction(amount * power, total)) < 1


def test_fee_rounds_down():
    assert fee_of(999, 300) == 29 and fee_of(0, 300) == 0


def test_params_refuse_a_sampling_seed_from_the_commit_block():
    import pytest

    from trolly.chain.errors import InvalidRequest
    from trolly.chain.market.params import MarketParams

    with pytest.raises(InvalidRequest):
        MarketParams(sampling_delay=0)
    with pytest.raises(InvalidRequest):
        MarketParams(validator_fee_bps=10_001)
    assert MarketParams.localnet().worker_unbonding_blocks < MarketParams().worker_unbonding_blocks


@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 10**9), st.integers(1, 5))
def test_a_choice_among_m_seeds_is_paid_for_with_p_to_the_m(segments, samples, reward, seed_choices):
    """A cheater whose ally picks the best of m seeds is caught only when all m catch it: p(k)^m."""
    collateral = minimum_collateral(reward, 1, segments, samples, 10_000, floor=0, seed_choices=seed_choices)
    s = min(samples, segments)
    for faked in range(1, segments + 1):
        p = (1 - Fraction(math.comb(segments - faked, s), math.comb(segments, s))) ** seed_choices
        assert p * (reward + collateral) >= Fraction(faked, segments) * reward + reward
    assert collateral >= minimum_collateral(reward, 1, segments, samples, 10_000, floor=0)


def test_five_seeds_to_choose_from_cost_much_more_collateral_unless_every_segment_is_sampled():
    # n = 5, s = 2, V = R: k = 1 is caught with (2/5)^5 instead of 2/5.
    assert minimum_collateral(10**6, 1, 5, 2, 10_000, 0, seed_choices=5) > 100 * 10**6
    assert minimum_collateral(10**6, 1, 5, 5, 10_000, 0, seed_choices=5) == 10**6  # s = n: p = 1
