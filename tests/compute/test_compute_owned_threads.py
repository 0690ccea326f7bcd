"""compute/ keeps no module-level threads, pools or scratch: each is owned by an object and handed down
(issue 18 item 3), and which one is used changes no byte."""

from __future__ import annotations

import ast
import hashlib
import gc
import pathlib
import threading

import pytest
import torch

from trolly.compute import checkpoints
from trolly.compute.blobs import BlobStore, direct
from trolly.compute.canonical_copy import BufferPool, allocate_canonical, copy_into_canonical
from trolly.compute.checkpoints import SnapshotCopier, checkpoint_bytes
from trolly.compute.codecs import get_codec
from trolly.compute.codecs.fused import Workspace, encode_with_feedback
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights, train_segment

COMPUTE = pathlib.Path(checkpoints.__file__).parent
OWNED_KINDS = {"ThreadPoolExecutor", "ProcessPoolExecutor", "Thread", "SnapshotCopier", "BufferPool", "Workspace",
               "DirectScratch", "_Copier", "_BufferPool", "_Workspace", "_RoundPinning", "local"}


@pytest.fixture(scope="module")
def trainer_parts():
    blobs = build_dataset("digits")
    spec = spec_from_dict(example_spec(blobs.manifest_hash, model={"arch": "mlp", "config": {"hidden": [16]}},
                                       training={"rounds": 2, "inner_steps": 6, "batch_size": 8, "checkpoint_every": 3,
                                                                 "seed": 4}))
    return spec, dataset_from_blobs(blobs)


def _called_name(call: ast.Call) -> str:
    function = call.func
    return function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")


