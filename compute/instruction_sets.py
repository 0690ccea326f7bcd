"""The instruction set a process trains under, fixed once, before torch is imported.

A replay is bitwise only under the instruction set the worker trained under, and three libraries choose
theirs when they load, each from the CPU and an environment variable: ATen's own kernels
(`ATEN_CPU_CAPABILITY`), MKL's BLAS, which runs torch's matrix products (`MKL_CBWR`), and oneDNN, which runs
its convolutions (`ONEDNN_MAX_CPU_ISA`). Left alone on a CPU with avx512 they all pick avx512 kernels, whose
bytes a verifier without avx512 cannot reproduce; and setting ATen's variable alone is not enough, since MKL
still runs its avx512 products under an `isa-avx2` label. So every process that trains for the protocol
(the worker, a verifier's replays, the benchmarks, the test session) or evaluates its rounds (the web
console's charts) pins all three to one of the `REPLAYABLE_INSTRUCTION_SETS` with
`pin_replayable_instruction_set` before torch is first imported: the console scripts (`run_pinned`),
`python -m benchmarks.*` (the package's `__init__`) and `tests/conftest.py` call it, and nothing else sets
these variables.

The same call pins what CUDA needs to be deterministic before CUDA initialises: cuBLAS picks its workspace
configuration when its first handle is created, and only a fixed one (`CUBLAS_WORKSPACE_CONFIG`,
`CUDA_SETTINGS`) makes its products repeatable, so torch's deterministic mode refuses them without it
(`compute.devices` checks it before training on a GPU). It costs a CPU-only process nothing.

This module imports nothing heavy, so that an entry point can use it before torch loads.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

INSTRUCTION_SETS = ("default", "avx2", "avx512")
"""The names `ATEN_CPU_CAPABILITY` accepts, weakest first."""

REPLAYABLE_INSTRUCTION_SETS = ("default", "avx2")
"""The instruction sets a worker may commit (docs/protocol.md 4.4a): every verifier replays them bit for bit
(avx2 runs on the x86-64 CPUs of the last decade, `default` anywhere), and verifiers refuse any other, so that
no worker can move its verification onto a tolerance that some cheats pass."""

LIBRARY_SETTINGS: Mapping[str, Mapping[str, str]] = {
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
}
"""The environment that makes each library run one instruction set's code whatever the CPU. `MKL_CBWR` is
MKL's conditional numerical reproducibility mode (the same bits on every CPU that has the named instruction
set, for a fixed thread count); COMPATIBLE is its code path for any x86-64 CPU. avx512 is never committed, so
it pins ATen alone and leaves the others to pick the CPU's own: what a process on an avx512 CPU runs unpinned,
for a child that measures it (`compute.determinism.child_environment`)."""

PINNED_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")

CUDA_SETTINGS: Mapping[str, str] = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
"""The environment CUDA's libraries read once, at initialisation, to run deterministically: cuBLAS with a fixed
workspace (eight 4 MiB buffers; `:16:8` is the other value NVIDIA documents, smaller and slower). Every process
gets it whatever its instruction set; one the user set already is kept."""

_AVX2_FLAGS = frozenset({"avx2", "fma"})
_AVX512_FLAGS = _AVX2_FLAGS | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}


class InstructionSetError(RuntimeError):
    """The process cannot be pinned to a replayable instruction set (torch loaded first, or a bad setting)."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The feature flags of this machine's CPU as Linux lists them; empty where that list cannot be read
    (another OS, a sandbox): the pin then keeps to `default`, which every CPU runs."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def runnable_instruction_sets(flags: frozenset[str]) -> tuple[str, ...]:
    """The instruction sets a CPU with `flags` can run, weakest first (as ATen decides its own dispatch)."""
    runnable = ["default"]
    if _AVX2_FLAGS <= flags:
        runnable.append("avx2")
    if _AVX512_FLAGS <= flags:
        runnable.append("avx512")
    return tuple(runnable)


def replayable_instruction_set(flags: frozenset[str]) -> str:
    """The strongest replayable instruction set a CPU with `flags` runs: what its workers train under."""
    return [name for name in runnable_instruction_sets(flags) if name in REPLAYABLE_INSTRUCTION_SETS][-1]


def pinned_environment(instruction_set: str, base: Mapping[str, str]) -> dict[str, str]:
    """`base` with every library pinned to `instruction_set` (and any other pin in `base` dropped)."""
    if instruction_set not in INSTRUCTION_SETS:
        raise InstructionSetError(f"unknown instruction set {instruction_set!r}; "
                                  f"ATEN_CPU_CAPABILITY takes one of {', '.join(INSTRUCTION_SETS)}")
    environment = {name: value for name, value in base.items() if name not in PINNED_VARIABLES}
    environment.update(LIBRARY_SETTINGS[instruction_set])
    for name, value in CUDA_SETTINGS.items():
        environment.setdefault(name, value)
    return environment


def pin_replayable_instruction_set(environ: MutableMapping[str, str] | None = None,
                                   flags: frozenset[str] | None = None) -> str:
    """Pin the libraries of this process (or `environ`) to a replayable instruction set and return its name.

    Where `ATEN_CPU_CAPABILITY` already names a replayable set (a parent chose, or the user did), that choice
    stands and the other libraries are pinned to match it where they are not set. Otherwise (unset, avx512, or
    a name torch would ignore) the strongest replayable set this CPU runs replaces it, with every library
    pinned to it. `CUDA_SETTINGS` are set where unset, either way. Must run before torch is imported: torch reads the variables once, when it loads, so a pin
    after that would change nothing in this process, and is refused rather than left to commit bytes under a
    false label.
    """
    environ = os.environ if environ is None else environ
    for name, value in CUDA_SETTINGS.items():
        environ.setdefault(name, value)
    chosen = environ.get("ATEN_CPU_CAPABILITY")
    if chosen in REPLAYABLE_INSTRUCTION_SETS:
        for name, value in LIBRARY_SETTINGS[chosen].items():
            environ.setdefault(name, value)
        return chosen
    if environ is os.environ and "torch" in sys.modules:
        raise InstructionSetError(
            f"torch was imported before the instruction set was pinned (ATEN_CPU_CAPABILITY={chosen}): call "
            "trolly.compute.instruction_sets.pin_replayable_instruction_set() before importing torch, or start "
            "the process with ATEN_CPU_CAPABILITY=avx2 (or default where the CPU lacks avx2)")
    chosen = replayable_instruction_set(cpu_flags() if flags is None else flags)
    environ.update(LIBRARY_SETTINGS[chosen])
    return chosen


def unpinned_libraries(instruction_set: str, environ: Mapping[str, str]) -> list[str]:
    """`NAME=value` for each library setting `environ` lacks to run `instruction_set` reproducibly."""
    wanted = LIBRARY_SETTINGS.get(instruction_set, {})
    return [f"{name}={value}" for name, value in wanted.items() if environ.get(name) != value]


def run_pinned(cli_module: str) -> None:
    """A console script's entry point: pin the instruction set, then import and run `cli_module`'s `main`.
    The CLI is imported only after the pin, since importing it imports torch."""
    pin_replayable_instruction_set()
    importlib.import_module(cli_module).main()
