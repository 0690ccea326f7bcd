"""`trolly-node init --state-sync RPC1,RPC2`: the trusted block a joining node's light client starts from.

CometBFT's state sync verifies the snapshot's app hash with a light client, which needs one block it trusts
(`trust_height`, `trust_hash`) and at least two RPC servers to fetch headers from. Those come from the nodes the
operator names: every one must answer, be of the same chain, and report the same block hash at the trust
height, or nothing is written and the operator is told which node disagreed or did not answer. A trust hash the
operator gives (`--trust-hash`, obtained out of band) must be that block's hash at every node.

The trust height is one below the lowest latest height among the nodes: the newest block whose commit every
node has (`/commit` at the latest height may not be canonical yet). Snapshots are taken below it, and the light
client verifies backwards from the trusted block to the snapshot's.

Only the standard library's HTTP client: the node side takes no wallet code (docs/architecture.md section 1).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from .home_genesis import HomeError

DEFAULT_TRUST_PERIOD = "168h0m0s"
"""CometBFT's default: the trusted block must be younger than this when the node starts syncing."""

RPC_TIMEOUT = 10.0


@dataclass(frozen=True)
class TrustedBlock:
    """What the RPC nodes agree on: the chain, its genesis, the block trusted, and the nodes' p2p addresses."""

    chain_id: str
    genesis: dict
    height: int
    hash: str
    rpc_servers: tuple[str, ...]
    peers: tuple[str, ...]

    def statesync_section(self, trust_period: str = DEFAULT_TRUST_PERIOD) -> dict:
        """config.toml's [statesync] values that turn state sync on from this block."""
        return {"enable": True, "rpc_servers": ",".join(self.rpc_servers), "trust_height": self.height,
                "trust_hash": self.hash, "trust_period": trust_period}


def parse_rpc_servers(text: str) -> list[str]:
    """`host:port` or URL entries, comma separated, as http(s) URLs; two at least (CometBFT needs two)."""
    servers = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        if "://" not in entry:
            entry = "http://" + entry
        url = urllib.parse.urlsplit(entry)
        scheme = {"tcp": "http"}.get(url.scheme, url.scheme)
        if scheme not in ("http", "https") or not url.hostname or not url.port:
            raise HomeError(f"--state-sync: {entry!r} is not an RPC address (host:port or http://host:port)")
        servers.append(f"{scheme}://{url.hostname}:{url.port}")
    if len(set(servers)) < 2:
        raise HomeError("--state-sync needs at least two different RPC servers: the light client cross-checks "
                        "them, and CometBFT refuses fewer")
    return servers


def trusted_block(servers: list[str], trust_height: int | None = None, trust_hash: str | None = None,
                  timeout: float = RPC_TIMEOUT) -> TrustedBlock:
    """Ask every server, cross-check their answers, and return the block to trust; HomeError saying why not."""
    statuses = {server: _call(server, "status", timeout) for server in servers}
    try:
        chains = {server: status["node_info"]["network"] for server, status in statuses.items()}
        latest = min(int(status["sync_info"]["latest_block_height"]) for status in statuses.values())
    except (KeyError, TypeError, ValueError) as exc:
        raise HomeError(f"an RPC server's /status lacks the chain id or latest height ({exc!r})") from None
    if len(set(chains.values())) > 1:
        raise HomeError(f"the RPC servers are of different chains: {_listing(chains)}")
    height = trust_height if trust_height is not None else latest - 1
    if not 1 <= height < latest + 1:
        raise HomeError(f"trust height {height} is not a block every RPC server has (the lowest latest height "
                        f"among them is {latest}); wait for a few blocks, or give a lower --trust-height")
    hashes = {server: _block_hash(server, height, timeout) for server in servers}
    if len(set(hashes.values())) > 1:
        raise HomeError(f"the RPC servers disagree on block {height}'s hash: {_listing(hashes)}; "
                        f"one of them is on another fork or lying: name servers you trust")
    block_hash = next(iter(hashes.values()))
    if trust_hash is not None and trust_hash.strip().upper() != block_hash:
        raise HomeError(f"the trust hash given, {trust_hash.strip().upper()}, is not block {height}'s hash: every "
                        f"RPC server has {block_hash}; refusing to write a trust root the chain does not have")
    genesis = _call(servers[0], "genesis", timeout)["genesis"]
    peers = tuple(_peer_address(server, statuses[server]) for server in servers)
    return TrustedBlock(chains[servers[0]], genesis, height, block_hash, tuple(servers), peers)


def _block_hash(server: str, height: int, timeout: float) -> str:
    commit = _call(server, f"commit?height={height}", timeout)
    try:
        return commit["signed_header"]["commit"]["block_id"]["hash"].upper()
    except (KeyError, TypeError, AttributeError):
        raise HomeError(f"{server} answered /commit?height={height} without a block hash") from None


def _peer_address(server: str, status: dict) -> str:
    """`id@host:port` of the node behind `server`: its listen address, or the RPC's host if it listens on all."""
    node_info = status["node_info"]
    listen = urllib.parse.urlsplit(node_info["listen_addr"] if "://" in node_info["listen_addr"]
                                   else "tcp://" + node_info["listen_addr"])
    host = listen.hostname if listen.hostname not in (None, "0.0.0.0", "::") else urllib.parse.urlsplit(server).hostname
    return f"{node_info['id']}@{host}:{listen.port}"


def _call(server: str, path: str, timeout: float) -> dict:
    """The `result` of a JSON-RPC GET; HomeError naming the server when it cannot be had."""
    try:
        with urllib.request.urlopen(f"{server}/{path}", timeout=timeout) as response:
            document = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HomeError(f"RPC server {server} did not answer /{path}: {exc}; state sync needs every server it is "
                        f"given to answer") from None
    if not isinstance(document, dict) or "result" not in document:
        raise HomeError(f"RPC server {server} answered /{path} with an error: {str(document)[:200]}")
    return document["result"]


def _listing(values: dict[str, str]) -> str:
    return ", ".join(f"{server} says {value}" for server, value in values.items())
