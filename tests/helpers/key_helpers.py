"""Helpers for private tasks in the market's state-machine tests: a private spec, its data key committed at
submission, boxes sealed with the sender's proof and reports made with the recipient's proof.

    market = key_market(make_chain)
    task_id, workers = running_private_task(market)     # full, so running: nobody holds a box yet
    deliver(market, task_id, workers)                   # the requester seals DATA_KEY to each
    report(market, task_id, workers[0])                 # the worker's MsgReportBadKey
"""

from __future__ import annotations

import json

from market_helpers import MARKET_PARAMS, SPEC, Market
from trolly.chain.crypto import encode_address
from trolly.chain.market.data_keys import box_context, data_key_hash
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.data.encryption import new_data_key
from trolly.wallet.box_proofs import prove_box_opening, seal_with_sender_proof

DATA_KEY = new_data_key()
KEY_DELIVERY_BLOCKS = 3
PRIVATE_ROUND_BLOCKS = 12
KEY_PARAMS = {**MARKET_PARAMS, "key_delivery_blocks": KEY_DELIVERY_BLOCKS}
COLLATERAL = 4_000_000
COMPENSATION = COLLATERAL * 1_000 // 10_000  # the missed-round penalty it spares a member


def private_spec(cipher: str = "xsalsa20poly1305", rounds: int | None = None) -> bytes:
    spec = json.loads(json.dumps(SPEC))
    spec["dataset"]["cipher"] = cipher
    if rounds is not None:
        spec["training"]["rounds"] = rounds
    return json.dumps(spec).encode()


def key_market(make_chain, validators: int = 2) -> Market:
    return Market(make_chain(accounts=5, validators=validators, params={"market": KEY_PARAMS}))


def submit_private(market: Market, key: bytes = DATA_KEY, **overrides) -> int:
    fields = dict(workers=2, spec=private_spec(), round_blocks=PRIVATE_ROUND_BLOCKS, collateral=COLLATERAL,
                  data_key_hash=data_key_hash(key))
    return market.submit(**{**fields, **overrides})


def running_private_task(market: Market, key: bytes = DATA_KEY, **overrides) -> tuple[int, list]:
    """Register the workers, submit a two-worker private task and have two of them join: it runs."""
    market.register()
    task_id = submit_private(market, key, **overrides)
    workers = market.workers[:2]
    market.join(task_id, workers)
    return task_id, workers


def deliver_message(task_id: int, recipient, key: bytes = DATA_KEY) -> pb.MsgDeliverKey:
    sealed, proof = seal_with_sender_proof(key, recipient.pubkey, box_context(task_id))
    return pb.MsgDeliverKey(task_id=task_id, recipient=recipient.address, sealed_key=sealed, sender_proof=proof)


def deliver(market: Market, task_id: int, recipients, key: bytes = DATA_KEY, sender=None):
    """One block in which the requester (or `sender`) delivers `key` to each recipient; its output."""
    sender = sender or market.requester
    return market.chain.block(*[market.chain.tx(sender, deliver_message(task_id, r, key)) for r in recipients])


def sealed_for(market: Market, task_id: int, who) -> bytes:
    return bytes.fromhex(market.chain.query(f"/market/data_key/{task_id}/{encode_address(who.address)}")["sealed_key"])


def report(market: Market, task_id: int, who):
    """`who`'s MsgReportBadKey on its box, with the proof of the box's shared secret; the tx result."""
    proof = prove_box_opening(who.seed, sealed_for(market, task_id, who))
    return market.chain.deliver(who, pb.MsgReportBadKey(task_id=task_id, proof=proof))


def sign_something(market: Market, *keys) -> None:
    """A transaction from each key, so the chain records its public key (a box is sealed to a recorded key)."""
    output = market.chain.block(*[market.chain.tx(k, pb.MsgCancelTask(task_id=10**6)) for k in keys])
    assert all(not r.ok for r in output.tx_results)  # refused (no such task), yet signed: the key is recorded


def new_key() -> bytes:
    return new_data_key()
