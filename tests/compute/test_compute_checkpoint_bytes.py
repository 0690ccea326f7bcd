"""The fast checkpoint path gives the reference bytes: captured snapshots, direct-I/O writes, the shared
background queue, reused optimizer tensors."""

import dataclasses
import errno
import hashlib
import os
import threading

import numpy as np
import pytest
import torch

from trolly.compute import memory
from trolly.compute.background import BackgroundQueue
from trolly.compute.blobs import BlobStore
from trolly.compute.blobs import direct
from trolly.compute.canonical import encode_tensors
from trolly.compute.canonical_copy import copy_into_canonical
from trolly.compute.cheats.distortions import forge_counters
from trolly.compute.checkpoints import (TrainingState, capture, checkpoint_bytes, checkpoint_hash,
                                        checkpoint_tensors, encode_checkpoint)
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.errors import EncodingError
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights, train_segment


@pytest.fixture(scope="module")
def digits():
    return dataset_from_blobs(build_dataset("digits"))


def small_spec(manifest_hash):
    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": [32, 32]}})
    document["training"].update({"inner_steps": 12, "checkpoint_every": 5})
    return spec_from_dict(document)


def test_copy_into_canonical_gives_the_reference_bytes_and_views_of_them():
    tensors = {"b": torch.randn(3, 5), "a/x": torch.arange(7, dtype=torch.int64), "step": torch.tensor(3),
               "empty": torch.zeros(0, 4), "half": torch.randn(2).half(), "é": torch.ones(1, dtype=torch.uint8)}
    data, views = copy_into_canonical(tensors)
    assert bytes(data) == encode_tensors(tensors)
    assert np.frombuffer(data, dtype=np.uint8).ctypes.data % direct.BLOCK == 0
    for name, tensor in tensors.items():
        assert torch.equal(views[name], tensor) and views[name].dtype == tensor.dtype
    tensors["b"].add_(1)  # a copy: the source changing later does not change the bytes
    assert bytes(data) != encode_tensors(tensors)
    views["b"].add_(1)  # the views are the bytes
    assert bytes(data) == encode_tensors(tensors)


def test_copy_into_canonical_refuses_what_the_reference_refuses():
    with pytest.raises(EncodingError):
        copy_into_canonical({"x": torch.zeros(2, dtype=torch.complex64)})
    with pytest.raises(EncodingError):
        copy_into_canonical({"x": "not a tensor"})


def test_a_training_snapshot_hashes_like_the_reference_encoding(digits):
    spec = small_spec(digits.manifest_hash)
    trainer = Trainer(spec, digits)
    state = train_segment(trainer, TrainingState.fresh(initial_weights(spec, digits.shape)), worker_index=0,
                          round_index=0, end_step=3)
    assert state.encoded is not None and state.encoded.describes(state)
    reference = encode_checkpoint(dataclasses.replace(state, encoded=None))
    assert bytes(checkpoint_bytes(state)) == reference
    assert checkpoint_hash(state) == hashlib.sha256(reference).digest()
    trainer.train_step(0, 0)  # training on does not touch the snapshot
    assert bytes(checkpoint_bytes(state)) == reference


def test_captured_bytes_are_ignored_once_they_no_longer_describe_the_state(digits):
    spec = small_spec(digits.manifest_hash)
    state = TrainingState.fresh(initial_weights(spec, digits.shape))
    for changed in (forge_counters(state, 5), dataclasses.replace(state, step=5),
                    dataclasses.replace(state, weights={n: t.clone() + 1 for n, t in state.weights.items()})):
        assert changed.encoded is None or not changed.encoded.describes(changed)
        assert bytes(checkpoint_bytes(changed)) == encode_tensors(checkpoint_tensors(changed))
        assert checkpoint_hash(changed) != checkpoint_hash(state)


def test_fresh_state_is_step_zero_and_zero_moments(digits):
    spec = small_spec(digits.manifest_hash)
    weights = initial_weights(spec, digits.shape)
    state = TrainingState.fresh(weights)
    assert state.step == 0 and all(torch.equal(state.weights[n], weights[n]) for n in weights)
    for slots in state.optimizer.values():
        assert all(not slot.any() for slot in slots.values())
    assert bytes(checkpoint_bytes(state)) == encode_tensors(checkpoint_tensors(dataclasses.replace(state, encoded=None)))


