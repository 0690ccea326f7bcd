"""The checkpoint process (`compute/acceleration/checkpoint_process.py`): the same bytes as the threads, and its failures.

A worker's rounds hand their checkpoints to a helper process that reads the trainer's state from shared
memory. Nothing a verifier sees may change because of it, and when the process dies or cannot store, the
round fails with a clear error and the next attempt resumes from what was recorded.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from worker_helpers import reference_round

from trolly.compute.acceleration import Acceleration, AccelerationOptions, checkpoint_process
from trolly.compute.acceleration.state_arena import ALIGNMENT, shared_state_arena
from trolly.compute.blobs import BlobStore
from trolly.compute.checkpoints import checkpoint_bytes, decode_checkpoint
from trolly.compute.errors import CheckpointError
from trolly.compute.training import Trainer, train_segment
from trolly.compute.worker.round_training import train_round
from trolly.compute.worker.progress import WorkerState
from trolly.compute.worker.strategies import TrainingStrategy

STEPS = 12  # checkpoints every 5: 0..3

needs_memfd = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux shared memory files (memfd)")


@pytest.fixture(scope="module")
def setup():
    return reference_round(STEPS, hidden=32, seed=11, worker_index=0)


def fresh_round(home: pathlib.Path):
    state = WorkerState.load(home)
    progress = state.add_task(3, "00" * 32, worker_index=0).round(0)
    progress.steps = STEPS
    return state, progress, BlobStore(home / "blobs")


@pytest.fixture
def trainer(setup):
    spec, dataset, _, _ = setup
    trainer = Trainer(spec, dataset)
    yield trainer
    trainer.close()


@pytest.fixture(scope="module")
def acceleration():
    """A worker's acceleration with its checkpoint process on (the default)."""
    with Acceleration() as acceleration:
        yield acceleration


def run(trainer, home, start, acceleration, **options):
    state, progress, store = fresh_round(home)
    return train_round(trainer, TrainingStrategy(), store, state, progress, worker_index=0, start_weights=start,
                       acceleration=acceleration, **options), progress, store


@needs_memfd
@pytest.mark.parametrize("process", [True, False])
def test_the_process_and_the_threads_store_the_runtimes_checkpoints(setup, trainer, tmp_path, process):
    _, _, start, reference = setup
    with Acceleration(AccelerationOptions(checkpoint_process=process)) as acceleration:
        trained, _, store = run(trainer, tmp_path, start, acceleration)
    assert (trainer.snapshot_taker is not None) == process
    assert trained.checkpoints == [h.hex() for h in reference.checkpoint_hashes]
    for digest in trained.checkpoints:  # each blob holds exactly the bytes its name says
        assert store.has(digest)
    stored = [decode_checkpoint(store.get(digest)) for digest in trained.checkpoints]
    assert [state.final for state in stored] == [False] * (len(stored) - 1) + [True]  # the round's end: weights only
    assert stored[-1].step == STEPS
    assert all(torch.equal(trained.end_weights[n], reference.end_weights[n]) for n in reference.end_weights)


@needs_memfd
def test_training_in_the_shared_arena_gives_the_same_bytes(setup):
    spec, dataset, start, _ = setup
    plain, shared = Trainer(spec, dataset), Trainer(spec, dataset)
    arena = shared_state_arena(shared)
    # the parameters now live in the arena, each on a 64-byte boundary, with their values kept
    for name, parameter in shared.parameters.items():
        assert parameter.data_ptr() == arena.tensors[f"weights/{name}"].data_ptr()
        assert parameter.data_ptr() % ALIGNMENT == 0
    for trainer in (plain, shared):
        trainer.start_round(start)
    states = [train_segment(t, None, worker_index=1, round_index=0, end_step=7) for t in (plain, shared)]
    assert bytes(checkpoint_bytes(states[0])) == bytes(checkpoint_bytes(states[1]))
    assert shared_state_arena(shared) is arena  # moved once


@needs_memfd
def test_a_killed_process_fails_the_round_clearly_and_the_next_attempt_resumes(setup, trainer, tmp_path, acceleration):
    _, _, start, reference = setup
    killed = []

    def kill_after_first_segment(step, steps):
        if not killed:
            killed.append(trainer.snapshot_taker._process.pid)
            os.kill(killed[0], signal.SIGKILL)

    with pytest.raises(CheckpointError, match="checkpoint process"):
        run(trainer, tmp_path, start, acceleration, on_segment=kill_after_first_segment)
    recorded = WorkerState.load(tmp_path).task(3).round(0).checkpoints
    assert recorded == [h.hex() for h in reference.checkpoint_hashes[:len(recorded)]]
    trained, _, _ = run(trainer, tmp_path, start, acceleration)  # a new process, resuming from what was recorded
    assert trainer.snapshot_taker._process.pid != killed[0]
    assert trained.checkpoints == [h.hex() for h in reference.checkpoint_hashes]


