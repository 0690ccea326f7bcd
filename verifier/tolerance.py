"""When a replayed segment counts as the same as the committed one.

Exact profile (docs/protocol.md section 2a: torch version, thread count, instruction set): the replay must
give the committed checkpoint byte for byte. PyTorch on CPU is bitwise reproducible under a fixed profile, so
any difference at all is a different computation. The verifier runs the committed profile whenever its CPU
can: the thread count is set per replay and another instruction set runs in a child process
(`replay_profile.py`, `isa_child_replay.py`). That is the normal path, and the one every target of issue 6 is met on.

A GPU-trained segment on a verifier without that GPU (the whole validator set's check of a disputed GPU segment,
docs/protocol.md 4.4) is replayed on the CPU under the profile's own thread count and instruction set and judged
by this rule too: nothing random runs in a step, so it is the same computation up to rounding. That the GPU's
drift from the CPU stays inside these thresholds is assumed, not yet measured on a GPU (docs/security.md).

Fallback, when this CPU lacks the committed instruction set: float sums are reassociated and the bytes
differ a little, so we compare numbers. The error of a tensor group is the L2 distance between replay and
claim, relative to how far the segment moved that group (start to claim):

    weights_error = ||W_replay - W_claim|| / ||W_claim - W_start||       (over all parameters at once)
    moment_error  = the same for AdamW's exp_avg, and for exp_avg_sq (the larger of the two)

A segment passes when the step counters match exactly, weights_error <= `WEIGHTS_THRESHOLD` and
moment_error <= `MOMENTS_THRESHOLD`. Measuring against the segment's own update (not the weights' norm) keeps
the rule meaningful for a model whose weights barely move in k steps: a cheat saves compute only by making
the update different.

Calibration (`python -m benchmarks.verification`, its `calibration` section; the figures are in
docs/performance.md): honest workers under every thread count and instruction set available, and every cheat
class, judged by this rule. `WEIGHTS_THRESHOLD` sits a few times above the largest honest drift and several
times below the smallest bf16-autocast error; `MOMENTS_THRESHOLD` a few times above the largest honest moment
drift, so it only catches gross forgeries of the optimizer state. The margins are thin, and fp16 autocast sits
inside honest cross-instruction-set drift (the fallback misses some of its faked segments): hence the exact
path for every instruction set the verifier's CPU supports, and this rule only for a verifier without the
worker's instruction set. Small models drift more per step than large ones (a few ReLUs and attention weights
whose rounding flips dominate them), and drift grows with a segment's length: segments longer than 10 steps are
refused by the spec (compute/spec.py), beyond which honest drift overlaps bf16 (docs/architecture.md section 5).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import torch

from trolly.compute.checkpoints import MOMENTS, TrainingState

WEIGHTS_THRESHOLD = 3e-4
"""Largest relative weights error accepted when this CPU cannot run the committed profile exactly."""

MOMENTS_THRESHOLD = 3e-3
"""Largest relative error of the AdamW moments accepted in that case (moments drift more: see above)."""


BITWISE, TOLERANCE = "bitwise", "tolerance"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The numbers behind a replay's verdict."""

    mode: str  # BITWISE or TOLERANCE
    passed: bool
    reason: str
    weights_error: float
    moment_error: float
    update_norm: float  # ||W_claim - W_start||, the scale of weights_error (NaN when the bytes are identical)
    threshold: float  # 0.0 in bitwise mode

    def to_json(self) -> dict:
        return {
            "mode": self.mode, "passed": self.passed, "reason": self.reason,
            "weights_error": _finite_or_text(self.weights_error), "moment_error": _finite_or_text(self.moment_error),
            "update_norm": _finite_or_text(self.update_norm), "threshold": self.threshold,
        }


def _finite_or_text(value: float):
    return value if math.isfinite(value) else str(value)


def _flat(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    pieces = [t.detach().reshape(-1).to(torch.float64) for t in tensors]
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.float64)


