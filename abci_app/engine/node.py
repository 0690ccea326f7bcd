"""`SoloNode`: the solo engine as one service with a lifecycle.

It owns the block store, the mempool, the event bus, the producer (handshake and block loop) and the RPC
server, and the Prometheus endpoint of the CometBFT metrics it stands in for (`metrics.py`; at
`SoloNodeConfig.prometheus_laddr`, config.toml's `[instrumentation]` address, off when empty). `start()` opens
the block store and binds the RPC port (and the metrics port: one taken is logged and left, or refused,
as `metrics_port_in_use` says); `run(stop)` produces blocks until `stop` is
set or a fatal error (a failed handshake, a broken app) ends it; `close()` releases everything. Signal
handlers live in the CLI only. Mempool limits come from the home's config.toml, as CometBFT reads them
(`[mempool] size`, `max_txs_bytes`, `max_tx_bytes`, `cache_size`), and so do the RPC's limits (`[rpc]
max_open_connections`, `max_body_bytes`, `max_request_batch_size`, `max_subscription_clients`,
`max_subscriptions_per_client`; see `rpc_server.RpcLimits`).

Searches (`tx_search`, `block_search`) run on the node's own small pool of search threads, not on the event
loop and not on the default executor the producer stores blocks with, so that no number of slow searches can
hold up a block. `close()` stops them (their deadlines see `closing`) before the block store closes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import dataclass

from trolly.wallet.metrics_endpoint import CONTINUE, MetricsEndpoint, start_metrics_endpoint

from ..home import Home
from .blockstore import BlockStore
from .event_bus import EventBus
from .mempool import Mempool
from .metrics import EngineMetrics
from .producer import EngineConfig, Producer, StepObserver
from .rpc_server import RpcLimits, RpcServer

log = logging.getLogger("trolly.engine")


@dataclass(frozen=True)
class SoloNodeConfig:
    engine: EngineConfig = EngineConfig()
    rpc_laddr: str = "tcp://127.0.0.1:26657"
    """Where the JSON-RPC listens; port 0 picks a free port (see `SoloNode.rpc_url`)."""
    broadcast_tx_commit_timeout: float = 10.0
    """Seconds `broadcast_tx_commit` waits for inclusion (config.toml `[rpc] timeout_broadcast_tx_commit`)."""
    rpc_limits: RpcLimits | None = None
    """The RPC's limits; None reads them from the home's config.toml `[rpc]` (CometBFT's defaults if absent)."""
    search_timeout: float = 10.0
    """Seconds a `tx_search` or `block_search` may scan before it stops with an error."""
    search_threads: int = 2
    """Searches that scan at once; later ones wait for a thread (their time budget already running)."""
    step_observer: StepObserver | None = None
    """Told of each block's steps (see `producer.StepObserver`); None in a node: crash tests hand one in."""
    prometheus_laddr: str = ""
    """Where the engine serves CometBFT's metrics it keeps (HOST:PORT); empty: nowhere."""
    metrics_port_in_use: str = CONTINUE
    """That address taken: `continue` without metrics, or `refuse` to start (`wallet/metrics_endpoint.py`)."""


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
        self.limits = config.rpc_limits or RpcLimits.from_config(home.config.get("rpc", {}))
        self.events = EventBus(self.limits.max_subscription_clients, self.limits.max_subscriptions_per_client)
        self.producer: Producer | None = None
        self.metrics = EngineMetrics(home.chain_id)
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.rpc: RpcServer | None = None
        self.closing = threading.Event()
        self.search_threads = concurrent.futures.ThreadPoolExecutor(config.search_threads, thread_name_prefix="rpc-search")

    async def start(self) -> None:
        self.metrics_endpoint = start_metrics_endpoint(self.config.prometheus_laddr, self.metrics.registry,
                                                       "the solo engine", self.config.metrics_port_in_use)
        self.blockstore = BlockStore(self.home.paths.engine_db)
        self.producer = Producer(self.home, self.config.engine, self.blockstore, self.mempool, self.events,
                                 self.config.step_observer, self.metrics)
        origins = tuple(self.home.config.get("rpc", {}).get("cors_allowed_origins", []))
        self.rpc = RpcServer(self, self.config.rpc_laddr, self.config.broadcast_tx_commit_timeout, origins, self.limits)
        await self.rpc.start()
        log.info("JSON-RPC listening on %s", self.rpc_url)

    @property
    def rpc_url(self) -> str:
        return self.rpc.url if self.rpc else ""

    async def run(self, stop: asyncio.Event) -> None:
        await self.producer.run(stop)

    async def close(self) -> None:
        self.closing.set()
        if self.rpc is not None:
            await self.rpc.stop()
            self.rpc = None
        await asyncio.get_running_loop().run_in_executor(None, self.search_threads.shutdown)
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
            self.metrics_endpoint = None
        if self.blockstore is not None:
            self.blockstore.close()
            self.blockstore = None
