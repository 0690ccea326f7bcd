"""Getting a task's dataset: built locally when it is a bundled one with the same hash, else streamed.

The bundled datasets (`compute/data`) are built from files this machine already has; when the manifest hash
the spec names is the one the local build gives, nothing needs to travel. Otherwise only the manifest is
fetched up front (hash-checked, and refused beyond the shards and bytes its spec declared); each shard is
fetched from the spec's URLs and the worker's blob service when a replayed batch first reads it (the one
dataset fetcher's `streamed`, `compute/data/fetch.py`), hash-checked, so a verifier holds what its sampled
segments need, not the dataset.

A dataset nobody serves is not the worker's fault: the worker obtained the whole dataset before it joined and
serves it beside its checkpoints, but the dataset is the requester's. A manifest or shard that cannot be
fetched, or does not match its hash, raises `WorkUnavailable` (never a `ComputeError`, which a replay would
count against the worker): the verifier votes nothing on that segment and tries again later, and a segment
still undecided when its window closes is settled `unverified`, neither paid nor slashed (docs/protocol.md).

A private dataset's shards open with the data key the requester delivered to this validator's operator
(`compute.sealed_keys`); without it the verifier cannot replay, which is `WorkUnavailable` too: no vote, tried
again at the next pass (the key may come), never a verdict against the worker.
"""

from __future__ import annotations

import dataclasses

import torch

from trolly.compute.blobs import AddressPolicy, RetryPolicy
from trolly.compute.data import Dataset, dataset_from_blobs
from trolly.compute.data.encryption import DataKeyError
from trolly.compute.data.fetch import DatasetFetcher, ShardSource, bundled_blobs
from trolly.compute.errors import ComputeError
from trolly.compute.spec import TaskSpec

from .errors import WorkUnavailable


@dataclasses.dataclass(frozen=True)
class UnservedShards:
    """A `ShardSource` whose failures are `WorkUnavailable`: a shard nobody serves is no fault of the worker
    (a replay counts a ComputeError against it). Picklable, as the source is."""

    source: ShardSource

    def __call__(self, entry: dict) -> dict[str, torch.Tensor]:
        try:
            return self.source(entry)
        except ComputeError as failure:
            raise WorkUnavailable(f"dataset shard {entry['hash'][:16]}... could not be fetched: {failure}") from None


class TaskDatasets:
    """Where a verifier gets its tasks' datasets, with the bundled ones it built kept for its lifetime (the
    service holds one; each `trolly-verifier replay` builds its own)."""

    def __init__(self) -> None:
        self._local: dict[str, Dataset | None] = {}

    def local_dataset(self, spec: TaskSpec) -> Dataset | None:
        """The bundled dataset if its local build has the spec's manifest hash, else None (either way built
        once per manifest hash)."""
        manifest_hash = spec.dataset.manifest_hash
        if manifest_hash not in self._local:
            blobs = bundled_blobs(spec)
            self._local[manifest_hash] = dataset_from_blobs(blobs) if blobs is not None else None
        return self._local[manifest_hash]

    async def task_dataset(self, spec: TaskSpec, extra_urls: list[str], retry: RetryPolicy,
                           addresses: AddressPolicy, key: bytes | None = None) -> Dataset:
        """The task's dataset: bundled if it matches, else its manifest fetched from the spec's URLs and
        `extra_urls` (strangers' URLs: connections only where `addresses` allows) and its shards streamed,
        a private one's decrypted with its data `key` (WorkUnavailable without one)."""
        dataset = self.local_dataset(spec)
        if dataset is not None:
            return dataset
        fetcher = DatasetFetcher.for_task(spec, list(spec.dataset.urls) + extra_urls, addresses, retry=retry)
        try:
            return await fetcher.streamed(key, wrap=UnservedShards)
        except DataKeyError:
            raise WorkUnavailable(f"dataset {spec.dataset.manifest_hash[:16]}... is private and its data key has "
                                  f"not been delivered to this validator's operator (yet)") from None
        except ComputeError as error:
            raise WorkUnavailable(f"dataset {spec.dataset.manifest_hash[:16]}... could not be fetched: "
                                  f"{error}") from None
