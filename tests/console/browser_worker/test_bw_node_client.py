"""The browser worker's node client on a real `trolly-node dev`: a MsgRegisterWorker signed by the JavaScript
modules (keys.js, tx.js) and sent by node_client.js is included in a block and registers the worker, with the
fee the chain asks; the chain's refusal of a second registration reaches the caller as TxRejected with the
chain's log; a query the chain answers with an error is QueryFailed; a port where nothing listens is
NodeUnreachable."""

from __future__ import annotations

import hashlib

import pytest

from bw_chain_helpers import NODE, run_node_script
from dev_node import dev_node, send_included
from net_helpers import free_port
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto import bank_pb2
from trolly.chain.tx import decode_tx
from trolly.wallet.rpc import RpcClient

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian's nodejs package)")

FUNDS = 50_000_000
STAKE = 10_000_000


def test_a_worker_registered_from_javascript_is_included_and_registered(tmp_path):
    worker = PrivateKey(hashlib.sha256(b"browser worker on a dev node").digest())
    address = encode_address(worker.address)
    closed = f"http://127.0.0.1:{free_port()}"
    with dev_node(tmp_path / "node") as url:
        send_included(url, dev_key(0), bank_pb2.MsgSend(to=worker.address, amount=FUNDS))
        answer = run_node_script("send_register.mjs", {
            "url": url, "seed": worker.seed.hex(), "stake": str(STAKE), "relay": "http://127.0.0.1:26680",
            "closedUrl": closed})
        with RpcClient(url) as client:
            included = client.tx(answer["sent"]["hash"])
            auth = client.query_json("/params/auth")

    assert answer["address"] == address and answer["chainId"] == "trolly-dev" and answer["height"] >= 1
    assert answer["before"] == {"balance": str(FUNDS), "nonce": "0", "pubKey": None}
    sent = answer["sent"]
    assert sent["code"] == 0 and sent["height"] == included.height and sent["nonce"] == "0"
    assert decode_tx(included.tx).signer == worker.address
    assert int(sent["fee"]) == auth["min_fee"] + auth["fee_per_byte"] * len(included.tx)
    assert answer["after"] == {"balance": str(FUNDS - STAKE - int(sent["fee"])), "nonce": "1", "hasPubKey": True}
    record = answer["worker"]
    assert record["registered"] is True and record["stake"] == STAKE and record["relay"] == "http://127.0.0.1:26680"

    again = answer["again"]
    assert again["error"] == "TxRejected" and "already a registered worker" in again["log"], again
    assert answer["missing"]["error"] == "QueryFailed" and "/market/task/999999" in answer["missing"]["message"]
    unreachable = answer["unreachable"]
    assert unreachable["error"] == "NodeUnreachable" and unreachable["message"].startswith(f"node unreachable at {closed}")
