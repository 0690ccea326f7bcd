"""A worker's `relay` on chain (docs/protocol.md 3a): RegisterWorker and UpdateWorker set it, checked like a blob
URL; a relayed worker may have no blob URL of its own; the views send fetchers to `<relay>/workers/<address>`."""

from __future__ import annotations

import pytest
from market_helpers import MARKET_PARAMS, STAKE, Market, assert_fails, market_snapshot

from trolly.chain.crypto import encode_address
from trolly.chain.errors import InvalidRequest
from trolly.chain.market.errors import InvalidBlobUrl
from trolly.chain.proto import market_pb2 as pb
from trolly.wallet.market_views import TaskOverview, WorkerView

HARDWARE = pb.HardwareProfile(device="cpu", samples_per_second=250, memory_mb=2048, threads=2)
RELAY = "http://relay.example:8650"


@pytest.fixture
def market(make_chain):
    return Market(make_chain(accounts=4, validators=1, params={"market": MARKET_PARAMS}))


def register(market, key, **fields):
    return market.chain.deliver(key, pb.MsgRegisterWorker(stake=STAKE, hardware=HARDWARE, **fields))


def worker_view(market, key) -> WorkerView:
    return WorkerView.from_answer(market.chain.query(f"/market/worker/{encode_address(key.address)}"))


def test_a_relayed_worker_registers_without_a_url_and_is_fetched_through_its_relay(market):
    key = market.workers[0]
    result = register(market, key, relay=RELAY)
    assert result.ok, result.log
    event = dict(next(e for e in result.events if e.type == "worker").attributes)
    assert event["relay"] == RELAY
    record = worker_view(market, key).record
    assert (record.blob_url, record.relay) == ("", RELAY)
    market.register(market.workers[1:2])
    task_id = market.submit(workers=2)
    market.join(task_id, market.workers[:2])
    members = {m.worker: m for m in TaskOverview.from_answer(market.chain.query(f"/market/task/{task_id}")).members}
    relayed, direct = members[encode_address(key.address)], members[encode_address(market.workers[1].address)]
    assert relayed.fetch_url == f"{RELAY}/workers/{encode_address(key.address)}"
    assert direct.relay == "" and direct.fetch_url == direct.blob_url == "http://127.0.0.1:9000"


@pytest.mark.parametrize("fields, error, words", [
    ({}, InvalidBlobUrl, "blob_url is required"),
    ({"relay": "ftp://relay.example"}, InvalidBlobUrl, "relay must start with http"),
    ({"relay": "http://user:pw@relay.example"}, InvalidBlobUrl, "relay must not carry user information"),
    ({"blob_url": "http://w.example", "relay": "http://relay.example/" + "a" * 300}, InvalidBlobUrl,
     "relay is longer than"),
])
def test_register_refuses_a_bad_relay_and_changes_nothing(market, fields, error, words):
    before = market_snapshot(market.chain)
    result = register(market, market.workers[0], **fields)
    assert_fails(result, error)
    assert words in result.log
    assert market_snapshot(market.chain) == before


def test_update_sets_and_clears_the_relay(market):
    key = market.workers[0]
    assert register(market, key, blob_url="http://w.example:9000").ok
    assert market.chain.deliver(key, pb.MsgUpdateWorker(relay=RELAY)).ok
    assert worker_view(market, key).record.relay == RELAY
    assert market.chain.deliver(key, pb.MsgUpdateWorker(clear_relay=True)).ok
    record = worker_view(market, key).record
    assert (record.blob_url, record.relay) == ("http://w.example:9000", "")


def test_update_refuses_both_or_a_clear_without_a_url(market):
    key = market.workers[0]
    assert register(market, key, relay=RELAY).ok
    before = market_snapshot(market.chain)
    assert_fails(market.chain.deliver(key, pb.MsgUpdateWorker(relay=RELAY, clear_relay=True)), InvalidRequest)
    cleared = market.chain.deliver(key, pb.MsgUpdateWorker(clear_relay=True))
    assert_fails(cleared, InvalidRequest)
    assert "no blob_url of its own" in cleared.log
    assert_fails(market.chain.deliver(key, pb.MsgUpdateWorker(relay="relay.example")), InvalidBlobUrl)
    assert market_snapshot(market.chain) == before
