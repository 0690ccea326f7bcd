"""Helpers for the solo engine tests: a chain running in a background thread (app server and solo engine on
one event loop, talking over a real unix socket), signed sends, and plain-HTTP JSON-RPC calls."""

from __future__ import annotations

import asyncio
import json
import pathlib
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from trolly.abci_app import home as homelib
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.engine.node import SoloNode, SoloNodeConfig
from trolly.abci_app.engine.producer import EngineConfig
from trolly.abci_app.server import serve
from trolly.abci_app.store import Store
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.params import AuthParams
from trolly.chain.tx import build_tx
from trolly.wallet.txbuilder import TxPlan


def send_tx(key, chain_id: str, nonce: int, to: bytes, amount: int, fee: int | None = None) -> bytes:
    """A signed send; without `fee`, it pays the default genesis's minimum for its size (`AuthParams`)."""
    if fee is not None:
        return build_tx(key, chain_id, nonce, fee, [MsgSend(to=to, amount=amount)])
    return paying_tx(key, chain_id, nonce, [MsgSend(to=to, amount=amount)])


def paying_tx(key, chain_id: str, nonce: int, messages: list) -> bytes:
    """A signed transaction paying exactly the default genesis's minimum fee for its size (the wallet's pricing)."""
    params = AuthParams()
    return TxPlan(chain_id, nonce, 0, tuple(messages)).with_minimum_fee(params.min_fee, params.fee_per_byte).sign(key)


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def rpc_get(url: str, method: str, **arguments) -> tuple[int, dict]:
    """A URI request; arguments are passed verbatim (quote strings yourself, as CometBFT wants)."""
    query = urllib.parse.urlencode(arguments)
    try:
        with urllib.request.urlopen(f"{url}/{method}" + (f"?{query}" if query else ""), timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def rpc_post(url: str, method: str, params=None, request_id=1) -> dict:
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}).encode()
    return rpc_post_raw(url, body)


def rpc_post_raw(url: str, body: bytes):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())


def result(url: str, method: str, params=None) -> dict:
    answer = rpc_post(url, method, params)
    assert "error" not in answer, answer
    return answer["result"]


class InProcessChain:
    """A dev chain in a background thread: `url` is its JSON-RPC, `node` the SoloNode (read-only use)."""

    def __init__(self, root: pathlib.Path, block_interval: float = 0.05, chain_id: str = "engine-test", dev: bool = True,
                 **node_options) -> None:
        """`node_options` go to SoloNodeConfig (e.g. rpc_limits, search_timeout)."""
        self.root = root
        self.node_options = node_options
        self.chain_id = chain_id
        self.block_interval = block_interval
        self.paths = homelib.init_home(root, chain_id, dev=dev)
        self.socket = f"unix://{root}/app.sock"
        self.url = ""
        self.node: SoloNode | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "InProcessChain":
        self._thread.start()
        if not self._ready.wait(30) or self._error:
            raise RuntimeError(f"the in-process chain did not start: {self._error!r}")
        wait_until(lambda: self.node.producer.visible_height >= 1, what="the first block")
        return self

    def __exit__(self, *exc_info) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # reported to the test through __enter__ or `error`
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        store = Store(self.paths.application_db)
        app_ready = asyncio.Event()
        server = asyncio.ensure_future(serve(TrollyApplication(store, self.chain_id), self.socket, app_ready))
        await app_ready.wait()
        home = homelib.load_home(self.root)
        self.node = SoloNode(
            home,
            SoloNodeConfig(engine=EngineConfig(proxy_app=self.socket, block_interval=self.block_interval),
                           rpc_laddr="tcp://127.0.0.1:0", broadcast_tx_commit_timeout=10.0, **self.node_options),
        )
        await self.node.start()
        self.url = self.node.rpc_url
        self._ready.set()
        try:
            await self.node.run(self._stop)
        finally:
            await self.node.close()
            server.cancel()
            try:
                await server
            except asyncio.CancelledError:
                pass
            store.close()

    @property
    def error(self) -> BaseException | None:
        return self._error

    def height(self) -> int:
        return self.node.producer.visible_height

    def wait_for_height(self, height: int, timeout: float = 20.0) -> None:
        wait_until(lambda: self.height() >= height, timeout, what=f"height {height}")
