"""The one follower of a task's global weights (`compute/weights_follower.py`), used by the worker, the
verifier and the demo's observer, tested here once: only passed updates count, an update is fetched from any
member (real aiohttp blob servers on 127.0.0.1) with every byte checked against its hash, a start that cannot
be derived is said plainly and never replaced by the chain's, and derived states are kept across a restart."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
import torch

from market_view_helpers import address, commitment_answer, member_answer, round_answer, task_answer

from trolly.compute.blobs import AddressPolicy, BlobServer, BlobStore, RetryPolicy
from trolly.compute.codecs import get_codec
from trolly.compute.models import DataShape
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.weights_follower import (DirectoryCache, RoundUpdate, StartUnavailable, WeightsFollower,
                                             round_updates)
from trolly.wallet.market_views import TaskView

LOOPBACK = AddressPolicy(allow_private=True)  # the test's servers listen on 127.0.0.1
SHAPE = DataShape(kind="classification", input_size=64, num_classes=10)
FAST = RetryPolicy(attempts=1, initial_delay=0.01, request_timeout=5.0)
GONE = "http://127.0.0.1:9"  # a member whose server is down (discard port: connection refused)


@pytest.fixture(scope="module")
def spec():
    return spec_from_dict(example_spec("ab" * 32, model={"arch": "mlp", "config": {"hidden": [8]}}, codec="int8"))


def follower(spec, tmp_path=None, **options) -> WeightsFollower:
    return WeightsFollower(spec, SHAPE, LOOPBACK, retry=FAST, **options)


def encoded_update(spec, state: GlobalState, scale: float) -> bytes:
    generator = torch.Generator().manual_seed(int(scale * 1000))
    update = {name: scale * torch.randn(t.shape, generator=generator) for name, t in state.weights.items()}
    return get_codec(spec.codec).encode(update)


def view_of(rounds: list[list[tuple[int, bytes, str, int, str]]]) -> TaskView:
    """A task whose round r has, per member, (index, update bytes, outcome, samples, blob URL)."""
    members = {index: url for round_ in rounds for index, _, _, _, url in round_}
    details = [round_answer(round=r, commitments=[
        commitment_answer(worker=address(10 + index), update_hash=hashlib.sha256(data).hexdigest(), outcome=outcome,
                          samples_processed=samples)
        for index, data, outcome, samples, _ in round_]) for r, round_ in enumerate(rounds)]
    return TaskView.from_answer(task_answer(
        round=len(rounds), members=[member_answer(worker=address(10 + i), index=i, blob_url=url)
                                    for i, url in sorted(members.items())], round_details=details))


def run(coroutine):
    return asyncio.run(coroutine)


def test_only_passed_updates_enter_the_next_weights(spec, tmp_path):
    store = BlobStore(tmp_path)
    initial = follower(spec).initial()
    blobs = [encoded_update(spec, initial, s) for s in (0.01, 0.02, 0.03)]
    for data in blobs:
        store.put(data)
    view = view_of([[(0, blobs[0], "passed", 64, GONE), (1, blobs[1], "failed", 64, GONE),
                     (2, blobs[2], "passed", 32, GONE)]])
    codec = get_codec(spec.codec)
    expected = outer_step(initial, [WorkerUpdate(0, 64, codec.decode(blobs[0])),
                                    WorkerUpdate(2, 32, codec.decode(blobs[2]))], spec.training.outer_optimizer)
    result = run(follower(spec, store=store).state(1, view))
    assert result.round == 1 and result.encode() == expected.encode()  # weights and momentum, bit for bit
    nothing_passed = run(follower(spec, store=store).state(1, view_of([[(1, blobs[1], "unverified", 64, GONE)]])))
    assert nothing_passed.round == 1 and nothing_passed.weights_hash() == initial.weights_hash()


def test_a_passed_update_nobody_serves_is_unavailable_not_skipped_nor_replaced(spec, tmp_path):
    initial = follower(spec).initial()
    lost = encoded_update(spec, initial, 0.01)
    view = view_of([[(0, lost, "passed", 64, GONE)]])
    with pytest.raises(StartUnavailable, match="cannot derive W_1: 1 passed update") as raised:
        run(follower(spec, store=BlobStore(tmp_path)).state(1, view))
    assert raised.value.round == 1 and raised.value.missing == (hashlib.sha256(lost).hexdigest(),)
    with pytest.raises(StartUnavailable, match="cannot derive W_2: round 1 is not on chain"):
        run(follower(spec).state(2, view_of([[(0, lost, "failed", 64, GONE)]])))


def test_the_chain_record_is_compared_with_never_adopted(spec):
    weights = follower(spec)
    initial = weights.initial()
    agreeing = TaskView.from_answer(task_answer(round_details=[round_answer(start_weights_hash=initial.weights_hash().hex())]))
    not_closed = TaskView.from_answer(task_answer(round_details=[round_answer()]))
    other = TaskView.from_answer(task_answer(round_details=[round_answer(start_weights_hash="00" * 32)]))
    assert weights.disagreement(initial, agreeing) == "" and weights.disagreement(initial, not_closed) == ""
    assert "the chain recorded start weights 0000" in weights.disagreement(initial, other)
    assert run(weights.state(0, other)).weights_hash() == initial.weights_hash()


def test_an_update_comes_from_another_member_when_its_maker_is_gone_and_wrong_bytes_are_refused(spec, tmp_path):
    initial = follower(spec).initial()
    good = encoded_update(spec, initial, 0.01)

    async def scenario():
        holder = BlobStore(tmp_path / "holder")
        holder.put(good)
        lying = BlobStore(tmp_path / "liar")  # answers the right name with other bytes
        lying.path(hashlib.sha256(good).hexdigest()).parent.mkdir(parents=True, exist_ok=True)
        lying.path(hashlib.sha256(good).hexdigest()).write_bytes(b"something else entirely")
        async with BlobServer(holder) as holder_server, BlobServer(lying) as lying_server:
            only_liar = view_of([[(0, good, "passed", 64, GONE), (1, b"x", "failed", 64, lying_server.url)]])
            ours = BlobStore(tmp_path / "ours")
            with pytest.raises(StartUnavailable):
                await follower(spec, store=ours).state(1, only_liar)
            assert not ours.has(hashlib.sha256(good).hexdigest())
            with_holder = view_of([[(0, good, "passed", 64, GONE), (1, b"x", "failed", 64, lying_server.url),
                                    (2, b"y", "failed", 64, holder_server.url)]])
            state = await follower(spec, store=ours).state(1, with_holder)
            return state, ours.get(hashlib.sha256(good).hexdigest())

    state, kept = run(scenario())
    assert state.round == 1 and kept == good


def test_the_mirror_backs_off_from_an_update_nobody_serves_and_warns_once(spec, tmp_path, caplog):
    now = [100.0]
    weights = follower(spec, store=BlobStore(tmp_path), clock=lambda: now[0])
    lost = RoundUpdate("w3", 3, hashlib.sha256(b"nobody has this").hexdigest(), 64, "pending", GONE)
    with caplog.at_level("WARNING", logger="trolly.weights"):
        assert run(weights.mirror([lost])) == [lost.update_hash] and weights.next_try[lost.update_hash] == 101.0
        now[0] = 100.5
        assert run(weights.mirror([lost])) == [lost.update_hash] and weights.failures[lost.update_hash] == 1
        now[0] = 101.5
        run(weights.mirror([lost]))
        assert weights.failures[lost.update_hash] == 2 and weights.next_try[lost.update_hash] == 103.5
    assert len([r for r in caplog.records if "cannot be fetched" in r.getMessage()]) == 1


def test_derived_states_survive_a_restart_and_a_damaged_one_is_derived_again(spec, tmp_path):
    initial = follower(spec).initial()
    data = encoded_update(spec, initial, 0.02)
    store = BlobStore(tmp_path / "blobs")
    store.put(data)
    view = view_of([[(0, data, "passed", 64, GONE)], []])
    first = run(follower(spec, store=store, cache=DirectoryCache(tmp_path / "weights")).state(2, view))
    assert first.round == 2 and first.weights_hash() != initial.weights_hash()  # momentum carries into round 1
    # Restarted without the update anywhere: the cached states stand in for it.
    restarted = follower(spec, cache=DirectoryCache(tmp_path / "weights"))
    assert run(restarted.state(2, view)).encode() == first.encode()
    (tmp_path / "weights" / "round-2.state").write_bytes(b"damaged")
    assert run(follower(spec, cache=DirectoryCache(tmp_path / "weights")).state(2, view)).encode() == first.encode()
    assert (tmp_path / "weights" / "round-2.state").read_bytes() == first.encode()


def test_round_updates_reads_every_commitment_in_worker_order_and_none_from_a_final_report():
    view = view_of([[(1, b"b", "pending", 8, "http://b"), (0, b"a", "passed", 16, "http://a")]])
    assert [(u.worker_index, u.outcome, u.samples_processed, u.blob_url) for u in round_updates(view, 0)] == [
        (0, "passed", 16, "http://a"), (1, "pending", 8, "http://b")]
    final = TaskView.from_answer(task_answer(round_details=[round_answer(final_report=True)]))
    assert round_updates(final, 0) == [] and round_updates(final, 5) == []
