"""What this machine can do for the market, measured, never assumed: `trolly-worker preflight`.

A worker is only as useful as what it can hold and how fast it trains, and a worker that overstates either
takes tasks it then cannot finish (its collateral lost, the other members' round too). So `measure` looks:
the cores and the instruction set this process trains under, the memory it may use (the machine's, or its
control group's limit: `devices.machine_memory_mb`), the disk free under its home, the torch build, each CUDA
GPU and its memory, the samples per second of the chain's reference workload (`throughput.measure_reference`)
on the device it trains on, whether its blob service is reachable from outside (asked of a probe that fetches
from it, `check_reachability`), and from the memory, the largest model of each architecture it can take
(`largest_model`, with the chain's own footprint estimate).

`init` runs it and saves it beside `worker.json`; `start` measures again, registers (or updates) its
hardware record from the measurement (`Preflight.hardware`: a flag may only lower the memory), and refuses a
task the measurement cannot fit (`unfit_reasons`), naming the requirement. What it found is a `Preflight`
(`preflight_record.py`, plain data that loads no torch).
"""

from __future__ import annotations

import os
import pathlib
import secrets
import shutil

import torch

from trolly.chain.market.base_models import BASE_MODELS
from trolly.chain.market.errors import InvalidSpec
from trolly.chain.market.footprint import MAX_DIMENSION, model_footprint, spec_footprint
from trolly.chain.market.params import MarketParams
from trolly.chain.market.spec import parse_spec as parse_chain_spec
from trolly.chain.proto.market_pb2 import HardwareProfile

from ..blobs import BlobError, BlobServer, BlobStore
from ..blobs.reachability import ask_probe
from ..determinism import current_instruction_set
from ..devices import cuda_description, device_memory_mb, is_cuda, machine_memory_mb, training_device
from ..errors import BaseModelMissing
from ..instruction_sets import cpu_flags, runnable_instruction_sets
from ..models.base_model import require_base_model
from ..spec import LORA_TEXT_BASE
from .config import WorkerConfig
from .preflight_record import NOT_CHECKED, REFERENCE_BATCH, CudaDevice, LargestModel, Preflight, Reachability
from .throughput import measure_reference

REFERENCE_DATASETS = {"mlp": "digits", "cnn": "digits", "transformer": "pycorpus", "lora-text": "pydocs"}
"""The bundled dataset each architecture's largest model is sized for (the input and output sizes it fixes)."""


def _scaled_config(arch: str, scale: int) -> dict:
    """The architecture's config grown by one integer `scale` (each field the chain's footprint reads grows with it)."""
    if arch == "mlp":
        return {"hidden": [scale, scale]}
    if arch == "cnn":
        return {"channels": [scale, 2 * scale], "hidden": 4 * scale}
    if arch == "transformer":
        return {"layers": 2, "heads": 4, "width": 4 * scale}
    return {"rank": scale, "alpha": 2 * scale}


