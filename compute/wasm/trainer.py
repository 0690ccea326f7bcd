"""The worker's trainer under the `wasm32` profile: a `Trainer` whose inner steps run the kernel.

    trainer = trainer_for(spec, dataset, kernel="wasm32")   # or "torch": the one place a worker picks its kernel
    trainer.profile_id                                      # "wasm32/kernel-1": what its commitments name

A worker's round does much besides stepping: checkpoints copied beside training, hashed, stored and resumed
(`compute.training.train_round_segments`, `compute.acceleration`), the update encoded, the cheats of the test
switch, the evaluation of W_r. All of it reads and writes the `Trainer`'s torch tensors, so `WasmKernelTrainer`
keeps them and changes one thing: `train_step` hands the state to the kernel (`segment.train_segment_wasm`, one
step), and copies what it returns back into those tensors, bit for bit. Its checkpoints are therefore the
kernel's bytes, which a verifier replays with the kernel alone (`verifier/replay_profile.py`), a browser tab's
the same.

Its steps run inside the torch round loop, which flushes subnormals (`determinism.flushing_subnormals`): the
kernel's segment switches that off while it runs (`segment.ieee_subnormals`), and the state is copied with numpy,
which moves bits without arithmetic.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from trolly.chain.market.spec import KERNELS, TORCH_KERNEL, WASM32_KERNEL

from ..checkpoints import TrainingState
from ..data.dataset import Dataset
from ..errors import WasmKernelError
from ..spec import TaskSpec
from ..training import Trainer
from .profile import PROFILE_ID
from .segment import WasmTrainer, mlp_sizes, train_segment_wasm


class WasmKernelTrainer(Trainer):
    """A `Trainer` on the CPU whose steps are the wasm32 kernel's (module docstring); refuses any model but an MLP
    on classification features (`WasmKernelError`)."""

    def __init__(self, spec: TaskSpec, dataset: Dataset, wasm: bytes | None = None) -> None:
        mlp_sizes(spec, dataset)  # before anything is built: the kernel trains nothing else
        cpu = dataclasses.replace(spec, determinism=dataclasses.replace(spec.determinism, device="cpu", gpu=None))
        super().__init__(cpu, dataset)
        self.kernel = WasmTrainer(cpu, dataset, wasm)
        self.profile_id = PROFILE_ID
        self._kernel_holds: tuple | None = None  # the tensors' mark when the kernel's state was last copied out

    def train_step(self, worker_index: int, round_index: int) -> float:
        """Inner step `self.step` by the kernel, from and back into the trainer's tensors. The state goes into
        the kernel only when the tensors changed since the kernel's last step wrote them (a load, a new round,
        anything that wrote them in place: `_mark`)."""
        self.batches_ahead.pop((worker_index, round_index, self.step), None)  # torch's batches: not the kernel's
        live = self._optimizer_tensors()
        start = None if self._kernel_holds == self._mark(live) else TrainingState(
            step=self.step, weights=dict(self.parameters), optimizer=live)
        losses: list[float] = []
        state = train_segment_wasm(self.kernel, start, worker_index=worker_index, round_index=round_index,
                                   end_step=self.step + 1, losses=losses)
        for name, parameter in self.parameters.items():  # numpy copies the bits, whatever the thread flushes
            np.copyto(parameter.detach().numpy(), state.weights[name].numpy())
            for slot in ("step", "exp_avg", "exp_avg_sq"):
                np.copyto(live[name][slot].detach().numpy(), state.optimizer[name][slot].numpy())
        self.step += 1
        self.samples += self.spec.training.batch_size
        self._kernel_holds = self._mark(live)
        return losses[0]

    def _mark(self, live: dict[str, dict[str, torch.Tensor]]) -> tuple:
        """The step and each tensor's identity and in-place version (which every torch write bumps, a numpy
        copy into it does not): equal marks mean nothing but the kernel wrote the tensors in between."""
        tensors = [tensor for name, parameter in self.parameters.items()
                   for tensor in (parameter, *live[name].values())]
        return (self.step, *((id(tensor), tensor._version) for tensor in tensors))


def trainer_for(spec: TaskSpec, dataset: Dataset, kernel: str = TORCH_KERNEL) -> Trainer:
    """The trainer of a task under `kernel`, which the task's spec must allow (`TaskSpec.kernels`)."""
    if kernel not in KERNELS:
        raise WasmKernelError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if kernel not in spec.kernels:
        raise WasmKernelError(f"the task's spec allows the kernels {', '.join(spec.kernels)}, not {kernel}")
    return WasmKernelTrainer(spec, dataset) if kernel == WASM32_KERNEL else Trainer(spec, dataset)
