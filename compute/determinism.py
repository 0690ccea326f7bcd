"""The determinism profile: everything that must match for two replays to give identical bytes.

On CPU, PyTorch is bitwise reproducible for a fixed thread count and instruction set (the kernels it and
its math libraries dispatch to, pinned before torch loads by `instruction_sets.py`), with deterministic algorithms on, and with the same treatment of
subnormal floats: training steps run with them flushed to zero (`flushing_subnormals`; the `-ftz` of the
profile's mode). Once a model has nearly fitted its data, many parameters get zero gradients and their AdamW
first moments decay by 0.9 a step into the subnormal range, where x86 arithmetic is many times slower
(docs/performance.md has what that cost the example MLP). Flushed, those values become exact zeros, the same on
every machine. Change either and float sums are reassociated: 1 and 2 threads already give different bytes
after a few MLP steps (docs/architecture.md 5). So a
worker records its profile's `id` in every commitment, and a verifier replays bitwise only under the same id
(otherwise it compares within `REPLAY_TOLERANCE`).

On a GPU (`device="cuda"`, `compute/devices.py`) the bytes depend on the GPU model, its driver and the CUDA
build as well, so the id of a CUDA profile names them in one more part
(`torch-<v>/threads-<n>/isa-<set>/gpu-<model>+driver-<v>+cuda-<v>/deterministic-ftz`), and training there runs
with CUDA's deterministic settings (`devices.apply_cuda_determinism`).

The other half of replayability is data order: `batch_generator` derives the `torch.Generator` for a step
from (task seed, worker index, round, step) alone, so any party can draw the same batch for any step without
replaying the ones before it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Iterator

import torch

from .devices import (apply_cuda_determinism, cuda_description, is_cuda, is_device_name, parse_gpu_profile_part,
                      training_device)
from .errors import DeterminismError
from .instruction_sets import INSTRUCTION_SETS, REPLAYABLE_INSTRUCTION_SETS, pinned_environment, unpinned_libraries

# Relative L2 distance allowed between a replay and a checkpoint when the profiles differ (different thread
# count or instruction set): orders of magnitude above the drift such a difference causes over a segment
# (at most 10 steps), and below what a cheat changes (benchmarks.verification calibrates both).
REPLAY_TOLERANCE = 1e-4

_BATCH_DOMAIN = b"trolly/batch/v1"

MODE = "deterministic-ftz"
"""The last part of a profile id: deterministic algorithms, subnormals flushed to zero in training steps."""


def current_instruction_set() -> str:
    """The instruction set this process's torch dispatches to, as an `ATEN_CPU_CAPABILITY` name."""
    return torch.backends.cpu.get_cpu_capability().lower()


@dataclasses.dataclass(frozen=True)
class DeterminismProfile:
    """The settings that make training replayable bit for bit.

    threads: intra-op threads (`torch.set_num_threads`); 1 is the protocol default.
    instruction_set: one of INSTRUCTION_SETS; None means "whatever this process runs" (recorded in `id`).
    device: "cpu", "cuda" or "cuda:N" (`devices.training_device`), where the trainer runs.
    gpu: for a CUDA device, the GPU the bytes are made on (`devices.gpu_profile_part`); None means this process's own.
    """

    threads: int = 1
    instruction_set: str | None = None
    device: str = "cpu"
    gpu: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 1:
            raise DeterminismError(f"threads must be a positive integer, got {self.threads!r}")
        if self.instruction_set is not None and self.instruction_set not in INSTRUCTION_SETS:
            raise DeterminismError(
                f"instruction_set must be one of {', '.join(INSTRUCTION_SETS)}, got {self.instruction_set!r}"
            )
        if not is_device_name(self.device):
            raise DeterminismError(f"device must be cpu, cuda or cuda:N, got {self.device!r}")
        if self.gpu is not None and (not is_cuda(self.device) or parse_gpu_profile_part(self.gpu) is None):
            raise DeterminismError(f"gpu must be a GPU profile part of a cuda profile, got {self.gpu!r}")

    @property
    def resolved_instruction_set(self) -> str:
        return self.instruction_set or current_instruction_set()

    @property
    def resolved_gpu(self) -> str | None:
        """The GPU part of the id: None on the CPU, else `gpu` or this machine's own (`devices.cuda_description`)."""
        if not is_cuda(self.device):
            return None
        return self.gpu or cuda_description(self.device)

    @property
    def id(self) -> str:
        """The string committed on chain (`CommitRound.determinism_profile`), e.g.
        `torch-2.13.0+cpu/threads-1/isa-avx512/deterministic-ftz`, or on a GPU
        `torch-2.5.1+cu124/threads-1/isa-avx2/gpu-NVIDIA-H100-80GB-HBM3+driver-550.54.15+cuda-12.4/deterministic-ftz`."""
        gpu = self.resolved_gpu
        return "/".join([f"torch-{torch.__version__}", f"threads-{self.threads}",
                         f"isa-{self.resolved_instruction_set}", *([gpu] if gpu else []), MODE])


