"""CometBFT v0.38's config.toml, as `cometbft init` writes it, with the values that differ per node.

`config_toml(NodeConfig(...))` returns the whole document as a dict (written with tomli_w); the keys and
defaults are CometBFT v0.38's, so a real `cometbft node` reads the file unchanged. One section is the app's
own: `[trolly]`, read by `trolly-node start` (CometBFT ignores sections it does not know):

    [trolly]
    signature_checker = true   # check large unchecked blocks' signatures in a helper process
    metrics_listen_addr = "127.0.0.1:26661"   # the app's own Prometheus endpoint ("" or "0": off)
    metrics_port_in_use = "continue"          # that address taken: "continue" without metrics, or "refuse"
    snapshot_interval = 1000                  # and the other snapshot and history options of `node_options`

CometBFT's own Prometheus endpoint is on (`[instrumentation] prometheus = true`) at `prometheus_listen_addr`,
loopback by default; the solo engine serves the same address with the CometBFT metrics it can stand in for
(`abci_app/engine/metrics.py`). docs/operations.md lists every metric.

Disk: `[storage] discard_abci_responses` stays false and `[tx_index] indexer` "kv", because the wallet, the
worker's earnings, the console and the localnet read results through `/block_results` and `/tx_search`; neither
is pruned by `retain_height` in v0.38, which has no compaction options of its own (docs/operations.md "Pruning").

Re-exported by `trolly.abci_app.home`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .home_genesis import COMETBFT_VERSION, HomeError
from .node_options import NodeOptions, read_node_options as _read_section

APP_SECTION = "trolly"
"""The config.toml section that holds the app's own options (`trolly-node start` reads it)."""

DEFAULT_PROMETHEUS_ADDRESS = "127.0.0.1:26660"
"""CometBFT's Prometheus endpoint (its own default port, on loopback: metrics are for the operator)."""
DEFAULT_APP_METRICS_ADDRESS = "127.0.0.1:26661"
"""The app's own endpoint: the port after CometBFT's (the worker's default is 26662, the verifier's 26663)."""
DEFAULT_METRICS_PORT_IN_USE = "continue"
"""A taken metrics address does not stop a validator: it says which and signs blocks without metrics."""


@dataclass(frozen=True)
class NodeConfig:
    """The config.toml values that differ between nodes; everything else takes CometBFT's defaults."""

    moniker: str = "trolly-node"
    proxy_app: str = "tcp://127.0.0.1:26658"
    rpc_laddr: str = "tcp://127.0.0.1:26657"
    p2p_laddr: str = "tcp://0.0.0.0:26656"
    persistent_peers: str = ""
    addr_book_strict: bool = True
    allow_duplicate_ip: bool = False
    timeout_commit: str = "1s"
    timeout_propose: str = "3s"
    create_empty_blocks: bool = True
    prometheus_listen_addr: str = DEFAULT_PROMETHEUS_ADDRESS
    signature_checker: bool = True
    metrics_listen_addr: str = DEFAULT_APP_METRICS_ADDRESS
    metrics_port_in_use: str = DEFAULT_METRICS_PORT_IN_USE
    options: NodeOptions = NodeOptions()  # snapshots and history kept: the rest of `[trolly]`
    statesync: dict[str, Any] = field(default_factory=dict)  # [statesync] values over CometBFT's defaults
    extra: dict[str, Any] = field(default_factory=dict)  # {"section": {"key": value}} overrides


def config_toml(config: NodeConfig) -> dict:
    """The whole CometBFT v0.38 config.toml as a dict (keys and defaults as `cometbft init` writes them), with
    the app's `[trolly]` section and `config.extra`'s overrides on top."""
    document: dict[str, Any] = {
        **_base_section(config),
        "rpc": _rpc_section(config),
        "p2p": _p2p_section(config),
        "mempool": _mempool_section(),
        "statesync": {**_statesync_section(), **config.statesync},
        "blocksync": {"version": "v0"},
        "consensus": _consensus_section(config),
        "storage": {"discard_abci_responses": False},
        "tx_index": {"indexer": "kv", "psql-conn": ""},
        "instrumentation": _instrumentation_section(config),
        APP_SECTION: {"signature_checker": config.signature_checker, "metrics_listen_addr": config.metrics_listen_addr,
                      "metrics_port_in_use": config.metrics_port_in_use, **config.options.to_toml()},
    }
    for section, values in config.extra.items():
        if isinstance(document.get(section), dict):
            document[section].update(values)
        else:
            document[section] = values
    return document


def signature_checker_enabled(document: dict) -> bool:
    """`[trolly] signature_checker` of a loaded config.toml (on when absent); HomeError unless a boolean."""
    section = document.get(APP_SECTION, {})
    if not isinstance(section, dict):
        raise HomeError(f"config.toml [{APP_SECTION}] must be a table, got {section!r}")
    value = section.get("signature_checker", True)
    if not isinstance(value, bool):
        raise HomeError(f"config.toml [{APP_SECTION}] signature_checker must be true or false, got {value!r}")
    return value


def app_metrics_settings(document: dict) -> tuple[str, str]:
    """`[trolly] metrics_listen_addr` and `metrics_port_in_use` of a loaded config.toml (defaults when absent, as in
    a home written before metrics); HomeError unless both are strings."""
    section = document.get(APP_SECTION, {})
    if not isinstance(section, dict):
        raise HomeError(f"config.toml [{APP_SECTION}] must be a table, got {section!r}")
    address = section.get("metrics_listen_addr", DEFAULT_APP_METRICS_ADDRESS)
    choice = section.get("metrics_port_in_use", DEFAULT_METRICS_PORT_IN_USE)
    for name, value in (("metrics_listen_addr", address), ("metrics_port_in_use", choice)):
        if not isinstance(value, str):
            raise HomeError(f"config.toml [{APP_SECTION}] {name} must be a string, got {value!r}")
    return address, choice


