"""Solo engine parts in isolation: hashes, the query language, the mempool, the block store, validator sets,
and CometBFT's RPC argument decoding."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trolly.abci_app.engine import hashing
from trolly.abci_app.engine.blockstore import BlockStore, StoredBlock
from trolly.abci_app.engine.chainstate import (
    apply_validator_updates,
    consensus_address,
    consensus_hash,
    init_chain_request,
    merge_params,
    params_to_proto,
)
from trolly.abci_app.engine.mempool import Mempool, MempoolError
from trolly.abci_app.engine.event_query import QueryError, parse_query
from trolly.abci_app.engine.rpc_server import InvalidParams, _json_value, _uri_value
from trolly.abci_app import home as homelib
from trolly.abci_app.proto.tendermint.abci import types_pb2
from trolly.abci_app.proto.tendermint.crypto import keys_pb2

# ----------------------------------------------------------------------------------------------- hashing


def test_empty_merkle_root_is_sha256_of_nothing():
    assert hashing.merkle_root([]).hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert hashing.merkle_root([b""]).hex() == hashlib.sha256(b"\x00").hexdigest()


def test_merkle_root_splits_at_largest_power_of_two():
    items = [bytes([i]) for i in range(5)]
    left = hashing.inner_hash(
        hashing.inner_hash(hashing.leaf_hash(items[0]), hashing.leaf_hash(items[1])),
        hashing.inner_hash(hashing.leaf_hash(items[2]), hashing.leaf_hash(items[3])),
    )
    assert hashing.merkle_root(items) == hashing.inner_hash(left, hashing.leaf_hash(items[4]))


@given(st.lists(st.binary(max_size=8), min_size=1, max_size=40), st.data())
def test_every_leaf_proves_against_the_root(items, data):
    index = data.draw(st.integers(0, len(items) - 1))
    aunts = hashing.merkle_aunts(items, index)
    assert hashing.root_from_aunts(hashing.leaf_hash(items[index]), index, len(items), aunts) == hashing.merkle_root(items)


def test_consensus_hash_of_default_params_matches_cometbft():
    # The value every CometBFT chain with default block params shows as header.consensus_hash.
    assert consensus_hash(homelib.default_consensus_params()).hex().upper() == (
        "048091BC7DDC283F77BFBF91D73C44DA58C3DF8A9CBC867405D8B7F3DAADA22F"
    )


def test_header_hash_changes_with_any_field():
    header = {"chain_id": "c", "height": "1", "time": "2024-01-01T00:00:00Z", "app_hash": ""}
    base = hashing.header_hash(header)
    assert base == hashing.header_hash(dict(reversed(list(header.items()))))  # key order does not matter
    for key in header:
        assert hashing.header_hash({**header, key: header[key] + "x"}) != base


def test_last_results_hash_ignores_non_deterministic_fields():
    plain = types_pb2.ExecTxResult(code=3, data=b"d", gas_wanted=1, gas_used=1)
    chatty = types_pb2.ExecTxResult(code=3, data=b"d", gas_wanted=1, gas_used=1, log="anything", codespace="x")
    assert hashing.last_results_hash([plain]) == hashing.last_results_hash([chatty])
    assert hashing.last_results_hash([plain]) != hashing.last_results_hash([types_pb2.ExecTxResult(code=4)])


# ------------------------------------------------------------------------------------------ validators


def _update(pubkey: bytes, power: int) -> types_pb2.ValidatorUpdate:
    return types_pb2.ValidatorUpdate(pub_key=keys_pb2.PublicKey(ed25519=pubkey), power=power)


def test_validator_updates_add_change_and_remove_in_cometbft_order():
    a, b, c = (bytes([i]) * 32 for i in (1, 2, 3))
    current = apply_validator_updates([], [_update(a, 10), _update(b, 10)])
    assert [p for p, _ in current] == sorted([a, b], key=consensus_address)  # equal power: by address
    current = apply_validator_updates(current, [_update(c, 50), _update(a, 0), _update(b, 5)])
    assert current == [(c, 50), (b, 5)]


def test_validator_update_with_bad_key_is_refused():
    with pytest.raises(Exception, match="ed25519"):
        apply_validator_updates([], [_update(b"short", 1)])


def test_init_chain_request_carries_genesis(tmp_path):
    paths = homelib.init_home(tmp_path / "h", "vector-chain", dev=True)
    genesis = homelib.load_home(paths.root).genesis
    request = init_chain_request(genesis)
    assert request.chain_id == "vector-chain" and request.initial_height == 1
    assert request.consensus_params.block.max_bytes == 22020096 and request.consensus_params.block.max_gas == -1
    assert request.consensus_params.evidence.max_age_duration.seconds == 172800
    assert [v.power for v in request.validators] == [10]
    assert request.time.seconds * 10**9 + request.time.nanos == homelib.parse_time(genesis["genesis_time"])
    assert __import__("json").loads(request.app_state_bytes) == genesis["app_state"]


def test_app_state_bytes_are_the_genesis_file_s_own(tmp_path):
    from trolly.abci_app.engine.chainstate import raw_app_state

    text = '{"chain_id": "c", "nested": {"app_state": 1}, "app_state" :  {"b": [1, 2],\n "a": "x"} , "z": null}'
    assert raw_app_state(text) == b'{"b": [1, 2],\n "a": "x"}'
    assert raw_app_state('{"chain_id": "c"}') is None
    paths = homelib.init_home(tmp_path / "h", "raw-chain", dev=True)
    text = paths.genesis.read_text()
    request = init_chain_request(__import__("json").loads(text), text)
    assert request.app_state_bytes.decode() in text  # verbatim, indentation included
    assert __import__("json").loads(request.app_state_bytes) == __import__("json").loads(text)["app_state"]


def test_params_round_trip_through_protobuf():
    params = homelib.default_consensus_params()
    assert merge_params({}, params_to_proto(params)) == {**params, "version": {"app": "0"}}


# ---------------------------------------------------------------------------------------------- query


def test_query_parses_and_matches_cometbft_semantics():
    query = parse_query("tm.event='Tx' AND transfer.amount >= 100 AND transfer.recipient = 'trolly1x'")
    events = {"tm.event": ["Tx"], "transfer.amount": ["5", "150"], "transfer.recipient": ["trolly1x"]}
    assert query.matches(events)  # any one value satisfying a condition is enough
    assert not query.matches({**events, "transfer.amount": ["5"]})
    assert not query.matches({"tm.event": ["Tx"], "transfer.amount": ["150"]})  # missing key
    assert parse_query("message.action EXISTS").matches({"message.action": ["/x"]})
    assert parse_query("tx.memo CONTAINS 'ell'").matches({"tx.memo": ["hello"]})
    assert query.equality("transfer.recipient") == "trolly1x" and query.equality("tx.height") is None


@pytest.mark.parametrize("text", ["", "tm.event", "tm.event =", "a = 'x' b = 'y'", "a = 'unterminated", "AND a = 1"])
def test_malformed_queries_are_refused(text):
    with pytest.raises(QueryError):
        parse_query(text)


# -------------------------------------------------------------------------------------------- mempool


class FakeCheck:
    """Stands in for the app's CheckTx: rejects txs listed in `invalid`."""

    def __init__(self):
        self.invalid: set[bytes] = set()
        self.calls: list[bytes] = []

    async def __call__(self, tx: bytes):
        self.calls.append(tx)
        return types_pb2.ResponseCheckTx(code=1 if tx in self.invalid else 0)

    async def all(self, txs: list[bytes]):
        return [await self(tx) for tx in txs]

    def send(self, tx: bytes, on_response):
        """The pipelined form the mempool uses: answer at once, callback first, like the ABCI reader."""
        self.calls.append(tx)
        response = types_pb2.ResponseCheckTx(code=1 if tx in self.invalid else 0)
        on_response(response)
        future = asyncio.get_running_loop().create_future()
        future.set_result(response)
        return future