def cuda_devices() -> tuple[CudaDevice, ...]:
    if not torch.cuda.is_available():
        return ()
    return tuple(CudaDevice(i, torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory // 2**20)
                 for i in range(torch.cuda.device_count()))


def largest_model(arch: str, memory_mb: int, params: MarketParams) -> LargestModel:
    """The largest `_scaled_config` of `arch` whose footprint fits `memory_mb` and the chain's `max_memory_mb`
    and `max_model_parameters` (bisection: the footprint grows with the scale)."""
    dataset = REFERENCE_DATASETS[arch]
    base = LORA_TEXT_BASE if arch == "lora-text" else None
    budget = min(memory_mb, params.max_memory_mb) if memory_mb else params.max_memory_mb
    bound = "memory" if memory_mb and memory_mb <= params.max_memory_mb else "the chain's max_memory_mb"
    if base is not None:
        try:
            require_base_model({"base": base})
        except BaseModelMissing as error:
            return LargestModel(arch, dataset, REFERENCE_BATCH, {}, 0, 0, str(error))

    def footprint(scale: int):
        return model_footprint(arch, _scaled_config(arch, scale), dataset, REFERENCE_BATCH, base)

    def limit_of(scale: int) -> str:
        try:
            found = footprint(scale)
        except InvalidSpec:
            return "the chain's bounds on a config"
        if found.parameters > params.max_model_parameters:
            return "the chain's max_model_parameters"
        return bound if found.memory_mb > budget else ""

    if limit_of(1):
        return LargestModel(arch, dataset, REFERENCE_BATCH, {}, 0, 0, f"even the smallest needs more: {limit_of(1)}")
    # a LoRA rank beyond the base model's width adds parameters, not capacity
    top = BASE_MODELS[(base["package"], base["version"])].hidden if base is not None else MAX_DIMENSION // 4
    low, high = 1, top
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if not limit_of(middle) else (low, middle - 1)
    found = footprint(low)
    reason = limit_of(low + 1) if low < top else ("the base model's width" if base is not None
                                                  else "the chain's bounds on a config")
    return LargestModel(arch, dataset, REFERENCE_BATCH, _scaled_config(arch, low), found.parameters, found.memory_mb,
                        reason)


def measure(home: pathlib.Path, device: str | None = None, params: MarketParams | None = None,
            reachability: Reachability = NOT_CHECKED, duration: float = 0.5) -> Preflight:
    """Measure this machine (about a second: the reference workload runs `duration` seconds). `device`: as
    `devices.training_device` takes it (None: CUDA where present); `params`: the chain's, for the bounds of the
    largest models (the defaults when the node is not asked)."""
    device = training_device(device)
    params = params or MarketParams()
    memory = machine_memory_mb()
    device_memory = device_memory_mb(device)
    probe_directory = home if home.exists() else next((p for p in home.parents if p.exists()), pathlib.Path("/"))
    speed = measure_reference(duration=duration, device=device)
    return Preflight(
        cores=os.cpu_count() or 1, instruction_set=current_instruction_set(),
        cpu_instruction_sets=runnable_instruction_sets(cpu_flags()), memory_mb=memory,
        disk_free_mb=shutil.disk_usage(probe_directory).free // 2**20, torch_version=torch.__version__,
        torch_cuda=torch.version.cuda or "", cuda_devices=cuda_devices(), device=device,
        device_memory_mb=device_memory, gpu_profile=cuda_description(device) if is_cuda(device) else "",
        samples_per_second=speed.samples_per_second, reachability=reachability,
        largest_models=tuple(largest_model(arch, device_memory, params) for arch in REFERENCE_DATASETS))


def unfit_reasons(preflight: Preflight, raw_spec: bytes, memory_limit_mb: int = 0,
                  replayed_gpus: set[str] | None = None) -> list[str]:
    """Each requirement of the spec this measurement does not meet, in words ('' none): the memory estimate
    (the chain's footprint) against the device's memory (lowered by `memory_limit_mb`), the spec's threads
    against the cores, its instruction set against this process's, its pinned base model against what is
    installed, and on a GPU, whether any validator replays it (`replayed_gpus`, the chain's
    `/market/replay_gpus`: without one, every round would settle unverified and unpaid). A spec that cannot be
    read is a reason too."""
    try:
        spec = parse_chain_spec(raw_spec)
        model = spec["model"]
        estimate = spec_footprint(spec).memory_mb
    except (InvalidSpec, KeyError, TypeError) as error:
        return [f"the spec cannot be read: {error}"]
    reasons = []
    memory = min(preflight.device_memory_mb, memory_limit_mb) if memory_limit_mb else preflight.device_memory_mb
    if memory and estimate > memory:
        reasons.append(f"memory: the task needs an estimated {estimate} MiB, this worker has {memory} MiB "
                       f"on {preflight.device}")
    threads = spec.get("determinism", {}).get("threads", 1)
    if threads > preflight.cores:
        reasons.append(f"cores: the task trains with {threads} threads, this machine has {preflight.cores}")
    wanted = spec.get("determinism", {}).get("instruction_set")
    if wanted is not None and wanted != preflight.instruction_set:
        reasons.append(f"instruction set: the task wants {wanted}, this process runs {preflight.instruction_set}")
    if model.get("base") is not None:
        try:
            require_base_model({"base": model["base"]})
        except BaseModelMissing as error:
            reasons.append(f"base model: {error}")
    if preflight.gpu_profile and replayed_gpus is not None and preflight.gpu_profile not in replayed_gpus:
        reasons.append(f"verification: no validator replays {preflight.gpu_profile}, so no committee could judge "
                       f"its rounds (they would settle unverified, unpaid); train on the CPU (--device cpu)")
    return reasons


def measured_differently(registered, measured: HardwareProfile) -> bool:
    """Whether the hardware record on chain (`market_views.Hardware`) is no longer what this machine is: another
    device, memory or core count. Not the speed: on a shared machine it moves from one start to the next, by more
    than 2x under load (docs/performance.md), and each update is a transaction and its fee."""
    return ((registered.device, registered.memory_mb, registered.threads)
            != (measured.device, measured.memory_mb, measured.threads))


def describe_hardware(hardware: HardwareProfile) -> str:
    return (f"{hardware.device}, {hardware.samples_per_second} samples/s, {hardware.memory_mb} MiB, "
            f"{hardware.threads} threads")


async def check_reachability(home: pathlib.Path, config: WorkerConfig, probe_url: str) -> Reachability:
    """Ask the probe at `probe_url` (a relay's `POST /probe`, `compute.blobs.reachability`) to fetch a fresh probe
    blob from this worker's registered blob URL: served for the time of the check by a blob service on the
    configured port, or by the worker's own running service when that port is taken (the blob is put in the home's
    store, which it serves). The probe blob is deleted afterwards."""
    if config.relay:
        return Reachability(False, False, f"not needed: this worker publishes through the relay {config.relay}")
    store = BlobStore(home / "blobs")
    digest = store.put(b"trolly reachability probe " + secrets.token_bytes(16))
    server = BlobServer(store, owner_token="", host=config.blob_host, port=config.blob_port)
    serving = True
    try:
        try:
            await server.start()
        except OSError:  # the port is taken: the worker's own service is up and serves this store
            serving = False
        try:
            reachable, detail = await ask_probe(probe_url, config.blob_url, digest)
        except BlobError as error:
            return Reachability(False, False, f"not checked: {error}")
        return Reachability(True, reachable, detail)
    finally:
        if serving:
            await server.stop()
        store.path(digest).unlink(missing_ok=True)
