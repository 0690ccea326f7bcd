"""Getting a task's dataset onto the worker, checked against the spec's manifest hash.

Tried in order, the first that works wins:
1. the worker's own blob store (a previous task, or a previous run, already has it);
2. building the bundled dataset the spec names (`digits`, `pycorpus`: nothing is downloaded) and keeping it
   only if its manifest hashes to the spec's `manifest_hash`;
3. fetching the manifest and its shards from the spec's `dataset.urls` (every blob hash-checked).

A packed dataset (a requester's own) is never built locally, and its manifest's shape must be the one its spec
declares: the chain bounded the model by the declared shape (`trolly.chain.market.datasets`).

Whatever way it came, the blobs end up in the worker's store, so the worker serves the dataset too.
"""

from __future__ import annotations

import asyncio
import json
import logging

from ..blobs import AddressPolicy, BlobClient, BlobStore
from ..data import Dataset, build_dataset, load_dataset
from ..errors import ComputeError, DatasetError
from ..spec import TaskSpec

log = logging.getLogger("trolly.worker")


def _from_store(store: BlobStore, manifest_hash: str) -> Dataset | None:
    if not store.has(manifest_hash):
        return None
    try:
        return load_dataset(manifest_hash, store.get)
    except ComputeError as error:  # a missing shard (BlobNotFound) is just as much "not here" as a bad one
        log.info("dataset %s is incomplete in the local store (%s)", manifest_hash[:12], error)
        return None


def _build_locally(store: BlobStore, spec: TaskSpec) -> Dataset | None:
    if spec.dataset.packed:
        return None
    blobs = build_dataset(spec.dataset.name)
    if blobs.manifest_hash != spec.dataset.manifest_hash:
        log.info("the bundled %s dataset hashes to %s, the task wants %s: fetching it instead",
                 spec.dataset.name, blobs.manifest_hash[:12], spec.dataset.manifest_hash[:12])
        return None
    for digest, data in blobs.all_blobs().items():
        store.put(data, expected=digest)
    return load_dataset(blobs.manifest_hash, store.get)


async def _fetch(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy) -> Dataset:
    manifest_hash = spec.dataset.manifest_hash
    if not spec.dataset.urls:
        raise DatasetError(f"dataset {manifest_hash} is not available locally and the spec lists no URLs")
    async with BlobClient(list(spec.dataset.urls), address_policy=addresses) as client:
        manifest = await client.fetch(manifest_hash)
        store.put(manifest, expected=manifest_hash)
        try:
            shard_hashes = [entry["hash"] for split in json.loads(manifest)["splits"].values() for entry in split["shards"]]
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise DatasetError(f"manifest {manifest_hash} is malformed: {error}") from None
        for digest in shard_hashes:
            if not store.has(digest):
                store.put(await client.fetch(digest), expected=digest)
    return load_dataset(manifest_hash, store.get)


def check_declared_shape(spec: TaskSpec, dataset: Dataset) -> None:
    """Refuse a packed dataset whose manifest disagrees with the shape its spec declared on chain."""
    if spec.dataset.packed and (dataset.shape.kind != "classification" or
                                (dataset.shape.input_size, dataset.shape.num_classes)
                                != (spec.dataset.input_size, spec.dataset.num_classes)):
        raise DatasetError(f"dataset {spec.dataset.manifest_hash[:12]} is {dataset.shape.kind} with "
                           f"{dataset.shape.input_size} inputs and {dataset.shape.num_classes} classes, the spec "
                           f"declares {spec.dataset.input_size} and {spec.dataset.num_classes}")


async def obtain_dataset(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy) -> Dataset:
    """The task's dataset: from the store, else built from the bundled data, else fetched from the spec's URLs
    (the requester's: connections only where `addresses` allows)."""
    dataset = _from_store(store, spec.dataset.manifest_hash)
    if dataset is None:
        dataset = await asyncio.to_thread(_build_locally, store, spec)
    if dataset is None:
        dataset = await _fetch(store, spec, addresses)
    check_declared_shape(spec, dataset)
    log.info("dataset %s ready: %d training samples", spec.dataset.name, dataset.train_size)
    return dataset
