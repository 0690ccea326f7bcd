"""train_segment, checkpoints and the determinism profile: replays give the same bytes."""

import concurrent.futures
import json
import os
import subprocess
import sys

import pytest
import torch

from trolly.compute.acceleration.batches_ahead import draw_batches_ahead
from trolly.compute.checkpoints import (CheckpointHasher, TrainingState, checkpoint_hash, decode_checkpoint,
                                        encode_checkpoint, weights_hash)
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.data.dataset import batch_indices
from trolly.compute.determinism import DeterminismProfile, batch_seed, child_environment
from trolly.compute.errors import CheckpointError, DeterminismError, SpecError
from trolly.compute.checkpoint_merkle import merkle_proof, merkle_root, verify_proof
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights, run_round, segment_bounds, train_segment


@pytest.fixture(scope="module")
def digits():
    return dataset_from_blobs(build_dataset("digits"))


def small_spec(manifest_hash, threads=1, **training):
    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": [32, 32]}},
                            determinism={"threads": threads})
    document["training"].update({"inner_steps": 12, "checkpoint_every": 5, **training})
    return spec_from_dict(document)


def test_batch_is_a_pure_function_of_seed_worker_round_step():
    first = batch_indices(1000, 16, 7, 1, 2, 3)
    assert torch.equal(first, batch_indices(1000, 16, 7, 1, 2, 3))
    for other in [(8, 1, 2, 3), (7, 0, 2, 3), (7, 1, 3, 3), (7, 1, 2, 4)]:
        assert not torch.equal(first, batch_indices(1000, 16, *other))


def test_batch_seed_rejects_negative_inputs():
    with pytest.raises(DeterminismError):
        batch_seed(-1, 0, 0, 0)


def test_run_round_commits_n_plus_one_checkpoints_and_their_merkle_root(digits):
    spec = small_spec(digits.manifest_hash)
    trainer = Trainer(spec, digits)
    start = initial_weights(spec, digits.shape)
    result = run_round(trainer, start, worker_index=0, round_index=0, steps=12, keep_bytes=True)
    assert [c.step for c in result.checkpoints] == [0, 5, 10, 12]
    assert spec.num_checkpoints(12) == 4
    assert result.samples_processed == 12 * spec.training.batch_size
    assert result.start_weights_hash == weights_hash(start)
    assert result.checkpoint_root == merkle_root(result.checkpoint_hashes)
    for index, record in enumerate(result.checkpoints):
        assert verify_proof(result.checkpoint_root, record.digest, index, 4, merkle_proof(result.checkpoint_hashes, index))
    # checkpoint 0 is W_r with a fresh optimizer; the update is start minus end
    zero = decode_checkpoint(result.checkpoints[0].data)
    assert zero.step == 0 and all(torch.equal(zero.weights[n], start[n]) for n in start)
    for name in start:
        assert torch.equal(result.pseudo_gradient[name], start[name] - result.end_weights[name])
    assert any(float(result.pseudo_gradient[n].abs().max()) > 0 for n in start)


def test_replaying_every_segment_from_its_checkpoint_gives_the_next_checkpoint(digits):
    spec = small_spec(digits.manifest_hash)
    result = run_round(Trainer(spec, digits), initial_weights(spec, digits.shape), worker_index=2, round_index=1,
                       steps=12, keep_bytes=True)
    verifier = Trainer(spec, digits)
    for segment in range(len(result.checkpoints) - 1):
        start = decode_checkpoint(result.checkpoints[segment].data)
        _, end = segment_bounds(segment, 12, spec.training.checkpoint_every)
        replayed = train_segment(verifier, start, worker_index=2, round_index=1, end_step=end, final=end == 12)
        assert encode_checkpoint(replayed) == result.checkpoints[segment + 1].data
    last = decode_checkpoint(result.checkpoints[-1].data)  # the round's end: weights and step, no optimizer
    assert last.final and last.step == 12 and set(last.weights) == set(start.weights)
    assert not any(decode_checkpoint(c.data).final for c in result.checkpoints[:-1])


def test_replay_with_the_wrong_worker_index_does_not_match(digits):
    spec = small_spec(digits.manifest_hash)
    result = run_round(Trainer(spec, digits), initial_weights(spec, digits.shape), worker_index=0, round_index=0,
                       steps=5, keep_bytes=True)
    replayed = train_segment(Trainer(spec, digits), decode_checkpoint(result.checkpoints[0].data), worker_index=1,
                             round_index=0, end_step=5)
    assert checkpoint_hash(replayed) != result.checkpoints[1].digest


