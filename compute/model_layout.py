"""The shapes a task's blobs must have, from its spec's model, checked before anything is decoded.

A checkpoint, an update or a residual comes from another party and is hash-checked only against what that
party committed: its bytes can still declare any names, dtypes and shapes (a forged shape of 2^31 elements,
a tensor the model does not have, a weight of the wrong size that would only fail deep inside
`load_state_dict`). `ModelLayout` is what the spec's model has (built on torch's meta device: shapes only,
no memory, no initialisation), and each `check_*` compares a blob's header with it and raises `LayoutError`
(a `ComputeError`) on the first difference, before a byte of data is copied. Callers turn that into a
verdict against the publisher; nothing here ever sees more than a header.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping

import torch

from .canonical import Entry, read_entries
from .errors import ComputeError
from .models import DataShape, build_model
from .spec import TaskSpec


class LayoutError(ComputeError):
    """A blob's declared tensors are not the ones the task's model has."""


@dataclasses.dataclass(frozen=True)
class ModelLayout:
    """The model's state_dict entries: name -> (dtype, shape), in canonical order."""

    weights: Mapping[str, tuple[torch.dtype, tuple[int, ...]]]

    def checkpoint(self, final: bool) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """The entries of a checkpoint (docs/protocol.md 2a); a round's last one (`final`) has no `adamw/`."""
        entries = {"step": (torch.int64, ())}
        for name, (dtype, shape) in self.weights.items():
            entries[f"weights/{name}"] = (dtype, shape)
            if not final and dtype.is_floating_point:
                entries[f"adamw/{name}/step"] = (torch.float32, ())
                entries[f"adamw/{name}/exp_avg"] = (dtype, shape)
                entries[f"adamw/{name}/exp_avg_sq"] = (dtype, shape)
        return entries

    def update(self) -> list[tuple[str, tuple[int, ...]]]:
        """An encoded update's layout (`codecs/base.py` framing): every weight, ascending name order."""
        return [(name, shape) for name, (_, shape) in sorted(self.weights.items(), key=lambda i: i[0].encode("utf-8"))]

    def check_weights(self, entries: Iterable[Entry], what: str) -> None:
        """A residual or a set of weights: the model's entries exactly."""
        _compare(entries, self.weights, what)

    def check_checkpoint(self, entries: list[Entry], what: str = "checkpoint") -> bool:
        """A checkpoint's entries: one of the two forms; returns whether it is the final form."""
        final = not any(entry.name.startswith("adamw/") for entry in entries)
        _compare(entries, self.checkpoint(final), what)
        return final


def _compare(entries: Iterable[Entry], expected: Mapping[str, tuple[torch.dtype, tuple[int, ...]]], what: str) -> None:
    seen = set()
    for entry in entries:
        want = expected.get(entry.name)
        if want is None:
            raise LayoutError(f"{what} holds {entry.name!r}, which the task's model does not have")
        if (entry.dtype, entry.shape) != want:
            raise LayoutError(f"{what}: {entry.name!r} is {entry.dtype} {list(entry.shape)}, "
                              f"the task's model has {want[0]} {list(want[1])}")
        seen.add(entry.name)
    missing = sorted(set(expected) - seen)
    if missing:
        raise LayoutError(f"{what} lacks {len(missing)} of the model's tensors, e.g. {missing[0]!r}")


def check_blob(data, layout: ModelLayout, what: str) -> list[Entry]:
    """Read a weights-like blob's header and check it against the model (raises EncodingError/LayoutError)."""
    entries = read_entries(data)
    layout.check_weights(entries, what)
    return entries


@functools.lru_cache(maxsize=32)
def _layout(arch: str, config_json: str, shape: DataShape, seed: int) -> ModelLayout:
    with torch.device("meta"):
        model = build_model(arch, json.loads(config_json), shape, seed)
    return ModelLayout({name: (tensor.dtype, tuple(tensor.shape)) for name, tensor in model.state_dict().items()})


def model_layout(spec: TaskSpec, shape: DataShape) -> ModelLayout:
    """The layout of the spec's model on data of `shape` (cached: specs repeat, building costs a few ms)."""
    return _layout(spec.model.arch, json.dumps(dict(spec.model.config), sort_keys=True), shape, spec.training.seed)