def apply_profile(profile: DeterminismProfile) -> str:
    """Configure this process for `profile` and return its id.

    Raises DeterminismError when the process runs another instruction set than the profile asks for: that can
    only be fixed by restarting with `child_environment(profile)`.
    """
    actual = current_instruction_set()
    if profile.instruction_set is not None and profile.instruction_set != actual:
        raise DeterminismError(
            f"profile wants instruction set {profile.instruction_set} but this process runs {actual}; "
            f"restart it with ATEN_CPU_CAPABILITY={profile.instruction_set}"
        )
    if is_cuda(profile.device):
        training_device(profile.device)  # refuses a process without that GPU
        if profile.gpu is not None and profile.gpu != cuda_description(profile.device):
            raise DeterminismError(f"profile wants {profile.gpu} but this process runs on "
                                   f"{cuda_description(profile.device)}")
        apply_cuda_determinism()
    if torch.get_num_threads() != profile.threads:
        torch.set_num_threads(profile.threads)
    torch.use_deterministic_algorithms(True)
    return profile.id


@contextlib.contextmanager
def flushing_subnormals() -> Iterator[None]:
    """Run the block with subnormal floats flushed to zero on this thread (x86 FTZ and DAZ; the setting is
    per thread, so it is made where the training runs). Training steps run inside it, in the worker and in a
    verifier's replay alike; everything else (codecs, the outer step) keeps plain IEEE arithmetic."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def require_replayable_process() -> str:
    """The instruction set this process trains under, checked to be one every verifier replays bit for bit,
    with each library pinned to it (`instruction_sets`); else a DeterminismError that says how to start it.
    A worker calls this before it joins a task: bytes made under another setting fail honest replays."""
    actual = current_instruction_set()
    unpinned = unpinned_libraries(actual, os.environ)
    if actual in REPLAYABLE_INSTRUCTION_SETS and not unpinned:
        return actual
    reason = (f"its torch runs {actual}, which verifiers refuse" if actual not in REPLAYABLE_INSTRUCTION_SETS
              else f"{' '.join(unpinned)} is not set, so its math libraries may run another instruction set")
    fix = " ".join(f"{name}={value}" for name, value in pinned_environment("avx2", {}).items())
    raise DeterminismError(
        f"this process cannot train for the protocol: {reason}. Start it with {fix} (the default set where the "
        f"CPU lacks avx2); the trolly-* commands, python -m benchmarks.* and the test suite do so themselves, and "
        f"a library caller calls trolly.compute.instruction_sets.pin_replayable_instruction_set() before torch "
        f"is imported")


def child_environment(profile: DeterminismProfile, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process that should run under `profile`: its instruction set with every
    library pinned to it (`instruction_sets.LIBRARY_SETTINGS`), and its thread pools."""
    environment = pinned_environment(profile.resolved_instruction_set, os.environ if base is None else base)
    # OpenMP/MKL pools are sized at start-up; keep them from oversubscribing before set_num_threads runs.
    environment["OMP_NUM_THREADS"] = str(profile.threads)
    environment["MKL_NUM_THREADS"] = str(profile.threads)
    return environment


def batch_seed(task_seed: int, worker_index: int, round_index: int, step: int) -> int:
    """A 63-bit seed that is a pure function of its four non-negative integer arguments."""
    for name, value in (("task_seed", task_seed), ("worker_index", worker_index), ("round", round_index), ("step", step)):
        if not isinstance(value, int) or value < 0 or value >= 2**64:
            raise DeterminismError(f"{name} must be an integer in [0, 2**64), got {value!r}")
    material = _BATCH_DOMAIN + b"".join(v.to_bytes(8, "little") for v in (task_seed, worker_index, round_index, step))
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "little") & (2**63 - 1)


def batch_generator(task_seed: int, worker_index: int, round_index: int, step: int) -> torch.Generator:
    """The explicit generator from which the batch of one step is drawn."""
    generator = torch.Generator(device="cpu")
    generator.manual_seed(batch_seed(task_seed, worker_index, round_index, step))
    return generator