def test_checkpoint_bytes_round_trip_and_reject_garbage(digits):
    spec = small_spec(digits.manifest_hash)
    trainer = Trainer(spec, digits)
    state = train_segment(trainer, TrainingState.fresh(initial_weights(spec, digits.shape)), worker_index=0,
                          round_index=0, end_step=3)
    data = encode_checkpoint(state)
    again = decode_checkpoint(data)
    assert again.step == 3 and encode_checkpoint(again) == data
    with pytest.raises(CheckpointError):
        decode_checkpoint(data[:-1])
    with pytest.raises(CheckpointError):
        decode_checkpoint(b"not a checkpoint")


def test_loading_a_checkpoint_for_another_model_is_refused(digits):
    spec = small_spec(digits.manifest_hash)
    other = spec_from_dict({**example_spec(digits.manifest_hash), "model": {"arch": "mlp", "config": {"hidden": [8]}}})
    state = TrainingState.fresh(initial_weights(other, digits.shape))
    with pytest.raises(CheckpointError):
        Trainer(spec, digits).load(state)


def test_train_segment_refuses_to_go_backwards(digits):
    spec = small_spec(digits.manifest_hash)
    trainer = Trainer(spec, digits)
    state = train_segment(trainer, TrainingState.fresh(initial_weights(spec, digits.shape)), worker_index=0,
                          round_index=0, end_step=4)
    with pytest.raises(SpecError):
        train_segment(trainer, state, worker_index=0, round_index=0, end_step=2)


def test_hasher_hashes_in_order_and_matches_direct_hashing(digits):
    spec = small_spec(digits.manifest_hash)
    trainer = Trainer(spec, digits)
    trainer.load(TrainingState.fresh(initial_weights(spec, digits.shape)))
    states = []
    with CheckpointHasher() as hasher:
        for index in range(3):
            trainer.train_step(0, 0)
            states.append(trainer.snapshot())
            hasher.submit(index, states[-1])
        records = hasher.results()
    assert [r.digest for r in records] == [checkpoint_hash(s) for s in states]


def test_hasher_reports_a_failing_sink(digits):
    spec = small_spec(digits.manifest_hash)

    def broken_sink(record, data):
        raise OSError("disk full")

    with CheckpointHasher(sink=broken_sink) as hasher:
        hasher.submit(0, TrainingState.fresh(initial_weights(spec, digits.shape)))
        with pytest.raises(CheckpointError, match="disk full"):
            hasher.results()


def test_profile_id_names_torch_threads_and_instruction_set():
    profile = DeterminismProfile(threads=2, instruction_set="avx2")
    assert profile.id == f"torch-{torch.__version__}/threads-2/isa-avx2/deterministic-ftz"
    assert child_environment(profile, {})["ATEN_CPU_CAPABILITY"] == "avx2"
    with pytest.raises(DeterminismError):
        DeterminismProfile(threads=0)
    with pytest.raises(DeterminismError):
        DeterminismProfile(instruction_set="sse9")


REPLAY_SCRIPT = """
import json, sys, torch
from trolly.compute.checkpoints import encode_checkpoint, TrainingState
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights, train_segment
threads = int(sys.argv[1])
digits = dataset_from_blobs(build_dataset("digits"))
document = example_spec(digits.manifest_hash, model={"arch": "mlp", "config": {"hidden": [256, 256]}},
                        determinism={"threads": threads})
spec = spec_from_dict(document)
state = train_segment(Trainer(spec, digits), TrainingState.fresh(initial_weights(spec, digits.shape)),
                      worker_index=1, round_index=0, end_step=10)
sys.stdout.buffer.write(encode_checkpoint(state))
"""


def replay_in_subprocess(threads, instruction_set="default"):
    profile = DeterminismProfile(threads=threads, instruction_set=instruction_set)
    environment = child_environment(profile)
    environment["PYTHONHASHSEED"] = str(threads * 7 + 1)
    completed = subprocess.run([sys.executable, "-c", REPLAY_SCRIPT, str(threads)], capture_output=True,
                               env=environment, timeout=300, check=True)
    return decode_checkpoint(completed.stdout), completed.stdout


@pytest.mark.slow
def test_two_processes_replaying_the_same_segment_produce_identical_bytes():
    _, first = replay_in_subprocess(1)
    _, second = replay_in_subprocess(1)
    assert first == second


