"""The round's aggregation check: the next round's start weights must be the deterministic aggregate.

W_{r+1} = outer Nesterov step over the decoded updates of the workers whose round r passed verification,
weighted by samples processed (docs/protocol.md section 2, `compute.outer_step.aggregate_round`, bit for bit the same
in every process). A verifier recomputes it from the updates (fetched by their committed hash) and compares
its hash with what round r + 1's workers say they started from. A worker that starts round r + 1 from
anything else (stale weights, its own update only, weights it likes better) fails each of its sampled
segments of round r + 1 with the reason, whatever the other members committed; when the updates cannot be
fetched the verifier votes UNAVAILABLE, never adopting the chain's majority.

The verifier service follows a task's W_r with the one weights follower (`compute/weights_follower.py`);
`check_aggregation` is the same rule as a report, for the verification benchmark.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from trolly.compute.errors import ComputeError
from trolly.compute.outer_step import GlobalState, aggregate_round
from trolly.compute.spec import TaskSpec


@dataclasses.dataclass(frozen=True)
class AggregationReport:
    round: int  # the round whose start weights were checked (r + 1)
    expected_hash: bytes
    claimed_hash: bytes
    matches: bool
    reason: str

    def to_json(self) -> dict:
        return {"round": self.round, "expected_hash": self.expected_hash.hex(), "claimed_hash": self.claimed_hash.hex(),
                "matches": self.matches, "reason": self.reason}


def check_aggregation(previous: GlobalState, encoded_updates: Sequence[tuple[int, int, bytes]], spec: TaskSpec,
                      claimed_next_hash: bytes) -> AggregationReport:
    """Compare the claimed hash of W_{r+1} with the aggregate recomputed here."""
    try:
        expected = aggregate_round(previous, encoded_updates, spec).weights_hash()
    except ComputeError as error:
        return AggregationReport(previous.round + 1, b"", claimed_next_hash, False, f"updates do not aggregate: {error}")
    matches = expected == claimed_next_hash
    reason = ("start weights are the deterministic aggregate" if matches else
              f"start weights {claimed_next_hash.hex()[:16]}... are not the aggregate {expected.hex()[:16]}...")
    return AggregationReport(previous.round + 1, expected, claimed_next_hash, matches, reason)
