"""A table's preprocessing is applied once, at pack time, so workers, verifiers and `task eval` read the very same
features (issue 34: "preprocessing applied identically by worker, verifier and eval"), and a worker that
preprocesses the raw table its own way is caught by the verifier's segment replay.

The table has an id, a column of words and missing cells (`people_csv`). The task is built as `task submit --data`
builds it (`prepare_data_submission`: private pack, this task's own copy, served over HTTP), its budget cut to one
short round for speed. The worker obtains the dataset as a worker does (`obtain_dataset`, fetched into its store
and opened with the task's key); the verifier as a verifier does (`TaskDatasets.task_dataset`, streamed shards);
`task eval --data` as the requester does (`packed_dataset_of`)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import numpy as np
import pytest
import torch

from trolly.compute.blobs import AddressPolicy, BlobStore, RetryPolicy
from trolly.compute.checkpoints import weights_hash
from trolly.compute.cheats import CHEATS, get_cheat, honest_round, register_cheat
from trolly.compute.data.packing import check_samples, held_out_split
from trolly.compute.data.preprocessing import fit
from trolly.compute.data.readers import features_array, read_samples
from trolly.compute.requester.cli import packed_dataset_of, prepare_data_submission
from trolly.compute.requester.results import TaskResult, evaluate_result, spec_shape
from trolly.compute.spec import parse_spec
from trolly.compute.training import Trainer
from trolly.compute.worker.cheat_round import play_cheat_round
from trolly.compute.worker.data import obtain_dataset
from trolly.compute.worker.progress import WorkerState
from trolly.compute.worker.round_training import commitment
from trolly.verifier.checkpoint_sources import MemorySource
from trolly.verifier.dataset_fetch import TaskDatasets
from trolly.verifier.segment_check import PASSED, Replayer, SegmentClaim, verify_segment

from cheat_helpers import stand_in_weights
from prediction_helpers import people_csv
from verifier_helpers import own_profile

LOOPBACK = AddressPolicy(allow_private=True)
FAST = RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.01, request_timeout=5.0)
HONEST = "test_honest_on_given_features"


@dataclasses.dataclass
class Served:
    """A submitted table task: its spec, the requester's submission (serving the data), and the dataset as the
    worker, the verifier and `task eval` each obtained it."""

    spec: object
    spec_bytes: bytes
    submission: object
    worker: object
    verifier: object
    evaluation: object


@pytest.fixture
def served(tmp_path):
    """The people table packed and served as `task submit --data` does, the budget cut to one short round."""
    submission = prepare_data_submission(str(people_csv(tmp_path / "people.csv", count=120)), None, None, 1, (),
                                         "127.0.0.1:0", None)
    try:
        document = json.loads(submission.spec)
        document["training"].update({"rounds": 2, "inner_steps": 12, "checkpoint_every": 5, "batch_size": 8})
        spec_bytes = json.dumps(document).encode()
        spec = parse_spec(spec_bytes)
        key = submission.data_key
        assert key is not None  # a private pack by default: every reader needs the task's key
        worker = asyncio.run(obtain_dataset(BlobStore(tmp_path / "worker-blobs"), spec, LOOPBACK, key))
        verifier = asyncio.run(TaskDatasets().task_dataset(spec, [], FAST, LOOPBACK, key))
        evaluation = packed_dataset_of(submission.packed, spec.dataset.manifest_hash)
        yield Served(spec, spec_bytes, submission, worker, verifier, evaluation)
    finally:
        submission.server.stop()


def other_statistics_features(csv_path, dataset):
    """The cheat's features: the raw table read again and preprocessed by a `Preprocessing` fitted on ALL rows
    (train and held-out alike), with the pack's own split; same rows and labels as the shards, other statistics."""
    samples = read_samples(csv_path)
    _, targets = check_samples(samples)
    test = held_out_split(targets, 0.2, 0)  # `data pack`'s defaults, which `task submit --data` packs with
    every_row = np.ones(len(samples.labels), dtype=bool)
    preprocessing = fit(samples.table, every_row, samples.feature_description["label_column"], (), "the CSV",
                        samples.lines)
    out = features_array(len(samples.labels), preprocessing.width, "the CSV")
    inputs = torch.from_numpy(preprocessing.transform(samples.table, "the CSV", samples.lines, out))
    assert torch.equal(torch.from_numpy(targets[~test]), dataset.train_targets)  # the very rows the shards hold
    return dataclasses.replace(dataset, train_inputs=inputs[~test].to(dataset.train_inputs.dtype),
                               test_inputs=inputs[test].to(dataset.test_inputs.dtype))


def play_rounds(spec, dataset, state, store):
    """A worker's rounds 0 and 1 of task 7, trained honestly on `dataset`'s features; round 1's commitment."""
    trainer = Trainer(spec, dataset)
    task = state.task(7)
    message = None
    for round_index in (0, 1):
        task.round(round_index).steps = spec.training.inner_steps
        previous = task.rounds[round_index - 1].residual_hash if round_index else ""
        trained = play_cheat_round(get_cheat(HONEST), trainer, store, state, task, round_index,
                                   start_weights=stand_in_weights(spec, dataset, round_index),
                                   previous_residual_hash=previous)
        message = commitment(7, task.round(round_index), spec.training.batch_size, own_profile(),
                             trained.claimed_samples)
    return message