def module_level_owned_objects(source: str) -> list[str]:
    """The module-level assignments in `source` of a call that makes a thread, a pool or a scratch owner."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            name = _called_name(node.value)
            if name in OWNED_KINDS:
                found.append(f"line {node.lineno}: {name}")
    return found


def test_the_scan_finds_a_module_level_thread_pool():
    source = "import concurrent.futures\n_hasher = concurrent.futures.ThreadPoolExecutor(max_workers=1)\n"
    assert module_level_owned_objects(source) == ["line 2: ThreadPoolExecutor"]
    assert module_level_owned_objects("def f():\n    pool = BufferPool()\n") == []


def test_no_module_of_compute_defines_a_module_level_thread_or_pool():
    offenders = {str(path.relative_to(COMPUTE)): found for path in sorted(COMPUTE.rglob("*.py"))
                 if (found := module_level_owned_objects(path.read_text()))}
    assert not offenders, offenders


def test_a_dropped_trainer_ends_its_copier_thread(trainer_parts):
    spec, dataset = trainer_parts
    trainer = Trainer(spec, dataset)
    trainer.start_round(initial_weights(spec, dataset.shape))
    snapshot = trainer.snapshot_soon()
    snapshot.result()
    thread = trainer._copier._thread
    assert thread is not None and thread.is_alive()
    del trainer, snapshot
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_closing_a_trainer_ends_its_copier_thread_and_the_next_snapshot_starts_one(trainer_parts):
    spec, dataset = trainer_parts
    trainer = Trainer(spec, dataset)
    trainer.start_round(initial_weights(spec, dataset.shape))
    first = checkpoint_bytes(trainer.snapshot_soon().result())
    thread = trainer._copier._thread
    trainer.close()
    assert not thread.is_alive()
    assert bytes(checkpoint_bytes(trainer.snapshot_soon().result())) == bytes(first)
    assert trainer._copier.running
    trainer.close()


def test_the_copier_calls_its_keep_off_hook_once_per_change_before_copying(trainer_parts):
    spec, dataset = trainer_parts
    trainer = Trainer(spec, dataset)
    trainer.start_round(initial_weights(spec, dataset.shape))
    calls = []

    class Hook:
        def __init__(self, label):
            self.label = label

        def keep_off(self):
            calls.append((self.label, threading.current_thread().name))

    first, second = Hook("first"), Hook("second")
    try:
        with trainer.snapshots_by(None, keep_off=first.keep_off):
            trainer.snapshot_soon().result()
            trainer.snapshot_soon().result()  # the same hook (an equal bound method): not called again
        with trainer.snapshots_by(None, keep_off=second.keep_off):
            trainer.snapshot_soon().result()
    finally:
        trainer.close()
    assert calls == [("first", "checkpoint-copy"), ("second", "checkpoint-copy")]


def test_snapshots_soon_give_the_same_bytes_with_or_without_a_pinning_hook_and_copier(trainer_parts):
    spec, dataset = trainer_parts
    results = []
    for hook in (None, lambda: None):
        trainer = Trainer(spec, dataset)
        try:
            trainer.start_round(initial_weights(spec, dataset.shape))
            with trainer.snapshots_by(None, keep_off=hook):
                state = train_segment(trainer, None, worker_index=0, round_index=0, end_step=3, soon=True).result()
            results.append(bytes(checkpoint_bytes(state)))
        finally:
            trainer.close()
    assert results[0] == results[1]


def test_a_buffer_pool_gives_the_same_bytes_as_fresh_memory_and_reuses_a_dropped_buffer():
    tensors = {"a": torch.arange(3000, dtype=torch.float32), "b": torch.ones(5, 7)}
    fresh, _ = copy_into_canonical(tensors)
    pool = BufferPool()
    pooled, views = copy_into_canonical(tensors, pool)
    assert bytes(pooled) == bytes(fresh)
    address = views["a"].data_ptr()
    del pooled, views
    gc.collect()
    again, views = copy_into_canonical(tensors, pool)
    assert views["a"].data_ptr() == address  # the spare came back
    assert bytes(again) == bytes(fresh)


@pytest.mark.parametrize("codec_name", ["sign", "ternary", "topk"])
def test_an_update_encoded_with_a_reused_workspace_is_the_one_without(codec_name):
    generator = torch.Generator().manual_seed(3)
    workspace = Workspace()
    for size in (5000, 300, 5000):  # grown, then a smaller one, then the first again: leftovers do not leak in
        start = {"w": torch.randn(size, generator=generator)}
        end = {"w": start["w"] - 1e-2 * torch.randn(size, generator=generator)}
        residual = {"w": 1e-3 * torch.randn(size, generator=generator)}
        _, alone_out = allocate_canonical(end)
        _, reused_out = allocate_canonical(end)
        codec = get_codec(codec_name)
        alone = encode_with_feedback(codec, start, end, residual, alone_out)
        assert encode_with_feedback(codec, start, end, residual, reused_out, workspace) == alone
        assert torch.equal(alone_out["w"], reused_out["w"])


def test_each_blob_store_hashes_on_its_own_thread_made_at_its_first_put_hashing(tmp_path):
    calls = []
    store = BlobStore(tmp_path / "a", keep_off=lambda: calls.append(threading.current_thread().name))
    other = BlobStore(tmp_path / "b")
    assert store._hasher is None
    data = bytes(range(256)) * 5000
    assert store.put_hashing(data) == other.put_hashing(data) == store.put(data)
    assert store._hasher is not other._hasher
    assert len(calls) == 1 and calls[0].startswith("blob-hash")
    assert store.get(store.put_hashing(memoryview(data))) == data
    assert len(calls) == 1  # one thread, reused


def test_the_copier_ends_after_the_copies_queued_before_close():
    copier = SnapshotCopier()
    copier.close()  # never started: nothing to do
    assert not copier.running


def test_a_direct_write_through_a_kept_scratch_writes_the_same_bytes_as_through_a_fresh_one(tmp_path):
    data = bytes(range(251)) * 40_000  # not a whole number of blocks, passed as unaligned chunks
    chunks = [memoryview(data)[1:5_000_001], memoryview(data)[5_000_001:]]
    scratch = direct.DirectScratch()
    written = []
    for name, kept in (("fresh", None), ("kept", scratch), ("kept-again", scratch)):
        path = tmp_path / name
        path.touch()
        if not direct.write_direct(path, chunks, kept):
            pytest.skip("the filesystem under tmp_path refuses O_DIRECT")
        written.append(path.read_bytes())
    assert written[0] == written[1] == written[2] == data[1:]


def test_a_blob_writer_calls_its_on_start_hook_first_on_its_thread(tmp_path):
    from trolly.compute.blobs import BlobWriter
    calls = []
    with BlobWriter(BlobStore(tmp_path), on_start=lambda: calls.append(threading.current_thread().name)) as writer:
        data = b"blob"
        writer.write(hashlib.sha256(data).hexdigest(), data)
        writer.flush()
        writer.write(hashlib.sha256(data).hexdigest(), data)
    assert calls == ["blob-writer"]
