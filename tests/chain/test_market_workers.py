"""Workers: registration with a stake, updates, unregistering and the stake's unbonding, queries."""

from __future__ import annotations

import pytest

from market_helpers import MARKET_PARAMS, STAKE, Market, assert_fails, market_snapshot
from trolly.chain.crypto import encode_address
from trolly.chain.errors import InvalidRequest, NotFound
from trolly.chain.market.errors import InvalidBlobUrl, InvalidWorkerProfile, StakeTooLow, WorkerAlreadyRegistered
from trolly.chain.market.errors import WorkerBusy
from trolly.chain.market.errors import WorkerNotRegistered
from trolly.chain.market.store import ESCROW
from trolly.chain.proto import market_pb2 as pb

HARDWARE = pb.HardwareProfile(device="cpu", samples_per_second=250, memory_mb=2048, threads=2)


@pytest.fixture
def market(make_chain):
    return Market(make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS}))


def register(stake=STAKE, url="http://127.0.0.1:9000", hardware=HARDWARE):
    return pb.MsgRegisterWorker(stake=stake, blob_url=url, hardware=hardware)


def test_register_locks_the_stake_and_shows_the_profile(market):
    chain, worker = market.chain, market.workers[0]
    balance = chain.balance(worker)
    assert chain.deliver(worker, register()).ok
    assert chain.balance(worker) == balance - STAKE and chain.balance(ESCROW) == STAKE
    view = chain.query(f"/market/worker/{encode_address(worker.address)}")
    assert (view["stake"], view["blob_url"], view["tasks"], view["registered"]) == (STAKE, "http://127.0.0.1:9000", [],
                                                                                    True)
    assert view["hardware"] == {"device": "cpu", "samples_per_second": 250, "memory_mb": 2048, "threads": 2}


@pytest.mark.parametrize("message,error", [
    (register(stake=MARKET_PARAMS["min_worker_stake"] - 1), StakeTooLow),
    (register(url="ftp://example"), InvalidBlobUrl),
    (register(url="http://127.0.0.1/" + "x" * 300), InvalidBlobUrl),
    (register(hardware=pb.HardwareProfile(device="", samples_per_second=1)), InvalidWorkerProfile),
    (register(hardware=pb.HardwareProfile(device="cpu", samples_per_second=0)), InvalidWorkerProfile),
    (pb.MsgRegisterWorker(stake=STAKE, blob_url="http://127.0.0.1:9000"), InvalidWorkerProfile),
], ids=["stake", "scheme", "url-length", "device", "throughput", "no-hardware"])
def test_bad_registrations_are_refused(market, message, error):
    before = market_snapshot(market.chain)
    assert_fails(market.chain.deliver(market.workers[0], message), error)
    assert market_snapshot(market.chain) == before


def test_register_twice_is_refused_and_update_changes_the_record(market):
    chain, worker = market.chain, market.workers[0]
    assert chain.deliver(worker, register()).ok
    assert_fails(chain.deliver(worker, register()), WorkerAlreadyRegistered)
    assert_fails(chain.deliver(market.workers[1], pb.MsgUpdateWorker(add_stake=1)), WorkerNotRegistered)
    assert_fails(chain.deliver(worker, pb.MsgUpdateWorker()), InvalidRequest)
    assert chain.deliver(worker, pb.MsgUpdateWorker(add_stake=5, blob_url="https://worker.example")).ok
    view = chain.query(f"/market/worker/{encode_address(worker.address)}")
    assert (view["stake"], view["blob_url"], view["hardware"]["samples_per_second"]) == (STAKE + 5,
                                                                                         "https://worker.example", 250)
    assert chain.balance(ESCROW) == STAKE + 5


def test_unregister_waits_for_tasks_then_unbonds_for_exactly_the_unbonding_period(market):
    chain = market.chain
    worker = market.workers[0]
    market.register(market.workers[:1])
    task_id = market.submit(workers=2)
    market.join(task_id, [worker])
    assert_fails(chain.deliver(worker, pb.MsgUnregisterWorker()), WorkerBusy)
    assert chain.deliver(market.requester, pb.MsgCancelTask(task_id=task_id)).ok
    balance = chain.balance(worker)
    assert chain.deliver(worker, pb.MsgUnregisterWorker()).ok
    maturity = chain.height + MARKET_PARAMS["worker_unbonding_blocks"]
    view = chain.query(f"/market/worker/{encode_address(worker.address)}")
    assert view["registered"] is False and view["unbonding"] == [{"maturity_height": maturity, "amount": STAKE}]
    assert_fails(chain.deliver(worker, pb.MsgJoinTask(task_id=task_id)), WorkerNotRegistered)
    while chain.height < maturity - 1:
        chain.block()
    assert chain.balance(worker) == balance
    chain.block()
    assert chain.balance(worker) == balance + STAKE
    assert chain.balance(ESCROW) == 0
    with pytest.raises(NotFound):
        chain.query(f"/market/worker/{encode_address(worker.address)}")


def test_queries(market):
    chain = market.chain
    task_id = market.open_task(workers=1)
    other = market.submit(workers=2)
    assert {t["id"] for t in chain.query("/market/tasks")["tasks"]} == {task_id, other}
    assert chain.query("/market/params")["min_worker_stake"] == MARKET_PARAMS["min_worker_stake"]
    assert chain.query("/params/market")["verification_window"] == MARKET_PARAMS["verification_window"]
    view = market.task(task_id)
    assert view["progress"] == "round 1 of 2" and view["members"][0]["blob_url"] == "http://127.0.0.1:9000"
    assert view["round_details"][0]["commitments"] == []
    with pytest.raises(NotFound):
        chain.query("/market/task/99")
    with pytest.raises(InvalidRequest):
        chain.query("/market/task/x")
    with pytest.raises(InvalidRequest):
        chain.query("/market/tasks/closed")


def test_one_round_of_a_task_can_be_queried_alone(market):
    chain = market.chain
    task_id = market.open_task(workers=1)
    market.commit(task_id, 0, market.workers[:1])
    full = market.task(task_id)["round_details"][0]
    page = chain.query(f"/market/task/{task_id}/round/0")
    assert page.pop("next") is None and page == full and len(full["commitments"]) == 1
    for bad in (f"/market/task/{task_id}/round/1", f"/market/task/{task_id}/round/x", f"/market/task/{task_id}/x"):
        with pytest.raises((NotFound, InvalidRequest)):
            chain.query(bad)


def test_task_listings_come_in_pages_that_follow_next_to_the_end(make_chain):
    from trolly.chain.market.queries import MAX_TASKS_PER_PAGE

    market = Market(make_chain(accounts=6, validators=1))
    ids = [market.submit() for _ in range(5)]
    first = market.chain.query("/market/tasks/limit/2")
    assert [t["id"] for t in first["tasks"]] == ids[:2] and first["next"] == ids[1]
    second = market.chain.query(f"/market/tasks/open/after/{first['next']}/limit/2")
    assert [t["id"] for t in second["tasks"]] == ids[2:4] and second["next"] == ids[3]
    last = market.chain.query(f"/market/tasks/after/{second['next']}")
    assert [t["id"] for t in last["tasks"]] == ids[4:] and last["next"] is None
    for bad in (f"/market/tasks/limit/{MAX_TASKS_PER_PAGE + 1}", "/market/tasks/limit/0", "/market/tasks/after",
                "/market/tasks/after/x", "/market/tasks/open/sideways/3", "/market/tasks/after/1/after/2/limit/3"):
        with pytest.raises(InvalidRequest):
            market.chain.query(bad)
