"""market `MsgSubmitTask`: escrow a budget for a training task described by its spec (docs/protocol.md 1).

The budget must cover the most the task can spend, rounds x (reward + validator fee + verifier fee); the
collateral must reach the minimum that keeps a worker honest for this task's segment and sample counts
(`market.params` explains the formula). The task then waits `join_blocks` for its workers.

A private task (its spec names a cipher) commits to its data key with `data_key_hash`, which no earlier task
may have used (`market.data_keys`); its budget covers also the compensation it may owe members it fails to key
(`key_faults.key_reserve`), and its rounds are longer than the key's delivery window (`key_delivery_blocks`).
"""

from __future__ import annotations

import hashlib

from ..accounts import check_amount
from ..block import BlockContext
from ..crypto import encode_address
from ..errors import InvalidRequest
from ..market.data_keys import claim_data_key_hash
from ..market.economics import minimum_collateral, segment_count, task_cost
from ..market.errors import (BudgetTooLow, CollateralTooLow, DatasetTooLarge, InvalidDataKeyHash, InvalidSpec,
                             InvalidTerms, ModelTooLarge, SpecTooLarge)
from ..market.key_faults import key_reserve
from ..market.events import task_event
from ..market.params import MarketParams
from ..market.records import JOIN, OPEN, Task
from ..market.spec import SpecSummary, validate_spec
from ..market.store import enter_phase, escrow_in, next_task_id, put_spec, put_task
from ..params import get_params
from ..proto.market_pb2 import MsgSubmitTask
from ..state import State

TERMS = ("validator_fee_bps", "verifier_fee_bps", "slash_verifier_bps", "missed_round_penalty_bps",
         "sampling_delay", "verification_window", "committee_size", "reveal_window",
         "lazy_verifier_penalty", "losing_verdict_penalty_bps", "seed_from_extensions", "key_delivery_blocks")
"""The params a task copies at submission, so that its terms never change under it."""


def validate_submit_task(msg: MsgSubmitTask) -> None:
    if not msg.spec:
        raise InvalidSpec("the task spec is empty")
    if len(msg.spec_hash) != 32 or hashlib.sha256(msg.spec).digest() != msg.spec_hash:
        raise InvalidSpec("spec_hash must be the sha256 of the spec bytes")
    for name in ("budget", "reward_per_round", "collateral"):
        check_amount(getattr(msg, name), name)
    for name in ("workers", "rounds", "join_blocks", "round_blocks", "samples_per_worker"):
        if getattr(msg, name) == 0:
            raise InvalidRequest(f"{name} must be at least 1")
    if len(msg.data_key_hash) not in (0, 32):
        raise InvalidDataKeyHash("data_key_hash must be 32 bytes (a private dataset) or empty (a public one)")


def check_data_key_terms(msg: MsgSubmitTask, summary: SpecSummary, params: MarketParams) -> None:
    """A private task commits to its key and leaves a round time to train after the key's delivery window; a
    public one commits to none."""
    if not summary.private_data:
        if msg.data_key_hash:
            raise InvalidDataKeyHash("a public dataset has no data key: data_key_hash must be empty")
        return
    if not msg.data_key_hash:
        raise InvalidDataKeyHash("a private dataset (the spec names a cipher) needs data_key_hash, the commitment "
                                 "to the data key drawn for this task")
    if msg.round_blocks <= params.key_delivery_blocks:
        raise InvalidTerms(f"round_blocks must exceed key_delivery_blocks ({params.key_delivery_blocks}) for a "
                           f"private dataset: a round must leave time to train once the data key is delivered")


def check_terms(msg: MsgSubmitTask, params: MarketParams) -> None:
    limits = {
        "workers": (1, params.max_workers),
        "rounds": (1, params.max_rounds),
        "join_blocks": (1, params.max_join_blocks),
        "round_blocks": (params.min_round_blocks, params.max_round_blocks),
        "samples_per_worker": (1, params.max_samples_per_worker),
    }
    for name, (low, high) in limits.items():
        value = getattr(msg, name)
        if not low <= value <= high:
            raise InvalidTerms(f"{name} must be within {low}..{high}, got {value}")


