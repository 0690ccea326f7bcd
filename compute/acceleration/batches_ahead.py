"""A round's batches drawn ahead of the training thread, on a thread of the worker's acceleration.

Why: drawing a batch in the training thread (a generator seeded for the step, `randint`, two gathers) costs a
step beside checkpoints much more than the drawing alone does. The batches are the very tensors
`sample_batch` gives; `Trainer.train_step` takes a step's batch from `Trainer.batches_ahead` when it is there
and draws it itself otherwise, so the bytes do not depend on how far ahead the drawing got.
"""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING

from ..data.dataset import sample_batch

if TYPE_CHECKING:
    from ..training import Trainer

AHEAD_BYTES = 64 * 1024 * 1024  # batches drawn ahead of the training thread at most


def draw_batches_ahead(trainer: Trainer, worker_index: int, round_index: int, steps: range,
                       drawer: concurrent.futures.Executor) -> concurrent.futures.Future:
    """Draw the batches of `steps` on `drawer`'s thread (the worker's `Acceleration.batch_drawer`, off the
    training core) into `trainer.batches_ahead`, which replaces what an earlier call drew. At most
    `AHEAD_BYTES` of batches are drawn. Returns the drawing's future (how many it drew)."""
    training = trainer.spec.training
    dataset = trainer.dataset
    per_batch = training.batch_size * sum(
        tensor.element_size() * (tensor.numel() // max(tensor.shape[0], 1))
        for tensor in (dataset.train_inputs, dataset.train_targets))
    steps = steps[:max(1, AHEAD_BYTES // max(per_batch, 1))]
    ahead = trainer.batches_ahead = {}

    def draw() -> int:
        drawn = 0
        for step in steps:
            if ahead is not trainer.batches_ahead:  # a later call took over
                break
            ahead[(worker_index, round_index, step)] = sample_batch(
                dataset, training.batch_size, training.seed, worker_index, round_index, step)
            drawn += 1
        return drawn

    return drawer.submit(draw)
