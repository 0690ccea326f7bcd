"""MsgDeliverKey (issue 26 item 2): a private task's data key, sealed to each member and validator on chain.

A private task (its spec's `dataset.cipher`) starts only once every member and every bonded validator holds
its sealed key; each recipient reads its box from the chain and only its own key opens it; a requester that
withholds a key leaves the task to expire at its join deadline, every worker's collateral returned and nobody
slashed.
"""

from __future__ import annotations

import json

import nacl.signing
import pytest

from market_helpers import MARKET_PARAMS, SPEC, Market, assert_fails, submit_message
from trolly.chain.crypto import encode_address
from trolly.chain.errors import InvalidRequest
from trolly.chain.market.errors import InvalidSpec, NotKeyRecipient, NotRequester
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.data.encryption import DataKeyError, new_data_key, open_data_key, seal_data_key

DATA_KEY = new_data_key()


def private_spec(cipher: str = "xsalsa20poly1305") -> bytes:
    spec = json.loads(json.dumps(SPEC))
    spec["dataset"]["cipher"] = cipher
    return json.dumps(spec).encode()


@pytest.fixture
def market(make_chain):
    return Market(make_chain(accounts=4, validators=2, params={"market": MARKET_PARAMS}))


def deliver(market: Market, task_id: int, recipients, sender=None, sealed: bytes | None = None):
    sender = sender or market.requester
    txs = [market.chain.tx(sender, pb.MsgDeliverKey(task_id=task_id, recipient=r.address,
                                                    sealed_key=sealed or seal_data_key(DATA_KEY, r.pubkey)))
           for r in recipients]
    return market.chain.block(*txs)


def private_task(market: Market) -> tuple[int, list]:
    market.register()
    task_id = market.submit(workers=2, spec=private_spec())
    workers = market.workers[:2]
    market.join(task_id, workers)
    return task_id, workers


def sealed_for(market: Market, task_id: int, who) -> bytes:
    return bytes.fromhex(market.chain.query(f"/market/data_key/{task_id}/{encode_address(who.address)}")["sealed_key"])


def test_a_full_private_task_waits_for_every_members_and_validators_key(market):
    task_id, workers = private_task(market)
    assert market.task(task_id)["status"] == "open"
    output = deliver(market, task_id, workers)
    assert all(r.ok for r in output.tx_results) and market.task(task_id)["status"] == "open"
    output = deliver(market, task_id, market.chain.operators)
    assert all(r.ok for r in output.tx_results)
    assert market.task(task_id)["status"] == "running"


def test_each_recipient_opens_its_own_box_and_no_other(market):
    task_id, workers = private_task(market)
    deliver(market, task_id, workers + market.chain.operators)
    first, second = (nacl.signing.SigningKey(w.seed) for w in workers)
    assert open_data_key(sealed_for(market, task_id, workers[0]), first) == DATA_KEY
    assert open_data_key(sealed_for(market, task_id, market.chain.operators[0]),
                         nacl.signing.SigningKey(market.chain.operators[0].seed)) == DATA_KEY
    with pytest.raises(DataKeyError, match="sealed to another member"):
        open_data_key(sealed_for(market, task_id, workers[0]), second)


def test_a_withheld_key_lets_the_task_expire_with_collateral_returned_and_nobody_slashed(market):
    task_id, workers = private_task(market)
    balances = [market.chain.balance(w) for w in workers]
    deliver(market, task_id, workers[:1] + market.chain.operators)  # the second worker's key is withheld
    market.chain.advance(12)  # past join_blocks = 10
    view = market.task(task_id)
    assert view["status"] == "expired"
    assert [market.chain.balance(w) for w in workers] == [b + view["collateral"] for b in balances]
    with pytest.raises(Exception, match="no data key"):
        sealed_for(market, task_id, workers[0])  # an ended task's boxes are deleted


def test_only_the_requester_delivers_and_only_to_members_and_validators(market):
    task_id, workers = private_task(market)
    assert_fails(deliver(market, task_id, workers[:1], sender=workers[1]).tx_results[0], NotRequester)
    outsider = market.workers[2]  # registered, not a member
    assert_fails(deliver(market, task_id, [outsider]).tx_results[0], NotKeyRecipient)


def test_a_box_of_the_wrong_size_is_refused_before_any_state(market):
    task_id, workers = private_task(market)
    assert_fails(deliver(market, task_id, workers[:1], sealed=b"\x01" * 79).tx_results[0], InvalidRequest)


def test_a_public_task_has_no_key_and_starts_at_its_last_join(market):
    task_id = market.open_task(workers=2)
    assert_fails(deliver(market, task_id, market.workers[:1]).tx_results[0], InvalidRequest)


def test_a_spec_naming_another_cipher_is_refused(market):
    result = market.chain.deliver(market.requester, submit_message(spec=private_spec("aes-ecb")))
    assert_fails(result, InvalidSpec)
