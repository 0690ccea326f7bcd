"""The solo engine's Prometheus metrics: the few of CometBFT's it can stand in for, under CometBFT's names.

Where the solo engine runs instead of CometBFT, a dashboard made for CometBFT (docs/grafana/trolly.json) still
finds the chain's height, its block sizes and the mempool at the address config.toml names
(`[instrumentation] prometheus_listen_addr`). The names and meanings are CometBFT v0.38's (`consensus_height`
is the height being decided, one above the last committed block); what only a network of validators has
(peers, rounds, missed votes) is not faked. Each carries the `chain_id` label, as CometBFT's do.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

NAMESPACE = "cometbft"
"""CometBFT's default `[instrumentation] namespace`."""


class EngineMetrics:
    """The engine's metrics and the registry they are served from."""

    def __init__(self, chain_id: str = "") -> None:
        self.registry = CollectorRegistry()

        def gauge(subsystem: str, name: str, documentation: str) -> Gauge:
            return Gauge(name, documentation, ["chain_id"], namespace=NAMESPACE, subsystem=subsystem,
                         registry=self.registry).labels(chain_id)

        self.height = gauge("consensus", "height", "Height of the chain (the one being decided)")
        self.latest_block_height = gauge("consensus", "latest_block_height", "The latest block height")
        self.num_txs = gauge("consensus", "num_txs", "Number of transactions in the latest block")
        self.total_txs = gauge("consensus", "total_txs", "Transactions in blocks since the engine started")
        self.mempool_size = gauge("mempool", "size", "Transactions waiting in the mempool")

    def at_height(self, last_committed: int) -> None:
        """The chain's last committed height (after the handshake, and after every block)."""
        self.latest_block_height.set(last_committed)
        self.height.set(last_committed + 1)

    def block_committed(self, height: int, transactions: int, waiting: int) -> None:
        """Block `height` with `transactions` is committed; `waiting` transactions are left in the mempool."""
        self.at_height(height)
        self.num_txs.set(transactions)
        self.total_txs.inc(transactions)
        self.mempool_size.set(waiting)
