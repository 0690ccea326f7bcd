"""`compute.acceleration.affinity`: the training thread gets a core to itself for a round, everything beside it the others.

The pinning is an option of the worker's `compute.acceleration.Acceleration`, handed to its rounds."""

from __future__ import annotations

import os
import threading

import pytest

from trolly.compute.acceleration import Acceleration, AccelerationOptions, affinity, checkpoint_process
from trolly.compute.acceleration.affinity import CorePinning
from trolly.compute.background import BackgroundQueue
from trolly.compute.blobs import BlobStore
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights
from trolly.compute.worker.round_training import train_round
from trolly.compute.worker.progress import WorkerState
from trolly.compute.worker.strategies import TrainingStrategy

CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs a process allowed on at least 2 CPUs (sched_setaffinity)")


def in_thread(function):
    """function() run on a fresh thread; its result or its error."""
    outcome = {}

    def run():
        try:
            outcome["value"] = function()
        except BaseException as error:  # re-raised below, on the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@needs_two_cpus
def test_the_training_thread_runs_alone_on_the_first_cpu_within_and_as_before_after():
    pinning = CorePinning.of_this_process()
    training, background = pinning.training, pinning.background
    assert training == {CPUS[0]} and background == set(CPUS[1:])

    def pinned_then_restored():
        before = os.sched_getaffinity(0)
        with pinning.training_core(1):
            within = os.sched_getaffinity(0)
        return before, within, os.sched_getaffinity(0)

    before, within, after = in_thread(pinned_then_restored)
    assert within == training and after == before == set(CPUS)


@needs_two_cpus
def test_background_threads_keep_off_the_training_cpu():
    pinning = CorePinning.of_this_process()

    def keep_off():
        pinning.keep_off_training_core()
        return os.sched_getaffinity(0)

    assert in_thread(keep_off) == set(CPUS[1:])


@needs_two_cpus
def test_a_background_queue_started_from_a_pinned_thread_keeps_off_the_training_cpu_only_with_the_hook():
    pinning = CorePinning.of_this_process()

    def queue_cpus(on_start):
        seen = []
        work = BackgroundQueue(lambda item: seen.append(os.sched_getaffinity(0)), name="test-queue",
                               failure=RuntimeError, on_start=on_start)
        work.put(None)
        work.join()
        work.close()
        return seen[0]

    def started_within_a_pinned_round(on_start):
        with pinning.training_core(1):
            return in_thread(lambda: queue_cpus(on_start))

    assert in_thread(lambda: started_within_a_pinned_round(pinning.keep_off_training_core)) == set(CPUS[1:])
    # Without the hook nothing moves it: it keeps the training CPU it inherited (nothing module-level guesses).
    assert in_thread(lambda: started_within_a_pinned_round(None)) == {CPUS[0]}


@needs_two_cpus
def test_a_multithreaded_profile_or_the_option_off_leaves_the_cpus_alone():
    pinning = CorePinning.of_this_process()
    assert in_thread(lambda: _within(pinning, 2)) == set(CPUS)  # PyTorch's intra-op threads would share one CPU
    with Acceleration(AccelerationOptions(training_core=False)) as acceleration:
        assert acceleration.pinning is None
        assert in_thread(lambda: _within(acceleration.pinning, 1)) == set(CPUS)


def _within(pinning: CorePinning | None, threads: int) -> set[int]:
    with affinity.training_core(pinning, threads):
        return os.sched_getaffinity(0)


def test_one_cpu_is_no_cpu_to_spare():
    assert CorePinning.of_cpus({0}) is None
    with affinity.training_core(None, 1):  # nothing to do, nothing refused
        pass


def small_round(tmp_path):
    """A tiny MLP task's round 0 of 12 steps for worker 0: (spec, dataset, trainer, worker state, progress)."""
    blobs = build_dataset("digits")
    spec = spec_from_dict(example_spec(
        blobs.manifest_hash, model={"arch": "mlp", "config": {"hidden": [32]}}, codec="ternary",
        training={"rounds": 2, "inner_steps": 12, "batch_size": 8, "checkpoint_every": 5, "seed": 11}))
    dataset = dataset_from_blobs(blobs)
    trainer = Trainer(spec, dataset)
    state = WorkerState.load(tmp_path)
    progress = state.add_task(3, "00" * 32, worker_index=0).round(0)
    progress.steps = 12
    return spec, dataset, trainer, state, progress


def train_watched(tmp_path, spec, dataset, trainer, state, progress, options: AccelerationOptions, look) -> None:
    """Train the round on a thread of its own under an acceleration with `options`, `look` called between
    segments; the trainer is closed after."""
    try:
        with Acceleration(options) as acceleration:
            in_thread(lambda: train_round(trainer, TrainingStrategy(), BlobStore(tmp_path / "blobs"), state, progress,
                                          worker_index=0, start_weights=initial_weights(spec, dataset.shape),
                                          acceleration=acceleration, on_segment=look))
    finally:
        trainer.close()


@needs_two_cpus
def test_in_a_round_the_checkpoint_process_and_the_background_threads_are_off_the_training_cpu(tmp_path):
    spec, dataset, trainer, state, progress = small_round(tmp_path)
    seen = []

    def look(step, steps):  # on the training thread, between segments
        threads = {t.name: os.sched_getaffinity(t.native_id) for t in threading.enumerate()
                   if t.name in ("checkpoint-records", "checkpoint-process-answers")}
        process = trainer.snapshot_taker
        helper = os.sched_getaffinity(process._process.pid) if process is not None else None
        seen.append((os.sched_getaffinity(0), threads, helper))

    train_watched(tmp_path, spec, dataset, trainer, state, progress, AccelerationOptions(), look)
    assert seen
    for training, threads, helper in seen:
        assert training == {CPUS[0]}
        assert threads and all(cpus == set(CPUS[1:]) for cpus in threads.values()), threads
        assert helper == set(CPUS[1:]) if checkpoint_process.available() else helper is None


@needs_two_cpus
def test_in_a_round_without_the_checkpoint_process_the_copier_and_hasher_threads_are_off_the_training_cpu(tmp_path):
    spec, dataset, trainer, state, progress = small_round(tmp_path)
    seen = []

    def look(step, steps):  # on the training thread, between segments
        threads = {t.name: os.sched_getaffinity(t.native_id) for t in threading.enumerate()
                   if t.name == "checkpoint-hasher"}
        copier = trainer._copier._thread  # this trainer's (other tests' trainers may have copiers too)
        if copier is not None:
            threads["checkpoint-copy"] = os.sched_getaffinity(copier.native_id)
        seen.append(threads)

    train_watched(tmp_path, spec, dataset, trainer, state, progress, AccelerationOptions(checkpoint_process=False),
                  look)
    assert seen
    for threads in seen[1:]:  # from the second segment on, the copier has copied under the round's hook
        assert set(threads) == {"checkpoint-hasher", "checkpoint-copy"}, threads
        assert all(cpus == set(CPUS[1:]) for cpus in threads.values()), threads
