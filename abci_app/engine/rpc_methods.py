"""The JSON-RPC methods the solo engine serves, each returning what CometBFT v0.38 returns.

Every handler takes the node and keyword arguments already decoded by `rpc_server` (the table `METHODS`
says which arguments a method takes and their kinds: int, bool, str, bytes (base64 in JSON) or hexbytes).
A handler raises `RpcError` for a failure the client caused; the message is CometBFT's wording.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable

from ..home import COMETBFT_VERSION, format_time
from ..proto.tendermint.abci import types_pb2
from . import AppConnectionLost, EngineError, hashing, rpc_encoding
from .mempool import MempoolError
from .blocks import BLOCK_PROTOCOL_VERSION, P2P_PROTOCOL_VERSION, tx_event_map
from .producer import ABCI_VERSION
from .query import QueryError, parse_query

DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100


class RpcError(Exception):
    """A failed call: JSON-RPC error `code`/`message`, the reason as the exception text (`data`)."""

    code = -32603
    message = "Internal error"


@dataclass(frozen=True)
class Method:
    handler: Callable[..., Awaitable[object]]
    params: tuple[tuple[str, str], ...] = ()


def _client(node):
    """The app's connections, once the handshake is over (before it, the app may be mid-replay)."""
    client = node.producer.client
    if client is None or not node.producer.connected.is_set():
        raise RpcError("the ABCI application is not connected (the engine is waiting for it)")
    return client


async def _app_call(coroutine):
    try:
        return await coroutine
    except AppConnectionLost as exc:
        raise RpcError(f"the ABCI application connection was lost: {exc}") from None


def _latest_height(node) -> int:
    return node.producer.visible_height


def _height(node, height: int | None) -> int:
    """CometBFT's `getHeight`: the latest when absent or 0; otherwise it must exist."""
    latest = _latest_height(node)
    if height is None or height == 0:
        if latest == 0:
            raise RpcError("no blocks yet: the chain has not produced its first block")
        return latest
    if height < 0:
        raise RpcError(f"height must be greater than 0, but got {height}")
    if height > latest:
        raise RpcError(f"height {height} must be less than or equal to the current blockchain height {latest}")
    base = node.blockstore.earliest_height
    if height < base:
        raise RpcError(f"height {height} is not available, lowest height is {base}")
    return height


