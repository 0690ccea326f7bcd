"""A dataset in memory, and the batch of a step as a pure function of (seed, worker, round, step)."""

from __future__ import annotations

import dataclasses

import torch

from ..determinism import batch_generator
from ..models.shape import DataShape


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Train and test splits as tensors. Classification: inputs float32 (n, features), targets int64 (n,).
    Text: inputs int64 (n, context) tokens, targets int64 (n, context) next tokens."""

    name: str
    manifest_hash: str
    shape: DataShape
    train_inputs: torch.Tensor
    train_targets: torch.Tensor
    test_inputs: torch.Tensor
    test_targets: torch.Tensor

    @property
    def train_size(self) -> int:
        return int(self.train_inputs.shape[0])


def batch_indices(dataset_size: int, batch_size: int, task_seed: int, worker_index: int, round_index: int,
                  step: int) -> torch.Tensor:
    """Indices (with replacement) of the training samples used at one step.

    Every worker samples from the whole training split through its own generator: shards of the data are a
    matter of storage, not of who trains on what, so the batch needs nothing but these integers.
    """
    generator = batch_generator(task_seed, worker_index, round_index, step)
    return torch.randint(0, dataset_size, (batch_size,), generator=generator)


def sample_batch(dataset: Dataset, batch_size: int, task_seed: int, worker_index: int, round_index: int,
                 step: int) -> tuple[torch.Tensor, torch.Tensor]:
    indices = batch_indices(dataset.train_size, batch_size, task_seed, worker_index, round_index, step)
    return dataset.train_inputs[indices], dataset.train_targets[indices]
