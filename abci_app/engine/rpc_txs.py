"""Transaction methods: `tx`, `tx_search`, `check_tx` and the three broadcasts, as CometBFT v0.38 answers them.

`tx_search` finds candidates through the block store's indexes (tx hash, height, or an attribute equality)
and then checks the whole query against each candidate's events, so any AND-ed mix of conditions works.
"""

from __future__ import annotations

import asyncio

from ..proto.tendermint.abci import types_pb2
from . import EngineError, hashing, rpc_encoding
from .blocks import tx_event_map
from .mempool import MempoolError
from .query import QueryError, parse_query
from .rpc_common import RpcError, app_call, app_client, latest_height, page_window


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
    if position is None or position[0] > latest_height(node):
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
        stored = store.block(height) if 0 < height <= latest_height(node) else None
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
                for height in range(store.earliest_height, latest_height(node) + 1)
                for index in range(len(store.block(height).txs))
            ]
    visible = latest_height(node)
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
    start, size = page_window(page, per_page, len(positions))
    return {
        "txs": [_tx_record(node, height, index, prove) for height, index in positions[start:start + size]],
        "total_count": str(len(positions)),
    }


async def check_tx(node, tx: bytes = b"") -> dict:
    """The app's CheckTx without the mempool. Like CometBFT's, it goes over the mempool connection, so an app
    with a mempool overlay counts the tx there until the next Commit."""
    client = app_client(node)
    async with node.mempool.lock:
        await app_call(node.producer.ensure_mempool_connection(client))
    response = await app_call(client.check_tx(tx))
    return rpc_encoding.check_tx_json(response)


async def _admit(node, tx: bytes):
    client = app_client(node)
    heal = lambda: node.producer.ensure_mempool_connection(client)  # noqa: E731 - a failed connection first
    try:
        return await app_call(node.mempool.check_and_add(tx, client.send_check_tx, reconnect=heal))
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
    app_client(node)

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
