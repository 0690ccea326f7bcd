"""Getting a task's dataset onto the worker, checked against the spec's manifest hash.

Tried in order, the first that works wins:
1. the worker's own blob store (a previous task, or a previous run, already has it);
2. building the bundled dataset the spec names (`digits`, `pycorpus`: nothing is downloaded) and keeping it
   only if its manifest hashes to the spec's `manifest_hash`;
3. fetching the manifest and its shards from the spec's `dataset.urls` (every blob hash-checked).

A packed dataset (a requester's own) is never built locally, and its manifest's shape must be the one its spec
declares: the chain bounded the model by the declared shape (`trolly.chain.market.datasets`).

Whatever way it came, the blobs end up in the worker's store, so the worker serves the dataset too.

Before it joins a task (and locks collateral), a worker reads the manifest alone (`read_manifest`), refuses
one listing more shards or bytes than the spec declared, checks what it would take against its disk and
memory (`compute/worker/fit.py`), then obtains the whole dataset: a dataset the requester does not serve, or
that does not match its hash, keeps the worker out of the task, and a worker never starts a round it cannot
train for want of data.

A private dataset (its manifest names a cipher, docs/privacy.md) is fetched the same way before joining, as
ciphertext (`obtain_blobs`): hash-checked, but not decodable until the requester delivers this worker's data
key, which it does once the task runs. The worker then waits for its box (one that does not come in time
releases it without penalty), checks it and loads the dataset with the key (`obtain_dataset`).
"""

from __future__ import annotations

import asyncio
import logging

from ..blobs import AddressPolicy, BlobClient, BlobStore
from ..data import Dataset, build_dataset, load_dataset
from ..data.manifest import SPLITS, check_manifest_bounds, is_private, parse_manifest
from ..data.encryption import DataKeyError
from ..errors import ComputeError, DatasetError
from ..spec import TaskSpec

log = logging.getLogger("trolly.worker")


def _from_store(store: BlobStore, manifest_hash: str, key: bytes | None) -> Dataset | None:
    if not store.has(manifest_hash):
        return None
    try:
        return load_dataset(manifest_hash, store.get, key)
    except DataKeyError:
        raise  # a private dataset without its key (or with another) is not "incomplete": fetching cannot help
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


def _bundled_manifest(spec: TaskSpec) -> bytes | None:
    if spec.dataset.packed:
        return None
    blobs = build_dataset(spec.dataset.name)
    return blobs.manifest if blobs.manifest_hash == spec.dataset.manifest_hash else None


async def read_manifest(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy, build: bool = True) -> dict:
    """The task's manifest, checked (hash, structure) and within the shards and bytes its spec declared: from
    the store, else from the bundled build when it hashes right (`build`), else fetched from the spec's URLs
    and stored. Raises DatasetError (or a BlobError) when none has it."""
    manifest_hash = spec.dataset.manifest_hash
    data = store.get(manifest_hash) if store.has(manifest_hash) else None
    if data is None and build:
        data = await asyncio.to_thread(_bundled_manifest, spec)
    if data is None:
        if not spec.dataset.urls:
            raise DatasetError(f"dataset {manifest_hash} is not available locally and the spec lists no URLs")
        async with BlobClient(list(spec.dataset.urls), address_policy=addresses) as client:
            data = await client.fetch(manifest_hash)
        store.put(data, expected=manifest_hash)
    manifest = parse_manifest(data)
    check_manifest_bounds(manifest, spec.dataset.max_shards, spec.dataset.max_bytes)
    return manifest


def missing_bytes(store: BlobStore, manifest: dict) -> int:
    """The bytes of the manifest's shards the store does not hold yet (what obtaining it will write)."""
    return sum(entry["size"] for split in SPLITS for entry in manifest["splits"][split]["shards"]
               if not store.has(entry["hash"]))


async def _fetch_shards(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy) -> dict:
    """The checked manifest, its shards fetched into the store (hash-checked, not decoded)."""
    manifest = await read_manifest(store, spec, addresses, build=False)
    missing = [entry["hash"] for split in SPLITS for entry in manifest["splits"][split]["shards"]
               if not store.has(entry["hash"])]
    if missing:
        async with BlobClient(list(spec.dataset.urls), address_policy=addresses) as client:
            for digest in missing:
                store.put(await client.fetch(digest), expected=digest)
    return manifest


async def _fetch(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy, key: bytes | None) -> Dataset:
    await _fetch_shards(store, spec, addresses)
    return load_dataset(spec.dataset.manifest_hash, store.get, key)


async def obtain_blobs(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy) -> bool:
    """Before joining: the task's dataset obtained into the store (a public one loaded and checked as by
    `obtain_dataset`, a private one fetched as ciphertext); True when it is private (a key is needed)."""
    manifest = await read_manifest(store, spec, addresses)
    if not is_private(manifest):
        await obtain_dataset(store, spec, addresses)
        return False
    await _fetch_shards(store, spec, addresses)
    return True


def check_declared_shape(spec: TaskSpec, dataset: Dataset) -> None:
    """Refuse a packed dataset whose manifest disagrees with the shape its spec declared on chain."""
    if not spec.dataset.packed:
        return
    declared = spec.dataset
    kind = "text-classification" if declared.context else "classification"
    if ((dataset.shape.kind, dataset.shape.input_size, dataset.shape.num_classes, dataset.shape.context)
            != (kind, declared.input_size, declared.num_classes, declared.context)):
        raise DatasetError(f"dataset {declared.manifest_hash[:12]} is {dataset.shape.kind} with "
                           f"{dataset.shape.input_size} inputs, {dataset.shape.num_classes} classes and context "
                           f"{dataset.shape.context}, the spec declares {kind} with {declared.input_size}, "
                           f"{declared.num_classes} and {declared.context}")


async def obtain_dataset(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy,
                         key: bytes | None = None) -> Dataset:
    """The task's dataset: from the store, else built from the bundled data, else fetched from the spec's URLs
    (the requester's: connections only where `connect_policy` allows); a private one decrypted with its data
    `key` (DataKeyError without it)."""
    dataset = _from_store(store, spec.dataset.manifest_hash, key)
    if dataset is None:
        dataset = await asyncio.to_thread(_build_locally, store, spec)
    if dataset is None:
        dataset = await _fetch(store, spec, addresses, key)
    check_declared_shape(spec, dataset)
    log.info("dataset %s ready: %d training samples", spec.dataset.name, dataset.train_size)
    return dataset
