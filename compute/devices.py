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

DEVICES = ("cpu", "cuda", "cuda:N")
"""The devices a trainer takes (`training_device`): the CPU, the current CUDA GPU, or CUDA GPU number N."""

NVIDIA_DRIVER_VERSION = Path("/proc/driver/nvidia/version")
"""Where Linux's NVIDIA kernel module says its version (torch exposes CUDA's API version, not the driver's)."""

CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where Linux mounts its control groups, whose memory limit a container's processes live under."""

_SLUG = re.compile(r"[^A-Za-z0-9.]+")
_CUDA_DEVICE = re.compile(r"cuda(?::([0-9]{1,3}))?")


def is_device_name(name: object) -> bool:
    """Whether `name` is written as a device of `DEVICES`: "cpu", "cuda" or "cuda:N" (present or not)."""
    return isinstance(name, str) and (name == "cpu" or _CUDA_DEVICE.fullmatch(name) is not None)


def is_cuda(device: str) -> bool:
    return device != "cpu"


def training_device(requested: str | None = None) -> str:
    """The device a trainer runs on: `requested` ("cpu", "cuda" or "cuda:N"), or CUDA where a GPU is present,
    else the CPU. Asking for a GPU this process does not see is a DeterminismError, not a silent fall back to
    the CPU."""
    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not is_device_name(requested):
        raise DeterminismError(f"device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cpu":
        return requested
    if not torch.cuda.is_available():
        raise DeterminismError(f"device {requested} was asked for, but this process sees no CUDA GPU")
    index = _CUDA_DEVICE.fullmatch(requested).group(1)
    if index is not None and int(index) >= torch.cuda.device_count():
        raise DeterminismError(f"device {requested} was asked for, but this process sees "
                               f"{torch.cuda.device_count()} CUDA GPU(s), numbered from 0")
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
    machine's for the CPU (`machine_memory_mb`)."""
    if is_cuda(device):
        return torch.cuda.get_device_properties(torch.device(device)).total_memory // 2**20
    return machine_memory_mb()


def machine_memory_mb(cgroup_root: Path = CGROUP_ROOT, own_cgroups: Path = Path("/proc/self/cgroup")) -> int:
    """The memory this process may use, in MiB: the machine's physical memory, or less where its control group
    (a container's, a systemd slice's) sets a lower limit, as cgroup v2's `memory.max` or v1's
    `memory.limit_in_bytes` says. 0 where the platform reports no physical memory."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0
    limits = [physical, *cgroup_memory_limits(cgroup_root, own_cgroups)]
    return min(limits) // 2**20


def cgroup_memory_limits(cgroup_root: Path, own_cgroups: Path) -> list[int]:
    """The memory limits in bytes of this process's control groups and their parents (none: no limit set)."""
    try:
        lines = own_cgroups.read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # cgroup v2's unified hierarchy
            base, name = cgroup_root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = cgroup_root / "memory", "memory.limit_in_bytes"
        else:
            continue
        directory = base / path.lstrip("/")
        while True:
            try:
                text = (directory / name).read_text().strip()
            except OSError:
                text = ""
            if text.isdigit():
                limits.append(int(text))
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return limits
