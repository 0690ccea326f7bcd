"""Planning a training task before paying for it: the reward the budget allows, the cost, the collateral.

The same numbers the chain checks in SubmitTask (`trolly.chain.market.economics`), computed before signing so a
requester sees them and a doomed task is refused locally with a reason. A private task's budget also holds its
key reserve (`trolly.chain.market.key_faults.key_reserve`): what it may owe members it fails to key, refunded
when it owes none.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable

from trolly.chain.market.economics import minimum_collateral, segment_count, task_cost
from trolly.chain.market.key_faults import key_reserve
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
    key_reserve: int = 0
    """A private task's reserve for compensating members it fails to key (0 for public data)."""
    private_data: bool = False
    """The spec's dataset is private: the task must commit to a data key drawn for it (`data_key_hash`)."""


def largest_reward(budget: int, needs: Callable[[int], int]) -> int:
    """The largest reward per round whose budget need `needs(reward)` fits in `budget` (it grows with the
    reward: the cost, and a private task's key reserve through the collateral)."""
    low, high = 0, budget
    while low < high:
        middle = (low + high + 1) // 2
        if needs(middle) <= budget:
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
    segments = segment_count(summary.inner_steps, summary.checkpoint_every)

    def needed_collateral(reward: int) -> int:
        return minimum_collateral(reward, workers, segments, samples, params.value_at_risk_bps, params.min_collateral)

    def reserve(reward: int) -> int:
        locked = needed_collateral(reward) if collateral is None else collateral
        return key_reserve(workers, locked, params.missed_round_penalty_bps) if summary.private_data else 0

    def needs(reward: int) -> int:
        return task_cost(summary.rounds, reward, params.validator_fee_bps, params.verifier_fee_bps) + reserve(reward)

    if reward is None:
        reward = largest_reward(budget, needs)
        if reward == 0:
            raise WalletError(f"a budget of {amount_text(budget)} cannot pay any reward over {summary.rounds} rounds")
    cost = task_cost(summary.rounds, reward, params.validator_fee_bps, params.verifier_fee_bps)
    needed = needed_collateral(reward)
    collateral = needed if collateral is None else collateral
    if budget < cost + reserve(reward):
        reserved = f" and the key reserve {amount_text(reserve(reward))}" if reserve(reward) else ""
        raise WalletError(f"the budget {amount_text(budget)} does not cover the cost {amount_text(cost)} "
                          f"({summary.rounds} rounds x reward {amount_text(reward)} + fees){reserved}")
    if collateral < needed:
        raise WalletError(f"collateral {amount_text(collateral)} is below the minimum {amount_text(needed)} "
                          f"for {segments} segments and {samples} samples per worker")
    return TaskPlan(rounds=summary.rounds, reward_per_round=reward, cost=cost, budget=budget,
                    refund_if_all_paid=budget - cost, collateral=collateral, minimum_collateral=needed,
                    segments_per_round=segments, workers=workers, samples_per_worker=samples,
                    key_reserve=reserve(reward), private_data=bool(summary.private_data))
