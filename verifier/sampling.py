"""Which segments get replayed, and how likely that is to catch a cheater. Pure functions only.

The chain draws the segments (docs/protocol.md section 4) from the hash of a block that came after every
commitment of the round, mixed with task, round and worker; `sampled_segments` is the same draw (it calls
the chain's own function, so the two can never disagree) and lets a verifier or an auditor re-derive what
the chain stored.

Detection. A worker that fakes k of its n segments in a round is caught by s distinct samples with
probability 1 - C(n - k, s) / C(n, s) (`round_detection`). Over a task, with samples drawn independently
round after round and a fraction f of all segments faked, s samples in total catch it with probability at
least 1 - (1 - f * d)^s, where d is the chance that replaying a faked segment exposes it (the benchmark
measures d per cheat class; it is 1 for every class so far). 44 samples give 0.99 at f = 0.1 and d = 1
(`samples_for_detection`).
"""

from __future__ import annotations

import math
from fractions import Fraction

from trolly.chain.market.sampling import sample_segments

from .errors import ConfigurationError


def segment_count(num_checkpoints: int) -> int:
    """Segments in a round with checkpoints 0..n: n = num_checkpoints - 1."""
    if num_checkpoints < 2:
        raise ConfigurationError(f"a round needs at least two checkpoints, got {num_checkpoints}")
    return num_checkpoints - 1


def sampled_segments(block_hash: bytes, task_id: int, round_index: int, worker: bytes, num_checkpoints: int,
                     samples: int) -> list[int]:
    """The segment indices the chain samples for one worker-round, in the order drawn."""
    return sample_segments(block_hash, task_id, round_index, worker, segment_count(num_checkpoints), samples)


def round_detection(segments: int, faked: int, samples: int) -> Fraction:
    """Exact probability that `samples` distinct segments out of `segments` include one of `faked`."""
    if not 0 <= faked <= segments or samples < 0:
        raise ConfigurationError(f"need 0 <= faked <= segments and samples >= 0, got {faked}, {segments}, {samples}")
    drawn = min(samples, segments)
    return 1 - Fraction(math.comb(segments - faked, drawn), math.comb(segments, drawn))


def task_detection(fraction_faked: float, samples: int, per_segment_detection: float = 1.0) -> float:
    """Lower bound on catching a cheater who fakes `fraction_faked` of its segments, with `samples` samples."""
    _check_probability(fraction_faked, "fraction_faked")
    _check_probability(per_segment_detection, "per_segment_detection")
    return 1.0 - (1.0 - fraction_faked * per_segment_detection) ** samples


def samples_for_detection(fraction_faked: float, target: float, per_segment_detection: float = 1.0) -> int:
    """Fewest samples s with task_detection(fraction_faked, s, d) >= target (44 for 0.1, 0.99, 1)."""
    _check_probability(target, "target")
    miss = 1.0 - fraction_faked * per_segment_detection
    if not 0 < fraction_faked * per_segment_detection:
        raise ConfigurationError("a cheat that is never exposed cannot be caught by more samples")
    if miss <= 0:
        return 1
    samples = math.ceil(math.log(1.0 - target) / math.log(miss))
    # log rounding can leave the bound a hair short of the target; step up until it holds exactly.
    while task_detection(fraction_faked, samples, per_segment_detection) < target:
        samples += 1
    return samples


def _check_probability(value: float, name: str) -> None:
    if not 0.0 <= value <= 1.0 or math.isnan(value):
        raise ConfigurationError(f"{name} must be a probability in [0, 1], got {value!r}")
