"""The global weights a worker starts each round from (`compute/worker/weights.py`): only verified updates
count, and an update is fetched from any member's blob service (real aiohttp servers on 127.0.0.1), with
every byte checked against its hash."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
import torch

from trolly.compute.blobs import AddressPolicy, BlobServer, BlobStore, RetryPolicy
from trolly.compute.codecs import get_codec
from trolly.compute.models import DataShape
from trolly.compute.rounds import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.worker.errors import WeightsMismatch
from trolly.compute.worker.plan import CommittedUpdate
from trolly.compute.worker.weights import check_agreed, initial_state, mirror_updates, next_state

LOOPBACK = AddressPolicy(allow_private=True)  # the test's servers listen on 127.0.0.1

SHAPE = DataShape(kind="classification", input_size=64, num_classes=10)
FAST = RetryPolicy(attempts=1, initial_delay=0.01, request_timeout=5.0)


@pytest.fixture(scope="module")
def spec():
    return spec_from_dict(example_spec("ab" * 32, model={"arch": "mlp", "config": {"hidden": [8]}}, codec="int8"))


def update_for(state: GlobalState, scale: float) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(int(scale * 1000))
    return {name: scale * torch.randn(t.shape, generator=generator) for name, t in state.weights.items()}


def committed(index, data, outcome, url="", samples=64) -> CommittedUpdate:
    return CommittedUpdate(worker=f"w{index}", worker_index=index, update_hash=hashlib.sha256(data).hexdigest(),
                           samples_processed=samples, outcome=outcome, blob_url=url)


def test_only_passed_updates_enter_the_next_weights(spec, tmp_path):
    store = BlobStore(tmp_path)
    codec = get_codec(spec.codec)
    state = initial_state(spec, SHAPE)
    blobs = [codec.encode(update_for(state, s)) for s in (0.01, 0.02, 0.03)]
    for data in blobs:
        store.put(data)
    updates = [committed(0, blobs[0], "passed", samples=64), committed(1, blobs[1], "failed"),
               committed(2, blobs[2], "passed", samples=32)]
    expected = outer_step(state, [WorkerUpdate(0, 64, codec.decode(blobs[0])),
                                  WorkerUpdate(2, 32, codec.decode(blobs[2]))], spec.training.outer_optimizer)
    result = next_state(spec, state, updates, store)
    assert result.round == 1 and result.weights_hash() == expected.weights_hash()
    assert result.encode() == expected.encode()  # momentum too
    nothing_passed = next_state(spec, state, [committed(1, blobs[1], "unverified")], store)
    assert nothing_passed.weights_hash() == state.weights_hash()


def test_a_missing_passed_update_is_an_error_not_a_silent_skip(spec, tmp_path):
    state = initial_state(spec, SHAPE)
    with pytest.raises(WeightsMismatch, match="not available"):
        next_state(spec, state, [committed(0, b"never stored", "passed")], BlobStore(tmp_path))


def test_check_agreed_compares_with_the_chain(spec):
    state = initial_state(spec, SHAPE)
    check_agreed(state, state.weights_hash().hex())
    check_agreed(state, "")  # round not closed yet: nothing to compare
    with pytest.raises(WeightsMismatch, match="agreed on start weights"):
        check_agreed(state, "00" * 32)


def test_updates_are_mirrored_from_another_member_when_their_maker_is_gone(tmp_path):
    good = b"an encoded update"
    liar = b"something else entirely"

    async def scenario():
        holder_store = BlobStore(tmp_path / "holder")
        holder_store.put(good)
        lying_store = BlobStore(tmp_path / "liar")
        # A server that answers the right name with the wrong bytes.
        lying_store.path(hashlib.sha256(good).hexdigest()).parent.mkdir(parents=True, exist_ok=True)
        lying_store.path(hashlib.sha256(good).hexdigest()).write_bytes(liar)
        async with BlobServer(holder_store) as holder, BlobServer(lying_store) as lying:
            ours = BlobStore(tmp_path / "ours")
            gone = "http://127.0.0.1:9"  # the maker's server is down (discard port: connection refused)
            update = committed(0, good, "pending", url=gone)
            other = committed(1, liar, "pending", url=lying.url)
            only_liar = [update, other]
            missing = await mirror_updates(ours, only_liar, LOOPBACK, retry=FAST)
            assert update.update_hash in missing and not ours.has(update.update_hash)  # wrong bytes refused
            third = committed(2, b"x", "pending", url=holder.url)
            missing = await mirror_updates(ours, [update, other, third], LOOPBACK, retry=FAST)
            assert update.update_hash not in missing
            assert ours.get(update.update_hash) == good

    asyncio.run(scenario())


def test_the_mirror_backs_off_from_an_update_nobody_serves_and_warns_once(tmp_path, caplog):
    from trolly.compute.worker.weights import UpdateMirror

    now = [100.0]
    mirror = UpdateMirror(BlobStore(tmp_path), LOOPBACK, clock=lambda: now[0])
    lost = committed(3, b"nobody has this", "pending", url="http://127.0.0.1:9")

    async def look():
        return await mirror.mirror([lost])

    with caplog.at_level("WARNING", logger="trolly.worker"):
        assert asyncio.run(look()) == [lost.update_hash]
        first_retry = mirror.next_try[lost.update_hash]
        assert first_retry == 101.0
        now[0] = 100.5
        assert asyncio.run(look()) == [lost.update_hash] and mirror.failures[lost.update_hash] == 1  # not tried
        now[0] = 101.5
        asyncio.run(look())
        assert mirror.failures[lost.update_hash] == 2 and mirror.next_try[lost.update_hash] == 103.5
    assert len([r for r in caplog.records if "cannot be fetched" in r.getMessage()]) == 1
