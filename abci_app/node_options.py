"""The app's own node options, from config.toml's `[trolly]` section: snapshots and what history to keep.

    [trolly]
    snapshot_interval = 1000     # a state-sync snapshot every N blocks (0: none)
    snapshot_keep_recent = 2     # snapshots kept on disk
    min_retain_blocks = 100000   # CometBFT blocks kept (0: every block, no pruning); raised to the floors below
    state_keep_recent = 1000     # heights of the app's own state a query can read (1: the latest only)

CometBFT ignores the section; `trolly-node start` reads it once (`read_node_options`) and hands the values to
the store, the snapshot store and the retention policy (`retention`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from trolly.chain.market.params import MarketParams, longest_reveal_wait

from .home_genesis import HomeError

DEFAULT_SNAPSHOT_INTERVAL = 1000
"""Blocks between snapshots: a joining node replays at most this many blocks after restoring one; each snapshot
costs one pass over the state on a background thread."""

DEFAULT_SNAPSHOT_KEEP_RECENT = 2
"""Two snapshots on disk, so that a peer fetching the older one is not cut off when the next is written."""

DEFAULT_MIN_RETAIN_BLOCKS = 100_000
"""The default evidence age in blocks (`default_consensus_params`, evidence.max_age_num_blocks): a validator
must keep the blocks evidence can still name, and keeping more than that only grows the disk."""

DEFAULT_STATE_KEEP_RECENT = 4 * longest_reveal_wait(MarketParams())
"""Recent heights of the app's state a query can read: a round's whole path from a vote to its reveal deadline
(`longest_reveal_wait` of the default market params), four times over, so that a verifier or a client looking
back over a round it missed still finds every height of it; older ones are pruned to bound the disk."""


@dataclass(frozen=True)
class NodeOptions:
    snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL
    snapshot_keep_recent: int = DEFAULT_SNAPSHOT_KEEP_RECENT
    min_retain_blocks: int = DEFAULT_MIN_RETAIN_BLOCKS
    state_keep_recent: int = DEFAULT_STATE_KEEP_RECENT

    def to_toml(self) -> dict[str, int]:
        return asdict(self)


_LEAST = {"snapshot_interval": 0, "snapshot_keep_recent": 1, "min_retain_blocks": 0, "state_keep_recent": 1}


def read_node_options(section: dict) -> NodeOptions:
    """The options in a loaded `[trolly]` table (defaults for those missing); HomeError naming a bad one."""
    values = {}
    for field in fields(NodeOptions):
        value = section.get(field.name, field.default)
        if type(value) is not int or value < _LEAST[field.name]:
            raise HomeError(f"config.toml [trolly] {field.name} must be an integer >= {_LEAST[field.name]}, "
                            f"got {value!r}")
        values[field.name] = value
    return NodeOptions(**values)
