"""Getting a task's dataset onto this machine: the one fetcher the worker, a replacement, the verifier, the
console and the requester share.

A dataset is a manifest and its shards, each a blob named by its hash (`manifest.py`). A `DatasetFetcher` asks
its URLs for them (the spec's, then the members' blob services or the relays that serve them: `dataset_urls`)
through a `BlobClient`, so every blob is hash-checked and connections go only where the `AddressPolicy`
allows. It checks the manifest before it fetches a shard: its structure, and the shards and bytes it lists
against `DatasetBounds` (what the spec declared, which the chain bounded, and the manifest's own size), so
nothing beyond them is fetched or held. What it fetched is held one of four ways, one per need:

- `into_store`: every shard a blob store lacks, each kept as it arrives, so an interrupted fetch resumes where
  it stopped; a shard already there is hash-checked first and fetched again only when it does not match. The
  worker and a replacement train from their store and serve the dataset from it.
- `in_memory`: the whole dataset loaded (the requester evaluating its result).
- `split`: one split only, within a byte bound the caller gives (the console's charts evaluate on the held-out
  split of data it does not hold).
- `streamed`: each shard fetched when a replayed batch first reads it (`lazy_dataset`: a verifier holds what
  its sampled segments need, not the dataset).

A bundled dataset (`digits`, `pycorpus`, ...) needs no fetch when the local build hashes to the spec's manifest
hash (`bundled_blobs`): it is built from files this machine already has.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence

import torch

from trolly.chain.market.records import ACTIVE, FINISHED
from trolly.wallet.market_views import TaskView

from ..blobs.client import BlobClient, RetryPolicy
from ..blobs.connect_policy import AddressPolicy
from ..blobs.store import DEFAULT_MAX_BLOB_SIZE, BlobStore
from ..errors import ComputeError, DatasetError
from ..spec import TaskSpec
from .dataset import Dataset
from .lazy_dataset import ShardLoader, lazy_dataset
from .manifest import (SPLITS, DatasetBlobs, build_dataset, check_manifest_bounds, decode_shard, is_private,
                       load_dataset, loaded_bytes, manifest_shape, parse_manifest, shard_key, split_tensors)

log = logging.getLogger("trolly.compute")


@dataclasses.dataclass(frozen=True)
class DatasetBounds:
    """The most a fetch takes: shards and shard bytes (the spec's declaration), and the manifest's bytes."""

    max_shards: int
    max_bytes: int
    max_manifest_bytes: int = DEFAULT_MAX_BLOB_SIZE

    @classmethod
    def of(cls, spec: TaskSpec, max_manifest_bytes: int = DEFAULT_MAX_BLOB_SIZE) -> DatasetBounds:
        return cls(spec.dataset.max_shards, spec.dataset.max_bytes, max_manifest_bytes)


def dataset_urls(spec: TaskSpec, view: TaskView | None = None) -> list[str]:
    """Where a task's dataset is served: the spec's URLs, then each member's blob service (its relay's place for
    it when a relay serves it), active and finished members first (each keeps the data it trained on)."""
    members = sorted(view.members, key=lambda m: m.status not in (ACTIVE, FINISHED)) if view is not None else []
    return list(dict.fromkeys(list(spec.dataset.urls) + [m.fetch_url for m in members if m.fetch_url]))


def bundled_blobs(spec: TaskSpec) -> DatasetBlobs | None:
    """The bundled dataset the spec names, built here (nothing downloaded), when it hashes to the spec's manifest
    hash; None for a requester's packed dataset, another build, or one this machine cannot build."""
    if spec.dataset.packed:
        return None
    try:
        blobs = build_dataset(spec.dataset.name)
    except ComputeError as error:
        log.info("cannot build dataset %s locally: %s", spec.dataset.name, error)
        return None
    if blobs.manifest_hash != spec.dataset.manifest_hash:
        log.info("the bundled %s dataset hashes to %s, the task wants %s: fetching it instead",
                 spec.dataset.name, blobs.manifest_hash[:12], spec.dataset.manifest_hash[:12])
        return None
    return blobs


