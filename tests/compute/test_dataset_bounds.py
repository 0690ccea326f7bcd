"""A dataset's size is bounded end to end (issue 24 item 5): the spec declares at most how many shards and bytes
its manifest lists and the chain bounds the declaration (`max_dataset_shards`, `max_dataset_bytes`); a worker
refuses a manifest beyond it, or one its memory and disk cannot hold, before it joins; a verifier fetches only
the shards a replayed batch reads, each hash-checked, and gets the same batches as from the whole dataset."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest
import torch

from market_helpers import MARKET_PARAMS, Market, assert_fails, spec_bytes, submit_message
from trolly.chain.market.errors import DatasetTooLarge
from trolly.chain.market.spec import DEFAULT_DATASET_MAX_BYTES, DEFAULT_DATASET_MAX_SHARDS
from trolly.compute.blobs import AddressPolicy, BlobServer, BlobStore, RetryPolicy
from trolly.compute.data import build_dataset, dataset_from_blobs, sample_batch
from trolly.compute.data.lazy_dataset import lazy_dataset
from trolly.compute.data.manifest import (check_manifest_bounds, decode_shard, loaded_bytes, manifest_size,
                                          parse_manifest)
from trolly.compute.errors import DatasetError
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.worker.data import read_manifest
from trolly.compute.worker.errors import TaskUnfit
from trolly.compute.worker.fit import check_disk, check_memory
from trolly.compute.data.fetch import ShardSource
from trolly.verifier.dataset_fetch import TaskDatasets, UnservedShards
from trolly.verifier.errors import WorkUnavailable

LOOPBACK = AddressPolicy(allow_private=True)
FAST = RetryPolicy(attempts=1, initial_delay=0.01, max_delay=0.01, request_timeout=5.0)


def declared(**dataset) -> bytes:
    spec = json.loads(spec_bytes())
    spec["dataset"].update(dataset)
    return json.dumps(spec).encode()


@pytest.mark.parametrize("dataset, limit", [
    ({"max_shards": 9}, {"max_dataset_shards": 8}),
    ({"max_bytes": 10_001}, {"max_dataset_bytes": 10_000}),
    ({}, {"max_dataset_bytes": DEFAULT_DATASET_MAX_BYTES - 1}),  # no declaration: the defaults are declared
    ({}, {"max_dataset_shards": DEFAULT_DATASET_MAX_SHARDS - 1}),
])
def test_submit_task_fails_when_the_spec_declares_more_shards_or_bytes_than_the_market_allows(make_chain, dataset,
                                                                                               limit):
    market = Market(make_chain(accounts=4, validators=1, params={"market": {**MARKET_PARAMS, **limit}}))
    result = market.chain.deliver(market.requester, submit_message(spec=declared(**dataset)))
    assert_fails(result, DatasetTooLarge)


def test_submit_task_accepts_a_declaration_within_the_market_bounds(make_chain):
    market = Market(make_chain(accounts=4, validators=1,
                               params={"market": {**MARKET_PARAMS, "max_dataset_shards": 8,
                                                  "max_dataset_bytes": 10_000}}))
    result = market.chain.deliver(market.requester, submit_message(spec=declared(max_shards=8, max_bytes=10_000)))
    assert result.ok, result.log


@pytest.fixture(scope="module")
def digits():
    return build_dataset("digits")


def test_a_manifest_beyond_the_declared_shards_or_bytes_is_refused(digits):
    manifest = parse_manifest(digits.manifest)
    shards, size = manifest_size(manifest)
    check_manifest_bounds(manifest, shards, size)
    with pytest.raises(DatasetError, match="shards"):
        check_manifest_bounds(manifest, shards - 1, size)
    with pytest.raises(DatasetError, match="bytes"):
        check_manifest_bounds(manifest, shards, size - 1)


def test_a_worker_counts_the_loaded_dataset_in_its_memory_and_its_shards_against_its_disk(digits):
    manifest = parse_manifest(digits.manifest)
    model_only = check_memory(spec_bytes(), 0)
    assert check_memory(spec_bytes(), 0, 64 * 2**20) == model_only + 64
    with pytest.raises(TaskUnfit, match="MiB"):
        check_memory(spec_bytes(), model_only + 10, loaded_bytes(manifest) + 11 * 2**20)
    check_disk(1_000, 1_000)
    with pytest.raises(TaskUnfit, match="disk"):
        check_disk(1_001, 1_000)


def spec_for(blobs, urls, **bounds):
    return spec_from_dict(example_spec(blobs.manifest_hash, model={"arch": "transformer", "config": {}},
                                       dataset={"name": "pycorpus", "manifest_hash": blobs.manifest_hash,
                                                "urls": urls, **bounds}))


def serve(tmp_path, blobs, name):
    store = BlobStore(tmp_path / name)
    for digest, data in blobs.all_blobs().items():
        store.put(data, expected=digest)
    return store


def test_a_worker_reads_the_manifest_and_refuses_one_beyond_the_spec_before_fetching_a_shard(tmp_path):
    small = build_dataset("pycorpus", max_bytes=20_000)
    served = serve(tmp_path, small, "requester")

    async def scenario(**bounds):
        async with BlobServer(served) as server:
            return await read_manifest(BlobStore(tmp_path / "worker"), spec_for(small, [server.url], **bounds),
                                       LOOPBACK)

    assert asyncio.run(scenario())["name"] == "pycorpus"
    with pytest.raises(DatasetError, match="shards"):
        asyncio.run(scenario(max_shards=1))
    worker = BlobStore(tmp_path / "worker")
    assert worker.has(small.manifest_hash)
    assert not any(worker.has(digest) for digest in small.shards)  # no shard was fetched


def test_a_worker_cannot_read_a_manifest_nobody_serves(tmp_path):
    small = build_dataset("pycorpus", max_bytes=20_000)
    with pytest.raises(Exception) as raised:
        asyncio.run(read_manifest(BlobStore(tmp_path), spec_for(small, ["http://127.0.0.1:9"]), LOOPBACK))
    assert isinstance(raised.value, DatasetError) or "blob" in str(raised.value).lower()


class CountingShards:
    """A shard loader over the dataset's blobs in memory that records which shards it was asked for."""

    def __init__(self, blobs) -> None:
        self.blobs = blobs
        self.fetched: list[str] = []

    def __call__(self, entry: dict) -> dict[str, torch.Tensor]:
        self.fetched.append(entry["hash"])
        return decode_shard(self.blobs.shards[entry["hash"]], entry)


