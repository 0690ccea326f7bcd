"""Which blocks CometBFT may prune: the `retain_height` the app answers in every Commit.

CometBFT deletes blocks below the height the app returns (0: keep all). The app keeps, counting back from the
block just committed, the most of:

- `min_retain_blocks`, the operator's choice (`node_options`; 0 turns pruning off altogether);
- the evidence age in blocks (genesis consensus params, evidence.max_age_num_blocks): evidence of a
  validator's misbehaviour names a block at most that old, and verifying it needs that block's validator set;
- the market's longest wait from a vote to its reveal deadline (`longest_reveal_wait` of the market params in
  state): a verifier or client catching up on a round reads that round's blocks and results;
- `snapshot_interval * snapshot_keep_recent`: a node restored from our oldest snapshot catches up by fetching
  every block after it (block sync), so those must still be here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .node_options import NodeOptions


@dataclass(frozen=True)
class Retention:
    min_retain_blocks: int = 0
    evidence_max_age_blocks: int = 0
    snapshot_blocks: int = 0

    @staticmethod
    def from_options(options: NodeOptions, genesis: dict) -> "Retention":
        return Retention(options.min_retain_blocks, evidence_max_age_blocks(genesis),
                         options.snapshot_interval * options.snapshot_keep_recent)

    def blocks_kept(self, market_window: int) -> int:
        """How many of the latest blocks stay (0: all)."""
        if self.min_retain_blocks == 0:
            return 0
        return max(self.min_retain_blocks, self.evidence_max_age_blocks, market_window, self.snapshot_blocks)

    def retain_height(self, height: int, market_window: int) -> int:
        """ResponseCommit.retain_height after committing `height`: the lowest block kept (0: keep all)."""
        kept = self.blocks_kept(market_window)
        return 0 if kept == 0 or height <= kept else height - kept + 1


def evidence_max_age_blocks(genesis: dict) -> int:
    """evidence.max_age_num_blocks of a genesis doc's consensus params (0 when it sets none)."""
    try:
        return max(0, int(genesis["consensus_params"]["evidence"]["max_age_num_blocks"]))
    except (KeyError, TypeError, ValueError):
        return 0
