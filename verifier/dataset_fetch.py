"""Getting a task's dataset: built locally when it is a bundled one with the same hash, else streamed.

The bundled datasets (`compute/data`) are built from files this machine already has; when the manifest hash
the spec names is the one the local build gives, nothing needs to travel. Otherwise only the manifest is
fetched up front (hash-checked, and refused beyond the shards and bytes its spec declared); each shard is
fetched from the spec's URLs and the worker's blob service when a replayed batch first reads it
(`compute.data.lazy_dataset`), hash-checked, so a verifier holds what its sampled segments need, not the dataset.

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

import asyncio
import dataclasses
import logging
import threading

import torch

from trolly.compute.blobs import AddressPolicy, BlobClient, RetryPolicy
from trolly.compute.data import Dataset, build_dataset, dataset_from_blobs
from trolly.compute.data.lazy_dataset import lazy_dataset
from trolly.compute.data.manifest import check_manifest_bounds, decode_shard, is_private, parse_manifest
from trolly.compute.errors import ComputeError
from trolly.compute.spec import TaskSpec

from .errors import WorkUnavailable

log = logging.getLogger("trolly.verifier")


@dataclasses.dataclass(frozen=True)
class ShardSource:
    """Fetches one shard from `urls` and checks it against its manifest entry; picklable, so a replay child
    fetches for itself. Runs its fetch on an event loop of its own, in a thread of its own: it is called from
    inside a replay, whichever thread (or the event loop's) runs it."""

    urls: tuple[str, ...]
    retry: RetryPolicy
    addresses: AddressPolicy
    key: bytes | None = None
    """A private dataset's data key (its shards are decrypted after their hash check)."""

    def __call__(self, entry: dict) -> dict[str, torch.Tensor]:
        outcome: dict[str, object] = {}

        def fetch() -> None:
            try:
                outcome["data"] = asyncio.run(self._fetch(entry["hash"]))
            except Exception as error:  # noqa: BLE001 - handed to the caller's thread below
                outcome["error"] = error

        thread = threading.Thread(target=fetch, name="dataset-shard-fetch")
        thread.start()
        thread.join()
        error = outcome.get("error")
        try:
            if error is not None:
                raise error
            return decode_shard(outcome["data"], entry, self.key)
        except ComputeError as failure:
            raise WorkUnavailable(f"dataset shard {entry['hash'][:16]}... could not be fetched: {failure}") from None

    async def _fetch(self, digest: str) -> bytes:
        async with BlobClient(list(self.urls), retry=self.retry, address_policy=self.addresses) as blobs:
            return await blobs.fetch(digest)


class TaskDatasets:
    """Where a verifier gets its tasks' datasets, with the bundled ones it built kept for its lifetime (the
    service holds one; each `trolly-verifier replay` builds its own)."""

    def __init__(self) -> None:
        self._local: dict[str, Dataset] = {}

    def local_dataset(self, spec: TaskSpec) -> Dataset | None:
        """The bundled dataset if its local build has the spec's manifest hash, else None."""
        name = spec.dataset.name
        if name not in self._local:
            try:
                self._local[name] = dataset_from_blobs(build_dataset(name))
            except ComputeError as error:
                log.info("cannot build dataset %s locally: %s", name, error)
                return None
        dataset = self._local[name]
        return dataset if dataset.manifest_hash == spec.dataset.manifest_hash else None

    async def task_dataset(self, spec: TaskSpec, extra_urls: list[str], retry: RetryPolicy,
                           addresses: AddressPolicy, key: bytes | None = None) -> Dataset:
        """The task's dataset: bundled if it matches, else its manifest fetched from the spec's URLs and
        `extra_urls` (strangers' URLs: connections only where `addresses` allows) and its shards streamed,
        a private one's decrypted with its data `key` (WorkUnavailable without one)."""
        dataset = self.local_dataset(spec)
        if dataset is not None:
            return dataset
        manifest_hash = spec.dataset.manifest_hash
        urls = tuple(spec.dataset.urls) + tuple(url for url in extra_urls if url)
        if not urls:
            raise WorkUnavailable(f"dataset {manifest_hash[:16]}... is not bundled and no URL serves it")
        try:
            async with BlobClient(list(urls), retry=retry, address_policy=addresses) as blobs:
                manifest = parse_manifest(await blobs.fetch(manifest_hash))
            check_manifest_bounds(manifest, spec.dataset.max_shards, spec.dataset.max_bytes)
            if is_private(manifest) and key is None:
                raise WorkUnavailable(f"dataset {manifest_hash[:16]}... is private and its data key has not been "
                                      f"delivered to this validator's operator (yet)")
            return lazy_dataset(manifest_hash, manifest,
                                ShardSource(urls, retry, addresses, key if is_private(manifest) else None))
        except ComputeError as error:
            raise WorkUnavailable(f"dataset {manifest_hash[:16]}... could not be fetched: {error}") from None