@pytest.mark.parametrize("name", ["digits", "pycorpus"])
def test_a_lazy_dataset_gives_the_same_batches_and_fetches_only_the_shards_they_read(name):
    blobs = build_dataset(name) if name == "digits" else build_dataset("pycorpus", max_bytes=1_000_000)
    whole = dataset_from_blobs(blobs)
    loader = CountingShards(blobs)
    lazy = lazy_dataset(blobs.manifest_hash, parse_manifest(blobs.manifest), loader)
    assert lazy.train_size == whole.train_size and lazy.shape == whole.shape and loader.fetched == []
    for step in range(3):
        for expected, got in zip(sample_batch(whole, 4, 7, 1, 2, step), sample_batch(lazy, 4, 7, 1, 2, step)):
            assert got.dtype == expected.dtype and torch.equal(got, expected)
    train_shards = len(parse_manifest(blobs.manifest)["splits"]["train"]["shards"])
    assert 0 < len(set(loader.fetched)) <= 12 and len(set(loader.fetched)) <= train_shards
    if name == "pycorpus":
        assert len(set(loader.fetched)) < train_shards  # a few batches read a few shards, not the dataset
    assert torch.equal(lazy.test_inputs[2:9], whole.test_inputs[2:9])
    assert len(loader.fetched) == len(set(loader.fetched))  # each shard fetched once, then kept
    travelled = pickle.loads(pickle.dumps(lazy.train_inputs))  # to a replay child: without its cached shards
    assert travelled.split.fetched() == []


