"""A home that joins a running chain by state sync (`trolly-node init --state-sync`).

Two ways in: a new home (`join_home`) takes the chain's genesis and the RPC nodes' p2p addresses from the
trusted nodes themselves and turns state sync on; an existing home of the same chain (`enable_state_sync`, for
one written by other means, e.g. a localnet's `add_node`) keeps everything and only gets its `[statesync]`
section rewritten. Either way the trust root is `state_sync_trust.trusted_block`'s, cross-checked.
"""

from __future__ import annotations

import os
import pathlib
import tomllib
from dataclasses import replace

import tomli_w

from .home import HomePaths, NodeConfig, ValidatorKey, check_home_chain_id, write_home
from .home_genesis import HomeError
from .state_sync_trust import DEFAULT_TRUST_PERIOD, TrustedBlock
from trolly.wallet.files import write_atomically


def join_home(root: str | os.PathLike, trusted: TrustedBlock, config: NodeConfig,
              trust_period: str = DEFAULT_TRUST_PERIOD, force: bool = False) -> HomePaths:
    """A new full node's home: the chain's genesis, a fresh (non-validator) key, the RPC nodes as persistent
    peers (besides any `config` names), state sync on from the trusted block."""
    peers = [peer for peer in config.persistent_peers.split(",") if peer] + list(trusted.peers)
    joined = replace(config, persistent_peers=",".join(dict.fromkeys(peers)),
                     statesync={**config.statesync, **trusted.statesync_section(trust_period)})
    return write_home(root, trusted.genesis, ValidatorKey.generate(), config=joined, force=force)


def enable_state_sync(root: str | os.PathLike, trusted: TrustedBlock,
                      trust_period: str = DEFAULT_TRUST_PERIOD) -> HomePaths:
    """Turn state sync on in an existing home of the trusted chain whose node has no blocks yet."""
    home = check_home_chain_id(root, trusted.chain_id)
    if any((home.paths.data_dir / name).exists() for name in ("blockstore.db", "state.db")):
        raise HomeError(f"{home.paths.root} already holds CometBFT blocks: state sync only starts an empty node "
                        f"(use --force to start over with a new home)")
    document = tomllib.loads(home.paths.config.read_text())
    document["statesync"] = {**document.get("statesync", {}), **trusted.statesync_section(trust_period)}
    write_atomically(pathlib.Path(home.paths.config), tomli_w.dumps(document).encode(), mode=0o644)
    return home.paths
