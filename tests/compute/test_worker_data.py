"""How a worker gets a task's dataset (`compute/worker/data.py`): from its own store, by building the bundled
dataset when it hashes right, or fetched by hash from the spec's URLs (a real blob service on 127.0.0.1)."""

from __future__ import annotations

import asyncio

import pytest

from trolly.compute.blobs import AddressPolicy, BlobServer, BlobStore
from trolly.compute.data import build_dataset
from trolly.compute.errors import ComputeError
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.worker.data import obtain_dataset

LOOPBACK = AddressPolicy(allow_private=True)  # the test's servers listen on 127.0.0.1


def spec_for(blobs, name, urls):
    model = {"arch": "mlp", "config": {"hidden": [8]}} if name == "digits" else {"arch": "transformer", "config": {}}
    return spec_from_dict(example_spec(blobs.manifest_hash, model=model,
                                       dataset={"name": name, "manifest_hash": blobs.manifest_hash, "urls": urls}))


def test_the_bundled_dataset_is_built_locally_and_kept(tmp_path):
    blobs = build_dataset("digits")
    store = BlobStore(tmp_path)
    spec = spec_for(blobs, "digits", ["http://127.0.0.1:9"])  # never contacted
    dataset = asyncio.run(obtain_dataset(store, spec, LOOPBACK))
    assert dataset.manifest_hash == blobs.manifest_hash and dataset.train_size == 1437
    assert all(store.has(digest) for digest in blobs.all_blobs())  # the worker now serves it too
    again = asyncio.run(obtain_dataset(store, spec, LOOPBACK))  # from the store this time
    assert again.train_size == dataset.train_size


def test_a_dataset_that_does_not_build_locally_is_fetched_by_hash(tmp_path):
    small = build_dataset("pycorpus", max_bytes=20_000)  # not the default build: the local one hashes otherwise
    served = BlobStore(tmp_path / "requester")
    for digest, data in small.all_blobs().items():
        served.put(data)

    async def scenario():
        async with BlobServer(served) as server:
            store = BlobStore(tmp_path / "worker")
            dataset = await obtain_dataset(store, spec_for(small, "pycorpus", [server.url]), LOOPBACK)
            return store, dataset

    store, dataset = asyncio.run(scenario())
    assert dataset.manifest_hash == small.manifest_hash and dataset.shape.kind == "text"
    assert all(store.has(digest) for digest in small.all_blobs())


def test_a_dataset_nobody_serves_is_a_clear_error(tmp_path):
    small = build_dataset("pycorpus", max_bytes=20_000)
    with pytest.raises(ComputeError):
        asyncio.run(obtain_dataset(BlobStore(tmp_path), spec_for(small, "pycorpus", ["http://127.0.0.1:9"]), LOOPBACK))