def test_mempool_admits_in_order_and_refuses_duplicates():
    async def scenario():
        mempool, check = Mempool(max_txs=3), FakeCheck()
        check.invalid.add(b"bad")
        for tx in (b"a", b"b"):
            assert (await mempool.check_and_add(tx, check.send)).code == 0
        assert (await mempool.check_and_add(b"bad", check.send)).code == 1
        with pytest.raises(MempoolError, match="already exists in cache"):
            await mempool.check_and_add(b"a", check.send)
        check.invalid.clear()
        assert (await mempool.check_and_add(b"bad", check.send)).code == 0  # a failed tx may be retried
        with pytest.raises(MempoolError, match="mempool is full"):
            await mempool.check_and_add(b"d", check.send)
        assert mempool.txs() == [b"a", b"b", b"bad"] and mempool.total_bytes == 5
        assert mempool.reap(2) == [b"a", b"b"] and mempool.reap(1) == [b"a"]

    asyncio.run(scenario())


def test_mempool_update_removes_committed_and_rechecks_the_rest():
    async def scenario():
        mempool, check = Mempool(), FakeCheck()
        for tx in (b"a", b"b", b"c"):
            await mempool.check_and_add(tx, check.send)
        mempool.remove_committed([b"a"])
        check.invalid.add(b"c")
        check.calls.clear()
        assert await mempool.recheck(check.all) == 1
        assert check.calls == [b"b", b"c"] and mempool.txs() == [b"b"]
        with pytest.raises(MempoolError):
            await mempool.check_and_add(b"a", check.send)  # committed txs stay in the cache

    asyncio.run(scenario())


def test_mempool_refuses_oversize_tx():
    async def scenario():
        with pytest.raises(MempoolError, match="too large"):
            await Mempool(max_tx_bytes=4).check_and_add(b"12345", FakeCheck().send)

    asyncio.run(scenario())


# ----------------------------------------------------------------------------------------- block store


