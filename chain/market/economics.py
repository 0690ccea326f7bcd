"""The market's arithmetic: what a task costs, the collateral that keeps workers honest, how a round's pay
and fees split. Exact integers throughout (basis points for rates, floor division with the remainder left in
escrow, where it is refunded to the requester at the end). The reasoning is in `market.params`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BPS = 10_000


def fee_of(amount: int, bps: int) -> int:
    """The fee at `bps` basis points on `amount`, rounded down (the requester keeps the fraction)."""
    return amount * bps // BPS


def task_cost(rounds: int, reward_per_round: int, validator_fee_bps: int, verifier_fee_bps: int) -> int:
    """The most a task can spend: every round paid in full, with both fees on top.

    Fees are charged per payout, and the sum of floor(pay_i * bps) over a round's payouts never exceeds
    floor(reward * bps), so this bound holds exactly and escrow can never go negative.
    """
    per_round = reward_per_round + fee_of(reward_per_round, validator_fee_bps) + fee_of(reward_per_round, verifier_fee_bps)
    return rounds * per_round


def segment_count(steps: int, checkpoint_every: int) -> int:
    """Segments of a round of `steps` inner steps with a checkpoint every `checkpoint_every` steps."""
    return -(-steps // checkpoint_every)


def detection_probability(segments: int, samples: int, faked: int) -> tuple[int, int]:
    """p(k) as an exact fraction (numerator, denominator): the chance that `samples` distinct segments drawn
    uniformly from `segments` include at least one of `faked` ones."""
    samples = min(samples, segments)
    total = math.comb(segments, samples)
    return total - math.comb(segments - faked, samples), total


def minimum_collateral(
    reward_per_round: int, workers: int, segments: int, samples: int, value_at_risk_bps: int, floor: int,
    seed_choices: int = 1,
) -> int:
    """The smallest per-worker collateral S with p(k)^m * (R + S) >= k/n * C + V for every cheat size k, where
    m = `seed_choices` is how many sampling seeds a cheater's ally may choose between (it escapes when any of
    them misses its faked segments, so it is caught with p(k)^m; see market.params)."""
    pay = reward_per_round // workers  # R, and C = R (see market.params)
    value_at_risk = fee_of(pay, value_at_risk_bps)  # V
    needed = 0
    for faked in range(1, segments + 1):
        caught, total = detection_probability(segments, samples, faked)
        caught, total = caught ** seed_choices, total ** seed_choices
        # (k*C/n + V) / (caught/total) = (k*C + n*V) * total / (n * caught), rounded up
        numerator = (faked * pay + segments * value_at_risk) * total
        denominator = segments * caught
        needed = max(needed, -(-numerator // denominator) - pay)
    return max(floor, needed)


@dataclass(frozen=True)
class Payout:
    worker: bytes
    pay: int
    validator_fee: int
    verifier_fee: int


def split_round_pay(
    reward_per_round: int,
    samples_by_worker: list[tuple[bytes, int, bool]],
    validator_fee_bps: int,
    verifier_fee_bps: int,
) -> list[Payout]:
    """Each committed worker's share of the round by samples processed; only verified (`True`) ones are paid.

    Shares are taken over every worker that committed to the round, so a failed or unverified worker's share
    is withheld (and refunded to the requester), never redistributed to the others.
    """
    total = sum(samples for _, samples, _ in samples_by_worker)
    payouts = []
    for worker, samples, verified in samples_by_worker:
        if not verified or total == 0:
            continue
        pay = reward_per_round * samples // total
        payouts.append(Payout(worker, pay, fee_of(pay, validator_fee_bps), fee_of(pay, verifier_fee_bps)))
    return payouts


def split_evenly(amount: int, recipients: list[bytes]) -> list[tuple[bytes, int]]:
    """`amount` shared equally among `recipients` (ascending address order), the remainder one utrl each to the
    first ones, so nothing is left over."""
    recipients = sorted(recipients)
    if not recipients:
        return []
    base, remainder = divmod(amount, len(recipients))
    return [(r, base + (1 if i < remainder else 0)) for i, r in enumerate(recipients)]


def split_by_power(amount: int, recipients: list[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
    """`amount` shared in proportion to power (largest remainder: the utrl left after rounding down go one
    each to the largest fractional parts, ties by ascending address), so the whole amount is handed out and
    nobody is more than one utrl from its exact share."""
    total = sum(power for _, power in recipients)
    if total == 0:
        return split_evenly(amount, [r for r, _ in recipients])
    shares = {r: amount * power // total for r, power in recipients}
    remainder = amount - sum(shares.values())
    by_fraction = sorted(recipients, key=lambda item: (-(amount * item[1] % total), item[0]))
    for r, _ in by_fraction[:remainder]:
        shares[r] += 1
    return sorted(shares.items())
