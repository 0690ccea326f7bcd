"""Planning a training task before paying for it: the reward the budget allows, the cost, the collateral.

The same numbers the chain checks in SubmitTask (`trolly.chain.market.economics`), computed before signing so a
requester sees them and a doomed task is refused locally with a reason.
"""

from __future__ import annotations

import dataclasses
import json

from trolly.chain.market.economics import minimum_collateral, segment_count, task_cost
from trolly.chain.market.params import MarketParams
from trolly.chain.market.spec import validate_spec

from .amounts import format_amount_both as amount_text
from .errors import WalletError


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """What a task will cost and lock, as `submit` shows it and sends it."""

    rounds: int
    reward_per_round: int
    cost: int
    """rounds x (reward + validator and verifier fees)."""
    budget: int
    refund_if_all_paid: int
    collateral: int
    minimum_collateral: int
    segments_per_round: int
    workers: int
    samples_per_worker: int


def largest_reward(budget: int, rounds: int, validator_fee_bps: int, verifier_fee_bps: int) -> int:
    """The largest reward per round whose total cost fits in `budget` (cost grows with the reward)."""
    low, high = 0, budget
    while low < high:
        middle = (low + high + 1) // 2
        if task_cost(rounds, middle, validator_fee_bps, verifier_fee_bps) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def plan_task(spec: bytes, params: MarketParams, budget: int, reward: int | None, workers: int, samples: int,
              collateral: int | None) -> TaskPlan:
    """The numbers `submit` shows and sends; raises WalletError when the chain would refuse them."""
    summary = validate_spec(spec, json.loads(spec)["training"]["rounds"])
    if summary.dataset_max_shards > params.max_dataset_shards or summary.dataset_max_bytes > params.max_dataset_bytes:
        raise WalletError(f"the dataset declares {summary.dataset_max_shards} shards and {summary.dataset_max_bytes} "
                          f"bytes; this chain allows {params.max_dataset_shards} shards and "
                          f"{params.max_dataset_bytes} bytes (market params max_dataset_shards, max_dataset_bytes): "
                          f"pack a sample of your data")
    if reward is None:
        reward = largest_reward(budget, summary.rounds, params.validator_fee_bps, params.verifier_fee_bps)
        if reward == 0:
            raise WalletError(f"a budget of {amount_text(budget)} cannot pay any reward over {summary.rounds} rounds")
    cost = task_cost(summary.rounds, reward, params.validator_fee_bps, params.verifier_fee_bps)
    segments = segment_count(summary.inner_steps, summary.checkpoint_every)
    needed = minimum_collateral(reward, workers, segments, samples, params.value_at_risk_bps, params.min_collateral)
    collateral = needed if collateral is None else collateral
    if budget < cost:
        raise WalletError(f"the budget {amount_text(budget)} does not cover the cost {amount_text(cost)} "
                          f"({summary.rounds} rounds x reward {amount_text(reward)} + fees)")
    if collateral < needed:
        raise WalletError(f"collateral {amount_text(collateral)} is below the minimum {amount_text(needed)} "
                          f"for {segments} segments and {samples} samples per worker")
    return TaskPlan(rounds=summary.rounds, reward_per_round=reward, cost=cost, budget=budget,
                    refund_if_all_paid=budget - cost, collateral=collateral, minimum_collateral=needed,
                    segments_per_round=segments, workers=workers, samples_per_worker=samples)
