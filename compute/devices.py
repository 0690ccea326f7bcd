"""Where a trainer runs: the CPU, or a CUDA GPU under the settings that make it replayable bit for bit.

A GPU replays a segment bit for bit only on the same GPU model, driver and CUDA build, with deterministic
algorithms on (torch then refuses the few kernels that have no deterministic form), cuBLAS on a fixed workspace
(`instruction_sets.CUDA_SETTINGS`, set before CUDA initialises), cuDNN's autotuner off and TF32 off (its
products round differently from fp32's). So a GPU's determinism profile names all three
(`gpu_profile_part`), and only a verifier whose own GPU gives the same part replays it
(`verifier/replay_profile.py`); any other votes nothing on it.

CPU-only machines run everything here but `cuda_description`, which needs the GPU it describes: the pure parts
(`gpu_profile_part`, `parse_gpu_profile_part`, `check_cuda_environment`) are tested without one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from .errors import DeterminismError
from .instruction_sets import CUDA_SETTINGS

DEVICES = ("cpu", "cuda")
"""The devices a trainer takes (`training_device`)."""

NVIDIA_DRIVER_VERSION = Path("/proc/driver/nvidia/version")
"""Where Linux's NVIDIA kernel module says its version (torch exposes CUDA's API version, not the driver's)."""

_SLUG = re.compile(r"[^A-Za-z0-9.]+")


def training_device(requested: str | None = None) -> str:
    """The device a trainer runs on: `requested` ("cpu" or "cuda"), or CUDA where a GPU is present, else the
    CPU. Asking for CUDA without a GPU is a DeterminismError, not a silent fall back to the CPU."""
    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested not in DEVICES:
        raise DeterminismError(f"device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cuda" and not torch.cuda.is_available():
        raise DeterminismError("device cuda was asked for, but this process sees no CUDA GPU")
    return requested


def gpu_profile_part(gpu_name: str, driver_version: str, cuda_version: str) -> str:
    """The part of a determinism profile id that names a GPU: `gpu-<model>+driver-<version>+cuda-<version>`,
    each name with anything but letters, digits and dots turned into `-` (a profile id's parts are separated
    by `/` and its fields by `+`)."""
    fields = [("gpu", gpu_name), ("driver", driver_version), ("cuda", cuda_version)]
    slugs = [(key, _SLUG.sub("-", value).strip("-")) for key, value in fields]
    missing = [key for key, slug in slugs if not slug]
    if missing:
        raise DeterminismError(f"a GPU profile needs its {', '.join(missing)}")
    return "+".join(f"{key}-{slug}" for key, slug in slugs)


def parse_gpu_profile_part(part: str) -> tuple[str, str, str] | None:
    """(gpu model, driver, cuda) of a `gpu_profile_part`, None if `part` is not one."""
    fields = part.split("+")
    keys = ("gpu-", "driver-", "cuda-")
    if len(fields) != 3 or not all(field.startswith(key) and len(field) > len(key)
                                   for field, key in zip(fields, keys)):
        return None
    return tuple(field[len(key):] for field, key in zip(fields, keys))


def nvidia_driver_version(path: Path = NVIDIA_DRIVER_VERSION) -> str:
    """The NVIDIA kernel driver's version (`550.54.15`), read from `path`; else CUDA's driver API version as
    torch reports it (`cuda-api-12040`), which still tells drivers of different CUDA generations apart."""
    try:
        text = path.read_text()
    except OSError:
        text = ""
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9][0-9.]+)", text)
    if match:
        return match.group(1)
    return f"cuda-api-{torch._C._cuda_getDriverVersion()}"


def cuda_description(device: str = "cuda") -> str:
    """This machine's `gpu_profile_part`: the GPU model of `device`, the driver and the CUDA torch was built
    with. Needs the GPU."""
    return gpu_profile_part(torch.cuda.get_device_name(torch.device(device)), nvidia_driver_version(),
                            torch.version.cuda or "none")


def check_cuda_environment(environ: Mapping[str, str] | None = None) -> None:
    """Raise DeterminismError unless cuBLAS's workspace is pinned as `CUDA_SETTINGS` says: it is read when CUDA
    initialises, so a process started without it cannot train on the GPU for the protocol."""
    environ = os.environ if environ is None else environ
    wrong = [f"{name}={value}" for name, value in CUDA_SETTINGS.items() if environ.get(name) != value]
    if wrong:
        raise DeterminismError(
            f"CUDA training is replayable only with {' '.join(wrong)} set before CUDA initialises: start the "
            "process through the trolly-* commands or python -m benchmarks.*, or call "
            "trolly.compute.instruction_sets.pin_replayable_instruction_set() before importing torch")


def apply_cuda_determinism(environ: Mapping[str, str] | None = None) -> None:
    """Set this process's CUDA libraries to deterministic mode (after `check_cuda_environment`): deterministic
    algorithms, cuDNN without its autotuner, no TF32 in matrix products or convolutions."""
    check_cuda_environment(environ)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def device_memory_mb(device: str) -> int:
    """The memory of `device` in MiB: the GPU's own for CUDA (what a CUDA worker declares and is held to), the
    machine's for the CPU (0 where the platform does not say)."""
    if device == "cuda":
        return torch.cuda.get_device_properties(torch.device(device)).total_memory // 2**20
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError, AttributeError):
        return 0
