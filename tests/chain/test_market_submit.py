"""SubmitTask and JoinTask: what a task costs, the collateral floor, the spec checks, joins; refusals change
no market state."""

from __future__ import annotations

import hashlib
import json

import pytest

from market_helpers import MARKET_PARAMS, REWARD, SPEC, Market, assert_fails, market_snapshot, spec_bytes
from market_helpers import edited, submit_message
from trolly.chain.errors import InsufficientFunds
from trolly.chain.market.economics import minimum_collateral
from trolly.chain.market.errors import AlreadyMember, BudgetTooLow, CollateralTooLow, InvalidSpec, InvalidTerms
from trolly.chain.market.errors import SpecTooLarge, TaskNotOpen, WorkerBusy, WorkerNotRegistered
from trolly.chain.market.store import ESCROW
from trolly.chain.proto import market_pb2 as pb

COST_PER_ROUND = REWARD + REWARD * 200 // 10_000 + REWARD * 300 // 10_000


@pytest.fixture
def market(make_chain):
    return Market(make_chain(accounts=4, validators=1, params={"market": MARKET_PARAMS}))


def test_submit_escrows_the_budget_and_records_the_terms(market):
    chain = market.chain
    balance = chain.balance(market.requester)
    task_id = market.submit(budget=2 * COST_PER_ROUND)
    assert chain.balance(market.requester) == balance - 2 * COST_PER_ROUND
    assert chain.balance(ESCROW) == 2 * COST_PER_ROUND
    view = market.task(task_id)
    assert (view["status"], view["phase"], view["rounds"], view["escrow_remaining"]) == ("open", "join", 2,
                                                                                          2 * COST_PER_ROUND)
    assert view["spec_hash"] == hashlib.sha256(spec_bytes()).hexdigest()
    assert chain.query(f"/market/spec/{task_id}")["spec"] == spec_bytes().decode()
    assert [t["id"] for t in chain.query("/market/tasks/open")["tasks"]] == [task_id]


def test_budget_must_cover_every_round_with_fees(market):
    chain = market.chain
    before = market_snapshot(chain)
    assert_fails(chain.deliver(market.requester, submit_message(budget=2 * COST_PER_ROUND - 1)), BudgetTooLow)
    assert market_snapshot(chain) == before
    assert chain.deliver(market.requester, submit_message(budget=2 * COST_PER_ROUND)).ok