def check_footprint(summary: SpecSummary, params: MarketParams) -> None:
    """The model, batch and memory estimate within the chain's bounds, so no task asks for what no worker holds."""
    footprint = summary.footprint
    if footprint.parameters > params.max_model_parameters:
        raise ModelTooLarge(f"the model has {footprint.parameters} parameters, limit {params.max_model_parameters}")
    if summary.batch_size > params.max_batch_size:
        raise ModelTooLarge(f"training.batch_size {summary.batch_size} exceeds the limit {params.max_batch_size}")
    if footprint.memory_mb > params.max_memory_mb:
        raise ModelTooLarge(f"the task's memory estimate is {footprint.memory_mb} MiB, limit {params.max_memory_mb} MiB")


def check_dataset_bounds(summary: SpecSummary, params: MarketParams) -> None:
    """The dataset's declared shards and bytes within the chain's bounds (every worker and verifier holds the
    manifest to the declared ones)."""
    if summary.dataset_max_shards > params.max_dataset_shards:
        raise DatasetTooLarge(f"dataset.max_shards {summary.dataset_max_shards} exceeds the limit "
                              f"{params.max_dataset_shards}")
    if summary.dataset_max_bytes > params.max_dataset_bytes:
        raise DatasetTooLarge(f"dataset.max_bytes {summary.dataset_max_bytes} exceeds the limit "
                              f"{params.max_dataset_bytes}")


def process_submit_task(state: State, ctx: BlockContext, signer: bytes, msg: MsgSubmitTask) -> None:
    params = get_params(state, MarketParams)
    if len(msg.spec) > params.max_spec_bytes:
        raise SpecTooLarge(f"spec is {len(msg.spec)} bytes, limit {params.max_spec_bytes}")
    summary = validate_spec(msg.spec, msg.rounds)
    check_terms(msg, params)
    check_footprint(summary, params)
    check_dataset_bounds(summary, params)
    check_data_key_terms(msg, summary, params)
    segments = segment_count(summary.inner_steps, summary.checkpoint_every)
    if segments > params.max_segments_per_round:
        raise InvalidTerms(f"{segments} segments per round (inner_steps / checkpoint_every), limit "
                           f"{params.max_segments_per_round}")
    needed = minimum_collateral(msg.reward_per_round, msg.workers, segments, msg.samples_per_worker,
                                params.value_at_risk_bps, params.min_collateral, params.seed_choices)
    if msg.collateral < needed:
        raise CollateralTooLow(f"collateral {msg.collateral}utrl is below the minimum {needed}utrl for "
                               f"{segments} segments and {msg.samples_per_worker} samples per worker")
    cost = task_cost(msg.rounds, msg.reward_per_round, params.validator_fee_bps, params.verifier_fee_bps)
    reserve = (key_reserve(msg.workers, msg.collateral, params.missed_round_penalty_bps) if summary.private_data
               else 0)
    if msg.budget < cost + reserve:
        keyed = f" + {reserve} key reserve (compensation for members the data key fails)" if reserve else ""
        raise BudgetTooLow(f"budget {msg.budget}utrl does not cover {cost + reserve}utrl = {msg.rounds} rounds x "
                           f"({msg.reward_per_round} reward + fees){keyed}")

    escrow_in(state, signer, msg.budget)
    task = Task(
        id=next_task_id(state), requester=signer, spec_hash=msg.spec_hash, status=OPEN, phase=JOIN,
        rounds=msg.rounds, workers_wanted=msg.workers, reward_per_round=msg.reward_per_round,
        collateral=msg.collateral, samples_per_worker=msg.samples_per_worker, round_blocks=msg.round_blocks,
        budget=msg.budget, escrow=msg.budget, inner_steps=summary.inner_steps, batch_size=summary.batch_size,
        checkpoint_every=summary.checkpoint_every, seed=summary.seed, created_height=ctx.env.height,
        join_deadline=ctx.env.height + msg.join_blocks, terms={name: getattr(params, name) for name in TERMS},
        private_data=summary.private_data, data_key_hash=msg.data_key_hash, kernels=list(summary.kernels),
    )
    if task.private_data:
        claim_data_key_hash(state, msg.data_key_hash, task.id)
    put_spec(state, task.id, msg.spec)
    enter_phase(state, task, JOIN, task.join_deadline)
    put_task(state, task)
    task_event(ctx, task.id, "submitted", requester=encode_address(signer), spec_hash=msg.spec_hash.hex(),
               budget=msg.budget, cost=cost, workers=msg.workers, rounds=msg.rounds, collateral=msg.collateral)