def prometheus_address(document: dict) -> str:
    """Where a loaded config.toml has CometBFT (or the solo engine) serve Prometheus metrics; "" when off."""
    section = document.get("instrumentation", {})
    if not isinstance(section, dict) or section.get("prometheus") is not True:
        return ""
    address = section.get("prometheus_listen_addr", "")
    return address if isinstance(address, str) else ""


def read_node_options(document: dict) -> NodeOptions:
    """The snapshot and history options of a loaded config.toml's `[trolly]` (defaults when absent)."""
    section = document.get(APP_SECTION, {})
    if not isinstance(section, dict):
        raise HomeError(f"config.toml [{APP_SECTION}] must be a table, got {section!r}")
    return _read_section(section)


def _base_section(config: NodeConfig) -> dict[str, Any]:
    """The top-level keys: the app's address, the node's name, where its keys and data live."""
    return {
        "version": COMETBFT_VERSION,
        "proxy_app": config.proxy_app,
        "moniker": config.moniker,
        "db_backend": "goleveldb",
        "db_dir": "data",
        "log_level": "info",
        "log_format": "plain",
        "genesis_file": "config/genesis.json",
        "priv_validator_key_file": "config/priv_validator_key.json",
        "priv_validator_state_file": "data/priv_validator_state.json",
        "priv_validator_laddr": "",
        "node_key_file": "config/node_key.json",
        "abci": "socket",
        "filter_peers": False,
    }


def _rpc_section(config: NodeConfig) -> dict[str, Any]:
    return {
        "laddr": config.rpc_laddr,
        "cors_allowed_origins": [],
        "cors_allowed_methods": ["HEAD", "GET", "POST"],
        "cors_allowed_headers": ["Origin", "Accept", "Content-Type", "X-Requested-With", "X-Server-Time"],
        "grpc_laddr": "",
        "grpc_max_open_connections": 900,
        "unsafe": False,
        "max_open_connections": 900,
        "max_subscription_clients": 100,
        "max_subscriptions_per_client": 5,
        "experimental_subscription_buffer_size": 200,
        "experimental_websocket_write_buffer_size": 200,
        "experimental_close_on_slow_client": False,
        "timeout_broadcast_tx_commit": "10s",
        "max_request_batch_size": 10,
        "max_body_bytes": 1000000,
        "max_header_bytes": 1048576,
        "tls_cert_file": "",
        "tls_key_file": "",
        "pprof_laddr": "",
    }


def _p2p_section(config: NodeConfig) -> dict[str, Any]:
    return {
        "laddr": config.p2p_laddr,
        "external_address": "",
        "seeds": "",
        "persistent_peers": config.persistent_peers,
        "addr_book_file": "config/addrbook.json",
        "addr_book_strict": config.addr_book_strict,
        "max_num_inbound_peers": 40,
        "max_num_outbound_peers": 10,
        "unconditional_peer_ids": "",
        "persistent_peers_max_dial_period": "0s",
        "flush_throttle_timeout": "100ms",
        "max_packet_msg_payload_size": 1024,
        "send_rate": 5120000,
        "recv_rate": 5120000,
        "pex": True,
        "seed_mode": False,
        "private_peer_ids": "",
        "allow_duplicate_ip": config.allow_duplicate_ip,
        "handshake_timeout": "20s",
        "dial_timeout": "3s",
    }


def _mempool_section() -> dict[str, Any]:
    return {
        "type": "flood",
        "recheck": True,
        "recheck_timeout": "1s",
        "broadcast": True,
        "wal_dir": "",
        "size": 5000,
        "max_txs_bytes": 1073741824,
        "cache_size": 10000,
        "keep-invalid-txs-in-cache": False,
        "max_tx_bytes": 1048576,
        "max_batch_bytes": 0,
        "experimental_max_gossip_connections_to_persistent_peers": 0,
        "experimental_max_gossip_connections_to_non_persistent_peers": 0,
    }


def _statesync_section() -> dict[str, Any]:
    return {
        "enable": False,
        "rpc_servers": "",
        "trust_height": 0,
        "trust_hash": "",
        "trust_period": "168h0m0s",
        "discovery_time": "15s",
        "temp_dir": "",
        "chunk_request_timeout": "10s",
        "chunk_fetchers": "4",
    }


def _consensus_section(config: NodeConfig) -> dict[str, Any]:
    return {
        "wal_file": "data/cs.wal/wal",
        "timeout_propose": config.timeout_propose,
        "timeout_propose_delta": "500ms",
        "timeout_prevote": "1s",
        "timeout_prevote_delta": "500ms",
        "timeout_precommit": "1s",
        "timeout_precommit_delta": "500ms",
        "timeout_commit": config.timeout_commit,
        "double_sign_check_height": 0,
        "skip_timeout_commit": False,
        "create_empty_blocks": config.create_empty_blocks,
        "create_empty_blocks_interval": "0s",
        "peer_gossip_sleep_duration": "100ms",
        "peer_query_maj23_sleep_duration": "2s",
    }


def _instrumentation_section(config: NodeConfig) -> dict[str, Any]:
    return {
        "prometheus": bool(config.prometheus_listen_addr),
        "prometheus_listen_addr": config.prometheus_listen_addr,
        "max_open_connections": 3,
        "namespace": "cometbft",
    }
