"""`SoloNode`: the solo engine as one service with a lifecycle (STYLE 8).

It owns the block store, the mempool, the event bus, the producer (handshake and block loop) and the RPC
server. `start()` opens the block store and binds the RPC port; `run(stop)` produces blocks until `stop` is
set or a fatal error (a failed handshake, a broken app) ends it; `close()` releases everything. Signal
handlers live in the CLI only. Mempool limits come from the home's config.toml, as CometBFT reads them
(`[mempool] size`, `max_txs_bytes`, `max_tx_bytes`, `cache_size`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..home import Home
from .blockstore import BlockStore
from .events import EventBus
from .mempool import Mempool
from .producer import EngineConfig, Producer
from .rpc_server import RpcServer

log = logging.getLogger("trolly.engine")


@dataclass(frozen=True)
class SoloNodeConfig:
    engine: EngineConfig = EngineConfig()
    rpc_laddr: str = "tcp://127.0.0.1:26657"
    """Where the JSON-RPC listens; port 0 picks a free port (see `SoloNode.rpc_url`)."""
    broadcast_tx_commit_timeout: float = 10.0
    """Seconds `broadcast_tx_commit` waits for inclusion (config.toml `[rpc] timeout_broadcast_tx_commit`)."""


class SoloNode:
    def __init__(self, home: Home, config: SoloNodeConfig) -> None:
        self.home = home
        self.config = config
        self.blockstore: BlockStore | None = None
        mempool = home.config.get("mempool", {})
        self.mempool = Mempool(
            max_txs=int(mempool.get("size", 5000)),
            max_bytes=int(mempool.get("max_txs_bytes", 1 << 30)),
            max_tx_bytes=int(mempool.get("max_tx_bytes", 1 << 20)),
            cache_size=int(mempool.get("cache_size", 10000)),
        )
        self.events = EventBus()
        self.producer: Producer | None = None
        self.rpc: RpcServer | None = None

    async def start(self) -> None:
        self.blockstore = BlockStore(self.home.paths.engine_db)
        self.producer = Producer(self.home, self.config.engine, self.blockstore, self.mempool, self.events)
        origins = tuple(self.home.config.get("rpc", {}).get("cors_allowed_origins", []))
        self.rpc = RpcServer(self, self.config.rpc_laddr, self.config.broadcast_tx_commit_timeout, origins)
        await self.rpc.start()
        log.info("JSON-RPC listening on %s", self.rpc_url)

    @property
    def rpc_url(self) -> str:
        return self.rpc.url if self.rpc else ""

    async def run(self, stop: asyncio.Event) -> None:
        await self.producer.run(stop)

    async def close(self) -> None:
        if self.rpc is not None:
            await self.rpc.stop()
            self.rpc = None
        if self.blockstore is not None:
            self.blockstore.close()
            self.blockstore = None
