"""`trolly-wallet task why` (issue 28 item 5), its reading on the state machine: a task's requirements (the chain's
memory estimate, threads, collateral, max tasks) held to each registered worker's record and balance, each
shortfall named. The command against a real node is in test_worker_earnings_e2e.py."""

from __future__ import annotations

import hashlib
import json

from market_helpers import MARKET_PARAMS, REWARD, SPEC, Market
from trolly.chain.crypto import encode_address
from trolly.chain.market.footprint import model_footprint
from trolly.chain.market.params import MarketParams
from trolly.wallet.market_views import TaskOverview, WorkerView
from trolly.wallet.task_fit import NoJoinReport, WorkerFit, requirements, shortfalls


def spec_with(**changes) -> bytes:
    document = json.loads(json.dumps(SPEC))
    document.update(changes)
    return json.dumps(document).encode()


def submitted(market, spec: bytes, **overrides) -> TaskOverview:
    task_id = market.submit(spec=spec, spec_hash=hashlib.sha256(spec).digest(), **overrides)
    return TaskOverview.from_answer(market.chain.query(f"/market/task/{task_id}"))


def test_each_requirement_a_registered_worker_misses_is_named(make_chain):
    chain = make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    market.register()  # 1024 MiB, 1 thread each
    big = {"arch": "mlp", "config": {"hidden": [8192, 8192]}}
    spec = spec_with(model=big, determinism={"threads": 2})
    overview = submitted(market, spec)
    params = MarketParams(**MARKET_PARAMS)
    needs = requirements(spec, overview, params)
    estimate = model_footprint("mlp", big["config"], SPEC["dataset"], SPEC["training"]["batch_size"]).memory_mb
    assert (needs.memory_mb, needs.threads, needs.collateral) == (estimate, 2, 4 * REWARD) and estimate > 1024
    worker = market.workers[0]
    record = WorkerView.from_answer(chain.query(f"/market/worker/{encode_address(worker.address)}")).record
    assert shortfalls(needs, record, balance=4 * REWARD) == (f"memory 1024 MiB < {estimate} MiB", "threads 1 < 2")
    assert shortfalls(needs, record, balance=10) == (f"memory 1024 MiB < {estimate} MiB", "threads 1 < 2",
                                                     f"balance 10 utrl < collateral {4 * REWARD} utrl")
    small = requirements(spec_with(), submitted(market, spec_with()), params)
    assert shortfalls(small, record, balance=4 * REWARD) == ()
    busy = requirements(spec_with(), overview, MarketParams(**{**MARKET_PARAMS, "max_tasks_per_worker": 0}))
    assert shortfalls(busy, record, balance=4 * REWARD) == ("already in 0 task(s), the most a worker may be in",)


def test_the_report_says_who_fits_and_what_an_open_slot_of_a_running_task_means(make_chain):
    chain = make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    needs = requirements(spec_with(), submitted(market, spec_with()), MarketParams(**MARKET_PARAMS))
    fits = WorkerFit("trolly1a", "cpu", 2048, 2, 900, 10 * REWARD, 0, ())
    short = WorkerFit("trolly1b", "cpu", 512, 1, 300, 0, 0, ("threads 1 < 2",))
    running = NoJoinReport(7, "running", 2, 2, 1, needs, (fits, short))
    text = "\n".join(running.lines())
    assert "running with 1 open slot(s)" in text and "trolly1a (cpu, 2048 MiB" in text and ": fits" in text
    assert "trolly1b (cpu, 512 MiB, 1 thread(s), 300 samples/s, balance 0 utrl, in 0 task(s)): does not fit: " \
           "threads 1 < 2" in text
    assert "no registered worker meets every requirement" not in text
    nobody = "\n".join(NoJoinReport(8, "open", 0, 2, 0, needs, ()).lines())
    assert "no worker is registered on this chain" in nobody
    assert json.loads(json.dumps(running.to_json()))["workers"][1]["shortfalls"] == ["threads 1 < 2"]
