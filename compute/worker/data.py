"""Getting a task's dataset onto the worker, checked against the spec's manifest hash.

Tried in order, the first that works wins:
1. the worker's own blob store (a previous task, or a previous run, already has it);
2. building the bundled dataset the spec names (`digits`, `pycorpus`: nothing is downloaded) and keeping it
   only if its manifest hashes to the spec's `manifest_hash`;
3. fetching the manifest and its shards from the spec's `dataset.urls` with the one dataset fetcher
   (`compute/data/fetch.py`: every blob hash-checked, only the shards the store lacks, so a fetch resumes).

A packed dataset (a requester's own) is never built locally, and its manifest's shape must be the one its spec
declares, its kind (classification or regression) included: the chain bounded the model by the declared shape
(`trolly.chain.market.datasets`), and a regression pack under a classification spec (or the reverse) would
train a model on labels it does not read.

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

from ..blobs import AddressPolicy, BlobStore
from ..data import Dataset, load_dataset
from ..data.encryption import DataKeyError
from ..data.fetch import DatasetFetcher, bundled_blobs, keep_blobs
from ..data.manifest import is_private
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
    blobs = bundled_blobs(spec)
    if blobs is None:
        return None
    keep_blobs(store, blobs)
    return load_dataset(blobs.manifest_hash, store.get)


def _fetcher(spec: TaskSpec, addresses: AddressPolicy) -> DatasetFetcher:
    """The dataset from the spec's URLs (the requester's: connections only where `addresses` allows)."""
    return DatasetFetcher.for_task(spec, spec.dataset.urls, addresses)


async def read_manifest(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy, build: bool = True) -> dict:
    """The task's manifest, checked (hash, structure) and within the shards and bytes its spec declared: from
    the store, else from the bundled build when it hashes right (`build`), else fetched from the spec's URLs
    and stored. Raises DatasetError (or a BlobError) when none has it."""
    fetcher = _fetcher(spec, addresses)
    if build and not store.has(spec.dataset.manifest_hash):
        blobs = await asyncio.to_thread(bundled_blobs, spec)
        if blobs is not None:
            return fetcher.checked(blobs.manifest)
    return await fetcher.manifest(store)


async def obtain_blobs(store: BlobStore, spec: TaskSpec, addresses: AddressPolicy) -> bool:
    """Before joining: the task's dataset obtained into the store (a public one loaded and checked as by
    `obtain_dataset`, a private one fetched as ciphertext); True when it is private (a key is needed)."""
    manifest = await read_manifest(store, spec, addresses)
    if not is_private(manifest):
        await obtain_dataset(store, spec, addresses)
        return False
    await _fetcher(spec, addresses).into_store(store)
    return True


def check_declared_shape(spec: TaskSpec, dataset: Dataset) -> None:
    """Refuse a packed dataset whose manifest disagrees with the shape its spec declared on chain."""
    if not spec.dataset.packed:
        return
    declared = spec.dataset
    kind = "text-classification" if declared.context else declared.task  # classification or regression
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
        await _fetcher(spec, addresses).into_store(store)  # resumes: only what the store lacks
        dataset = load_dataset(spec.dataset.manifest_hash, store.get, key)
    check_declared_shape(spec, dataset)
    log.info("dataset %s ready: %d training samples", spec.dataset.name, dataset.train_size)
    return dataset