def test_a_reused_trainer_replays_like_a_new_one(digits):
    """load() overwrites AdamW's tensors in place once they exist: bitwise the same as fresh ones."""
    spec = small_spec(digits.manifest_hash)
    start = TrainingState.fresh(initial_weights(spec, digits.shape))
    used = Trainer(spec, digits)
    train_segment(used, start, worker_index=1, round_index=2, end_step=7)  # AdamW state now exists
    middle = train_segment(used, start, worker_index=0, round_index=0, end_step=4)
    again = train_segment(used, middle, worker_index=0, round_index=0, end_step=9)
    new = train_segment(Trainer(spec, digits), middle, worker_index=0, round_index=0, end_step=9)
    assert checkpoint_hash(again) == checkpoint_hash(new)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, direct.PIECE + 1, 3 * direct.PIECE + 123])
@pytest.mark.parametrize("aligned", [False, True])
def test_write_direct_writes_exactly_the_bytes(tmp_path, size, aligned):
    data = os.urandom(size)
    chunks = [copy_into_canonical({"x": torch.frombuffer(bytearray(data), dtype=torch.uint8)})[0]] if aligned and size \
        else [data[:size // 3], data[size // 3:]]
    expected = b"".join(bytes(c) for c in chunks)
    path = tmp_path / "blob"
    path.touch()
    if not direct.write_direct(path, chunks):
        pytest.skip("the filesystem of tmp_path refuses O_DIRECT")
    assert path.read_bytes() == expected


def test_store_falls_back_to_buffered_writes_where_direct_io_is_refused(tmp_path, monkeypatch):
    real_open = os.open

    def refuse_direct(path, flags, *args):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "O_DIRECT not supported")
        return real_open(path, flags, *args)

    store = BlobStore(tmp_path)
    data = os.urandom(direct.DIRECT_MINIMUM + 5)
    monkeypatch.setattr(os, "open", refuse_direct)
    digest = store.put(data)
    assert store.get(digest) == data


def test_background_queue_handles_items_in_order_and_reports_the_first_error():
    seen = []

    def handle(item):
        if item == 3:
            raise ValueError("three")
        seen.append((item, threading.current_thread().name))

    work = BackgroundQueue(handle, name="test-queue", failure=lambda error: RuntimeError(f"failed: {error}"))
    for item in range(4):
        work.put(item)
    with pytest.raises(RuntimeError, match="failed: three"):
        work.join()
    with pytest.raises(RuntimeError):
        work.put(9)
    work.close()
    assert seen == [(0, "test-queue"), (1, "test-queue"), (2, "test-queue")]


def test_retaining_freed_memory_is_idempotent():
    first = memory.retain_freed_memory()
    assert memory.retain_freed_memory() == first


def test_start_round_is_loading_a_fresh_state(digits):
    spec = small_spec(digits.manifest_hash)
    weights = initial_weights(spec, digits.shape)
    used = Trainer(spec, digits)
    train_segment(used, TrainingState.fresh(weights), worker_index=0, round_index=0, end_step=3)
    moved = {name: tensor + 0.01 for name, tensor in weights.items()}
    used.start_round(moved)
    assert checkpoint_hash(used.snapshot()) == checkpoint_hash(TrainingState.fresh(moved))
    after_start = train_segment(used, None, worker_index=2, round_index=1, end_step=4)
    after_load = train_segment(Trainer(spec, digits), TrainingState.fresh(moved), worker_index=2, round_index=1,
                               end_step=4)
    assert checkpoint_hash(after_start) == checkpoint_hash(after_load)
    with pytest.raises(Exception):
        used.start_round({name: tensor for name, tensor in list(moved.items())[1:]})


def test_a_snapshot_taken_soon_is_the_state_at_that_step(digits):
    """The copy runs beside the next steps; training waits for it before changing anything."""
    spec = small_spec(digits.manifest_hash)
    start = TrainingState.fresh(initial_weights(spec, digits.shape))
    trainer, reference = Trainer(spec, digits), Trainer(spec, digits)
    soon = train_segment(trainer, start, worker_index=0, round_index=0, end_step=5, soon=True)
    now = train_segment(reference, start, worker_index=0, round_index=0, end_step=5)
    for _ in range(3):
        trainer.train_step(0, 0)
    state = soon.result()
    assert state.step == 5 and checkpoint_hash(state) == checkpoint_hash(now)
