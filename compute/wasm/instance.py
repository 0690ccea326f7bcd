"""One instance of the kernel under wasmtime: a model of fixed sizes, its training data, its state.

    kernel = KernelInstance(sizes=(64, 32, 10), batch_size=32)
    kernel.set_data(inputs, targets)                  # float32 (n, 64), integer classes (n,)
    kernel.set_training(training)                     # the spec's TrainingSpec: AdamW and its lr schedule
    kernel.load(weights, exp_avg, exp_avg_sq, adam_step)
    kernel.set_stream(seed, worker, round)
    losses = [kernel.train_step(step) for step in range(start, end)]
    weights, exp_avg, exp_avg_sq, adam_step = kernel.state()

Everything the kernel computes happens inside the .wasm: this module only moves bytes in and out of its
memory. The engine refuses relaxed SIMD, whose results differ between machines, so no kernel could use it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import wasmtime

from ..errors import WasmKernelError
from ..spec import TrainingSpec
from .profile import KERNEL_VERSION, KERNEL_WASM

SCHEDULE_KINDS = {"constant": 0, "linear": 1, "cosine": 2}
"""The schedule names of `compute.lr_schedule` as the kernel's `set_schedule` numbers them."""

_CONFIGURE_ERRORS = {1: "sizes or batch size outside the kernel's limits", 2: "the kernel's memory cannot grow",
                     3: "no training data", 4: "a target outside the model's classes"}


def engine() -> wasmtime.Engine:
    """A wasmtime engine that refuses relaxed SIMD (fixed-width SIMD is deterministic and stays allowed)."""
    config = wasmtime.Config()
    config.wasm_relaxed_simd = False
    return wasmtime.Engine(config)


class KernelInstance:
    """The kernel's exports over one wasmtime store, for a model of `sizes` (input, hidden..., classes)."""

    def __init__(self, sizes: Sequence[int], batch_size: int, wasm: bytes | None = None) -> None:
        self._engine = engine()
        self._store = wasmtime.Store(self._engine)
        try:
            module = wasmtime.Module(self._engine, wasm if wasm is not None else KERNEL_WASM.read_bytes())
            self._exports = wasmtime.Instance(self._store, module, []).exports(self._store)
        except wasmtime.WasmtimeError as error:
            raise WasmKernelError(f"the kernel does not load: {error}") from error
        if self._call("kernel_version") != KERNEL_VERSION:
            raise WasmKernelError(f"the kernel is version {self._call('kernel_version')}, this runner knows "
                                  f"{KERNEL_VERSION}")
        self.sizes = tuple(int(size) for size in sizes)
        self.batch_size = batch_size
        sizes_at = self._write(np.asarray(self.sizes, dtype="<u4"))
        self._check(self._call("configure", len(self.sizes) - 1, sizes_at, batch_size))
        self.params = self._call("param_count")

    def _call(self, name: str, *arguments):
        return self._exports[name](self._store, *arguments)

    @staticmethod
    def _check(code: int) -> None:
        if code != 0:
            raise WasmKernelError(f"the kernel refused: {_CONFIGURE_ERRORS.get(code, f'error {code}')}")

    def _write(self, array: np.ndarray) -> int:
        """Copy `array`'s bytes into fresh kernel memory and return where."""
        data = np.ascontiguousarray(array).tobytes()
        at = self._call("kernel_alloc", len(data))
        if at == 0 and data:
            raise WasmKernelError("the kernel's memory cannot grow")
        self._exports["memory"].write(self._store, data, at)
        return at

    def _read(self, at: int, count: int, dtype: str) -> np.ndarray:
        size = np.dtype(dtype).itemsize
        return np.frombuffer(bytes(self._exports["memory"].read(self._store, at, at + count * size)), dtype=dtype)

    def set_data(self, inputs: np.ndarray, targets: np.ndarray) -> None:
        """The training split: float32 rows of `sizes[0]` features and their classes."""
        if inputs.ndim != 2 or inputs.shape[1] != self.sizes[0] or targets.shape != (inputs.shape[0],):
            raise WasmKernelError(f"data of shape {inputs.shape} / {targets.shape} does not fit a model with "
                                  f"{self.sizes[0]} inputs")
        if targets.min(initial=0) < 0:
            raise WasmKernelError("a target outside the model's classes")
        inputs_at = self._write(inputs.astype("<f4", copy=False))
        targets_at = self._write(targets.astype("<u4"))
        self._check(self._call("set_data", inputs_at, targets_at, int(inputs.shape[0])))

    def set_training(self, training: TrainingSpec) -> None:
        """AdamW's hyperparameters and the lr schedule of the spec (`compute.lr_schedule`)."""
        inner = training.inner_optimizer
        schedule = inner.schedule
        self._call("set_optimizer", inner.beta1, inner.beta2, inner.eps, inner.weight_decay)
        self._call("set_schedule", inner.lr, SCHEDULE_KINDS[schedule.name], schedule.warmup_steps,
                   schedule.final_lr, training.rounds, training.inner_steps)

    def set_stream(self, seed: int, worker_index: int, round_index: int) -> None:
        """Whose batches the following steps draw: (task seed, worker, round); the step completes the key."""
        self._call("set_stream", _u64(seed), _u64(worker_index), _u64(round_index))

    def inner_lr(self, round_index: int, step: int) -> float:
        return self._call("inner_lr", _u64(round_index), _u64(step))

    def batch(self, step: int) -> np.ndarray:
        """The sample indices of `step`'s batch in the current stream."""
        self._check(self._call("draw_batch", _u64(step)))
        return self._read(self._call("indices_ptr"), self.batch_size, "<u4").copy()

    def load(self, weights: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray, adam_step: int) -> None:
        """The state, each array flat in the kernel's layout (per layer: weight [out][in], then bias)."""
        for array in (weights, exp_avg, exp_avg_sq):
            if array.shape != (self.params,):
                raise WasmKernelError(f"a state of {array.shape} floats for a model of {self.params}")
        for name, array in (("weights_ptr", weights), ("exp_avg_ptr", exp_avg), ("exp_avg_sq_ptr", exp_avg_sq)):
            self._exports["memory"].write(self._store, array.astype("<f4", copy=False).tobytes(), self._call(name))
        self._call("set_adam_step", adam_step)

    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Copies of the weights, both moments (flat, as `load` takes them) and AdamW's step count."""
        arrays = tuple(self._read(self._call(name), self.params, "<f4").copy()
                       for name in ("weights_ptr", "exp_avg_ptr", "exp_avg_sq_ptr"))
        return (*arrays, self._call("adam_step"))

    def train_step(self, step: int) -> float:
        """Inner step `step`: its batch, forward, backward and AdamW; the batch's mean loss."""
        return self._call("train_step", _u64(step))


def _u64(value: int) -> int:
    """A non-negative integer as wasm's i64 carries it (two's complement)."""
    if not 0 <= value < 2**64:
        raise WasmKernelError(f"{value} is outside [0, 2**64)")
    return value - 2**64 if value >= 2**63 else value
