"""A cheat of the registry played through a worker's round (`compute/worker/cheat_round.py`) and the verifier's
segment replay of what it committed, served from the worker's blob store. Shared by the cheat tests on the CPU
path, on a regression task and under the wasm32 kernel, which differ only in the task, the trainer, the
profile committed under and the replay's spec key: one copy, so the three cannot drift apart."""

from __future__ import annotations

import asyncio
import functools
import json

import torch

from trolly.compute.blobs import BlobStore
from trolly.compute.checkpoints import weights_hash
from trolly.compute.cheats import get_cheat
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.spec import example_spec, parse_spec
from trolly.compute.training import initial_weights
from trolly.compute.worker.cheat_round import play_cheat_round
from trolly.compute.worker.progress import WorkerState
from trolly.compute.worker.round_training import commitment
from trolly.verifier.checkpoint_sources import MemorySource
from trolly.verifier.segment_check import Replayer, SegmentClaim, verify_segment

TASK_ID = 7
"""The task every cheat round here belongs to (worker index 1)."""


@functools.lru_cache(maxsize=1)
def digits_dataset():
    """The bundled digits dataset, built once per test process."""
    return dataset_from_blobs(build_dataset("digits"))


def wasm32_digits_document(kernels=("torch", "wasm32"), **training) -> dict:
    """The spec document of the small digits MLP task the wasm32 cheat tests play (native and in a tab): three
    segments of 12 steps, weight decay and a cosine schedule whose warm-up ends inside the round."""
    document = example_spec(digits_dataset().manifest_hash, model={"arch": "mlp", "config": {"hidden": [16]}},
                            determinism={"threads": 1, "kernels": list(kernels)})
    document["training"].update({"inner_steps": 12, "checkpoint_every": 5, "batch_size": 8, **training})
    document["training"]["inner_optimizer"].update(weight_decay=0.01, schedule={"name": "cosine", "warmup_steps": 6})
    return document


def wasm32_digits_spec(kernels=("torch", "wasm32"), **training):
    return parse_spec(json.dumps(wasm32_digits_document(kernels, **training)))


def stand_in_weights(spec, dataset, round_index: int):
    """Start weights for round 0 (W_0) and a seeded perturbation of them standing in for later rounds'."""
    weights = initial_weights(spec, dataset.shape)
    if round_index == 0:
        return weights
    generator = torch.Generator().manual_seed(round_index)
    return {n: t + 1e-3 * torch.randn(t.shape, generator=generator) for n, t in weights.items()}


def cheat_worker(directory):
    """A worker's progress state (holding task 7 as worker index 1) and blob store under `directory`."""
    state, store = WorkerState.load(directory), BlobStore(directory / "blobs")
    state.add_task(TASK_ID, "00" * 32, worker_index=1)
    return state, store


def play_worker_round(name, spec, dataset, trainer, state, store, round_index, profile):
    """Round `round_index` of task 7 played by the cheat `name` as a worker with `--cheat` plays it, from the
    stand-in start weights of that round, committed under `profile`; its commitment."""
    task = state.task(TASK_ID)
    task.round(round_index).steps = spec.training.inner_steps
    previous = task.rounds[round_index - 1].residual_hash if round_index else ""
    trained = play_cheat_round(get_cheat(name), trainer, store, state, task, round_index,
                               start_weights=stand_in_weights(spec, dataset, round_index),
                               previous_residual_hash=previous)
    assert trained.checkpoints == task.round(round_index).checkpoints
    return commitment(TASK_ID, task.round(round_index), spec.training.batch_size, profile, trained.claimed_samples)


def replay_round_one(spec, dataset, state, store, message, spec_key: str) -> list:
    """The verifier's report on every segment of round 1 of task 7 (committed by `message`), served from the
    worker's store."""
    progress, previous = state.task(TASK_ID).round(1), state.task(TASK_ID).round(0).residual_hash
    served = {h: store.get(h) for h in progress.checkpoints if store.has(h)}
    for digest in (progress.update_hash, progress.residual_hash, previous):
        served[digest] = store.get(digest)
    source = MemorySource()
    source.add_round(TASK_ID, 1, progress.checkpoints, served)
    replayer = Replayer()
    try:
        reports = []
        for segment in range(len(progress.checkpoints) - 1):
            claim = SegmentClaim(task_id=TASK_ID, round=1, worker="worker-1", worker_index=1, segment=segment,
                                 checkpoint_root=message.checkpoint_root, num_checkpoints=message.num_checkpoints,
                                 steps=message.steps, samples_processed=message.samples_processed,
                                 start_weights_hash=message.start_weights_hash,
                                 determinism_profile=message.determinism_profile, update_hash=message.update_hash,
                                 residual_hash=message.residual_hash, previous_residual_hash=bytes.fromhex(previous))
            reports.append(asyncio.run(verify_segment(
                claim, spec, dataset, source, replayer, spec_key=spec_key,
                expected_start_hash=weights_hash(stand_in_weights(spec, dataset, 1)))))
    finally:
        replayer.close()
    return reports
