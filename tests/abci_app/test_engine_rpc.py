"""The solo engine's JSON-RPC and websocket, against a real app over a real socket: CometBFT v0.38's shapes and
encodings (64-bit integers as strings, bytes as base64, hashes as upper-case hex), tx_search queries,
websocket NewBlock/Tx events, and errors the way CometBFT reports them."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re

import aiohttp
import pytest

from engine_helpers import InProcessChain, result, rpc_get, rpc_post, rpc_post_raw, send_tx, wait_until
from trolly.abci_app.engine import hashing
from trolly.chain.accounts import Account, encode_account
from trolly.chain.crypto import encode_address, verify_signature
from trolly.chain.hd import dev_key
from trolly.chain.ics23_proofs import EXIST_OP_TYPE
from trolly.wallet.proofs import proof_holds

HEX_HASH = re.compile(r"^[0-9A-F]{64}$")
HEX_ADDRESS = re.compile(r"^[0-9A-F]{40}$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
DEV = dev_key(0)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    with InProcessChain(tmp_path_factory.mktemp("rpc") / "home") as running:
        yield running
    assert running.error is None


def account(chain, address: bytes) -> dict:
    answer = result(chain.url, "abci_query", {"path": f"/account/{encode_address(address)}"})
    return json.loads(base64.b64decode(answer["response"]["value"]))


def fresh_address(tag: str) -> bytes:
    return hashlib.sha256(tag.encode()).digest()[:20]


def signed_send(chain, to: bytes, amount: int = 1, offset: int = 0) -> bytes:
    return send_tx(DEV, chain.chain_id, account(chain, DEV.address)["nonce"] + offset, to, amount)


def commit(chain, tx: bytes) -> dict:
    answer = result(chain.url, "broadcast_tx_commit", {"tx": base64.b64encode(tx).decode()})
    assert answer["check_tx"]["code"] == 0 and answer["tx_result"]["code"] == 0, answer
    return answer


def assert_exec_tx_result_shape(value: dict) -> None:
    assert set(value) == {"code", "data", "log", "info", "gas_wanted", "gas_used", "events", "codespace"}
    assert isinstance(value["code"], int) and isinstance(value["gas_wanted"], str) and isinstance(value["gas_used"], str)
    for event in value["events"]:
        assert set(event) == {"type", "attributes"}
        for attribute in event["attributes"]:
            assert set(attribute) == {"key", "value", "index"} and isinstance(attribute["index"], bool)


# ------------------------------------------------------------------------------------------ info methods


def test_health_is_empty_over_get_and_post(chain):
    assert rpc_get(chain.url, "health") == (200, {"jsonrpc": "2.0", "id": -1, "result": {}})
    assert rpc_post(chain.url, "health", request_id="abc") == {"jsonrpc": "2.0", "id": "abc", "result": {}}


def test_status_shape(chain):
    status = result(chain.url, "status")
    node_info, sync_info, validator = status["node_info"], status["sync_info"], status["validator_info"]
    assert node_info["network"] == chain.chain_id and node_info["version"].startswith("0.38")
    assert set(node_info["protocol_version"]) == {"p2p", "block", "app"}
    assert re.fullmatch(r"[0-9a-f]{40}", node_info["id"])
    assert node_info["other"]["tx_index"] == "on"
    assert HEX_HASH.match(sync_info["latest_block_hash"]) and HEX_HASH.match(sync_info["latest_app_hash"])
    assert int(sync_info["latest_block_height"]) >= 1 and isinstance(sync_info["latest_block_height"], str)
    assert RFC3339.match(sync_info["latest_block_time"]) and sync_info["earliest_block_height"] == "1"
    assert sync_info["catching_up"] is False
    assert HEX_ADDRESS.match(validator["address"]) and validator["voting_power"] == "10"
    assert validator["pub_key"]["type"] == "tendermint/PubKeyEd25519"


def test_status_app_hashes_are_the_headers_as_in_cometbft(chain):
    status = result(chain.url, "status")["sync_info"]
    latest = result(chain.url, "block", {"height": status["latest_block_height"]})["block"]["header"]
    assert status["latest_app_hash"] == latest["app_hash"]  # CometBFT's status.go reads the latest header
    assert status["earliest_app_hash"] == result(chain.url, "block", {"height": "1"})["block"]["header"]["app_hash"]


def test_genesis_and_validators(chain):
    genesis = result(chain.url, "genesis")["genesis"]
    assert genesis == json.loads(chain.paths.genesis.read_text())
    validators = result(chain.url, "validators")
    assert set(validators) == {"block_height", "validators", "count", "total"}
    assert validators["count"] == "1" and validators["total"] == "1"
    [validator] = validators["validators"]
    assert validator["pub_key"] == genesis["validators"][0]["pub_key"]
    assert validator["address"] == genesis["validators"][0]["address"]
    assert validator["voting_power"] == "10" and validator["proposer_priority"] == "0"
    assert result(chain.url, "validators", {"height": "1"})["block_height"] == "1"


def test_abci_info(chain):
    response = result(chain.url, "abci_info")["response"]
    assert int(response["last_block_height"]) >= 1 and isinstance(response["last_block_height"], str)
    assert len(base64.b64decode(response["last_block_app_hash"])) == 32
    assert response["app_version"] == "1"


def test_unconfirmed_txs_shape(chain):
    answer = result(chain.url, "unconfirmed_txs", {"limit": "5"})
    assert set(answer) == {"n_txs", "total", "total_bytes", "txs"} and isinstance(answer["txs"], list)
    assert all(isinstance(answer[key], str) for key in ("n_txs", "total", "total_bytes"))


def test_header_and_consensus_params(chain):
    chain.wait_for_height(2)
    assert result(chain.url, "header", {"height": "2"})["header"] == result(chain.url, "block", {"height": "2"})["block"]["header"]
    params = result(chain.url, "consensus_params", {"height": "2"})
    assert params["block_height"] == "2"
    assert params["consensus_params"] == json.loads(chain.paths.genesis.read_text())["consensus_params"]


def test_every_method_answers_without_a_server_bug(chain):
    from trolly.abci_app.engine.rpc_methods import METHODS

    for method in METHODS:
        answer = rpc_post(chain.url, method, {})
        assert "result" in answer or answer["error"]["code"] in (-32602, -32603), (method, answer)
        if "error" in answer:  # a failure the client caused, worded for the client, never a Python exception
            assert not re.match(r"^[A-Z]\w+(Error|Exception): ", answer["error"]["data"]), (method, answer)


def test_net_info_shape(chain):
    assert result(chain.url, "net_info") == {"listening": False, "listeners": [], "n_peers": "0", "peers": []}


def test_num_unconfirmed_txs_shape(chain):
    answer = result(chain.url, "num_unconfirmed_txs")
    assert set(answer) == {"n_txs", "total", "total_bytes", "txs"}
    assert all(isinstance(answer[key], str) for key in ("n_txs", "total", "total_bytes"))


# ------------------------------------------------------------------------------------------------ blocks


def test_block_shape_and_hash_chain(chain):
    chain.wait_for_height(3)
    answer = result(chain.url, "block", {"height": "3"})
    block, block_id = answer["block"], answer["block_id"]
    assert set(block) == {"header", "data", "evidence", "last_commit"}
    header = block["header"]
    assert header["height"] == "3" and header["chain_id"] == chain.chain_id and RFC3339.match(header["time"])
    assert header["version"] == {"block": "11", "app": "1"}
    for field in ("last_commit_hash", "data_hash", "validators_hash", "next_validators_hash", "consensus_hash",
                  "app_hash", "last_results_hash", "evidence_hash"):
        assert HEX_HASH.match(header[field]), field
    assert header["consensus_hash"] == "048091BC7DDC283F77BFBF91D73C44DA58C3DF8A9CBC867405D8B7F3DAADA22F"
    assert block_id["hash"] == hashing.header_hash(header).hex().upper()
    assert block_id["parts"]["total"] == 1 and HEX_HASH.match(block_id["parts"]["hash"])
    previous = result(chain.url, "block", {"height": "2"})
    assert header["last_block_id"] == previous["block_id"]
    commit_info = block["last_commit"]
    assert commit_info["height"] == "2" and commit_info["block_id"] == previous["block_id"]
    [signature] = commit_info["signatures"]
    assert signature["block_id_flag"] == 2 and signature["validator_address"] == header["proposer_address"]
    pubkey = base64.b64decode(result(chain.url, "validators")["validators"][0]["pub_key"]["value"])
    signed = hashing.vote_sign_bytes(chain.chain_id, 2, bytes.fromhex(previous["block_id"]["hash"]))
    assert verify_signature(pubkey, signed, base64.b64decode(signature["signature"]))
    assert block["evidence"] == {"evidence": []}
    first = result(chain.url, "block", {"height": "1"})["block"]
    assert first["header"]["last_block_id"] == {"hash": "", "parts": {"total": 0, "hash": ""}}
    assert first["last_commit"]["signatures"] == []


def test_block_by_hash(chain):
    chain.wait_for_height(2)
    by_height = result(chain.url, "block", {"height": "2"})
    by_hash = result(chain.url, "block_by_hash", {"hash": base64.b64encode(bytes.fromhex(by_height["block_id"]["hash"])).decode()})
    assert by_hash == by_height
    missing = result(chain.url, "block_by_hash", {"hash": base64.b64encode(b"\x00" * 32).decode()})
    assert missing["block"] is None


def test_header_by_hash_block_search_and_genesis_chunked(chain):
    chain.wait_for_height(3)
    block_id = result(chain.url, "block", {"height": "3"})["block_id"]["hash"]
    by_hash = result(chain.url, "header_by_hash", {"hash": base64.b64encode(bytes.fromhex(block_id)).decode()})
    assert by_hash["header"]["height"] == "3"
    found = result(chain.url, "block_search", {"query": "block.height >= 2 AND block.height <= 3"})
    assert found["total_count"] == "2" and [b["block"]["header"]["height"] for b in found["blocks"]] == ["2", "3"]
    chunk = result(chain.url, "genesis_chunked", {"chunk": "0"})
    assert chunk["total"] == "1" and json.loads(base64.b64decode(chunk["data"])) == json.loads(chain.paths.genesis.read_text())


def test_latest_block_by_default_and_over_get(chain):
    status, answer = rpc_get(chain.url, "block")
    assert status == 200 and int(answer["result"]["block"]["header"]["height"]) >= 1
    chain.wait_for_height(2)  # the module's chain may still be at height 1 on a busy machine
    status, answer = rpc_get(chain.url, "block", height="2")
    assert status == 200 and answer["result"]["block"]["header"]["height"] == "2"


def test_blockchain_and_commit(chain):
    chain.wait_for_height(4)
    metas = result(chain.url, "blockchain", {"minHeight": "2", "maxHeight": "4"})
    assert [m["header"]["height"] for m in metas["block_metas"]] == ["4", "3", "2"]
    assert int(metas["last_height"]) >= 4 and metas["block_metas"][0]["num_txs"].isdigit()
    signed = result(chain.url, "commit", {"height": "3"})
    assert signed["canonical"] is True
    assert signed["signed_header"]["commit"] == result(chain.url, "block", {"height": "4"})["block"]["last_commit"]
    latest = result(chain.url, "commit")
    assert latest["signed_header"]["commit"]["height"] == latest["signed_header"]["header"]["height"]


def test_block_results_of_an_empty_block(chain):
    chain.wait_for_height(2)
    answer = result(chain.url, "block_results", {"height": "1"})
    assert set(answer) == {"height", "txs_results", "finalize_block_events", "validator_updates",
                           "consensus_param_updates", "app_hash"}
    assert answer["height"] == "1"
    next_header = result(chain.url, "block", {"height": "2"})["block"]["header"]
    assert base64.b64decode(answer["app_hash"]).hex().upper() == next_header["app_hash"]


# ---------------------------------------------------------------------------------------------------- txs


def test_broadcast_sync_then_tx_and_block_results(chain):
    recipient = fresh_address("sync")
    tx = signed_send(chain, recipient, 7)
    answer = result(chain.url, "broadcast_tx_sync", {"tx": base64.b64encode(tx).decode()})
    assert set(answer) == {"code", "data", "log", "codespace", "hash"}
    assert answer["code"] == 0 and answer["hash"] == hashlib.sha256(tx).hexdigest().upper()
    found = wait_until(lambda: "result" in (r := rpc_post(chain.url, "tx", {"hash": base64.b64encode(hashlib.sha256(tx).digest()).decode()})) and r["result"], what="tx inclusion")
    assert set(found) == {"hash", "height", "index", "tx_result", "tx"}
    assert found["hash"] == answer["hash"] and base64.b64decode(found["tx"]) == tx and isinstance(found["index"], int)
    assert_exec_tx_result_shape(found["tx_result"])
    assert found["tx_result"]["code"] == 0
    transfer = next(e for e in found["tx_result"]["events"] if e["type"] == "transfer")
    assert {"key": "recipient", "value": encode_address(recipient), "index": True} in transfer["attributes"]
    assert account(chain, recipient)["balance"] == 7
    results = result(chain.url, "block_results", {"height": found["height"]})
    assert results["txs_results"][found["index"]] == found["tx_result"]
    block = result(chain.url, "block", {"height": found["height"]})["block"]
    assert base64.b64encode(tx).decode() in block["data"]["txs"]
    assert block["header"]["data_hash"] == hashing.data_hash([base64.b64decode(t) for t in block["data"]["txs"]]).hex().upper()
    status, by_get = rpc_get(chain.url, "tx", hash="0x" + answer["hash"])
    assert status == 200 and by_get["result"] == found


def test_tx_proof_verifies_against_data_hash(chain):
    tx = signed_send(chain, fresh_address("proof"))
    included = commit(chain, tx)
    proven = result(chain.url, "tx", {"hash": base64.b64encode(hashlib.sha256(tx).digest()).decode(), "prove": True})
    proof = proven["proof"]
    header = result(chain.url, "block", {"height": included["height"]})["block"]["header"]
    assert proof["root_hash"] == header["data_hash"] and base64.b64decode(proof["data"]) == tx
    leaf = base64.b64decode(proof["proof"]["leaf_hash"])
    assert leaf == hashing.leaf_hash(hashlib.sha256(tx).digest())
    root = hashing.root_from_aunts(leaf, int(proof["proof"]["index"]), int(proof["proof"]["total"]),
                                   [base64.b64decode(a) for a in proof["proof"]["aunts"]])
    assert root.hex().upper() == header["data_hash"]


def test_broadcast_tx_commit_returns_check_and_exec_results(chain):
    tx = signed_send(chain, fresh_address("commit"), 3)
    answer = commit(chain, tx)
    assert set(answer) == {"check_tx", "tx_result", "hash", "height"}
    assert_exec_tx_result_shape(answer["check_tx"])
    assert_exec_tx_result_shape(answer["tx_result"])
    assert int(answer["height"]) >= 1 and answer["hash"] == hashlib.sha256(tx).hexdigest().upper()
    assert result(chain.url, "tx", {"hash": base64.b64encode(hashlib.sha256(tx).digest()).decode()})["height"] == answer["height"]


def test_broadcast_tx_commit_of_a_failing_tx_reports_check_tx(chain):
    tx = signed_send(chain, fresh_address("x"), 1, offset=5)  # skipped nonce
    answer = result(chain.url, "broadcast_tx_commit", {"tx": base64.b64encode(tx).decode()})
    assert answer["check_tx"]["code"] != 0 and answer["check_tx"]["log"]
    assert answer["height"] == "0" and answer["tx_result"]["code"] == 0


def test_broadcast_async_gets_included(chain):
    recipient = fresh_address("async")
    tx = signed_send(chain, recipient, 2)
    answer = result(chain.url, "broadcast_tx_async", {"tx": base64.b64encode(tx).decode()})
    assert answer["code"] == 0 and answer["hash"] == hashlib.sha256(tx).hexdigest().upper()
    wait_until(lambda: account(chain, recipient)["balance"] == 2, what="async tx inclusion")


def test_invalid_txs_are_refused_with_code_and_log_and_never_included(chain):
    good = signed_send(chain, fresh_address("bad"), 1)
    tampered = bytearray(good)
    tampered[-1] ^= 1  # breaks the signature
    for tx in (bytes(tampered), b"\x00garbage", signed_send(chain, fresh_address("bad"), 10**18)):
        answer = result(chain.url, "broadcast_tx_sync", {"tx": base64.b64encode(tx).decode()})
        assert answer["code"] != 0 and answer["log"], answer
    assert result(chain.url, "num_unconfirmed_txs")["n_txs"] == "0"


def test_duplicate_broadcast_is_an_error(chain):
    tx = signed_send(chain, fresh_address("dup"))
    encoded = base64.b64encode(tx).decode()
    assert result(chain.url, "broadcast_tx_sync", {"tx": encoded})["code"] == 0
    answer = rpc_post(chain.url, "broadcast_tx_sync", {"tx": encoded})
    assert answer["error"]["code"] == -32603 and "already exists in cache" in answer["error"]["data"]
    wait_until(lambda: result(chain.url, "num_unconfirmed_txs")["n_txs"] == "0", what="mempool drain")


def test_check_tx_does_not_enter_the_mempool(chain):
    tx = signed_send(chain, fresh_address("check"))
    answer = result(chain.url, "check_tx", {"tx": base64.b64encode(tx).decode()})
    assert_exec_tx_result_shape(answer)
    assert answer["code"] == 0
    assert result(chain.url, "num_unconfirmed_txs")["n_txs"] == "0"
    # As in CometBFT, check_tx runs the app's CheckTx on the mempool connection, so the app's mempool view
    # counts the nonce until the next Commit resets it; after that the same tx is admitted normally.
    chain.wait_for_height(chain.height() + 1)
    assert result(chain.url, "broadcast_tx_sync", {"tx": base64.b64encode(tx).decode()})["code"] == 0


def test_abci_query_with_proof_verifies_against_next_header(chain):
    answer = result(chain.url, "abci_query", {"path": f"/account/{encode_address(DEV.address)}", "prove": True})
    response = answer["response"]
    assert set(response) == {"code", "log", "info", "index", "key", "value", "proofOps", "height", "codespace"}
    assert response["code"] == 0 and isinstance(response["height"], str) and response["index"] == "0"
    [op] = response["proofOps"]["ops"]
    assert op["type"] == EXIST_OP_TYPE
    height = int(response["height"])
    chain.wait_for_height(height + 1)
    app_hash = bytes.fromhex(result(chain.url, "block", {"height": str(height + 1)})["block"]["header"]["app_hash"])
    value = json.loads(base64.b64decode(response["value"]))
    assert value["pub_key"] == base64.b64encode(DEV.pubkey).decode()  # the dev genesis records the operator's key
    raw = encode_account(Account(value["balance"], value["nonce"], DEV.pubkey))
    key, data = base64.b64decode(op["key"]), base64.b64decode(op["data"])
    assert proof_holds(app_hash, key, raw, op["type"], data)
    assert not proof_holds(app_hash, key, encode_account(Account(1, 0)), op["type"], data)


def test_abci_query_over_get_with_quoted_path_and_unknown_path(chain):
    status, answer = rpc_get(chain.url, "abci_query", path=f'"/account/{encode_address(DEV.address)}"')
    assert status == 200 and answer["result"]["response"]["code"] == 0
    answer = result(chain.url, "abci_query", {"path": "/no/such/path"})
    assert answer["response"]["code"] != 0 and answer["response"]["log"] and answer["response"]["value"] is None


# -------------------------------------------------------------------------------------------- tx_search


def test_tx_search_by_height_hash_and_attribute(chain):
    recipient = fresh_address("search")
    first = commit(chain, signed_send(chain, recipient, 5))
    second = commit(chain, signed_send(chain, recipient, 6))
    address = encode_address(recipient)

    found = result(chain.url, "tx_search", {"query": f"transfer.recipient='{address}'"})
    assert found["total_count"] == "2" and [t["hash"] for t in found["txs"]] == [first["hash"], second["hash"]]
    descending = result(chain.url, "tx_search", {"query": f"transfer.recipient='{address}'", "order_by": "desc"})
    assert [t["hash"] for t in descending["txs"]] == [second["hash"], first["hash"]]
    paged = result(chain.url, "tx_search", {"query": f"transfer.recipient='{address}'", "per_page": "1", "page": "2"})
    assert paged["total_count"] == "2" and [t["hash"] for t in paged["txs"]] == [second["hash"]]

    both = result(chain.url, "tx_search", {"query": f"transfer.recipient='{address}' AND transfer.amount='6'"})
    assert [t["hash"] for t in both["txs"]] == [second["hash"]]
    by_hash = result(chain.url, "tx_search", {"query": f"tx.hash='{first['hash']}'"})
    assert [t["hash"] for t in by_hash["txs"]] == [first["hash"]]
    by_height = result(chain.url, "tx_search", {"query": f"tx.height={second['height']}"})
    assert second["hash"] in [t["hash"] for t in by_height["txs"]]
    assert all(t["height"] == second["height"] for t in by_height["txs"])
    none = result(chain.url, "tx_search", {"query": f"transfer.recipient='{address}' AND transfer.amount='999'"})
    assert none == {"txs": [], "total_count": "0"}
    status, over_get = rpc_get(chain.url, "tx_search", query=f"\"transfer.recipient='{address}'\"")
    assert status == 200 and over_get["result"]["total_count"] == "2"


def test_tx_search_errors(chain):
    answer = rpc_post(chain.url, "tx_search", {"query": "transfer.recipient ="})
    assert answer["error"]["code"] == -32603 and "parse" in answer["error"]["data"]
    answer = rpc_post(chain.url, "tx_search", {"query": "tx.height=1", "page": "9"})
    assert "page should be within" in answer["error"]["data"]


# ---------------------------------------------------------------------------------------------- errors


def test_errors_are_cometbft_json_rpc_errors(chain):
    assert rpc_post(chain.url, "no_such_method")["error"] == {"code": -32601, "message": "Method not found", "data": ""}
    height = chain.height()
    answer = rpc_post(chain.url, "block", {"height": str(height + 1000)})
    assert answer["error"]["code"] == -32603 and answer["error"]["message"] == "Internal error"
    assert "must be less than or equal to the current blockchain height" in answer["error"]["data"]
    answer = rpc_post(chain.url, "block", {"height": "-1"})
    assert "height must be greater than 0" in answer["error"]["data"]
    answer = rpc_post(chain.url, "block", {"height": "ten"})
    assert answer["error"]["code"] == -32602 and answer["error"]["message"] == "Invalid params"
    missing = rpc_post(chain.url, "tx", {"hash": base64.b64encode(b"\x01" * 32).decode()})
    assert missing["error"]["data"] == f"tx ({'01' * 32}) not found"
    status, over_get = rpc_get(chain.url, "block", height=str(height + 1000))
    assert status == 500 and over_get["id"] == -1 and over_get["error"]["code"] == -32603
    assert rpc_post_raw(chain.url, b"{not json")["error"]["code"] == -32700


def test_batch_requests_answer_each_in_order(chain):
    body = json.dumps([
        {"jsonrpc": "2.0", "id": 1, "method": "health", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "nope", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "block", "params": ["1"]},
    ]).encode()
    answers = rpc_post_raw(chain.url, body)
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert answers[0]["result"] == {} and answers[1]["error"]["code"] == -32601
    assert answers[2]["result"]["block"]["header"]["height"] == "1"


# ------------------------------------------------------------------------------------------- websocket


def test_websocket_new_block_and_tx_events(chain):
    recipient = fresh_address("websocket")
    tx = signed_send(chain, recipient, 4)

    async def scenario():
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(chain.url + "/websocket") as socket:
                await socket.send_json({"jsonrpc": "2.0", "id": 1, "method": "subscribe", "params": {"query": "tm.event='NewBlock'"}})
                assert await socket.receive_json(timeout=10) == {"jsonrpc": "2.0", "id": 1, "result": {}}
                event = await socket.receive_json(timeout=10)
                assert event["id"] == 1 and event["result"]["query"] == "tm.event='NewBlock'"
                data = event["result"]["data"]
                assert data["type"] == "tendermint/event/NewBlock"
                assert set(data["value"]) == {"block", "block_id", "result_finalize_block"}
                assert data["value"]["block_id"]["hash"] == hashing.header_hash(data["value"]["block"]["header"]).hex().upper()
                assert event["result"]["events"]["tm.event"] == ["NewBlock"]
                await socket.send_json({"jsonrpc": "2.0", "id": 2, "method": "unsubscribe", "params": {"query": "tm.event='NewBlock'"}})

                query = f"tm.event='Tx' AND transfer.recipient='{encode_address(recipient)}'"
                await socket.send_json({"jsonrpc": "2.0", "id": 3, "method": "subscribe", "params": {"query": query}})
                await socket.send_json({"jsonrpc": "2.0", "id": 4, "method": "subscribe", "params": {"query": query}})
                await socket.send_json({"jsonrpc": "2.0", "id": 5, "method": "broadcast_tx_sync", "params": {"tx": base64.b64encode(tx).decode()}})
                seen: dict = {}
                while 5 not in seen or "event" not in seen:
                    message = await socket.receive_json(timeout=15)
                    if message.get("id") == 3 and "query" in message.get("result", {}):
                        seen["event"] = message
                    else:
                        seen.setdefault(message["id"], message)
                assert seen[2]["result"] == {} and seen[3]["result"] == {}
                assert seen[4]["error"]["data"] == "already subscribed"
                assert seen[5]["result"]["code"] == 0
                tx_event = seen["event"]["result"]
                assert tx_event["data"]["type"] == "tendermint/event/Tx"
                inner = tx_event["data"]["value"]["TxResult"]
                assert base64.b64decode(inner["tx"]) == tx and inner["result"]["code"] == 0
                assert int(inner["height"]) >= 1
                assert tx_event["events"]["tx.hash"] == [hashlib.sha256(tx).hexdigest().upper()]
                assert tx_event["events"]["transfer.recipient"] == [encode_address(recipient)]

    asyncio.run(scenario())


def test_websocket_header_and_block_events(chain):
    async def scenario():
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(chain.url + "/websocket") as socket:
                for request_id, kind in ((1, "NewBlockHeader"), (2, "NewBlockEvents")):
                    await socket.send_json({"jsonrpc": "2.0", "id": request_id, "method": "subscribe",
                                            "params": [f"tm.event='{kind}'"]})
                seen = {}
                while len(seen) < 2:
                    message = await socket.receive_json(timeout=10)
                    if "query" in message.get("result", {}):
                        seen[message["result"]["data"]["type"]] = message["result"]["data"]["value"]
                header = seen["tendermint/event/NewBlockHeader"]["header"]
                assert int(header["height"]) >= 1 and HEX_HASH.match(header["app_hash"])
                block_events = seen["tendermint/event/NewBlockEvents"]
                assert set(block_events) == {"height", "events", "num_txs"} and block_events["num_txs"].isdigit()

    asyncio.run(scenario())


def test_websocket_rejects_bad_subscriptions(chain):
    async def scenario():
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(chain.url + "/websocket") as socket:
                await socket.send_json({"jsonrpc": "2.0", "id": 1, "method": "subscribe", "params": {"query": "tm.event="}})
                assert "parse" in (await socket.receive_json(timeout=10))["error"]["data"]
                await socket.send_json({"jsonrpc": "2.0", "id": 2, "method": "unsubscribe", "params": {"query": "tm.event='Tx'"}})
                assert (await socket.receive_json(timeout=10))["error"]["data"] == "subscription not found"
                await socket.send_json({"jsonrpc": "2.0", "id": 3, "method": "health", "params": {}})
                assert (await socket.receive_json(timeout=10)) == {"jsonrpc": "2.0", "id": 3, "result": {}}

    asyncio.run(scenario())


# ------------------------------------------------------------------------------------ validator set changes


@pytest.mark.slow
def test_validator_updates_take_effect_two_heights_later(tmp_path):
    from trolly.chain.crypto import PrivateKey
    from trolly.chain.proto.staking_pb2 import MsgCreateValidator
    from engine_helpers import paying_tx

    with InProcessChain(tmp_path / "home") as own_chain:
        operator = dev_key(1)
        commit(own_chain, send_tx(DEV, own_chain.chain_id, 0, operator.address, 50_000_000))
        consensus_key = PrivateKey(b"\x05" * 32)
        create = paying_tx(operator, own_chain.chain_id, 0,
                           [MsgCreateValidator(consensus_pubkey=consensus_key.pubkey, stake=20_000_000, moniker="second")])
        height = int(commit(own_chain, create)["height"])
        own_chain.wait_for_height(height + 3)

        [update] = result(own_chain.url, "block_results", {"height": str(height)})["validator_updates"]
        assert update == {"pub_key": {"Sum": {"type": "tendermint.crypto.PublicKey_Ed25519",
                                              "value": {"ed25519": base64.b64encode(consensus_key.pubkey).decode()}}},
                          "power": "20"}
        assert result(own_chain.url, "validators", {"height": str(height + 1)})["total"] == "1"
        after = result(own_chain.url, "validators", {"height": str(height + 2)})
        assert after["total"] == "2"
        assert [v["voting_power"] for v in after["validators"]] == ["20", "10"]  # CometBFT order: power first
        new_set = [(base64.b64decode(v["pub_key"]["value"]), int(v["voting_power"])) for v in after["validators"]]
        headers = {h: result(own_chain.url, "block", {"height": str(h)})["block"] for h in (height + 1, height + 2, height + 3)}
        assert headers[height + 1]["header"]["next_validators_hash"] == hashing.validators_hash(new_set).hex().upper()
        assert headers[height + 2]["header"]["validators_hash"] == hashing.validators_hash(new_set).hex().upper()
        assert headers[height + 1]["header"]["validators_hash"] != headers[height + 2]["header"]["validators_hash"]
        flags = [s["block_id_flag"] for s in headers[height + 3]["last_commit"]["signatures"]]
        assert flags == [1, 2]  # the new validator (absent: the solo engine cannot sign for it), then ours
    assert own_chain.error is None


def test_a_plain_init_home_makes_blocks_with_its_self_operated_validator(tmp_path):
    with InProcessChain(tmp_path / "home", dev=False) as plain:
        plain.wait_for_height(2)
        [validator] = result(plain.url, "validators")["validators"]
        assert validator["voting_power"] == "10"
        status = result(plain.url, "status")
        assert status["validator_info"]["address"] == validator["address"]
    assert plain.error is None


def test_no_block_before_a_future_genesis_time(tmp_path):
    import time as clock

    from trolly.abci_app.home import format_time, parse_time

    waiting = InProcessChain(tmp_path / "home")
    genesis = json.loads(waiting.paths.genesis.read_text())
    genesis["genesis_time"] = format_time(clock.time_ns() + 1_500_000_000)
    waiting.paths.genesis.write_text(json.dumps(genesis))
    with waiting:
        first = result(waiting.url, "block", {"height": "1"})["block"]["header"]
        assert parse_time(first["time"]) >= parse_time(genesis["genesis_time"])
    assert waiting.error is None
