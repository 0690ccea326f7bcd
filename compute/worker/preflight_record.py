"""The record of a preflight (`preflight.measure`), kept beside `worker.json` and read without torch.

A preflight is measured with torch (`preflight.py`), but what it found is plain data: the worker registers its
hardware from it (`Preflight.hardware`), `trolly-worker preflight` prints it (`Preflight.lines`), and the
console's Provide compute page shows the one saved in its worker's home. This module imports no torch, so that
showing it loads none.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from trolly.chain.proto.market_pb2 import HardwareProfile
from trolly.wallet.files import write_private_file

PREFLIGHT_FILE = "preflight.json"
"""Where `init` keeps its measurement, in the worker home."""
REFERENCE_BATCH = 32
"""The batch of the reference workload (`throughput.measure_reference`) and of the largest models a preflight
sizes."""


@dataclasses.dataclass(frozen=True)
class CudaDevice:
    index: int
    name: str
    memory_mb: int


@dataclasses.dataclass(frozen=True)
class LargestModel:
    """The largest model of one architecture this machine's memory and the chain's bounds admit, at the
    reference batch size on its reference dataset; `limit` says what stopped it growing. Empty `config`: none
    fits, and `limit` says why."""

    arch: str
    dataset: str
    batch_size: int
    config: dict
    parameters: int
    memory_mb: int
    limit: str


@dataclasses.dataclass(frozen=True)
class Reachability:
    """Whether others reach this worker's blob service: `checked` only when a probe answered."""

    checked: bool
    reachable: bool
    detail: str


NOT_CHECKED = Reachability(False, False, "not checked: no probe given (trolly-worker preflight --probe URL)")


@dataclasses.dataclass(frozen=True)
class Preflight:
    cores: int
    instruction_set: str
    """The instruction set this process trains under (`determinism.current_instruction_set`)."""
    cpu_instruction_sets: tuple[str, ...]
    """Those the CPU runs (`instruction_sets.runnable_instruction_sets`)."""
    memory_mb: int
    """What this process may use: physical memory, or its control group's lower limit."""
    disk_free_mb: int
    """Free under the worker home (its blob store)."""
    torch_version: str
    torch_cuda: str
    """The CUDA version torch was built with ('' for a CPU-only build)."""
    cuda_devices: tuple[CudaDevice, ...]
    device: str
    """Where this worker trains (`devices.training_device`)."""
    device_memory_mb: int
    """What a task's estimate is held to: the GPU's memory on CUDA, else `memory_mb`."""
    gpu_profile: str
    """The GPU part of the determinism profile on CUDA ('' on the CPU)."""
    samples_per_second: float
    """The chain's reference workload (`throughput.measure_reference`) on `device`."""
    reachability: Reachability
    largest_models: tuple[LargestModel, ...]

    def hardware(self, slowdown: float = 1.0, memory_limit_mb: int = 0) -> HardwareProfile:
        """The hardware record registered on chain: measured; `memory_limit_mb` (a flag) may only lower it, and
        `slowdown` divides the speed (`declared_speed`)."""
        memory = min(self.device_memory_mb, memory_limit_mb) if memory_limit_mb else self.device_memory_mb
        device = self.device if not self.gpu_profile else f"{self.device} {self.gpu_profile}"
        return HardwareProfile(device=device[:128],
                               samples_per_second=declared_speed(self.samples_per_second, slowdown),
                               memory_mb=memory, threads=self.cores)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, document: dict) -> Preflight:
        fields = dict(document)
        fields["cpu_instruction_sets"] = tuple(fields["cpu_instruction_sets"])
        fields["cuda_devices"] = tuple(CudaDevice(**d) for d in fields["cuda_devices"])
        fields["reachability"] = Reachability(**fields["reachability"])
        fields["largest_models"] = tuple(LargestModel(**m) for m in fields["largest_models"])
        return cls(**fields)

    def lines(self) -> list[str]:
        """The report for people, one measurement a line."""
        gpus = ", ".join(f"cuda:{d.index} {d.name} ({d.memory_mb} MiB)" for d in self.cuda_devices)
        lines = [
            f"cores             {self.cores}",
            f"instruction set   {self.instruction_set} (the CPU runs {', '.join(self.cpu_instruction_sets)})",
            f"memory            {self.memory_mb} MiB",
            f"disk free         {self.disk_free_mb} MiB (worker home)",
            f"torch             {self.torch_version}"
            + (f", CUDA {self.torch_cuda}" if self.torch_cuda else ", CPU-only build"),
            f"CUDA devices      {gpus or 'none'}",
            f"trains on         {self.device} ({self.device_memory_mb} MiB)"
            + (f", profile {self.gpu_profile}" if self.gpu_profile else ""),
            f"reference speed   {self.samples_per_second:.0f} samples/s (MLP 64-1024-1024-10, batch {REFERENCE_BATCH})",
            f"reachable         " + (("yes: " if self.reachability.reachable else "NO: ") if self.reachability.checked
                                     else "") + self.reachability.detail,
            "largest models    (batch 32, within this memory and the chain's bounds)",
        ]
        for model in self.largest_models:
            if model.config:
                lines.append(f"  {model.arch:12} {model.parameters:>12,} parameters, {model.memory_mb} MiB "
                             f"on {model.dataset} {json.dumps(model.config)} (limit: {model.limit})")
            else:
                lines.append(f"  {model.arch:12} none: {model.limit}")
        return lines


def declared_speed(samples_per_second: float, slowdown: float = 1.0) -> int:
    """The samples per second the chain records for a measured speed: divided by `slowdown`, rounded down, and at
    least 1 (the chain refuses 0)."""
    return max(1, int(samples_per_second / slowdown))


def save_preflight(home: pathlib.Path, preflight: Preflight) -> pathlib.Path:
    path = home / PREFLIGHT_FILE
    write_private_file(path, (json.dumps(preflight.to_json(), indent=2) + "\n").encode())
    return path