def keep_blobs(store: BlobStore, blobs: DatasetBlobs) -> None:
    """Put a built dataset's manifest and shards in `store` (each checked against its name)."""
    for digest, data in blobs.all_blobs().items():
        store.put(data, expected=digest)


def shard_entries(manifest: dict, splits: Sequence[str] = SPLITS) -> list[dict]:
    """The shard entries of a checked manifest's `splits`, in order."""
    return [entry for split in splits for entry in manifest["splits"][split]["shards"]]


def missing_bytes(store: BlobStore, manifest: dict) -> int:
    """The bytes of the manifest's shards the store does not hold yet (what `into_store` will write)."""
    return sum(entry["size"] for entry in shard_entries(manifest) if not store.has(entry["hash"]))


def held_intact(store: BlobStore, digest: str) -> bool:
    """Whether the store holds the blob `digest` with bytes that hash to it; one that does not is removed, so
    that it is fetched again."""
    if not store.has(digest):
        return False
    if hashlib.sha256(store.get(digest)).hexdigest() == digest:
        return True
    log.warning("blob %s in the store does not match its hash: fetching it again", digest[:16])
    store.discard(digest)
    return False


class DatasetFetcher:
    """One dataset, by its manifest hash, from `urls` (see the module docstring)."""

    def __init__(self, manifest_hash: str, urls: Sequence[str], addresses: AddressPolicy, bounds: DatasetBounds,
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.manifest_hash = manifest_hash
        self.urls = tuple(dict.fromkeys(url for url in urls if url))
        self.addresses = addresses
        self.bounds = bounds
        self.retry = retry

    @classmethod
    def for_task(cls, spec: TaskSpec, urls: Sequence[str], addresses: AddressPolicy, *,
                 retry: RetryPolicy = RetryPolicy(), max_manifest_bytes: int = DEFAULT_MAX_BLOB_SIZE) -> DatasetFetcher:
        """The spec's dataset from `urls` (`dataset_urls`), within the bounds the spec declared."""
        return cls(spec.dataset.manifest_hash, urls, addresses, DatasetBounds.of(spec, max_manifest_bytes), retry)

    def _client(self, max_blob_size: int) -> BlobClient:
        if not self.urls:
            raise DatasetError(f"dataset {self.manifest_hash[:16]}... is not here and no URL serves it")
        return BlobClient(list(self.urls), retry=self.retry, address_policy=self.addresses, max_blob_size=max_blob_size)

    def checked(self, data: bytes) -> dict:
        """The manifest in `data` (already hash-checked), its structure and size checked against the bounds."""
        manifest = parse_manifest(data)
        check_manifest_bounds(manifest, self.bounds.max_shards, self.bounds.max_bytes)
        return manifest

    async def manifest(self, store: BlobStore | None = None) -> dict:
        """The checked manifest: from `store` when it holds it, else fetched (and kept in `store`)."""
        return self.checked(await self._manifest_bytes(store))

    async def _manifest_bytes(self, store: BlobStore | None) -> bytes:
        if store is not None and held_intact(store, self.manifest_hash):
            return store.get(self.manifest_hash)
        async with self._client(self.bounds.max_manifest_bytes) as client:
            data = await client.fetch(self.manifest_hash)
        self.checked(data)  # nothing unchecked is kept
        if store is not None:
            store.put(data, expected=self.manifest_hash)
        return data

    async def preprocessing_blob(self) -> tuple[dict, bytes | None]:
        """The checked manifest and the preprocessing blob it names beside its shards (a packed table's,
        `preprocessing.py`; hash-checked, still encrypted for private data), None when it names none."""
        manifest = await self.manifest()
        entry = manifest.get("preprocessing")
        if entry is None:
            return manifest, None
        async with self._client(entry["size"]) as client:
            return manifest, await client.fetch(entry["hash"])

    async def _fetch_shards(self, entries: Sequence[dict], keep: Callable[[dict, bytes], object]) -> None:
        """Fetch each shard of `entries` and hand it to `keep(entry, data)` as it arrives."""
        if not entries:
            return
        async with self._client(max(entry["size"] for entry in entries)) as client:
            for entry in entries:
                keep(entry, await client.fetch(entry["hash"]))

    async def into_store(self, store: BlobStore) -> int:
        """The manifest and every shard `store` lacks (or holds with bytes that do not match), each kept as it
        arrives; returns how many shards were fetched. Resumes an interrupted fetch where it stopped."""
        manifest = await self.manifest(store)
        missing = [entry for entry in shard_entries(manifest) if not held_intact(store, entry["hash"])]
        await self._fetch_shards(missing, lambda entry, data: store.put(data, expected=entry["hash"]))
        return len(missing)

    async def in_memory(self, key: bytes | None = None) -> Dataset:
        """The whole dataset, fetched and loaded (a private one's shards decrypted with its data `key`)."""
        data = await self._manifest_bytes(None)
        blobs = {self.manifest_hash: data}
        await self._fetch_shards(shard_entries(self.checked(data)),
                                 lambda entry, shard: blobs.__setitem__(entry["hash"], shard))
        return load_dataset(self.manifest_hash, blobs.__getitem__, key)

    async def split(self, name: str, max_bytes: int) -> Dataset:
        """Split `name` of a public dataset alone (the other left empty), refused when its shards, fetched or
        decoded, would take more than `max_bytes`."""
        manifest = await self.manifest()
        if is_private(manifest):
            raise DatasetError(f"dataset {self.manifest_hash[:16]}... is private: its {name} split cannot be read "
                               f"without its data key")
        chosen = manifest["splits"][name]
        fetched = sum(entry["size"] for entry in chosen["shards"])
        empty = {split: {"samples": 0} for split in SPLITS if split != name}
        decoded = loaded_bytes({**manifest, "splits": {**empty, name: chosen}})
        if max(fetched, decoded) > max_bytes:
            raise DatasetError(f"the {name} split is {max(fetched, decoded)} bytes, more than the {max_bytes} "
                               f"bytes this fetch allows")
        pieces: list[dict[str, torch.Tensor]] = []
        await self._fetch_shards(chosen["shards"], lambda entry, data: pieces.append(decode_shard(data, entry)))
        inputs, targets = split_tensors(manifest["kind"], pieces)
        if len(inputs) != chosen["samples"]:
            raise DatasetError(f"the {name} split has {len(inputs)} samples, its manifest says {chosen['samples']}")
        splits = {split: (inputs, targets) if split == name else (inputs[:0], targets[:0]) for split in SPLITS}
        return Dataset(name=str(manifest["name"]), manifest_hash=self.manifest_hash, shape=manifest_shape(manifest),
                       train_inputs=splits["train"][0], train_targets=splits["train"][1],
                       test_inputs=splits["test"][0], test_targets=splits["test"][1])

    async def streamed(self, key: bytes | None = None,
                       wrap: Callable[[ShardSource], ShardLoader] | None = None) -> Dataset:
        """The dataset over its checked manifest, each shard fetched when first read (`ShardSource`, handed to
        `wrap` first when given: a verifier turns a failed fetch into its own error); a private one's shards
        decrypted with its data `key` (DataKeyError without one)."""
        manifest = await self.manifest()
        source = ShardSource(self.urls, self.retry, self.addresses, shard_key(manifest, key))
        return lazy_dataset(self.manifest_hash, manifest, source if wrap is None else wrap(source))


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
                outcome["data"] = asyncio.run(self._fetch(entry))
            except Exception as error:  # noqa: BLE001 - handed to the caller's thread below
                outcome["error"] = error

        thread = threading.Thread(target=fetch, name="dataset-shard-fetch")
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return decode_shard(outcome["data"], entry, self.key)

    async def _fetch(self, entry: dict) -> bytes:
        async with BlobClient(list(self.urls), retry=self.retry, address_policy=self.addresses,
                              max_blob_size=entry["size"]) as blobs:
            return await blobs.fetch(entry["hash"])
