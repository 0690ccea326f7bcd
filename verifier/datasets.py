"""Getting a task's dataset: built locally when it is a bundled one with the same hash, else fetched.

The bundled datasets (`compute/data`) are built from files this machine already has; when the manifest hash
the spec names is the one the local build gives, nothing needs to travel. Otherwise the manifest and shards
are fetched by hash from the spec's URLs and the worker's blob service (each blob hash-checked).
"""

from __future__ import annotations

import logging

from trolly.compute.blobs import AddressPolicy, BlobClient, RetryPolicy, fetch_dataset
from trolly.compute.data import Dataset, build_dataset, dataset_from_blobs
from trolly.compute.errors import ComputeError
from trolly.compute.spec import TaskSpec

from .errors import WorkUnavailable

log = logging.getLogger("trolly.verifier")


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
                           addresses: AddressPolicy) -> Dataset:
        """The task's dataset: bundled if it matches, else fetched from the spec's URLs and `extra_urls`
        (strangers' URLs: connections only where `addresses` allows)."""
        dataset = self.local_dataset(spec)
        if dataset is not None:
            return dataset
        urls = list(spec.dataset.urls) + [url for url in extra_urls if url]
        if not urls:
            raise WorkUnavailable(f"dataset {spec.dataset.manifest_hash[:16]}... is not bundled and no URL serves it")
        try:
            async with BlobClient(urls, retry=retry, address_policy=addresses) as blobs:
                return await fetch_dataset(blobs, spec.dataset.manifest_hash)
        except ComputeError as error:
            raise WorkUnavailable(f"dataset {spec.dataset.manifest_hash[:16]}... could not be fetched: {error}") from None
