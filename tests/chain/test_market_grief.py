"""Requesters cannot grief: a cancel waits for the round in progress (from its start, with or without commitments
on chain), and a spec's model, batch and memory estimate are bounded by chain params."""

from __future__ import annotations

import json

import pytest

from market_helpers import MARKET_PARAMS, REWARD, STAKE, Market, assert_fails, event_actions, spec_bytes
from trolly.chain.market.errors import CancelPending, InvalidSpec, ModelTooLarge, TaskEnded
from trolly.chain.market.footprint import model_footprint
from trolly.chain.market.store import ESCROW
from trolly.chain.proto import market_pb2 as pb

COLLATERAL = 4 * REWARD
HALF = REWARD // 2
SPENT_PER_ROUND = 2 * (HALF + HALF * 200 // 10_000 + HALF * 300 // 10_000)


def make_market(make_chain, **params):
    return Market(make_chain(accounts=4, validators=1, params={"market": {**MARKET_PARAMS, **params}}))


def cancel(market, task_id):
    return market.chain.deliver(market.requester, pb.MsgCancelTask(task_id=task_id))


def two_worker_task(make_chain):
    """A running task of two workers, with the requester's and the workers' balances before it ran."""
    market = make_market(make_chain)
    chain = market.chain
    requester_balance = chain.balance(market.requester)
    task_id = market.open_task(workers=2, collateral=COLLATERAL, budget=5 * REWARD)
    return market, chain, task_id, requester_balance, [chain.balance(w) for w in market.workers[:2]]


def assert_cancelled_after_one_paid_round(market, task_id: int, requester_balance: int, worker_balances) -> None:
    """The task ended cancelled with its one round paid: each worker its half and its collateral back, the
    requester charged that round alone and refunded the rest."""
    view = market.task(task_id)
    assert view["status"] == "cancelled" and view["paid_workers"] == REWARD
    assert view["refunded"] == 5 * REWARD - SPENT_PER_ROUND
    assert market.chain.balance(market.requester) == requester_balance - SPENT_PER_ROUND
    for worker, before in zip(market.workers[:2], worker_balances):
        assert market.chain.balance(worker) == before + COLLATERAL + HALF


def test_a_cancel_after_commitments_lets_the_round_settle_and_pays_it(make_chain):
    market, chain, task_id, requester_balance, worker_balances = two_worker_task(make_chain)
    market.commit(task_id, 0, market.workers[:1])  # one of two committed: the round is still open
    assert cancel(market, task_id).ok
    view = market.task(task_id)
    assert view["status"] == "running" and view["cancel_requested"]
    assert_fails(cancel(market, task_id), CancelPending)

    market.commit(task_id, 0, market.workers[1:2])  # the round closes as usual
    chain.block()  # sampled
    output = market.vote(chain.operators, task_id)
    assert [a["action"] for a in event_actions(output, "cancelled")] == ["cancelled"]
    assert event_actions(output, "round_started") == []  # no further round
    assert_cancelled_after_one_paid_round(market, task_id, requester_balance, worker_balances)
    market.reveal(task_id)  # the verifier fees stay in escrow until the reveal window closes
    chain.advance(10)
    view = market.task(task_id)
    assert chain.balance(ESCROW) == 3 * STAKE
    assert_fails(cancel(market, task_id), TaskEnded)


def test_a_cancel_as_soon_as_a_round_starts_lets_it_be_trained_verified_and_paid(make_chain):
    market, chain, task_id, requester_balance, worker_balances = two_worker_task(make_chain)
    view = market.task(task_id)
    assert (view["round"], view["phase"]) == (0, "commit")
    assert not market.round_commitments(task_id, 0)  # nothing on chain yet: the workers are training
    assert cancel(market, task_id).ok
    view = market.task(task_id)
    assert view["status"] == "running" and view["cancel_requested"]

    market.commit(task_id, 0, market.workers[:2])
    chain.block()  # sampled
    output = market.vote(chain.operators, task_id)
    assert len(event_actions(output, "cancelled")) == 1 and event_actions(output, "round_started") == []
    assert_cancelled_after_one_paid_round(market, task_id, requester_balance, worker_balances)


def test_a_cancel_during_verification_still_pays_the_round(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    task_id = market.open_task(workers=2, collateral=COLLATERAL, budget=5 * REWARD)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    assert market.task(task_id)["phase"] == "verify"
    assert cancel(market, task_id).ok
    market.vote(chain.operators, task_id)
    view = market.task(task_id)
    assert view["status"] == "cancelled" and view["paid_workers"] == REWARD


def test_a_cancelled_round_that_nobody_verifies_ends_the_task_unpaid_at_the_window(make_chain):
    market = make_market(make_chain)
    chain = market.chain
    task_id = market.open_task(workers=2, collateral=COLLATERAL, budget=5 * REWARD)
    market.commit(task_id, 0, market.workers[:2])
    assert cancel(market, task_id).ok
    chain.advance(1 + MARKET_PARAMS["verification_window"])
    view = market.task(task_id)
    assert view["status"] == "cancelled" and view["paid_workers"] == 0 and view["refunded"] == 5 * REWARD


@pytest.mark.parametrize("arch,config,dataset", [
    ("mlp", {"hidden": [1024, 1024]}, "digits"), ("mlp", {"hidden": []}, "digits"),
    ("cnn", {}, "digits"), ("cnn", {"channels": [8], "hidden": 16}, "digits"),
    ("transformer", {}, "pycorpus"), ("transformer", {"layers": 1, "heads": 2, "width": 32}, "pycorpus"),
])
def test_the_chain_counts_exactly_the_parameters_compute_builds(arch, config, dataset):
    from trolly.compute.models import DataShape, build_model, count_parameters

    shapes = {"digits": DataShape("classification", 64, 10), "pycorpus": DataShape("text", 64, 256, 64)}
    model = build_model(arch, config, shapes[dataset], seed=1)
    assert model_footprint(arch, config, dataset, batch_size=8).parameters == count_parameters(model)


def test_the_memory_estimate_grows_with_the_model_and_the_batch():
    small = model_footprint("mlp", {"hidden": [64]}, "digits", 8)
    assert model_footprint("mlp", {"hidden": [4096, 4096]}, "digits", 8).memory_mb > small.memory_mb
    assert model_footprint("mlp", {"hidden": [64]}, "digits", 1 << 16).memory_mb > small.memory_mb


def spec_with(model=None, **training) -> bytes:
    spec = json.loads(spec_bytes(**training))
    if model is not None:
        spec["model"] = model
    return json.dumps(spec).encode()


@pytest.mark.parametrize("spec,limit", [
    (spec_with({"arch": "mlp", "config": {"hidden": [4096, 4096, 4096]}}), {"max_model_parameters": 10_000_000}),
    (spec_with(batch_size=8192), {}),
    (spec_with({"arch": "mlp", "config": {"hidden": [2048]}}, batch_size=4096), {"max_memory_mb": 300}),
])
def test_a_spec_beyond_the_chain_bounds_is_refused(make_chain, spec, limit):
    market = make_market(make_chain, **limit)
    result = market.chain.deliver(market.requester, __import__("market_helpers").submit_message(spec=spec))
    assert_fails(result, ModelTooLarge)


@pytest.mark.parametrize("model", [
    {"arch": "mlp", "config": {"width": 3}},  # not an mlp field
    {"arch": "mlp", "config": {"hidden": [0]}},
    {"arch": "transformer", "config": {"width": 30, "heads": 4}},  # width not a multiple of heads
    {"arch": "cnn", "config": {"hidden": True}},
])
def test_a_model_config_compute_would_refuse_is_an_invalid_spec(make_chain, model):
    from market_helpers import submit_message

    market = make_market(make_chain)
    assert_fails(market.chain.deliver(market.requester, submit_message(spec=spec_with(model))), InvalidSpec)


def test_a_transformer_on_image_data_is_an_invalid_spec(make_chain):
    from market_helpers import submit_message

    market = make_market(make_chain)
    spec = spec_with({"arch": "transformer", "config": {}})
    assert_fails(market.chain.deliver(market.requester, submit_message(spec=spec)), InvalidSpec)