def test_a_verifier_streams_shards_from_the_worker_when_the_requester_has_gone(tmp_path):
    """The requester stopped serving after the start; the worker obtained the dataset before it joined and
    serves it: the verifier's batches are the whole dataset's."""
    small = build_dataset("pycorpus", max_bytes=50_000)
    whole = dataset_from_blobs(small)
    worker_store = serve(tmp_path, small, "worker")

    async def scenario():
        async with BlobServer(worker_store) as worker:
            dataset = await TaskDatasets().task_dataset(spec_for(small, ["http://127.0.0.1:9"]), [worker.url],
                                                        FAST, LOOPBACK)
            return await asyncio.to_thread(sample_batch, dataset, 8, 3, 0, 1, 4)

    inputs, targets = asyncio.run(scenario())
    expected = sample_batch(whole, 8, 3, 0, 1, 4)
    assert torch.equal(inputs, expected[0]) and torch.equal(targets, expected[1])


def test_a_shard_nobody_serves_is_work_unavailable_for_the_verifier_never_a_fault_of_the_worker(tmp_path):
    small = build_dataset("pycorpus", max_bytes=50_000)
    manifest = parse_manifest(small.manifest)
    source = UnservedShards(ShardSource(("http://127.0.0.1:9",), FAST, LOOPBACK))
    lazy = lazy_dataset(small.manifest_hash, manifest, source)
    with pytest.raises(WorkUnavailable, match="shard"):
        sample_batch(lazy, 8, 3, 0, 1, 4)
    assert not issubclass(WorkUnavailable, DatasetError)  # a replay counts a ComputeError against the worker


def test_a_worker_does_not_join_a_task_whose_dataset_nobody_serves_and_the_task_expires_refunded(make_chain,
                                                                                                  tmp_path):
    """The requester names a dataset it does not serve (and one beyond its own declaration): the worker stays
    out without locking collateral, joins the task whose dataset it can obtain, and the others expire with
    their budgets back to the requester."""
    import hashlib

    from worker_helpers import ROUNDS, new_service, spec_document

    from trolly.chain.market.store import ESCROW

    unserved = build_dataset("pycorpus", max_bytes=20_000)
    digits = build_dataset("digits")
    chain = make_chain(accounts=2, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    specs = [spec_document(unserved.manifest_hash, model={"arch": "transformer", "config": {}},
                           dataset={"name": "pycorpus", "manifest_hash": unserved.manifest_hash,
                                    "urls": ["http://127.0.0.1:9"]}),
             spec_document(digits.manifest_hash,
                           dataset={"name": "digits", "manifest_hash": digits.manifest_hash, "max_shards": 2}),
             spec_document(digits.manifest_hash)]
    task_ids = [market.submit(spec=spec, spec_hash=hashlib.sha256(spec).digest(), workers=1, rounds=ROUNDS,
                              samples_per_worker=1, join_blocks=20) for spec in specs]
    requester_before = chain.balance(market.requester)
    service = new_service(tmp_path, chain, market.workers[0])

    async def scenario():
        await service.server.start()
        try:
            await service._register()
            worker_before = chain.balance(market.workers[0])
            assert await service.find_and_join()
            assert not await service.find_and_join()
            return worker_before
        finally:
            await service.server.stop()

    worker_before = asyncio.run(scenario())
    assert service.unfit == set(task_ids[:2])
    assert market.task(task_ids[2])["status"] == "running"
    assert [market.task(task_id)["status"] for task_id in task_ids[:2]] == ["open", "open"]
    locked = chain.balance(market.workers[0]) - worker_before  # the one join's collateral and fee only
    chain.advance(21)
    assert [market.task(task_id)["status"] for task_id in task_ids[:2]] == ["expired", "expired"]
    budgets = sum(int(market.task(task_id)["budget"]) for task_id in task_ids[:2])
    assert chain.balance(market.requester) >= requester_before + budgets  # (the joined one, never trained, too)
    assert locked < 0 and chain.balance(ESCROW) >= 0
