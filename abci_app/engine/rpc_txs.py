"""Transaction methods: `tx`, `tx_search`, `check_tx` and the three broadcasts, as CometBFT v0.38 answers them.

`tx_search` finds candidates through the block store's indexes (tx hash, height, or an attribute equality)
and then checks the whole query against each candidate's events, so any AND-ed mix of conditions works.
The scan runs on a search thread within the node's time budget (`rpc_common.run_search`), never on the
event loop that makes blocks; pages follow CometBFT (`per_page` at most 100, `page` within range).

`broadcast_tx_commit` holds a subscription while it waits, counted against the subscription limits of the
calling client as in CometBFT.
"""

from __future__ import annotations

import asyncio

from ..proto.tendermint.abci import types_pb2
from . import EngineError, hashing, rpc_encoding
from .blocks import tx_event_map
from .mempool import MempoolError
from .event_query import QueryError, parse_query
from .event_bus import SubscriptionLimit
from .rpc_common import RpcError, app_call, app_client, latest_height, page_window, run_search


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


class _BlockCache:
    """Blocks and results read during one search, so that a block's txs are decoded once, not once each."""

    def __init__(self, store) -> None:
        self._store = store
        self._blocks: dict[int, tuple] = {}

    def get(self, height: int) -> tuple:
        if height not in self._blocks:
            if len(self._blocks) > 64:
                self._blocks.clear()
            self._blocks[height] = (self._store.block(height), self._store.results(height))
        return self._blocks[height]


def _positions_for(node, query, deadline) -> list[tuple[int, int]]:
    """Candidate (height, index) pairs from the most selective indexed condition, then filtered exactly;
    `deadline.check()` between candidates ends a scan that takes too long."""
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
            candidates = store.iter_positions_with_attribute(attribute.key, str(attribute.operand))
        else:
            candidates = (
                (height, index)
                for height in range(store.earliest_height, latest_height(node) + 1)
                for index in range(len(store.block(height).txs))
            )
    visible, cache, found = latest_height(node), _BlockCache(store), set()
    for position in candidates:
        deadline.check()
        if position[0] <= visible and _matches(cache, query, position):
            found.add(position)
    return sorted(found)


def _matches(cache: _BlockCache, query, position: tuple[int, int]) -> bool:
    height, index = position
    stored, results = cache.get(height)
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
    return await run_search(node, _tx_search, parsed, prove, page, per_page, order_by)


def _tx_search(deadline, node, parsed, prove: bool, page: int | None, per_page: int | None, order_by: str) -> dict:
    """The scan and the page of records, on a search thread."""
    positions = _positions_for(node, parsed, deadline)
    if order_by == "desc":
        positions.reverse()
    start, size = page_window(page, per_page, len(positions))
    records = []
    for height, index in positions[start:start + size]:
        deadline.check()
        records.append(_tx_record(node, height, index, prove))
    return {"txs": records, "total_count": str(len(positions))}


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


async def broadcast_tx_commit(node, tx: bytes = b"", client: str = "") -> dict:
    tx_hash = hashing.sha256(tx)
    try:
        subscription = node.events.subscribe(parse_query(f"tm.event = 'Tx' AND tx.hash = '{tx_hash.hex().upper()}'"), client)
    except SubscriptionLimit as exc:
        raise RpcError(str(exc)) from None
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
