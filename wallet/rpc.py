"""A client for CometBFT's JSON-RPC, the only way the wallet, the worker and the verifier talk to a node.

It speaks the CometBFT v0.38 encodings (64-bit integers as JSON strings, bytes as base64, hashes as upper-case
hex), so it works the same against the solo engine of `trolly-node dev` and against a real CometBFT node.

`AsyncRpcClient` is the real client (aiohttp, one session per client, use it as an async context manager);
`RpcClient` is a small synchronous facade over it for the CLI and scripts. Failures are typed:
`NodeUnreachable(url)` when nothing answers, `RpcError(code, message)` for a JSON-RPC error object,
`QueryFailed` for an ABCI query with a non-zero code, `TxRejected(code, codespace, log)` when CheckTx or the
block refuses a transaction, `InclusionTimeout` when a transaction does not land in time.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
from typing import Any

import aiohttp

from .errors import InclusionTimeout, NodeUnreachable, QueryFailed, RpcError, TxRejected
from .rpc_types import (  # noqa: F401  (re-exported: callers import the answer types from here)
    BlockHeader, BroadcastResult, Event, NodeStatus, ProofOp, QueryResult, TxResult, ValidatorInfo, hash_hex,
    parse_base64, parse_int, parse_events, parse_tx_result,
)

DEFAULT_NODE = "http://127.0.0.1:26657"
DEFAULT_TIMEOUT = 10.0


def normalize_node_url(url: str) -> str:
    """Accept CometBFT's `tcp://host:port` and a bare `host:port` as well as `http(s)://...`."""
    url = (url or DEFAULT_NODE).strip().rstrip("/")
    if url.startswith("tcp://"):
        url = "http://" + url[len("tcp://") :]
    if "://" not in url:
        url = "http://" + url
    return url


def _is_not_found(error: RpcError) -> bool:
    return "not found" in f"{error.message} {error.data}".lower()