def test_collateral_floor_follows_the_honesty_condition(market):
    chain = market.chain
    # 20 inner steps, a checkpoint every 5: n = 4 segments; s = 2 samples; R = REWARD / 2 workers; V = R.
    needed = minimum_collateral(REWARD, 2, 4, 2, 10_000, MARKET_PARAMS["min_collateral"])
    pay = REWARD // 2
    assert needed == -(-(pay + 4 * pay) * 6 // (4 * 3)) - pay  # k = 1: p = 1 - C(3,2)/C(4,2) = 1/2
    before = market_snapshot(chain)
    assert_fails(chain.deliver(market.requester, submit_message(collateral=needed - 1)), CollateralTooLow)
    assert market_snapshot(chain) == before
    assert chain.deliver(market.requester, submit_message(collateral=needed)).ok


def mutated(path: list[str], value) -> bytes:
    return json.dumps(edited(SPEC, path, value)).encode()


@pytest.mark.parametrize("spec", [
    b"not json",
    b"[1, 2]",
    b'{"version": 1, "version": 1}',
    b"\xff\xfe",
    mutated(["version"], 2),
    mutated(["model", "arch"], "resnet"),
    mutated(["model", "arch"], KeyError),
    mutated(["dataset", "name"], "imagenet"),
    mutated(["dataset", "manifest_hash"], "AB" * 32),
    mutated(["dataset", "urls"], "http://x"),
    mutated(["dataset", "extra"], 1),
    mutated(["dataset", "urls"], ["ftp://x"]),
    mutated(["training", "inner_steps"], 0),
    mutated(["training", "inner_steps"], 20.0),
    mutated(["training", "batch_size"], "8"),
    mutated(["training", "checkpoint_every"], 11),
    mutated(["training", "seed"], True),
    mutated(["training", "rounds"], 3),
    mutated(["training", "inner_optimizer"], {"lr": 0.1}),
    mutated(["training", "outer_optimizer", "lr"], "fast"),
    mutated(["training", "outer_optimizer", "lr"], 0),
    mutated(["training", "outer_optimizer", "momentum"], 1.0),
    mutated(["training", "inner_optimizer", "name"], "sgd"),
    mutated(["training", "inner_optimizer", "lr"], 1e400),
    mutated(["training", "inner_optimizer", "beta3"], 0.5),
    mutated(["training", "inner_optimizer", "schedule"], {"name": "step"}),
    mutated(["training", "inner_optimizer", "schedule"], {"warmup_steps": 5}),
    mutated(["training", "inner_optimizer", "schedule"], {"name": "cosine", "warmup_steps": 10**6}),
    mutated(["training", "inner_optimizer", "schedule"], {"name": "cosine", "warmup_steps": 1.5}),
    mutated(["training", "inner_optimizer", "schedule"], {"name": "cosine", "final_lr": 0.5}),
    mutated(["training", "inner_optimizer", "schedule"], {"name": "constant", "final_lr": 0.0}),
    mutated(["training", "inner_optimizer", "schedule"], {"name": "linear", "period": 3}),
    mutated(["codec"], 7),
    mutated(["codec"], "gzip"),
    mutated(["determinism"], {"threads": 0}),
    mutated(["determinism", "instruction_set"], "sse"),
], ids=lambda s: s[:40].decode("utf-8", "replace"))
def test_specs_that_break_the_schema_are_refused(market, spec):
    chain = market.chain
    before = market_snapshot(chain)
    assert_fails(chain.deliver(market.requester, submit_message(spec=spec, rounds=2)), InvalidSpec)
    assert market_snapshot(chain) == before


def test_optional_sections_may_be_left_out_as_in_compute(market):
    spec = json.loads(spec_bytes())
    del spec["determinism"], spec["dataset"]["urls"], spec["training"]["inner_optimizer"]
    assert market.chain.deliver(market.requester, submit_message(spec=json.dumps(spec).encode())).ok


def test_the_chain_accepts_exactly_what_compute_parses(market):
    compute_spec = pytest.importorskip("trolly.compute.spec", reason="needs trolly.compute.spec (compute package)")
    schedules = [{"name": "cosine", "warmup_steps": 4, "final_lr": 0.0001}, {"name": "linear"},
                 {"name": "constant", "warmup_steps": 2}, {"name": "cosine", "final_lr": 0.5},
                 {"name": "cosine", "warmup_steps": 10**6}, {"name": "constant", "final_lr": 0.0}]
    for raw in [spec_bytes(), mutated(["training", "inner_optimizer", "lr"], 20), mutated(["codec"], "zip"),
                *(mutated(["training", "inner_optimizer", "schedule"], schedule) for schedule in schedules)]:
        try:
            compute_spec.parse_spec(raw)
            compute_ok = True
        except compute_spec.SpecError:
            compute_ok = False
        chain_ok = market.chain.deliver(market.requester, submit_message(spec=raw)).ok
        assert chain_ok == compute_ok, raw


def test_nan_in_a_spec_is_refused(market):
    spec = spec_bytes().replace(b'"lr": 0.001', b'"lr": NaN')
    assert_fails(market.chain.deliver(market.requester, submit_message(spec=spec, rounds=2)), InvalidSpec)


def test_spec_hash_must_match(market):
    assert_fails(market.chain.deliver(market.requester, submit_message(spec_hash=b"\x00" * 32)), InvalidSpec)


def test_spec_over_the_size_limit_is_refused(make_chain):
    chain = make_chain(accounts=2, validators=1, params={"market": {**MARKET_PARAMS, "max_spec_bytes": 600}})
    market = Market(chain)
    padded = json.loads(spec_bytes())
    padded["model"]["config"]["note"] = "x" * 600
    assert_fails(chain.deliver(market.requester, submit_message(spec=json.dumps(padded).encode())), SpecTooLarge)


@pytest.mark.parametrize("overrides", [
    {"workers": 65}, {"round_blocks": 1}, {"samples_per_worker": 65}, {"join_blocks": 100_001},
])
def test_terms_outside_the_limits_are_refused(market, overrides):
    assert_fails(market.chain.deliver(market.requester, submit_message(**overrides)), InvalidTerms)


def test_budget_beyond_the_balance_is_refused(market):
    assert_fails(market.chain.deliver(market.requester, submit_message(budget=10**13)), InsufficientFunds)


def test_joins_lock_collateral_and_refuse_doubles_strangers_and_full_tasks(market):
    chain = market.chain
    market.register(market.workers[:2])
    task_id = market.submit(workers=1, collateral=4 * REWARD)
    stranger = market.workers[2]
    assert_fails(chain.deliver(stranger, pb.MsgJoinTask(task_id=task_id)), WorkerNotRegistered)
    open_task = market.submit(workers=2, collateral=4 * REWARD)
    market.join(open_task, market.workers[:1])
    before = market_snapshot(chain)
    assert_fails(chain.deliver(market.workers[0], pb.MsgJoinTask(task_id=open_task)), AlreadyMember)
    assert market_snapshot(chain) == before
    balance = chain.balance(market.workers[1])
    market.join(task_id, market.workers[1:2])
    assert chain.balance(market.workers[1]) == balance - 4 * REWARD
    assert market.task(task_id)["status"] == "running"
    assert_fails(chain.deliver(market.workers[0], pb.MsgJoinTask(task_id=task_id)), TaskNotOpen)


def test_a_worker_may_belong_to_a_bounded_number_of_tasks(make_chain):
    chain = make_chain(accounts=2, validators=1, params={"market": {**MARKET_PARAMS, "max_tasks_per_worker": 2}})
    market = Market(chain)
    market.register(market.workers[:1])
    tasks = [market.submit(workers=2) for _ in range(3)]
    market.join(tasks[0], market.workers[:1])
    market.join(tasks[1], market.workers[:1])
    assert_fails(chain.deliver(market.workers[0], pb.MsgJoinTask(task_id=tasks[2])), WorkerBusy)


@pytest.mark.parametrize("urls", [["http://169.254.169.254:80x/"], ["ftp://example.com"], "http://example.com",
                                  ["http://user:pw@example.com"], ["http://example.com"] * 17])
def test_a_spec_whose_dataset_urls_break_the_blob_url_rules_is_refused(make_chain, urls):
    spec = json.loads(spec_bytes())
    spec["dataset"]["urls"] = urls
    chain = make_chain(params={"market": MARKET_PARAMS})
    result = chain.deliver(chain.accounts[0], submit_message(json.dumps(spec).encode()))
    assert result.code == InvalidSpec.code and "dataset.urls" in result.log, result.log