@pytest.mark.slow
def test_one_and_two_threads_differ_only_within_the_documented_tolerance():
    from trolly.compute.determinism import REPLAY_TOLERANCE
    one, _ = replay_in_subprocess(1)
    two, _ = replay_in_subprocess(2)
    for name in one.weights:
        difference = float((one.weights[name] - two.weights[name]).norm())
        scale = float(one.weights[name].norm())
        assert difference <= REPLAY_TOLERANCE * scale, name


def test_training_steps_flush_subnormals_and_leave_the_thread_as_it_was():
    from trolly.compute.determinism import flushing_subnormals
    tiny = torch.tensor([1e-39, -3e-40, 2e-38], dtype=torch.float32)  # two subnormals and a normal float
    assert (tiny * 1.0).tolist()[:2] != [0.0, 0.0]  # IEEE: subnormals survive
    with flushing_subnormals():
        flushed = (tiny * 1.0).tolist()
    assert flushed[:2] == [0.0, 0.0] and flushed[2] == pytest.approx(2e-38)
    assert (tiny * 1.0).tolist()[:2] != [0.0, 0.0]  # back to IEEE afterwards
    with pytest.raises(RuntimeError):
        with flushing_subnormals():
            raise RuntimeError("a failing step")
    assert (tiny * 1.0).tolist()[:2] != [0.0, 0.0]


def test_batches_drawn_ahead_are_the_steps_own_and_give_the_same_bytes(digits, drawer):
    from trolly.compute.data.dataset import sample_batch
    spec = small_spec(digits.manifest_hash)
    start = initial_weights(spec, digits.shape)
    inline = Trainer(spec, digits)
    inline.start_round(start)
    expected = train_segment(inline, None, worker_index=1, round_index=2, end_step=12)
    ahead = Trainer(spec, digits)
    ahead.start_round(start)
    assert draw_batches_ahead(ahead, 1, 2, range(0, 12), drawer).result(timeout=30) == 12
    drawn = dict(ahead.batches_ahead)
    for step in (0, 11):
        own = sample_batch(digits, spec.training.batch_size, spec.training.seed, 1, 2, step)
        assert all(torch.equal(a, b) for a, b in zip(drawn[(1, 2, step)], own))
    replayed = train_segment(ahead, None, worker_index=1, round_index=2, end_step=12)
    assert ahead.batches_ahead == {}  # every step took its batch from those drawn
    assert checkpoint_hash(replayed) == checkpoint_hash(expected)


def test_batches_drawn_ahead_stop_at_the_memory_bound_and_the_rest_are_drawn_in_step(digits, monkeypatch, drawer):
    from trolly.compute.acceleration import batches_ahead
    spec = small_spec(digits.manifest_hash)
    start = initial_weights(spec, digits.shape)
    expected = train_segment(Trainer(spec, digits), TrainingState.fresh(start), worker_index=0, round_index=0,
                             end_step=12)
    per_batch = spec.training.batch_size * (digits.train_inputs[0].numel() * 4 + 8)
    monkeypatch.setattr(batches_ahead, "AHEAD_BYTES", 3 * per_batch)
    trainer = Trainer(spec, digits)
    trainer.start_round(start)
    assert draw_batches_ahead(trainer, 0, 0, range(0, 12), drawer).result(timeout=30) == 3
    assert sorted(step for _, _, step in trainer.batches_ahead) == [0, 1, 2]
    assert checkpoint_hash(train_segment(trainer, None, worker_index=0, round_index=0, end_step=12)) == \
        checkpoint_hash(expected)


def test_a_later_drawing_takes_over_and_batches_of_another_round_are_not_used(digits, drawer):
    spec = small_spec(digits.manifest_hash)
    start = initial_weights(spec, digits.shape)
    trainer = Trainer(spec, digits)
    draw_batches_ahead(trainer, 0, 5, range(0, 12), drawer).result(timeout=30)
    assert draw_batches_ahead(trainer, 0, 6, range(0, 12), drawer).result(timeout=30) == 12
    assert {round_index for _, round_index, _ in trainer.batches_ahead} == {6}
    trainer.start_round(start)  # round 7's steps find nothing drawn for them and draw their own
    trained = train_segment(trainer, None, worker_index=0, round_index=7, end_step=12)
    reference = train_segment(Trainer(spec, digits), TrainingState.fresh(start), worker_index=0, round_index=7,
                              end_step=12)
    assert checkpoint_hash(trained) == checkpoint_hash(reference)


@pytest.fixture
def drawer():
    """A batch-drawing thread, as a worker's `Acceleration` has one."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        yield executor