def _page(page: int | None, per_page: int | None, total: int) -> tuple[int, int]:
    per_page = DEFAULT_PER_PAGE if not per_page or per_page <= 0 else min(per_page, MAX_PER_PAGE)
    pages = max(1, -(-total // per_page))
    page = 1 if page is None else page
    if page <= 0 or page > pages:
        raise RpcError(f"page should be within [1, {pages}] range, given {page}")
    return (page - 1) * per_page, per_page


# ------------------------------------------------------------------------------------------------ info


async def health(node) -> dict:
    return {}


async def status(node) -> dict:
    store = node.blockstore
    home = node.home
    latest, earliest = _latest_height(node), store.earliest_height
    latest_block = store.block(latest) if latest else None
    earliest_block = store.block(earliest) if latest else None
    validators = store.validators(latest + 1) or store.validators(node.producer.initial_height) or []
    own = home.validator_key
    power = next((p for k, p in validators if k == own.pubkey), 0)

    def block_fields(block, prefix: str) -> dict:
        return {
            f"{prefix}_block_hash": rpc_encoding.hex_upper(block.block_hash) if block else "",
            f"{prefix}_app_hash": rpc_encoding.hex_upper(store.app_hash_after(block.height) or b"") if block else "",
            f"{prefix}_block_height": str(block.height if block else 0),
            f"{prefix}_block_time": format_time(block.time_ns) if block else "1970-01-01T00:00:00Z",
        }

    return {
        "node_info": {
            "protocol_version": {
                "p2p": str(P2P_PROTOCOL_VERSION),
                "block": str(BLOCK_PROTOCOL_VERSION),
                "app": str(node.producer.app_version),
            },
            "id": home.node_key.node_id,
            "listen_addr": home.config.get("p2p", {}).get("laddr", "tcp://0.0.0.0:26656"),
            "network": home.chain_id,
            "version": COMETBFT_VERSION,
            "channels": "40202122233038606100",
            "moniker": home.config.get("moniker", "trolly-node"),
            "other": {"tx_index": "on", "rpc_address": node.rpc_url.replace("http://", "tcp://")},
        },
        "sync_info": {**block_fields(latest_block, "latest"), **block_fields(earliest_block, "earliest"), "catching_up": False},
        "validator_info": {
            "address": rpc_encoding.hex_upper(own.address),
            "pub_key": rpc_encoding.pub_key(own.pubkey),
            "voting_power": str(power),
        },
    }


async def genesis(node) -> dict:
    return {"genesis": node.home.genesis}


async def validators(node, height: int | None = None, page: int | None = None, per_page: int | None = None) -> dict:
    height = _height(node, height)
    members = node.blockstore.validators(height) or []
    start, size = _page(page, per_page, len(members))
    selected = members[start:start + size]
    return {
        "block_height": str(height),
        "validators": [rpc_encoding.validator_json(pubkey, power) for pubkey, power in selected],
        "count": str(len(selected)),
        "total": str(len(members)),
    }


async def num_unconfirmed_txs(node) -> dict:
    return {
        "n_txs": str(len(node.mempool)),
        "total": str(len(node.mempool)),
        "total_bytes": str(node.mempool.total_bytes),
        "txs": None,
    }


async def unconfirmed_txs(node, limit: int | None = None) -> dict:
    limit = DEFAULT_PER_PAGE if not limit or limit <= 0 else min(limit, MAX_PER_PAGE)
    txs = node.mempool.txs(limit)
    return {
        "n_txs": str(len(txs)),
        "total": str(len(node.mempool)),
        "total_bytes": str(node.mempool.total_bytes),
        "txs": [rpc_encoding.b64(tx) for tx in txs],
    }


async def net_info(node) -> dict:
    """The solo engine has no peers; it listens on nothing but the RPC."""
    return {"listening": False, "listeners": [], "n_peers": "0", "peers": []}


# ------------------------------------------------------------------------------------------------ abci


async def abci_info(node) -> dict:
    response = await _app_call(
        _client(node).info(
            types_pb2.RequestInfo(
                version=COMETBFT_VERSION,
                block_version=BLOCK_PROTOCOL_VERSION,
                p2p_version=P2P_PROTOCOL_VERSION,
                abci_version=ABCI_VERSION,
            )
        )
    )
    return {"response": rpc_encoding.info_json(response)}


async def abci_query(node, path: str = "", data: bytes = b"", height: int = 0, prove: bool = False) -> dict:
    response = await _app_call(_client(node).query(types_pb2.RequestQuery(path=path, data=data, height=height, prove=prove)))
    return {"response": rpc_encoding.query_json(response)}


# ---------------------------------------------------------------------------------------------- blocks


async def block(node, height: int | None = None) -> dict:
    stored = node.blockstore.block(_height(node, height))
    return {"block_id": stored.block_id, "block": rpc_encoding.block_json(stored)}


async def block_by_hash(node, hash: bytes = b"") -> dict:
    height = node.blockstore.height_of_block(hash)
    if height is None or height > _latest_height(node):
        return {"block_id": {"hash": "", "parts": {"total": 0, "hash": ""}}, "block": None}
    stored = node.blockstore.block(height)
    return {"block_id": stored.block_id, "block": rpc_encoding.block_json(stored)}


async def header(node, height: int | None = None) -> dict:
    return {"header": node.blockstore.block(_height(node, height)).header}


async def blockchain(node, minHeight: int | None = None, maxHeight: int | None = None) -> dict:
    """Block metas for minHeight..maxHeight, highest first, at most 20 (CometBFT's filterMinMax)."""
    latest = _latest_height(node)
    base = node.blockstore.earliest_height
    if (minHeight or 0) < 0 or (maxHeight or 0) < 0:
        raise RpcError("heights must be non-negative")
    top = min(latest, maxHeight or latest)
    bottom = max(base, minHeight or base, top - 19)
    if bottom > top and latest:
        raise RpcError(f"min height {bottom} can't be greater than max height {top}")
    metas = []
    for height in range(top, bottom - 1, -1):
        stored = node.blockstore.block(height)
        metas.append(
            {
                "block_id": stored.block_id,
                "block_size": str(sum(len(tx) for tx in stored.txs)),
                "header": stored.header,
                "num_txs": str(len(stored.txs)),
            }
        )
    return {"last_height": str(latest), "block_metas": metas}


async def commit(node, height: int | None = None) -> dict:
    """The signed header at `height`: the commit comes from block height+1, or is the engine's own
    precommit for the latest block (then `canonical` is false, as CometBFT's seen commit)."""
    height = _height(node, height)
    stored = node.blockstore.block(height)
    following = node.blockstore.block(height + 1) if height < _latest_height(node) else None
    if following is not None:
        return {"signed_header": {"header": stored.header, "commit": following.last_commit}, "canonical": True}
    key = node.home.validator_key
    signature = key.private_key.sign(hashing.vote_sign_bytes(node.home.chain_id, height, stored.block_hash))
    seen = {
        "height": str(height),
        "round": 0,
        "block_id": stored.block_id,
        "signatures": [
            {
                "block_id_flag": 2,
                "validator_address": rpc_encoding.hex_upper(key.address),
                "timestamp": format_time(stored.time_ns),
                "signature": rpc_encoding.b64(signature),
            }
        ],
    }
    return {"signed_header": {"header": stored.header, "commit": seen}, "canonical": False}


async def block_results(node, height: int | None = None) -> dict:
    height = _height(node, height)
    return rpc_encoding.block_results_json(height, node.blockstore.results(height))


async def consensus_params(node, height: int | None = None) -> dict:
    height = _height(node, height)
    return {"block_height": str(height), "consensus_params": node.producer.consensus_params}


# ------------------------------------------------------------------------------------------------- txs


def _tx_record(node, height: int, index: int, prove: bool) -> dict:
    stored = node.blockstore.block(height)
    results = node.blockstore.results(height)
    tx = stored.txs[index]
    proof = None
    if prove:
        leaves = [hashing.sha256(t) for t in stored.txs]
        proof = {
            "root_hash": rpc_encoding.hex_upper(hashing.merkle_root(leaves)),
            "data": rpc_encoding.b64(tx),
            "proof": {
                "total": str(len(leaves)),
                "index": str(index),
                "leaf_hash": rpc_encoding.b64(hashing.leaf_hash(leaves[index])),
                "aunts": [rpc_encoding.b64(a) for a in hashing.merkle_aunts(leaves, index)],
            },
        }
    return rpc_encoding.tx_result_json(tx, height, index, results.tx_results[index], hashing.sha256(tx), proof)


async def tx(node, hash: bytes = b"", prove: bool = False) -> dict:
    position = node.blockstore.tx_position(hash)
    if position is None or position[0] > _latest_height(node):
        raise RpcError(f"tx ({hash.hex().upper()}) not found")
    return _tx_record(node, *position, prove)


def _positions_for(node, query) -> list[tuple[int, int]]:
    """Candidate (height, index) pairs from the most selective indexed condition, then filtered exactly."""
    store = node.blockstore
    tx_hash = query.equality("tx.hash")
    if isinstance(tx_hash, str):
        try:
            position = store.tx_position(bytes.fromhex(tx_hash))
        except ValueError:
            raise RpcError(f"invalid tx.hash {tx_hash!r}: expected hex") from None
        candidates = [position] if position else []
    elif query.equality("tx.height") is not None:
        try:
            height = int(query.equality("tx.height"))
        except ValueError:
            raise RpcError(f"tx.height must be a number, got {query.equality('tx.height')!r}") from None
        stored = store.block(height) if 0 < height <= _latest_height(node) else None
        candidates = [(height, i) for i in range(len(stored.txs))] if stored else []
    else:
        attribute = next(
            (c for c in query.conditions if c.operator == "=" and c.key not in ("tm.event", "tx.height", "tx.hash")), None
        )
        if attribute is not None:
            candidates = store.positions_with_attribute(attribute.key, str(attribute.operand))
        else:
            candidates = [
                (height, index)
                for height in range(store.earliest_height, _latest_height(node) + 1)
                for index in range(len(store.block(height).txs))
            ]
    visible = _latest_height(node)
    return sorted(set(p for p in candidates if p[0] <= visible and _matches(node, query, p)))


def _matches(node, query, position: tuple[int, int]) -> bool:
    height, index = position
    stored = node.blockstore.block(height)
    results = node.blockstore.results(height)
    events = tx_event_map(stored.txs[index], height, results.tx_results[index])
    events.pop("tm.event")  # tx_search queries the tx index, which has no tm.event key
    return all(
        condition.key == "tm.event" or (condition.key in events and condition.matches(events[condition.key]))
        for condition in query.conditions
    )


async def tx_search(node, query: str = "", prove: bool = False, page: int | None = None, per_page: int | None = None, order_by: str = "") -> dict:
    try:
        parsed = parse_query(query)
    except QueryError as exc:
        raise RpcError(str(exc)) from None
    if order_by not in ("", "asc", "desc"):
        raise RpcError("expected order_by to be either `asc` or `desc` or empty")
    positions = _positions_for(node, parsed)
    if order_by == "desc":
        positions.reverse()
    start, size = _page(page, per_page, len(positions))
    return {
        "txs": [_tx_record(node, height, index, prove) for height, index in positions[start:start + size]],
        "total_count": str(len(positions)),
    }


async def check_tx(node, tx: bytes = b"") -> dict:
    """The app's CheckTx without the mempool. Like CometBFT's, it goes over the mempool connection, so an app
    with a mempool overlay counts the tx there until the next Commit."""
    response = await _app_call(_client(node).check_tx(tx))
    return rpc_encoding.check_tx_json(response)


async def _admit(node, tx: bytes):
    client = _client(node)
    try:
        return await _app_call(node.mempool.check_and_add(tx, client.send_check_tx))
    except MempoolError as exc:
        raise RpcError(str(exc)) from None


async def broadcast_tx_sync(node, tx: bytes = b"") -> dict:
    response = await _admit(node, tx)
    return {
        "code": response.code,
        "data": rpc_encoding.hex_upper(response.data),
        "log": response.log,
        "codespace": response.codespace,
        "hash": rpc_encoding.hex_upper(hashing.sha256(tx)),
    }


async def broadcast_tx_async(node, tx: bytes = b"") -> dict:
    _client(node)

    async def admit_in_background() -> None:
        try:
            await _admit(node, tx)
        except (RpcError, EngineError):
            pass  # the client asked not to wait; CometBFT drops the tx the same way

    asyncio.ensure_future(admit_in_background())
    return {"code": 0, "data": "", "log": "", "codespace": "", "hash": rpc_encoding.hex_upper(hashing.sha256(tx))}


async def broadcast_tx_commit(node, tx: bytes = b"") -> dict:
    tx_hash = hashing.sha256(tx)
    subscription = node.events.subscribe(parse_query(f"tm.event = 'Tx' AND tx.hash = '{tx_hash.hex().upper()}'"))
    try:
        response = await _admit(node, tx)
        if response.code != 0:
            return {
                "check_tx": rpc_encoding.check_tx_json(response),
                "tx_result": rpc_encoding.exec_tx_result_json(types_pb2.ExecTxResult()),
                "hash": rpc_encoding.hex_upper(tx_hash),
                "height": "0",
            }
        try:
            item = await asyncio.wait_for(subscription.queue.get(), timeout=node.config.broadcast_tx_commit_timeout)
        except asyncio.TimeoutError:
            raise RpcError("timed out waiting for tx to be included in a block") from None
        if item is None:
            raise RpcError("subscription was cancelled")
        value = item[1]["value"]["TxResult"]
        position = node.blockstore.tx_position(tx_hash)
        results = node.blockstore.results(position[0])
        return {
            "check_tx": rpc_encoding.check_tx_json(response),
            "tx_result": rpc_encoding.exec_tx_result_json(results.tx_results[position[1]]),
            "hash": rpc_encoding.hex_upper(tx_hash),
            "height": value["height"],
        }
    finally:
        node.events.unsubscribe(subscription)


METHODS: dict[str, Method] = {
    "health": Method(health),
    "status": Method(status),
    "genesis": Method(genesis),
    "validators": Method(validators, (("height", "int"), ("page", "int"), ("per_page", "int"))),
    "num_unconfirmed_txs": Method(num_unconfirmed_txs),
    "net_info": Method(net_info),
    "blockchain": Method(blockchain, (("minHeight", "int"), ("maxHeight", "int"))),
    "commit": Method(commit, (("height", "int"),)),
    "unconfirmed_txs": Method(unconfirmed_txs, (("limit", "int"),)),
    "abci_info": Method(abci_info),
    "abci_query": Method(abci_query, (("path", "str"), ("data", "hexbytes"), ("height", "int"), ("prove", "bool"))),
    "block": Method(block, (("height", "int"),)),
    "block_by_hash": Method(block_by_hash, (("hash", "bytes"),)),
    "header": Method(header, (("height", "int"),)),
    "block_results": Method(block_results, (("height", "int"),)),
    "consensus_params": Method(consensus_params, (("height", "int"),)),
    "tx": Method(tx, (("hash", "bytes"), ("prove", "bool"))),
    "tx_search": Method(
        tx_search, (("query", "str"), ("prove", "bool"), ("page", "int"), ("per_page", "int"), ("order_by", "str"))
    ),
    "check_tx": Method(check_tx, (("tx", "bytes"),)),
    "broadcast_tx_sync": Method(broadcast_tx_sync, (("tx", "bytes"),)),
    "broadcast_tx_async": Method(broadcast_tx_async, (("tx", "bytes"),)),
    "broadcast_tx_commit": Method(broadcast_tx_commit, (("tx", "bytes"),)),
}
