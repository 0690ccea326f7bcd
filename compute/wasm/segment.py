"""A segment of a round trained by the wasm32 kernel, from a `TrainingState` to a `TrainingState`.

    trainer = WasmTrainer(spec, dataset)          # the kernel instance, the spec's AdamW and schedule, the data
    state = train_segment_wasm(trainer, start, worker_index=0, round_index=3, end_step=20)
    checkpoint_hash(state)                        # the same hash every checkpoint has (compute/checkpoints.py)

The states are the protocol's own checkpoints: "weights/layers.<2l>.weight" and ".bias" as the MLP template's
state_dict names them, and AdamW's "step", "exp_avg" and "exp_avg_sq" per parameter, so a `wasm32` segment is
hashed, stored and committed as any other; only its bytes come from the kernel (docs/browser-worker.md). The
kernel trains the MLP template on classification data; anything else is refused. Its batch order is its own
(a pure function of seed, worker, round and step, `kernel.c`), not torch's: a `wasm32` round is replayed by
the kernel alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ..checkpoints import TrainingState
from ..data.dataset import Dataset
from ..errors import CheckpointError, WasmKernelError
from ..models import make_config
from ..spec import TaskSpec
from .instance import KernelInstance


def mlp_sizes(spec: TaskSpec, dataset: Dataset) -> tuple[int, ...]:
    """(inputs, hidden..., classes) of the spec's MLP; WasmKernelError for any model the kernel cannot train."""
    if spec.model.arch != "mlp" or dataset.shape.kind != "classification":
        raise WasmKernelError(f"the wasm32 kernel trains an mlp on classification data, not a {spec.model.arch} on "
                              f"{dataset.shape.kind} data")
    config = make_config("mlp", spec.model.config, dataset.shape)
    return (config.input_size, *config.hidden, config.num_classes)


def parameter_shapes(sizes: Sequence[int]) -> list[tuple[str, tuple[int, ...]]]:
    """Each parameter's state_dict name and shape, in the kernel's flat order (per layer: weight, then bias).
    Layer l is `layers.<2l>` in the MLP template's Sequential: a ReLU sits between each two Linear layers."""
    shapes = []
    for layer, (inputs, outputs) in enumerate(zip(sizes, sizes[1:])):
        shapes += [(f"layers.{2 * layer}.weight", (outputs, inputs)), (f"layers.{2 * layer}.bias", (outputs,))]
    return shapes


class WasmTrainer:
    """The kernel set up for one task's model, optimizer, schedule and training data, reused across segments."""

    def __init__(self, spec: TaskSpec, dataset: Dataset, wasm: bytes | None = None) -> None:
        self.spec = spec
        self.sizes = mlp_sizes(spec, dataset)
        self.shapes = parameter_shapes(self.sizes)
        self.kernel = KernelInstance(self.sizes, spec.training.batch_size, wasm)
        # `[:]`: the whole split as a tensor, also where it is a verifier's lazily fetched one (`LazyRows`, a
        # dataset served by a requester), which has no `.numpy()`; the kernel holds the whole split anyway
        self.kernel.set_data(dataset.train_inputs[:].numpy(), dataset.train_targets[:].numpy())
        self.kernel.set_training(spec.training)
        self.step = 0

    def load(self, state: TrainingState) -> None:
        """Make the kernel's state exactly `state`, checked against the model before anything is written."""
        if set(state.weights) != {name for name, _ in self.shapes} or set(state.optimizer) != set(state.weights):
            raise CheckpointError("the state's parameters are not the model's")
        steps = {float(slots["step"]) for slots in state.optimizer.values()}
        if len(steps) != 1 or not steps.pop().is_integer():
            raise CheckpointError("the parameters' AdamW step counts differ or are not whole")
        flat = [self._flat(lambda name: state.weights[name]),
                self._flat(lambda name: state.optimizer[name]["exp_avg"]),
                self._flat(lambda name: state.optimizer[name]["exp_avg_sq"])]
        adam_step = int(float(next(iter(state.optimizer.values()))["step"]))
        self.kernel.load(*flat, adam_step)
        self.step = state.step

    def _flat(self, tensor_of) -> np.ndarray:
        parts = []
        for name, shape in self.shapes:
            tensor = tensor_of(name)
            if tuple(tensor.shape) != shape or tensor.dtype != torch.float32:
                raise CheckpointError(f"{name!r} is {tuple(tensor.shape)} {tensor.dtype}, the model has {shape} "
                                      f"float32")
            parts.append(tensor.detach().cpu().reshape(-1).numpy())
        return np.concatenate(parts)

    def train_to(self, worker_index: int, round_index: int, end_step: int, losses: list[float] | None = None) -> None:
        """Steps from where the trainer stands up to `end_step` in (seed, worker, round)'s stream."""
        if end_step < self.step:
            raise WasmKernelError(f"end_step {end_step} is before the current step {self.step}")
        self.kernel.set_stream(self.spec.training.seed, worker_index, round_index)
        while self.step < end_step:
            loss = self.kernel.train_step(self.step)
            if losses is not None:
                losses.append(loss)
            self.step += 1

    def snapshot(self, final: bool = False) -> TrainingState:
        """The state as a checkpoint holds it (`final`: a round's last, without the optimizer state)."""
        weights, exp_avg, exp_avg_sq, adam_step = self.kernel.state()
        tensors = {}
        offset = 0
        for name, shape in self.shapes:
            size = int(np.prod(shape))
            tensors[name] = tuple(torch.from_numpy(array[offset:offset + size].reshape(shape))
                                  for array in (weights, exp_avg, exp_avg_sq))
            offset += size
        optimizer = {} if final else {
            name: {"step": torch.tensor(float(adam_step), dtype=torch.float32), "exp_avg": moments[1],
                   "exp_avg_sq": moments[2]} for name, moments in tensors.items()}
        return TrainingState(step=self.step, weights={name: parts[0] for name, parts in tensors.items()},
                             optimizer=optimizer)


_SUBNORMAL = np.array([1e-39], dtype=np.float32)
"""A float32 subnormal: multiplied by one, it stays itself unless this thread flushes subnormals."""


def flushing_here() -> bool:
    """Whether this thread's floating-point unit flushes subnormals now (`determinism.flushing_subnormals`)."""
    return float((_SUBNORMAL * np.float32(1.0))[0]) == 0.0


@contextlib.contextmanager
def ieee_subnormals() -> Iterator[None]:
    """Run the block with subnormals kept, as WebAssembly requires, restoring the thread's setting after."""
    flushing = flushing_here()
    if flushing:
        torch.set_flush_denormal(False)
    try:
        yield
    finally:
        if flushing:
            torch.set_flush_denormal(True)


def train_segment_wasm(trainer: WasmTrainer, start: TrainingState | None, *, worker_index: int, round_index: int,
                       end_step: int, final: bool = False, losses: list[float] | None = None) -> TrainingState:
    """`compute.training.train_segment` for the wasm32 profile: from `start` (or where the trainer stands) up
    to `end_step`, the state returned (`final`: in the form of a round's last checkpoint); `losses` receives
    each step's mean batch loss. The kernel keeps subnormals whatever the calling thread flushes (a torch
    round's steps run flushing them, `determinism.flushing_subnormals`), as every WebAssembly engine must."""
    if start is not None:
        trainer.load(start)
    with ieee_subnormals():
        trainer.train_to(worker_index, round_index, end_step, losses)
    return trainer.snapshot(final)
