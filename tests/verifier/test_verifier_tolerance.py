"""The comparison rule: bitwise under the same profile, relative error to the segment's update otherwise."""

from __future__ import annotations

import dataclasses
import math

import torch

from trolly.compute.checkpoints import TrainingState, checkpoint_hash
from trolly.verifier.tolerance import (BITWISE, MOMENTS_THRESHOLD, TOLERANCE, WEIGHTS_THRESHOLD, compare_states, relative_error)


def state(step: int, scale: float, seed: int = 0) -> TrainingState:
    generator = torch.Generator().manual_seed(seed)
    weights = {"a": torch.randn(50, generator=generator) * scale, "b": torch.randn(3, 4, generator=generator) * scale}
    optimizer = {name: {"step": torch.tensor(float(step)), "exp_avg": tensor * 0.1, "exp_avg_sq": tensor.abs() * 0.01}
                 for name, tensor in weights.items()}
    return TrainingState(step, weights, optimizer)


def shifted(base: TrainingState, direction: TrainingState, amount: float) -> TrainingState:
    weights = {n: base.weights[n] + amount * direction.weights[n] for n in base.weights}
    optimizer = {n: {"step": base.optimizer[n]["step"],
                     "exp_avg": base.optimizer[n]["exp_avg"] + amount * direction.optimizer[n]["exp_avg"],
                     "exp_avg_sq": base.optimizer[n]["exp_avg_sq"] + amount * direction.optimizer[n]["exp_avg_sq"].abs()}
                 for n in base.optimizer}
    return TrainingState(base.step, weights, optimizer)


def compare(start, claimed, replayed, same_profile):
    return compare_states(start, claimed, replayed, same_profile=same_profile, claimed_hash=checkpoint_hash(claimed),
                          replayed_hash=checkpoint_hash(replayed))


START = state(0, 1e-2, seed=1)  # small weights: float32 can hold drift far below the threshold
END = shifted(dataclasses.replace(START, optimizer={n: {**s, "step": torch.tensor(5.0)} for n, s in START.optimizer.items()},
                                  step=5), state(0, 1.0, seed=2), 1e-3)


def test_identical_replay_passes_in_both_modes():
    for same in (True, False):
        result = compare(START, END, END, same)
        assert result.passed and result.weights_error == 0.0 and result.moment_error == 0.0
        assert result.mode == (BITWISE if same else TOLERANCE)


def test_drift_far_below_the_threshold_passes_only_across_profiles():
    direction = state(0, 1.0, seed=3)
    update = relative_error(START.weights.values(), END.weights.values(), END.weights.values())[1]
    size = float(torch.cat([t.reshape(-1) for t in direction.weights.values()]).norm())
    drift = shifted(END, direction, WEIGHTS_THRESHOLD * 0.05 * update / size)
    assert not compare(START, END, drift, True).passed
    result = compare(START, END, drift, False)
    assert result.passed and 0 < result.weights_error < WEIGHTS_THRESHOLD


def test_an_error_of_a_percent_of_the_update_fails():
    update_size = 1e-3
    wrong = shifted(END, state(0, 1.0, seed=4), update_size * 0.01)
    result = compare(START, END, wrong, False)
    assert not result.passed and result.weights_error > 5 * WEIGHTS_THRESHOLD
    assert "beyond tolerance" in result.reason


def test_step_counters_must_match_exactly():
    relabelled = dataclasses.replace(END, step=6)
    assert "step" in compare(START, relabelled, END, False).reason
    counters = {n: {**s, "step": torch.tensor(4.0)} for n, s in END.optimizer.items()}
    result = compare(START, dataclasses.replace(END, optimizer=counters), END, False)
    assert not result.passed and "counter" in result.reason


def test_a_claim_that_did_not_move_is_an_infinite_error():
    error, moved = relative_error([torch.zeros(3)], [torch.zeros(3)], [torch.ones(3)])
    assert math.isinf(error) and moved == 0.0
    assert relative_error([torch.zeros(3)], [torch.zeros(3)], [torch.zeros(3)]) == (0.0, 0.0)


def test_non_finite_numbers_never_pass():
    broken = {n: t.clone() for n, t in END.weights.items()}
    broken["a"][0] = float("nan")
    result = compare(START, dataclasses.replace(END, weights=broken), END, False)
    assert not result.passed and math.isinf(result.weights_error)


def test_other_tensors_cannot_be_compared():
    extra = dict(END.weights, c=torch.zeros(2))
    result = compare(START, dataclasses.replace(END, weights=extra), END, False)
    assert not result.passed and "other tensors" in result.reason


def test_moments_far_off_fail_even_when_the_weights_agree():
    moments = {n: {**s, "exp_avg": s["exp_avg"] * 2} for n, s in END.optimizer.items()}
    result = compare(START, END, dataclasses.replace(END, optimizer=moments), False)
    assert result.weights_error == 0.0 and result.moment_error > MOMENTS_THRESHOLD and not result.passed
