"""Checks of what a worker claims, before and around the replay: step count, samples, checkpoint positions.

A commitment (docs/protocol.md section 4) states `steps`, `samples_processed`, `num_checkpoints` and
`start_weights_hash`. Pay is by samples, so an inflated count is a cheat even when every replayed segment is
right; and checkpoints must sit exactly where the protocol puts them (j * k steps, the last at `steps`), or a
worker could label a short run as a long one. Every function returns "" when the claim holds, otherwise the
reason, in words an operator can act on.
"""

from __future__ import annotations

import torch

from trolly.compute.checkpoints import MOMENTS, TrainingState, weights_hash
from trolly.compute.spec import TaskSpec
from trolly.compute.training import segment_bounds


def check_commitment(spec: TaskSpec, *, steps: int, samples_processed: int, num_checkpoints: int, segment: int) -> str:
    """The commitment's numbers agree with each other and with the spec."""
    if steps < 1:
        return f"claims {steps} steps; a round needs at least one"
    expected_checkpoints = spec.num_checkpoints(steps)
    if num_checkpoints != expected_checkpoints:
        return (f"claims {num_checkpoints} checkpoints for {steps} steps every {spec.training.checkpoint_every}; "
                f"the protocol gives {expected_checkpoints}")
    expected_samples = steps * spec.training.batch_size
    if samples_processed != expected_samples:
        return (f"claims {samples_processed} samples for {steps} steps of batch {spec.training.batch_size}; "
                f"that is {expected_samples}")
    if not 0 <= segment < num_checkpoints - 1:
        return f"segment {segment} is outside the round's {num_checkpoints - 1} segments"
    return ""


def check_start_position(spec: TaskSpec, *, steps: int, segment: int, start: TrainingState) -> str:
    """Checkpoint i holds optimizer state, sits at step i * k, and its AdamW counters say so."""
    begin, _ = segment_bounds(segment, steps, spec.training.checkpoint_every)
    if start.final:
        return f"checkpoint {segment} holds no optimizer state; only the round's last checkpoint may leave it out"
    if start.step != begin:
        return f"checkpoint {segment} is labelled step {start.step}, the protocol puts it at step {begin}"
    for name, slots in start.optimizer.items():
        if float(slots["step"]) != float(begin):
            return f"checkpoint {segment}'s AdamW counter for {name!r} is {float(slots['step'])}, not {begin}"
    return ""


def check_end_position(spec: TaskSpec, *, steps: int, segment: int, end: TrainingState) -> str:
    """Checkpoint i + 1 sits at the segment's end and holds optimizer state unless it is the round's last."""
    _, finish = segment_bounds(segment, steps, spec.training.checkpoint_every)
    if end.final != (finish == steps):
        return (f"checkpoint {segment + 1} is the round's last and must hold no optimizer state" if finish == steps
                else f"checkpoint {segment + 1} holds no optimizer state; only the round's last checkpoint may leave it out")
    if end.step != finish:
        return f"checkpoint {segment + 1} is labelled step {end.step}, the protocol puts it at step {finish}"
    return ""


def check_round_start(start: TrainingState, start_weights_hash: bytes) -> str:
    """Checkpoint 0 holds the committed start weights and an optimizer that has not stepped."""
    actual = weights_hash(start.weights)
    if actual != start_weights_hash:
        return f"checkpoint 0 holds weights {actual.hex()[:16]}..., the commitment says {start_weights_hash.hex()[:16]}..."
    for name, slots in start.optimizer.items():
        if float(slots["step"]) != 0.0 or any(bool(torch.any(slots[m] != 0)) for m in MOMENTS):
            return f"checkpoint 0's optimizer state for {name!r} is not fresh"
    return ""


def check_expected_start(start_weights_hash: bytes, expected: bytes | None, source: str) -> str:
    """The weights the worker says it started from are the round's global weights (`source` names who says so:
    the verifying service derives them itself, `trolly-verifier replay` takes `--expected-start`)."""
    if expected is None or start_weights_hash == expected:
        return ""
    return (f"started from weights {start_weights_hash.hex()[:16]}..., but the round's global weights "
            f"({source}) are {expected.hex()[:16]}...")
