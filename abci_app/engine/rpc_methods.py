"""The JSON-RPC methods the solo engine serves, each returning what CometBFT v0.38 returns.

Every handler takes the node and keyword arguments already decoded by `rpc_server` (the table `METHODS`
says which arguments a method takes and their kinds: int, bool, str, bytes (base64 in JSON) or hexbytes).
A handler raises `RpcError` for a failure the client caused; the message is CometBFT's wording. Node,
ABCI and block methods are here; transaction methods in `rpc_txs`.
"""

from __future__ import annotations

import json

from ..home import COMETBFT_VERSION, format_time
from ..proto.tendermint.abci import types_pb2
from . import hashing, rpc_encoding
from .blocks import BLOCK_PROTOCOL_VERSION, P2P_PROTOCOL_VERSION, block_event_map
from .producer import ABCI_VERSION
from .event_query import QueryError, parse_query
from .rpc_common import (
    DEFAULT_PER_PAGE,
    MAX_PER_PAGE,
    Method,
    RpcError,
    app_call,
    app_client,
    latest_height,
    page_window,
    resolve_height,
    run_search,
)
from .rpc_txs import broadcast_tx_async, broadcast_tx_commit, broadcast_tx_sync, check_tx, tx, tx_search

__all__ = ["METHODS", "RpcError"]


# ------------------------------------------------------------------------------------------------ info


async def health(node) -> dict:
    return {}


async def status(node) -> dict:
    store = node.blockstore
    home = node.home
    latest, earliest = latest_height(node), store.earliest_height
    latest_block = store.block(latest) if latest else None
    earliest_block = store.block(earliest) if latest else None
    validators = store.validators(latest + 1) or store.validators(node.producer.initial_height) or []
    own = home.validator_key
    power = next((p for k, p in validators if k == own.pubkey), 0)

    def block_fields(block, prefix: str) -> dict:
        return {
            f"{prefix}_block_hash": rpc_encoding.hex_upper(block.block_hash) if block else "",
            # As CometBFT: the app hash in that block's header (the state *before* it), not the one after it.
            f"{prefix}_app_hash": block.header["app_hash"] if block else "",
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


GENESIS_CHUNK_BYTES = 16 * 1024 * 1024


async def genesis_chunked(node, chunk: int = 0) -> dict:
    """The genesis JSON in 16 MB base64 chunks, as CometBFT serves big genesis files."""
    data = json.dumps(node.home.genesis).encode()
    chunks = [data[i:i + GENESIS_CHUNK_BYTES] for i in range(0, len(data), GENESIS_CHUNK_BYTES)] or [b""]
    if not 0 <= chunk < len(chunks):
        raise RpcError(f"there are {len(chunks)} chunks, {chunk} is invalid")
    return {"chunk": str(chunk), "total": str(len(chunks)), "data": rpc_encoding.b64(chunks[chunk])}


async def validators(node, height: int | None = None, page: int | None = None, per_page: int | None = None) -> dict:
    height = resolve_height(node, height)
    members = node.blockstore.validators(height) or []
    start, size = page_window(page, per_page, len(members))
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
        "txs": [rpc_encoding.b64(raw) for raw in txs],
    }


async def net_info(node) -> dict:
    """The solo engine has no peers; it listens on nothing but the RPC."""
    return {"listening": False, "listeners": [], "n_peers": "0", "peers": []}


# ------------------------------------------------------------------------------------------------ abci


async def abci_info(node) -> dict:
    response = await app_call(
        app_client(node).info(
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
    response = await app_call(app_client(node).query(types_pb2.RequestQuery(path=path, data=data, height=height, prove=prove)))
    return {"response": rpc_encoding.query_json(response)}


# ---------------------------------------------------------------------------------------------- blocks


async def block(node, height: int | None = None) -> dict:
    stored = node.blockstore.block(resolve_height(node, height))
    return {"block_id": stored.block_id, "block": rpc_encoding.block_json(stored)}


async def block_by_hash(node, hash: bytes = b"") -> dict:
    height = node.blockstore.height_of_block(hash)
    if height is None or height > latest_height(node):
        return {"block_id": {"hash": "", "parts": {"total": 0, "hash": ""}}, "block": None}
    stored = node.blockstore.block(height)
    return {"block_id": stored.block_id, "block": rpc_encoding.block_json(stored)}


async def header(node, height: int | None = None) -> dict:
    return {"header": node.blockstore.block(resolve_height(node, height)).header}


async def header_by_hash(node, hash: bytes = b"") -> dict:
    height = node.blockstore.height_of_block(hash)
    if height is None or height > latest_height(node):
        return {"header": None}
    return {"header": node.blockstore.block(height).header}


async def block_search(node, query: str = "", page: int | None = None, per_page: int | None = None, order_by: str = "") -> dict:
    """Blocks whose FinalizeBlock events (and `block.height`) match the query. The solo engine keeps no
    block-event index, so this scans the chain, linear in its length: off the event loop and within the
    node's search time budget, so a long chain gives a clear error rather than a stalled node."""
    try:
        parsed = parse_query(query)
    except QueryError as exc:
        raise RpcError(str(exc)) from None
    if order_by not in ("", "asc", "desc"):
        raise RpcError("expected order_by to be either `asc` or `desc` or empty")
    return await run_search(node, _block_search, parsed, page, per_page, order_by)


def _block_search(deadline, node, parsed, page: int | None, per_page: int | None, order_by: str) -> dict:
    """The scan and the page of blocks, on a search thread (`rpc_common.run_search`)."""
    matching = []
    for height in range(node.blockstore.earliest_height, latest_height(node) + 1):
        deadline.check()
        events = block_event_map(node.blockstore.results(height))
        events.pop("tm.event")
        events["block.height"] = [str(height)]
        if all(c.key == "tm.event" or (c.key in events and c.matches(events[c.key])) for c in parsed.conditions):
            matching.append(height)
    if order_by == "desc":
        matching.reverse()
    start, size = page_window(page, per_page, len(matching))
    blocks = []
    for height in matching[start:start + size]:
        stored = node.blockstore.block(height)
        blocks.append({"block_id": stored.block_id, "block": rpc_encoding.block_json(stored)})
    return {"blocks": blocks, "total_count": str(len(matching))}


async def blockchain(node, minHeight: int | None = None, maxHeight: int | None = None) -> dict:
    """Block metas for minHeight..maxHeight, highest first, at most 20 (CometBFT's filterMinMax)."""
    latest = latest_height(node)
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
    height = resolve_height(node, height)
    stored = node.blockstore.block(height)
    following = node.blockstore.block(height + 1) if height < latest_height(node) else None
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
    height = resolve_height(node, height)
    return rpc_encoding.block_results_json(height, node.blockstore.results(height))


async def consensus_params(node, height: int | None = None) -> dict:
    height = resolve_height(node, height)
    return {"block_height": str(height), "consensus_params": node.producer.consensus_params}


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
    "header_by_hash": Method(header_by_hash, (("hash", "bytes"),)),
    "block_search": Method(block_search, (("query", "str"), ("page", "int"), ("per_page", "int"), ("order_by", "str"))),
    "genesis_chunked": Method(genesis_chunked, (("chunk", "int"),)),
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
    "broadcast_tx_commit": Method(broadcast_tx_commit, (("tx", "bytes"),), takes_client=True),
}