def relative_error(start: Iterable[torch.Tensor], claimed: Iterable[torch.Tensor],
                   replayed: Iterable[torch.Tensor]) -> tuple[float, float]:
    """(||replayed - claimed|| / ||claimed - start||, ||claimed - start||), in float64.

    A claim that did not move while the replay did is an infinite error; both unmoved is no error."""
    start_flat, claimed_flat, replayed_flat = _flat(start), _flat(claimed), _flat(replayed)
    moved = float(torch.linalg.vector_norm(claimed_flat - start_flat))
    if replayed_flat.numel() == 0:  # only the update's size was asked for
        return 0.0, moved
    if not (torch.isfinite(claimed_flat).all() and torch.isfinite(replayed_flat).all()):
        return math.inf, math.nan
    distance = float(torch.linalg.vector_norm(replayed_flat - claimed_flat))
    if moved == 0.0:
        return (0.0 if distance == 0.0 else math.inf), moved
    return distance / moved, moved


def structure_mismatch(start: TrainingState, claimed: TrainingState, replayed: TrainingState) -> str:
    """Why two states cannot be compared number by number ("" when they can)."""
    if claimed.step != replayed.step:
        return f"claimed checkpoint is at step {claimed.step}, the replay ends at step {replayed.step}"
    if set(claimed.weights) != set(replayed.weights) or set(claimed.optimizer) != set(replayed.optimizer):
        return "claimed checkpoint holds other tensors than the model"
    for name, tensor in replayed.weights.items():
        other = claimed.weights[name]
        if other.shape != tensor.shape or other.dtype != tensor.dtype:
            return f"claimed weights {name!r} have shape {tuple(other.shape)} {other.dtype}"
    for name, slots in replayed.optimizer.items():
        claimed_slots = claimed.optimizer[name]
        if not torch.equal(claimed_slots["step"].to(torch.float64), slots["step"].to(torch.float64)):
            return f"claimed optimizer step counter of {name!r} is {float(claimed_slots['step'])}, replay has {float(slots['step'])}"
        for moment in MOMENTS:
            if claimed_slots[moment].shape != slots[moment].shape or claimed_slots[moment].dtype != slots[moment].dtype:
                return f"claimed optimizer state {name}/{moment} has the wrong shape or type"
    if set(start.weights) != set(claimed.weights):
        return "start and end checkpoints hold different tensors"
    return ""


def compare_states(start: TrainingState, claimed: TrainingState, replayed: TrainingState, *, same_profile: bool,
                   claimed_hash: bytes, replayed_hash: bytes, weights_threshold: float = WEIGHTS_THRESHOLD,
                   moments_threshold: float = MOMENTS_THRESHOLD) -> Comparison:
    """Judge a replay of the segment from `start` against the committed end checkpoint `claimed`."""
    names = sorted(replayed.weights)
    structure = structure_mismatch(start, claimed, replayed)
    if structure:
        return Comparison(BITWISE if same_profile else TOLERANCE, False, structure, math.inf, math.inf, math.nan,
                          0.0 if same_profile else weights_threshold)
    if same_profile and claimed_hash == replayed_hash:
        # Identical bytes: both errors are zero by definition, and the update's size, the scale they would be
        # measured against, is not computed (for a large model it costs as much as the replayed steps).
        return Comparison(BITWISE, True, "replay is bitwise identical", 0.0, 0.0, math.nan, 0.0)
    weights_error, update_norm = relative_error((start.weights[n] for n in names), (claimed.weights[n] for n in names),
                                                (replayed.weights[n] for n in names))
    moment_error = 0.0
    for moment in MOMENTS:
        order = sorted(replayed.optimizer)
        error, _ = relative_error((start.optimizer[n][moment] for n in order), (claimed.optimizer[n][moment] for n in order),
                                  (replayed.optimizer[n][moment] for n in order))
        moment_error = max(moment_error, error)
    if same_profile:
        identical = claimed_hash == replayed_hash
        reason = "replay is bitwise identical" if identical else "same determinism profile but the replay's bytes differ"
        return Comparison(BITWISE, identical, reason, weights_error, moment_error, update_norm, 0.0)
    within = weights_error <= weights_threshold and moment_error <= moments_threshold
    reason = (f"within tolerance (weights {weights_error:.3g} <= {weights_threshold:.3g}, moments {moment_error:.3g} "
              f"<= {moments_threshold:.3g})" if within else
              f"replay differs beyond tolerance (weights {weights_error:.3g}, limit {weights_threshold:.3g}; "
              f"moments {moment_error:.3g}, limit {moments_threshold:.3g})")
    return Comparison(TOLERANCE, within, reason, weights_error, moment_error, update_norm, weights_threshold)