@needs_memfd
def test_a_storage_failure_fails_that_checkpoint_and_every_later_one(setup, trainer, tmp_path, acceleration):
    start = setup[2]

    def break_the_store(step, steps):
        blobs = tmp_path / "blobs" / "blobs"
        while blobs.is_dir():  # the process may be writing in it meanwhile
            shutil.rmtree(blobs, ignore_errors=True)
        if not blobs.exists():
            blobs.write_bytes(b"not a directory")  # every later write fails

    with pytest.raises(CheckpointError, match="storing checkpoint failed"):
        run(trainer, tmp_path, start, acceleration, on_segment=break_the_store)


@needs_memfd
def test_closing_the_trainer_ends_the_process(setup, trainer, tmp_path, acceleration):
    run(trainer, tmp_path, setup[2], acceleration)
    process = trainer.snapshot_taker._process
    trainer.close()
    assert process.returncode == 0
    assert trainer.snapshot_taker is None


@needs_memfd
def test_a_process_that_cannot_start_leaves_checkpoints_to_threads(trainer, tmp_path, caplog):
    (tmp_path / "blobs").mkdir()
    store = BlobStore(tmp_path / "blobs")
    (tmp_path / "not-a-directory").write_bytes(b"")
    store.root = tmp_path / "not-a-directory"  # the process cannot create its blobs folder there
    assert checkpoint_process.checkpoint_process_for(trainer, store) is None
    assert "checkpoints stay in this process's threads" in caplog.text


def test_the_process_main_refuses_to_run_without_its_arena():
    result = subprocess.run([sys.executable, "-m", "trolly.compute.acceleration.checkpoint_process_main"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ARENA_FD" in result.stderr


@needs_memfd
def test_a_worker_killed_with_sigkill_leaves_no_checkpoint_process_behind(tmp_path):
    """The process reads its commands from the worker: when the worker dies, its input ends and it exits."""
    script = tmp_path / "worker.py"
    script.write_text(
        "import sys, time\n"
        "from trolly.compute.blobs import BlobStore\n"
        "from trolly.compute.acceleration.checkpoint_process import checkpoint_process_for\n"
        "from trolly.compute.data import build_dataset, dataset_from_blobs\n"
        "from trolly.compute.spec import example_spec, spec_from_dict\n"
        "from trolly.compute.training import Trainer\n"
        "blobs = build_dataset('digits')\n"
        "spec = spec_from_dict(example_spec(blobs.manifest_hash, model={'arch': 'mlp', 'config': {'hidden': [8]}}))\n"
        "trainer = Trainer(spec, dataset_from_blobs(blobs))\n"
        "process = checkpoint_process_for(trainer, BlobStore(sys.argv[1]))\n"
        "print(process._process.pid, flush=True)\n"
        "time.sleep(600)\n")
    worker = subprocess.Popen([sys.executable, str(script), str(tmp_path / "blobs")], stdout=subprocess.PIPE, text=True)
    try:
        child = int(worker.stdout.readline())
        os.kill(child, 0)  # running
        worker.kill()
        worker.wait(timeout=30)
        for _ in range(200):
            if not _running(child):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"checkpoint process {child} outlived its worker")
    finally:
        worker.kill()


def _running(pid: int) -> bool:
    """True while `pid` runs (an exited process that its new parent has not collected yet does not count)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@needs_memfd
def test_a_dropped_trainer_releases_its_shared_memory(setup):
    import gc
    spec, dataset, _, _ = setup
    trainer = Trainer(spec, dataset)
    link = pathlib.Path(f"/proc/self/fd/{shared_state_arena(trainer).descriptor}")
    assert "trolly-training-state" in os.readlink(link)  # open while the trainer lives
    del trainer
    gc.collect()
    assert not link.exists() or "trolly-training-state" not in os.readlink(link)


@needs_memfd
def test_a_trainer_dropped_without_close_ends_its_process(setup, tmp_path, acceleration):
    import gc
    spec, dataset, start, _ = setup
    trainer = Trainer(spec, dataset)
    run(trainer, tmp_path, start, acceleration)
    process = trainer.snapshot_taker._process
    del trainer
    gc.collect()
    assert process.wait(timeout=30) == 0
