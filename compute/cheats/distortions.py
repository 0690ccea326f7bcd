"""Dishonest variants of one inner step, for the cheats: the same loop as `Trainer.train_step`, bent.

A cheater gains by doing less or cheaper work (fewer steps, a smaller batch, lower precision) or by steering
the model (other data, another learning rate). It then labels the result as the honest checkpoint: step
counts, including AdamW's own counters, are forged to what an honest run would show, so that only the
numbers can give it away.
"""

from __future__ import annotations

import contextlib

import torch

from ..checkpoints import TrainingState
from ..data.dataset import batch_indices
from ..determinism import flushing_subnormals
from ..lr_schedule import inner_lr
from .registry import CheatContext


def cheat_steps(context: CheatContext, begin: int, end: int, *, train_steps: int | None = None,
                batch_fraction: float = 1.0, lr_scale: float = 1.0, autocast_dtype: torch.dtype | None = None,
                test_data: bool = False) -> TrainingState:
    """Train `train_steps` (default all) of the steps [begin, end) with the given distortions, then label the
    state as step `end`. The trainer must stand at step `begin`."""
    trainer = context.trainer
    training = context.spec.training
    dataset = trainer.dataset
    count = end - begin if train_steps is None else train_steps
    with flushing_subnormals():  # the honest arithmetic (`training.train_segment`): only the distortion differs
        for step in range(begin, begin + count):
            indices = batch_indices(dataset.train_size, training.batch_size, training.seed, context.worker_index,
                                    context.round_index, step)
            indices = indices[: max(1, int(len(indices) * batch_fraction))]
            if test_data:
                inputs = dataset.test_inputs[indices % len(dataset.test_inputs)]
                targets = dataset.test_targets[indices % len(dataset.test_targets)]
            else:
                inputs, targets = dataset.train_inputs[indices], dataset.train_targets[indices]
            precision = (torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype is not None
                         else contextlib.nullcontext())
            with precision:
                loss = trainer.loss(inputs, targets)
            trainer.optimizer.zero_grad(set_to_none=True)
            loss.float().backward()
            for group in trainer.optimizer.param_groups:  # the spec's lr of this step (its schedule), scaled
                group["lr"] = inner_lr(training, context.round_index, step) * lr_scale
            trainer.optimizer.step()
    trainer.step = end
    return forge_counters(trainer.snapshot(), end)


def forge_counters(state: TrainingState, step: int) -> TrainingState:
    """The same numbers, labelled as step `step` everywhere (checkpoint step and AdamW counters)."""
    optimizer = {name: {**slots, "step": torch.tensor(float(step), dtype=torch.float32)}
                 for name, slots in state.optimizer.items()}
    return TrainingState(step=step, weights=state.weights, optimizer=optimizer)


def mix_states(first: TrainingState, second: TrainingState, weight: float, step: int) -> TrainingState:
    """(1 - weight) * first + weight * second, tensor by tensor, labelled as `step`."""
    def mix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a + (b - a) * weight).to(a.dtype)

    weights = {name: mix(first.weights[name], second.weights[name]) for name in first.weights}
    optimizer = {name: {slot: mix(slots[slot], second.optimizer[name][slot]) for slot in slots}
                 for name, slots in first.optimizer.items()}
    return forge_counters(TrainingState(step=step, weights=weights, optimizer=optimizer), step)
