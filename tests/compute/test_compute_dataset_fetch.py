"""The one dataset fetcher (`compute/data/fetch.py`): a whole dataset in memory, into a store resuming what an
interrupted fetch left, one split within a byte bound, and the URLs a task's dataset is served at; every blob
from a real blob service on 127.0.0.1, hash-checked."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from market_view_helpers import member_answer, task_answer
from trolly.compute.blobs import AddressPolicy, BlobError, BlobServer, BlobStore, BlobTooLarge
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.data.fetch import DatasetBounds, DatasetFetcher, dataset_urls, keep_blobs, shard_entries
from trolly.compute.data.manifest import parse_manifest
from trolly.compute.data.encryption import new_data_key
from trolly.compute.data.packing import pack_file
from trolly.compute.errors import DatasetError
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.worker.data import obtain_dataset
from trolly.wallet.market_views import TaskView

LOOPBACK = AddressPolicy(allow_private=True)  # the test's servers listen on 127.0.0.1
ANY_SIZE = DatasetBounds(max_shards=1 << 20, max_bytes=1 << 40)


def served_store(tmp_path, blobs, name="served", leave_out=()) -> BlobStore:
    store = BlobStore(tmp_path / name)
    for digest, data in blobs.all_blobs().items():
        if digest not in leave_out:
            store.put(data, expected=digest)
    return store


def fetch_with(store: BlobStore, use):
    """Run `use(url)` (a coroutine) while `store` is served."""
    async def scenario():
        async with BlobServer(store) as server:
            return await use(server.url)
    return asyncio.run(scenario())


def test_a_dataset_is_fetched_and_checked_over_http(tmp_path):
    blobs = build_dataset("digits")
    dataset = fetch_with(served_store(tmp_path, blobs),
                         lambda url: DatasetFetcher(blobs.manifest_hash, [url], LOOPBACK, ANY_SIZE).in_memory())
    assert dataset.train_inputs.shape == (1437, 64)


def test_an_interrupted_fetch_resumes_with_only_what_the_store_lacks(tmp_path):
    """The first source lacks the last shard: the fetch stops there, keeping what came. The second source
    serves only that shard (and the manifest): the next try takes it alone, fetching nothing twice."""
    small = build_dataset("pycorpus", max_bytes=50_000)
    shards = [entry["hash"] for entry in shard_entries(parse_manifest(small.manifest))]
    assert len(shards) >= 3
    mine = BlobStore(tmp_path / "mine")

    def into_mine(url):
        return DatasetFetcher(small.manifest_hash, [url], LOOPBACK, ANY_SIZE).into_store(mine)

    with pytest.raises(BlobError):  # the source does not serve the last shard
        fetch_with(served_store(tmp_path, small, "partial", leave_out=shards[-1:]), into_mine)
    assert all(mine.has(digest) for digest in shards[:-1]) and not mine.has(shards[-1])
    assert fetch_with(served_store(tmp_path, small, "rest", leave_out=shards[:-1]), into_mine) == 1
    assert fetch_with(served_store(tmp_path, small, "nothing", leave_out=shards), into_mine) == 0


def test_a_shard_the_store_holds_with_other_bytes_is_fetched_again(tmp_path):
    """A worker's store holds a shard whose file no longer hashes to its name (a disk fault, a meddler): before,
    it counted as present, so the dataset failed to load from the store and the fetch left it as it was, and
    the worker could never obtain the dataset; now it is hash-checked, discarded and fetched again."""
    small = build_dataset("pycorpus", max_bytes=20_000)  # not the default build: the local one hashes otherwise
    mine = BlobStore(tmp_path / "mine")
    keep_blobs(mine, small)
    damaged = shard_entries(parse_manifest(small.manifest))[0]["hash"]
    mine.path(damaged).write_bytes(b"not the shard")

    async def obtain(url):
        spec = spec_from_dict(example_spec(small.manifest_hash, model={"arch": "transformer", "config": {}},
                                           dataset={"name": "pycorpus", "manifest_hash": small.manifest_hash,
                                                    "urls": [url]}))
        return await obtain_dataset(mine, spec, LOOPBACK)

    dataset = fetch_with(served_store(tmp_path, small), obtain)
    assert dataset.manifest_hash == small.manifest_hash and mine.get(damaged) == small.shards[damaged]


def test_the_held_out_split_alone_is_fetched_within_the_bounds_given(tmp_path):
    small = build_dataset("pycorpus", max_bytes=50_000)
    whole = dataset_from_blobs(small)
    manifest = parse_manifest(small.manifest)
    test_shards = [entry["hash"] for entry in manifest["splits"]["test"]["shards"]]
    train_only = [entry["hash"] for entry in manifest["splits"]["train"]["shards"]]
    store = served_store(tmp_path, small, leave_out=train_only)  # fetching a training shard would fail

    async def attempts(url):
        def fetcher(bounds=ANY_SIZE):
            return DatasetFetcher(small.manifest_hash, [url], LOOPBACK, bounds)
        held_out = await fetcher().split("test", 1 << 30)
        refused = []
        for bounds, max_bytes in ((ANY_SIZE, 1000), (DatasetBounds(1, 1 << 40), 1 << 30),
                                  (DatasetBounds(1 << 20, 1 << 40, max_manifest_bytes=100), 1 << 30)):
            with pytest.raises((DatasetError, BlobTooLarge)) as refusal:
                await fetcher(bounds).split("test", max_bytes)
            refused.append(str(refusal.value))
        return held_out, refused

    held_out, refused = fetch_with(store, attempts)
    assert torch.equal(held_out.test_inputs, whole.test_inputs) and len(held_out.train_inputs) == 0
    assert test_shards and "more than the 1000 bytes" in refused[0]
    assert "the spec allows 1" in refused[1] and "exceeds the limit of 100" in refused[2]


def test_a_private_datasets_split_is_not_read_without_its_key(tmp_path):
    generator = np.random.default_rng(0)
    rows = "".join(f"{generator.normal(i % 2 * 3, 1):.3f},{generator.normal(0, 1):.3f},{'ab'[i % 2]}\n"
                   for i in range(60))
    (tmp_path / "data.csv").write_text("a,b,label\n" + rows)
    blobs, _, _ = pack_file(tmp_path / "data.csv", key=new_data_key())
    with pytest.raises(DatasetError, match="private"):
        fetch_with(served_store(tmp_path, blobs),
                   lambda url: DatasetFetcher(blobs.manifest_hash, [url], LOOPBACK, ANY_SIZE).split("test", 1 << 30))


def test_a_tasks_dataset_is_served_at_its_spec_urls_then_its_members_own_or_relayed_urls():
    """A member served by a relay is fetched from the relay (a replacement used to ask its own blob URL, which
    a worker behind a relay has no inbound route to); members that left come last."""
    blobs_hash = "ab" * 32
    spec = spec_from_dict(example_spec(blobs_hash, dataset={"name": "digits", "manifest_hash": blobs_hash,
                                                            "urls": ["http://requester:1"]}))
    view = TaskView.from_answer(task_answer(members=[
        member_answer(blob_url="http://gone:1", status="left", index=0),
        member_answer(blob_url="http://behind-nat:1", relay="http://relay:1", index=1),
        member_answer(blob_url="http://requester:1", index=2)]))
    relayed = f"http://relay:1/workers/{view.members[1].worker}"
    assert dataset_urls(spec, view) == ["http://requester:1", relayed, "http://gone:1"]
    assert dataset_urls(spec) == ["http://requester:1"]
