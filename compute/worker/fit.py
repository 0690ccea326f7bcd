"""Whether this worker's declared memory and its disk hold a task before it joins (and locks collateral).

The model's estimate is the chain's own (`trolly.chain.market.footprint`), computed from the spec with
integers, so a worker refuses exactly what it could not hold by the same rule the chain bounds specs with; the
dataset's loaded size and the bytes its shards will take on disk come from its manifest
(`compute/worker/data.py` reads it first, and refuses one beyond the spec's declared shards and bytes).
"""

from __future__ import annotations

import dataclasses

from trolly.chain.market.errors import InvalidSpec
from trolly.chain.market.spec import parse_spec as parse_chain_spec
from trolly.chain.market.footprint import spec_footprint

from ..errors import BaseModelMissing
from ..models.base_model import require_base_model
from ..spec import TaskSpec
from .errors import TaskUnfit


def check_memory(raw_spec: bytes, memory_mb: int, dataset_bytes: int = 0) -> int:
    """The task's memory estimate in MiB, the model's and the loaded dataset's (`dataset_bytes`); raises
    TaskUnfit when it exceeds `memory_mb`. A worker that declared no memory (0: its platform does not report it)
    is not held to one."""
    try:
        estimate = spec_footprint(parse_chain_spec(raw_spec)).memory_mb + -(-dataset_bytes // 2**20)
    except (InvalidSpec, KeyError, TypeError) as error:
        raise TaskUnfit(f"the spec's memory estimate cannot be computed: {error}") from None
    if memory_mb and estimate > memory_mb:
        raise TaskUnfit(f"the task needs an estimated {estimate} MiB, this worker declared {memory_mb} MiB")
    return estimate


def check_base_model(spec: TaskSpec) -> None:
    """Raise TaskUnfit when the spec's pinned base model is not installed here as pinned: without it this worker
    cannot derive the frozen weights it would fine-tune (`compute.models.base_model`)."""
    try:
        require_base_model(spec.model.config)
    except BaseModelMissing as error:
        raise TaskUnfit(f"the task fine-tunes a base model this worker does not have: {error}") from None


def check_disk(missing_bytes: int, free_bytes: int) -> None:
    """Raise TaskUnfit when the dataset's shards not yet stored would not fit the store's free disk."""
    if missing_bytes > free_bytes:
        raise TaskUnfit(f"the dataset needs {missing_bytes} more bytes on disk, the blob store has {free_bytes} free")


def on_device(spec: TaskSpec, device: str) -> TaskSpec:
    """The spec as this worker trains it: on its device (`devices.training_device`). The device is the worker's
    choice, not the requester's: the determinism profile it commits names it (and a GPU's model, driver and
    CUDA build), so verifiers replay it where they can."""
    return dataclasses.replace(spec, determinism=dataclasses.replace(spec.determinism, device=device))
