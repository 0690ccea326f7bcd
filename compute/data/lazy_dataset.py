"""A dataset whose shards are fetched when a batch first needs them, for verifiers.

A verifier replays a few short segments of a task: a segment of k steps reads k batches, so it needs the
shards those batches' indices fall in, not the whole dataset. `lazy_dataset` builds a `Dataset` from the
checked manifest alone; its splits are `LazyRows`, which answer `rows[indices]` (and slices, and `shape`)
with the same values and dtypes as the loaded tensors of `load_dataset` would, fetching each shard they
touch through `load_shard(entry)` (which fetches it and checks it against its manifest entry:
`manifest.decode_shard`) and keeping the most recently used ones up to `cache_bytes`.

Whatever `load_shard` raises comes out of the indexing unchanged, so its caller decides whose fault a shard
nobody serves is (the verifier: not the worker's, see `verifier/dataset_fetch.py`). A pickled `LazyRows` (the
dataset handed to a replay child) travels without its cached shards; the child fetches what it needs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import torch

from ..errors import DatasetError
from .dataset import Dataset
from .manifest import FEATURE_KINDS, SPLITS, manifest_shape, split_tensors

DEFAULT_CACHE_BYTES = 256 * 2**20
"""Decoded shards a lazy split keeps for later batches, most recently used first."""

ShardLoader = Callable[[dict], dict[str, torch.Tensor]]
"""Fetch one shard by its manifest entry and return its decoded, checked tensors."""


class LazySplit:
    """One split of a manifest: its shards' offsets, and the shards fetched so far (bounded)."""

    def __init__(self, manifest: dict, split: str, load_shard: ShardLoader, cache_bytes: int) -> None:
        self.kind = manifest["kind"]
        self.entries = list(manifest["splits"][split]["shards"])
        counts = torch.tensor([entry["samples"] for entry in self.entries], dtype=torch.long)
        self.ends = torch.cumsum(counts, 0)
        self.samples = int(self.ends[-1])
        if self.samples != manifest["splits"][split]["samples"]:
            raise DatasetError(f"split {split}'s shards hold {self.samples} samples, manifest says "
                               f"{manifest['splits'][split]['samples']}")
        width = manifest["input_size"] if self.kind in FEATURE_KINDS else manifest["context"]
        self.row_shapes = {"inputs": (width,), "targets": (width,) if self.kind == "text" else ()}  # one label each
        self.load_shard = load_shard
        self.cache_bytes = cache_bytes
        self._cached: OrderedDict[int, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def shard(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of shard `index`, fetched now unless it is still cached."""
        with self._lock:
            cached = self._cached.get(index)
            if cached is not None:
                self._cached.move_to_end(index)
                return cached
        tensors = split_tensors(self.kind, [self.load_shard(self.entries[index])])
        size = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
        with self._lock:
            if index not in self._cached:
                self._cached[index] = tensors
                self._held += size
            while self._held > self.cache_bytes and len(self._cached) > 1:
                _, dropped = self._cached.popitem(last=False)
                self._held -= sum(tensor.numel() * tensor.element_size() for tensor in dropped)
        return tensors

    def fetched(self) -> list[int]:
        """The shards held now, least recently used first."""
        with self._lock:
            return list(self._cached)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cached"], state["_held"], state["_lock"] = OrderedDict(), 0, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class LazyRows:
    """The inputs or the targets of a `LazySplit`, indexed like the tensor `load_dataset` would hold."""

    def __init__(self, split: LazySplit, field: str) -> None:
        self.split = split
        self.field = field
        floats = split.kind == "regression" or (field == "inputs" and split.kind == "classification")
        self.dtype = torch.float32 if floats else torch.long

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.split.samples, *self.split.row_shapes[self.field]))

    def __len__(self) -> int:
        return self.split.samples

    def __getitem__(self, key) -> torch.Tensor:
        count = self.split.samples
        indices = torch.arange(count)[key] if isinstance(key, slice) else torch.as_tensor(key, dtype=torch.long)
        if indices.dim() != 1:
            raise IndexError("a lazy dataset is indexed by a 1-D tensor of sample indices or a slice")
        if len(indices) and (int(indices.min()) < -count or int(indices.max()) >= count):
            raise IndexError(f"sample index out of range for {count} samples")
        indices = torch.where(indices < 0, indices + count, indices)
        position = 0 if self.field == "inputs" else 1
        rows = torch.empty((len(indices), *self.split.row_shapes[self.field]), dtype=self.dtype)
        shard_of = torch.searchsorted(self.split.ends, indices, right=True)
        for shard in torch.unique(shard_of).tolist():
            chosen = (shard_of == shard).nonzero().squeeze(1)
            start = int(self.split.ends[shard - 1]) if shard else 0
            rows[chosen] = self.split.shard(shard)[position][indices[chosen] - start]
        return rows


def lazy_dataset(manifest_hash: str, manifest: dict, load_shard: ShardLoader,
                 cache_bytes: int = DEFAULT_CACHE_BYTES) -> Dataset:
    """A `Dataset` over a checked manifest (`manifest.parse_manifest`) whose shards come when first needed."""
    splits = {split: LazySplit(manifest, split, load_shard, cache_bytes) for split in SPLITS}
    return Dataset(name=str(manifest["name"]), manifest_hash=manifest_hash, shape=manifest_shape(manifest),
                   train_inputs=LazyRows(splits["train"], "inputs"), train_targets=LazyRows(splits["train"], "targets"),
                   test_inputs=LazyRows(splits["test"], "inputs"), test_targets=LazyRows(splits["test"], "targets"))