def replay_outcomes(spec, dataset, state, store, message, spec_key: str) -> list[str]:
    """The verifier's outcome on every segment of round 1, replayed on `dataset` (the verifier's own)."""
    progress = state.task(7).round(1)
    served = {h: store.get(h) for h in progress.checkpoints if store.has(h)}
    for digest in (progress.update_hash, progress.residual_hash, state.task(7).round(0).residual_hash):
        served[digest] = store.get(digest)
    source = MemorySource()
    source.add_round(7, 1, progress.checkpoints, served)
    replayer = Replayer()
    try:
        outcomes = []
        for segment in range(len(progress.checkpoints) - 1):
            claim = SegmentClaim(task_id=7, round=1, worker="worker-1", worker_index=1, segment=segment,
                                 checkpoint_root=message.checkpoint_root, num_checkpoints=message.num_checkpoints,
                                 steps=message.steps, samples_processed=message.samples_processed,
                                 start_weights_hash=message.start_weights_hash,
                                 determinism_profile=message.determinism_profile, update_hash=message.update_hash,
                                 residual_hash=message.residual_hash,
                                 previous_residual_hash=bytes.fromhex(state.task(7).round(0).residual_hash))
            report = asyncio.run(verify_segment(claim, spec, dataset, source, replayer, spec_key=spec_key,
                                                expected_start_hash=weights_hash(stand_in_weights(spec, dataset, 1))))
            outcomes.append(report.outcome)
    finally:
        replayer.close()
    return outcomes


@pytest.fixture
def honest_strategy():
    register_cheat(HONEST, "an honest round on whatever features the worker trains on")(honest_round)
    yield
    CHEATS.pop(HONEST, None)


def test_worker_verifier_and_eval_read_the_same_features_bitwise(served):
    """The worker's fetched shards, the verifier's streamed ones and `task eval --data`'s copy are one dataset:
    the same features (made at pack time by the one preprocessing) and targets, bit for bit, and `task eval`
    scores the same weights the same on each (its
    baseline too, fitted on those features)."""
    worker, verifier, evaluation = served.worker, served.verifier, served.evaluation
    assert worker.manifest_hash == verifier.manifest_hash == evaluation.manifest_hash == served.spec.dataset.manifest_hash
    for split in ("train", "test"):
        for field in ("inputs", "targets"):
            mine = getattr(worker, f"{split}_{field}")
            streamed = getattr(verifier, f"{split}_{field}")[:]  # every row, fetched shard by shard
            theirs = getattr(evaluation, f"{split}_{field}")
            assert mine.dtype == streamed.dtype == theirs.dtype
            assert torch.equal(mine, streamed) and torch.equal(mine, theirs)
    assert torch.isfinite(worker.train_inputs).all()  # the missing cells were imputed at pack time
    weights = stand_in_weights(served.spec, worker, 1)
    result = TaskResult(1, weights_hash(weights), served.spec_bytes, served.spec, spec_shape(served.spec), weights,
                        served.submission.packed.labels, tuple(served.submission.urls))
    scored, rescored = evaluate_result(result, evaluation), evaluate_result(result, worker)
    scored.pop("baseline_seconds"), rescored.pop("baseline_seconds")  # a wall-clock time, not a score
    assert scored == rescored and scored["test_samples"] == len(worker.test_targets)


def test_an_honest_round_on_the_packed_features_passes_every_segment(tmp_path, served, honest_strategy):
    state, store = WorkerState.load(tmp_path / "worker"), BlobStore(tmp_path / "worker" / "blobs")
    state.add_task(7, "00" * 32, worker_index=1)
    message = play_rounds(served.spec, served.worker, state, store)
    outcomes = replay_outcomes(served.spec, served.verifier, state, store, message, "honest-table")
    assert len(outcomes) >= 2 and outcomes == [PASSED] * len(outcomes)


def test_a_worker_preprocessing_with_statistics_of_all_rows_is_caught(tmp_path, served, honest_strategy):
    """Attack: a dishonest (or buggy) worker ignores the pack's preprocessing and makes its own features from the
    raw table, with means, scales, medians and categories fitted on every row, the held-out ones included (leaking
    them into training). Same rows, same labels, same batches, trained honestly otherwise: only the statistics
    differ. The verifier replays on the pack's shards, so every segment's checkpoint hash differs and none
    passes."""
    cheat = other_statistics_features(tmp_path / "people.csv", served.worker)
    assert cheat.train_inputs.shape == served.worker.train_inputs.shape
    assert not torch.equal(cheat.train_inputs, served.worker.train_inputs)
    state, store = WorkerState.load(tmp_path / "worker"), BlobStore(tmp_path / "worker" / "blobs")
    state.add_task(7, "00" * 32, worker_index=1)
    message = play_rounds(served.spec, cheat, state, store)
    outcomes = replay_outcomes(served.spec, served.verifier, state, store, message, "other-statistics-table")
    assert len(outcomes) >= 2 and all(outcome != PASSED for outcome in outcomes)
