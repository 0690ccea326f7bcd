"""The inner learning-rate schedule: the lr of inner step s of round r, a pure function of the spec.

Progress is counted in the spec's nominal steps, t = r * inner_steps + s, over T = rounds * inner_steps (a
worker that declares fewer steps in a round simply stops early on the same curve), as DiLoCo runs one
schedule over the whole task:

    warm-up   t < W:   lr * (t + 1) / W                         (W = warmup_steps; none when W = 0)
    then      p = (t - W) / (T - 1 - W), clamped to [0, 1]       (0 after warm-up, 1 at the task's last step)
              constant: lr
              linear:   final + (lr - final) * (1 - p)
              cosine:   final + (lr - final) * (1 + cos(pi * p)) / 2

A verifier replays a segment with the same lr at every step, so the value must be the same float on every
machine. Everything here is Python float arithmetic (IEEE-754 double, each operation correctly rounded), and
the cosine is a fixed polynomial rather than the C library's `cos`, whose last bit is not the same on every
platform. A spec without a schedule (or `constant` without warm-up) gives exactly `lr` at every step.
"""

from __future__ import annotations

import math

from .spec import TrainingSpec

# (1 + cos(pi p)) / 2 = cos(x)^2 with x = pi p / 2 in [0, pi/2]. Taylor terms up to x^26: the first one left
# out, (pi/2)^28 / 28!, is below 1e-25, far under a double's last bit. Each coefficient is an exact integer
# quotient, so it is the correctly rounded double of 1/(2k)! everywhere.
_COSINE_TERMS = 14
_COSINE_COEFFICIENTS = tuple((-1) ** k / math.factorial(2 * k) for k in range(_COSINE_TERMS))


def half_cosine(progress: float) -> float:
    """(1 + cos(pi * progress)) / 2 for progress in [0, 1]: 1 at the start, 0 at the end."""
    if not 0.0 <= progress <= 1.0:
        raise ValueError(f"progress must be in [0, 1], got {progress!r}")
    x = math.pi * progress / 2.0
    x_squared = x * x
    cosine = 0.0
    for coefficient in reversed(_COSINE_COEFFICIENTS):  # Horner: a fixed sequence of multiply and add
        cosine = cosine * x_squared + coefficient
    return cosine * cosine


def inner_lr(training: TrainingSpec, round_index: int, step: int) -> float:
    """The AdamW learning rate of inner step `step` (0-based) of round `round_index`."""
    if round_index < 0 or step < 0:
        raise ValueError(f"round {round_index} and step {step} must be non-negative")
    peak = training.inner_optimizer.lr
    schedule = training.inner_optimizer.schedule
    progress_step = round_index * training.inner_steps + step
    if progress_step < schedule.warmup_steps:
        return peak * (progress_step + 1) / schedule.warmup_steps
    if schedule.name == "constant":
        return peak
    decay_steps = training.rounds * training.inner_steps - 1 - schedule.warmup_steps
    progress = 1.0 if decay_steps <= 0 else min(1.0, (progress_step - schedule.warmup_steps) / decay_steps)
    final = schedule.final_lr
    if schedule.name == "linear":
        return final + (peak - final) * (1.0 - progress)
    if schedule.name == "cosine":
        return final + (peak - final) * half_cosine(progress)
    raise ValueError(f"unknown schedule {schedule.name!r}")  # the spec parser refuses it first
