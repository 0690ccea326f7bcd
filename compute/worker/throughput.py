"""How fast this machine trains, and how many inner steps a worker therefore declares.

A worker registers with `samples_per_second` measured on a reference workload (the protocol's example
model, the 64-1024-1024-10 MLP, batch 32, one thread), so requesters can compare machines. For a task it
measures the task's own model (`measure_trainer`) and declares the inner steps it can finish inside the
round's commit window (`plan_steps`): a slower machine declares fewer, and the aggregate weights updates by
samples processed, so it still contributes (docs/architecture.md section 4).

`slowdown` (`trolly-worker start --declare-slowdown X`) divides the measured speed: it lets a localnet
present one of its workers as an X times slower machine. Everything here is measured, nothing assumed.
`BlockClock` measures the chain's block interval, to turn a round's deadline (a height) into seconds.
"""

from __future__ import annotations

import dataclasses
import time

import torch
from torch.nn import functional

from ..models import DataShape, build_model
from ..determinism import flushing_subnormals
from ..training import Trainer
from .preflight_record import REFERENCE_BATCH

REFERENCE_SHAPE = DataShape(kind="classification", input_size=64, num_classes=10)
STEP_BUDGET_SHARE = 0.5
"""Share of the commit window planned for training: the rest absorbs fetching, encoding and block times."""


@dataclasses.dataclass(frozen=True)
class Throughput:
    samples_per_second: float
    steps: int
    seconds: float


def _timed_steps(step, duration: float, min_steps: int) -> tuple[int, float]:
    step()  # warm-up: first-call allocations are not representative
    steps, began = 0, time.perf_counter()
    while steps < min_steps or time.perf_counter() - began < duration:
        step()
        steps += 1
    return steps, time.perf_counter() - began


def measure_reference(duration: float = 0.5, min_steps: int = 3, threads: int = 1,
                      device: str = "cpu") -> Throughput:
    """Samples per second of AdamW steps on the reference MLP (synthetic data, fixed seeds), on `device`: the
    CPU with `threads` threads, or a CUDA GPU (each step waits for the GPU to finish, so the time is its own)."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = build_model("mlp", {}, REFERENCE_SHAPE, seed=0).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False, fused=True)  # as `Trainer`
        generator = torch.Generator().manual_seed(0)
        inputs = torch.rand((REFERENCE_BATCH, REFERENCE_SHAPE.input_size), generator=generator).to(device)
        targets = torch.randint(0, REFERENCE_SHAPE.num_classes, (REFERENCE_BATCH,), generator=generator).to(device)

        def step() -> None:
            loss = functional.cross_entropy(model(inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if device != "cpu":
                torch.cuda.synchronize(device)

        steps, seconds = _timed_steps(step, duration, min_steps)
    finally:
        torch.set_num_threads(previous_threads)
    return Throughput(steps * REFERENCE_BATCH / seconds, steps, seconds)


def measure_trainer(trainer: Trainer, duration: float = 0.3, min_steps: int = 3) -> Throughput:
    """Samples per second of the task's own training step. Leaves the trainer dirty: the round loads its
    start state afterwards anyway."""
    round_index = 2**32 - 1  # a round no task reaches: the batches drawn here are never part of real work
    with flushing_subnormals():  # as training runs (`training.train_segment`)
        steps, seconds = _timed_steps(lambda: trainer.train_step(0, round_index), duration, min_steps)
    return Throughput(steps * trainer.spec.training.batch_size / seconds, steps, seconds)


def plan_steps(inner_steps: int, batch_size: int, samples_per_second: float, seconds_available: float | None,
               slowdown: float = 1.0) -> int:
    """Inner steps to declare for a round: the spec's H, cut to what fits in the commit window (if known)
    at this machine's speed divided by `slowdown`, and at least 1."""
    if slowdown < 1.0:
        raise ValueError("slowdown must be >= 1")
    speed = samples_per_second / slowdown
    steps = inner_steps if slowdown == 1.0 else int(inner_steps / slowdown)
    if seconds_available is not None and speed > 0:
        steps = min(steps, int(speed * seconds_available * STEP_BUDGET_SHARE / batch_size))
    return max(1, min(inner_steps, steps))


class BlockClock:
    """Seconds per block, estimated from the heights seen while polling (None until two are known)."""

    def __init__(self) -> None:
        self.first: tuple[float, int] | None = None
        self.last: tuple[float, int] | None = None

    def observe(self, height: int) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = (now, height)
        if self.last is None or height > self.last[1]:
            self.last = (now, height)

    def seconds_per_block(self) -> float | None:
        if self.first is None or self.last is None or self.last[1] <= self.first[1]:
            return None
        return (self.last[0] - self.first[0]) / (self.last[1] - self.first[1])