class AsyncRpcClient:
    """CometBFT JSON-RPC over HTTP POST (aiohttp). Use `async with AsyncRpcClient(url) as client:`."""

    def __init__(self, url: str = DEFAULT_NODE, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = normalize_node_url(url)
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._ids = itertools.count(1)

    async def __aenter__(self) -> "AsyncRpcClient":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, method: str, **params: Any) -> Any:
        """One JSON-RPC call; returns its `result`. Parameters that are None are left out."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        request = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": method,
            "params": {name: value for name, value in params.items() if value is not None},
        }
        for attempt in (1, 2):
            try:
                async with self._session.post(self.url, json=request) as response:
                    body = await response.read()
                    status = response.status
                break
            except aiohttp.ServerDisconnectedError as exc:
                # A kept-alive connection the node closed while it sat idle: the request never reached it, so a
                # query is sent once more on a fresh connection (a broadcast is not: it may have arrived).
                if attempt == 2 or method.startswith("broadcast_"):
                    raise NodeUnreachable(self.url, _reason(exc)) from None
            except (aiohttp.ClientError, OSError) as exc:  # refused, reset, DNS, bad URL, truncated answer
                raise NodeUnreachable(self.url, _reason(exc)) from None
            except asyncio.TimeoutError:
                raise NodeUnreachable(self.url, f"no answer within {self.timeout:g}s") from None
        try:
            answer = json.loads(body)
        except ValueError:
            raise RpcError(-32700, f"HTTP {status}: the answer is not JSON (is {self.url} a CometBFT RPC?)") from None
        if not isinstance(answer, dict):
            raise RpcError(-32700, "the answer is not a JSON-RPC object")
        if answer.get("error"):
            error = answer["error"]
            raise RpcError(parse_int(error.get("code"), -1), str(error.get("message", "")), str(error.get("data") or ""))
        if "result" not in answer:
            raise RpcError(-32603, f"HTTP {status}: JSON-RPC answer without result")
        return answer["result"]

    # ---- node and chain ------------------------------------------------------------------------------------

    async def status(self) -> NodeStatus:
        raw = await self.call("status")
        node_info, sync_info = raw.get("node_info") or {}, raw.get("sync_info") or {}
        return NodeStatus(
            chain_id=node_info.get("network", ""),
            latest_block_height=parse_int(sync_info.get("latest_block_height")),
            latest_block_hash=sync_info.get("latest_block_hash", ""),
            latest_app_hash=sync_info.get("latest_app_hash", ""),
            latest_block_time=sync_info.get("latest_block_time", ""),
            catching_up=bool(sync_info.get("catching_up", False)),
            node_id=node_info.get("id", ""),
            version=node_info.get("version", ""),
            raw=raw,
        )

    async def block(self, height: int | None = None) -> BlockHeader:
        raw = await self.call("block", height=None if height is None else str(height))
        block = raw.get("block") or {}
        header = block.get("header") or {}
        return BlockHeader(
            chain_id=header.get("chain_id", ""),
            height=parse_int(header.get("height")),
            time=header.get("time", ""),
            app_hash=bytes.fromhex(header.get("app_hash") or ""),
            last_block_hash=(header.get("last_block_id") or {}).get("hash", ""),
            block_hash=(raw.get("block_id") or {}).get("hash", ""),
            num_txs=len((block.get("data") or {}).get("txs") or []),
        )

    async def validators(self, height: int | None = None) -> list[ValidatorInfo]:
        """Every validator at `height` (latest by default), following CometBFT's pagination."""
        found: list[ValidatorInfo] = []
        for page in itertools.count(1):
            raw = await self.call(
                "validators", height=None if height is None else str(height), page=str(page), per_page="100"
            )
            for item in raw.get("validators") or []:
                pub_key = item.get("pub_key") or {}
                found.append(
                    ValidatorInfo(
                        address=item.get("address", ""),
                        pubkey=parse_base64(pub_key.get("value")),
                        pubkey_type=pub_key.get("type", ""),
                        voting_power=parse_int(item.get("voting_power")),
                        proposer_priority=parse_int(item.get("proposer_priority")),
                    )
                )
            if len(found) >= parse_int(raw.get("total"), len(found)) or not raw.get("validators"):
                return found

    # ---- application queries -------------------------------------------------------------------------------

    async def abci_query(self, path: str, data: bytes = b"", height: int = 0, prove: bool = False) -> QueryResult:
        raw = await self.call(
            "abci_query", path=path, data=data.hex(), height=str(height) if height else None, prove=prove
        )
        response = raw.get("response") or {}
        proof = response.get("proof_ops") or response.get("proofOps") or response.get("proof") or {}
        return QueryResult(
            path=path,
            code=parse_int(response.get("code")),
            codespace=response.get("codespace") or "",
            log=response.get("log") or "",
            info=response.get("info") or "",
            key=parse_base64(response.get("key")),
            value=parse_base64(response.get("value")),
            height=parse_int(response.get("height")),
            proof_ops=tuple(
                ProofOp(op.get("type", ""), parse_base64(op.get("key")), parse_base64(op.get("data"))) for op in proof.get("ops") or []
            ),
        )

    async def query_json(self, path: str, height: int = 0) -> Any:
        """The decoded JSON value at a query path; raises QueryFailed for a non-zero code."""
        result = await self.abci_query(path, height=height)
        if result.code != 0:
            raise QueryFailed(path, result.code, result.codespace, result.log)
        return result.json()

    # ---- transactions --------------------------------------------------------------------------------------

    async def broadcast_tx_sync(self, tx: bytes, *, check: bool = True) -> BroadcastResult:
        """Hand `tx` to the mempool and return CheckTx's answer; raises TxRejected for a non-zero code if `check`."""
        raw = await self.call("broadcast_tx_sync", tx=base64.b64encode(tx).decode())
        result = BroadcastResult(
            hash=str(raw.get("hash", "")).upper(),
            code=parse_int(raw.get("code")),
            codespace=raw.get("codespace") or "",
            log=raw.get("log") or "",
        )
        if check and result.code != 0:
            raise TxRejected(result.code, result.codespace, result.log, result.hash)
        return result

    async def tx(self, tx_hash: bytes | str) -> TxResult:
        """The included transaction with this hash; raises RpcError (with "not found") if it is not in a block."""
        raw = await self.call("tx", hash=base64.b64encode(bytes.fromhex(hash_hex(tx_hash))).decode(), prove=False)
        return parse_tx_result(raw)

    async def find_tx(self, tx_hash: bytes | str) -> TxResult | None:
        """Like `tx`, but None while the transaction is not (yet) in a block."""
        try:
            return await self.tx(tx_hash)
        except RpcError as error:
            if _is_not_found(error):
                return None
            raise

    async def tx_search(
        self, query: str, page: int = 1, per_page: int = 30, order_by: str = "asc"
    ) -> tuple[list[TxResult], int]:
        """Transactions matching a CometBFT event query (e.g. `tx.height=5`); returns (page of results, total)."""
        raw = await self.call(
            "tx_search", query=query, prove=False, page=str(page), per_page=str(per_page), order_by=order_by
        )
        return [parse_tx_result(item) for item in raw.get("txs") or []], parse_int(raw.get("total_count"))

    async def wait_for_tx(self, tx_hash: bytes | str, timeout: float = 30.0, poll_interval: float = 0.2) -> TxResult:
        """Poll until the transaction is in a block; raises InclusionTimeout after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = await self.find_tx(tx_hash)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise InclusionTimeout(hash_hex(tx_hash), timeout)
            await asyncio.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))

    async def wait_for_height(self, height: int, timeout: float = 30.0, poll_interval: float = 0.2) -> NodeStatus:
        """Poll until the node has committed block `height`."""
        deadline = time.monotonic() + timeout
        while True:
            status = await self.status()
            if status.latest_block_height >= height:
                return status
            if time.monotonic() >= deadline:
                raise InclusionTimeout(f"block {height}", timeout)
            await asyncio.sleep(poll_interval)

    async def broadcast_and_wait(self, tx: bytes, timeout: float = 30.0) -> TxResult:
        """broadcast_tx_sync, then wait for inclusion; raises TxRejected if CheckTx or the block refuses it."""
        sent = await self.broadcast_tx_sync(tx)
        included = await self.wait_for_tx(sent.hash, timeout)
        if included.code != 0:
            raise TxRejected(included.code, included.codespace, included.log, included.hash, included.height)
        return included


def _reason(exc: BaseException) -> str:
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror.lower()
    text = str(exc) or exc.__class__.__name__
    return text.splitlines()[0]


class RpcClient:
    """Synchronous facade over AsyncRpcClient, running it on a private event loop (for the CLI)."""

    def __init__(self, url: str = DEFAULT_NODE, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._client = AsyncRpcClient(url, timeout)
        self._runner = asyncio.Runner()

    @property
    def url(self) -> str:
        return self._client.url

    def __enter__(self) -> "RpcClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._runner.run(self._client.close())
        self._runner.close()

    @property
    def async_client(self) -> AsyncRpcClient:
        """The underlying async client, for library code run through `run` (e.g. `TxSender`)."""
        return self._client

    def run(self, coroutine):
        """Run a coroutine that uses `async_client` on this facade's event loop."""
        return self._runner.run(coroutine)

    _run = run

    def call(self, method: str, **params: Any) -> Any:
        return self._run(self._client.call(method, **params))

    def status(self) -> NodeStatus:
        return self._run(self._client.status())

    def block(self, height: int | None = None) -> BlockHeader:
        return self._run(self._client.block(height))

    def validators(self, height: int | None = None) -> list[ValidatorInfo]:
        return self._run(self._client.validators(height))

    def abci_query(self, path: str, data: bytes = b"", height: int = 0, prove: bool = False) -> QueryResult:
        return self._run(self._client.abci_query(path, data, height, prove))

    def query_json(self, path: str, height: int = 0) -> Any:
        return self._run(self._client.query_json(path, height))

    def broadcast_tx_sync(self, tx: bytes, *, check: bool = True) -> BroadcastResult:
        return self._run(self._client.broadcast_tx_sync(tx, check=check))

    def tx(self, tx_hash: bytes | str) -> TxResult:
        return self._run(self._client.tx(tx_hash))

    def find_tx(self, tx_hash: bytes | str) -> TxResult | None:
        return self._run(self._client.find_tx(tx_hash))

    def tx_search(self, query: str, page: int = 1, per_page: int = 30, order_by: str = "asc"):
        return self._run(self._client.tx_search(query, page, per_page, order_by))

    def wait_for_tx(self, tx_hash: bytes | str, timeout: float = 30.0, poll_interval: float = 0.2) -> TxResult:
        return self._run(self._client.wait_for_tx(tx_hash, timeout, poll_interval))

    def wait_for_height(self, height: int, timeout: float = 30.0, poll_interval: float = 0.2) -> NodeStatus:
        return self._run(self._client.wait_for_height(height, timeout, poll_interval))

    def broadcast_and_wait(self, tx: bytes, timeout: float = 30.0) -> TxResult:
        return self._run(self._client.broadcast_and_wait(tx, timeout))
