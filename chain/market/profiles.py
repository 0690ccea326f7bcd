"""The determinism profiles the chain accepts in a commitment, and when it accepts a GPU one (docs/protocol.md 4.2).

A profile names how a worker trained (docs/protocol.md 2a): `torch-<version>/threads-<n>/isa-<set>/
deterministic-ftz` on the CPU, with one more part, `gpu-<model>+driver-<v>+cuda-<v>`, before the mode on a GPU
(the `torch` kernel's profiles); `wasm32/kernel-<v>` for the browser worker's kernel (docs/browser-worker.md),
whose bytes depend on no machine, so that every verifier replays it with the same .wasm, as it replays a CPU
profile. A task's spec says which kernels it allows (`determinism.kernels`, `spec.KERNELS`); a commitment
under another kernel's profile is refused.
The chain cannot import `compute`, so the form lives here, and a test holds it equal to what the worker writes
(`compute.determinism.DeterminismProfile.id`, `compute.instruction_sets.REPLAYABLE_INSTRUCTION_SETS`).

A profile decides who can judge the work, so a profile nobody can judge must never be paid for: a CPU profile
must name an instruction set every verifier replays bit for bit and at most `MAX_PROFILE_THREADS` threads (what
the verifier replays, `verifier/replay_profile.py`); a GPU profile must name a GPU whose declared replayers (the
validators that said, `MsgDeclareReplayGpus`, that their verifier replays it, the worker itself aside) hold
more than a third of the validators' power. Below that, a coalition holding under a third of the stake could be
every replayer of the GPU, draw every seat of its committees and decide its verdicts alone; above it, every
committee drawn for it (`round_lifecycle.sample_round` draws a GPU committee until it holds more than a third of
the power) holds a validator outside any such coalition, who can always dissent and so send the segment to the
whole validator set (`tally`).
"""

from __future__ import annotations

import re

from ..state import State
from .errors import ProfileNotAllowed, TooFewReplayers, UnknownProfile
from .power import operator_power, total_power
from .replay_gpus import declared_replay_gpus, gpu_part_of
from .spec import TORCH_KERNEL, WASM32_KERNEL

REPLAYABLE_INSTRUCTION_SETS = ("default", "avx2")
"""The instruction sets a CPU profile may name: the ones every verifier replays bit for bit (as
`compute.instruction_sets.REPLAYABLE_INSTRUCTION_SETS`)."""

MAX_PROFILE_THREADS = 64
"""Most threads a profile may name (as `verifier.replay_profile.MAX_REPLAY_THREADS`)."""

MODE = "deterministic-ftz"
"""The last part of every profile id (as `compute.determinism.MODE`)."""

WASM32_PROFILE = "wasm32/kernel-1"
"""The browser kernel's profile (as `compute.wasm.profile.PROFILE_ID`, docs/browser-worker.md), whose bytes depend
on no machine: every verifier replays it with the same .wasm under wasmtime, so its committees are drawn as a
CPU profile's. Accepted in a task whose spec allows the `wasm32` kernel."""

_TORCH = re.compile(r"torch-[A-Za-z0-9.+]{1,40}")
_THREADS = re.compile(r"threads-([1-9][0-9]{0,2})")


def profile_kernel(profile: str) -> str:
    """The kernel a profile id belongs to (`spec.KERNELS`): `wasm32` for `WASM32_PROFILE`, else `torch` (whose
    form `check_profile_form` checks)."""
    return WASM32_KERNEL if profile == WASM32_PROFILE else TORCH_KERNEL


def check_profile_form(profile: str) -> None:
    """Raise UnknownProfile unless `profile` is the wasm32 profile or a CPU or GPU profile id of the protocol's
    form."""
    if profile == WASM32_PROFILE:
        return
    parts = profile.split("/")
    gpu = gpu_part_of(profile)
    cpu_parts = [*parts[:3], parts[4]] if gpu is not None else parts
    threads = _THREADS.fullmatch(cpu_parts[1]) if len(cpu_parts) == 4 else None
    if (len(cpu_parts) != 4 or not _TORCH.fullmatch(cpu_parts[0]) or threads is None
            or int(threads.group(1)) > MAX_PROFILE_THREADS
            or cpu_parts[2] not in {f"isa-{name}" for name in REPLAYABLE_INSTRUCTION_SETS} or cpu_parts[3] != MODE):
        raise UnknownProfile(
            f"determinism_profile {profile[:128]!r} is not a profile the chain knows: torch-<version>/threads-<1.."
            f"{MAX_PROFILE_THREADS}>/isa-<{'|'.join(REPLAYABLE_INSTRUCTION_SETS)}>[/gpu-<model>+driver-<v>+cuda-<v>]"
            f"/{MODE}, or {WASM32_PROFILE}")


def gpu_replayer_power(state: State, gpu: str, worker: bytes) -> int:
    """The current power of the validators that declared `gpu`, the worker aside (it never judges its own work)."""
    return sum(operator_power(state, operator) for operator, gpus in declared_replay_gpus(state)
               if gpu in gpus and operator != worker)


def check_replayable(state: State, profile: str, worker: bytes, kernels: list[str]) -> None:
    """Raise UnknownProfile, ProfileNotAllowed or TooFewReplayers unless a commitment of determinism `profile` by
    `worker`, in a task allowing `kernels`, can be judged with no coalition under a third of the power able to
    decide it."""
    check_profile_form(profile)
    kernel = profile_kernel(profile)
    if kernel not in kernels:
        raise ProfileNotAllowed(f"determinism_profile {profile[:128]!r} is of the {kernel} kernel; the task's spec "
                                f"allows {', '.join(kernels)} (determinism.kernels)")
    gpu = gpu_part_of(profile)
    if gpu is None:
        return
    declared, total = gpu_replayer_power(state, gpu, worker), total_power(state)
    if declared == 0:
        raise UnknownProfile(f"no validator declared that its verifier replays {gpu}: nobody can judge work "
                             f"trained on it")
    if 3 * declared <= total:
        raise TooFewReplayers(
            f"the validators that declared they replay {gpu} (this worker aside) hold {declared} of {total} power; "
            f"work trained on it is accepted once they hold more than a third ({total // 3 + 1} or more), so that "
            f"no coalition under a third of the stake can be all of them")