def _block(height: int, txs: tuple[bytes, ...]) -> StoredBlock:
    header = {"height": str(height)}
    block_hash = hashing.header_hash(header)
    return StoredBlock(height, height * 10, block_hash, header, {"hash": block_hash.hex()}, txs, {})


def _results(txs, attribute_values):
    return types_pb2.ResponseFinalizeBlock(
        app_hash=bytes([len(txs)]) * 32,
        tx_results=[
            types_pb2.ExecTxResult(events=[types_pb2.Event(type="transfer", attributes=[
                types_pb2.EventAttribute(key="recipient", value=value, index=True),
                types_pb2.EventAttribute(key="secret", value=value, index=False),
            ])])
            for value in attribute_values
        ],
    )


def test_block_store_persists_blocks_results_and_indexes(tmp_path):
    store = BlockStore(tmp_path / "db")
    validators = [(b"\x01" * 32, 10)]
    store.save_init_chain(1, b"\xaa" * 32, homelib.default_consensus_params(), validators)
    store.save_block(_block(1, (b"t1", b"t2")), types_pb2.RequestFinalizeBlock(height=1), _results((1, 2), ["alice", "bob"]), validators)
    store.save_block(_block(2, (b"t3",)), types_pb2.RequestFinalizeBlock(height=2), _results((1,), ["alice"]), [])
    with pytest.raises(Exception, match="does not follow"):
        store.save_block(_block(4, ()), types_pb2.RequestFinalizeBlock(height=4), _results((), []), [])
    store.close()

    store = BlockStore(tmp_path / "db")  # everything survives a reopen
    assert store.last_height == 2 and store.initial_height == 1
    assert store.block(1).txs == (b"t1", b"t2") and store.request(2).height == 2
    assert store.app_hash_after(1) == b"\x02" * 32
    assert store.tx_position(hashlib.sha256(b"t3").digest()) == (2, 0)
    assert store.positions_with_attribute("transfer.recipient", "alice") == [(1, 0), (2, 0)]
    assert store.positions_with_attribute("transfer.secret", "alice") == []  # index=false is not indexed
    assert store.validators(1) == validators and store.validators(3) == validators and store.validators(4) == []
    store.close()


# ------------------------------------------------------------------------------------- RPC arguments


@pytest.mark.parametrize(
    "kind, raw, expected",
    [
        ("int", "5", 5),
        ("int", '"5"', 5),
        ("bool", "true", True),
        ("str", '"/account/x"', "/account/x"),
        ("str", "tx.height=5", "tx.height=5"),
        ("bytes", "0xDEADbeef", b"\xde\xad\xbe\xef"),
        ("bytes", '"raw"', b"raw"),
        ("hexbytes", "0x00ff", b"\x00\xff"),
    ],
)
def test_uri_arguments_follow_cometbft_rules(kind, raw, expected):
    assert _uri_value(kind, raw) == expected


@pytest.mark.parametrize("kind, raw", [("int", "five"), ("bool", "yes"), ("bytes", "deadbeef"), ("bytes", "0xZZ")])
def test_bad_uri_arguments_are_invalid_params(kind, raw):
    with pytest.raises(InvalidParams):
        _uri_value(kind, raw)


def test_json_arguments_use_base64_for_bytes_and_hex_for_hexbytes():
    assert _json_value("bytes", "3q2+7w==") == b"\xde\xad\xbe\xef"
    assert _json_value("hexbytes", "deadbeef") == b"\xde\xad\xbe\xef"
    assert _json_value("int", "12") == 12 and _json_value("int", 12) == 12
    for kind, value in (("bytes", "not base64!"), ("int", True), ("bool", "true"), ("hexbytes", "xyz")):
        with pytest.raises(InvalidParams):
            _json_value(kind, value)


# ----------------------------------------------------------------------------------------------- CORS


def test_cors_headers_only_for_configured_origins():
    import aiohttp

    from trolly.abci_app.engine.rpc_server import RpcServer

    async def scenario():
        server = RpcServer(None, "tcp://127.0.0.1:0", 1.0, ("http://dashboard.local",))
        await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(server.url + "/health", headers={"Origin": "http://dashboard.local"}) as response:
                    assert response.headers["Access-Control-Allow-Origin"] == "http://dashboard.local"
                    assert response.headers["Vary"] == "Origin"  # an answer naming one origin is not shared
                    assert (await response.json())["result"] == {}
                async with session.get(server.url + "/health", headers={"Origin": "http://evil.example"}) as response:
                    assert "Access-Control-Allow-Origin" not in response.headers
                async with session.options(server.url + "/", headers={"Origin": "http://dashboard.local"}) as response:
                    assert response.status == 200 and "POST" in response.headers["Access-Control-Allow-Methods"]
                async with session.options(server.url + "/", headers={"Origin": "http://evil.example"}) as response:
                    assert response.status == 403
        finally:
            await server.stop()

    asyncio.run(scenario())
