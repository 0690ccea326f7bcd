"""A worker's round (`compute/worker/round_training.py`): resumable training, the update, the commitment, a cheat's.

The reference is the compute runtime's own `run_round` (what a verifier's replay agrees with): a round
interrupted at any checkpoint and resumed in a fresh trainer must give exactly its checkpoints.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch
from worker_helpers import reference_round

from trolly.chain.market.economics import segment_count
from trolly.chain.messages.commit_round import validate_commit_round
from trolly.compute.blobs import BlobStore
from trolly.compute.checkpoints import checkpoint_hash, decode_checkpoint
from trolly.compute.canonical import decode_tensors
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.checkpoint_merkle import merkle_root
from trolly.compute.training import Trainer, run_round, train_segment
from trolly.compute.cheats import get_cheat
from trolly.compute.worker.cheat_round import play_cheat_round
from trolly.compute.worker.errors import WorkerError
from trolly.compute.acceleration import Acceleration, AccelerationOptions
from trolly.compute.worker.round_training import (ResidualStore, RoundInterrupted, commitment, encode_update,
                                                  final_report, previous_residual, train_round)
from trolly.compute.worker.progress import WorkerState
from trolly.compute.worker.strategies import TrainingStrategy

STEPS = 12  # checkpoints every 5: segments [0,5) [5,10) [10,12), checkpoints 0..3


@pytest.fixture(scope="module")
def setup():
    return reference_round(STEPS, hidden=16, seed=3, worker_index=1)


@pytest.fixture
def residuals():
    """The worker's residual store (one per worker service)."""
    store = ResidualStore()
    yield store
    store.close()


def fresh_round(tmp_path, steps=STEPS):
    state = WorkerState.load(tmp_path)
    progress = state.add_task(7, "00" * 32, worker_index=1).round(0)
    progress.steps = steps
    return state, progress, BlobStore(tmp_path / "blobs")


def test_an_uninterrupted_round_matches_the_runtime_and_stores_every_checkpoint(setup, tmp_path):
    spec, dataset, start, reference = setup
    state, progress, store = fresh_round(tmp_path)
    trained = train_round(Trainer(spec, dataset), TrainingStrategy(), store, state, progress, worker_index=1,
                          start_weights=start)
    hashes = trained.checkpoints
    assert hashes == [h.hex() for h in reference.checkpoint_hashes]
    assert all(store.has(h) for h in hashes)
    # the start weights' hash, left empty by the caller, was filled in and saved with checkpoint 0
    assert progress.start_weights_hash == reference.start_weights_hash.hex()
    assert WorkerState.load(tmp_path).task(7).round(0).start_weights_hash == progress.start_weights_hash
    assert all(torch.equal(trained.end_weights[n], reference.end_weights[n]) for n in reference.end_weights)
    saved = WorkerState.load(tmp_path).task(7).rounds[0]
    assert saved.checkpoints == hashes  # recorded on disk as they were hashed


@pytest.mark.parametrize("stop_after_segments", [1, 2])
def test_a_round_interrupted_and_resumed_in_a_new_trainer_is_byte_identical(setup, tmp_path, stop_after_segments):
    spec, dataset, start, reference = setup
    state, progress, store = fresh_round(tmp_path)
    stop = threading.Event()
    seen = []

    def on_segment(step, steps):
        seen.append(step)
        if len(seen) == stop_after_segments:
            stop.set()

    with pytest.raises(RoundInterrupted):
        train_round(Trainer(spec, dataset), TrainingStrategy(), store, state, progress, worker_index=1,
                    start_weights=start, stop=stop, on_segment=on_segment)
    reloaded = WorkerState.load(tmp_path)
    resumed_progress = reloaded.task(7).rounds[0]
    assert len(resumed_progress.checkpoints) == stop_after_segments + 1

    # A different, already-used trainer: resuming must not depend on what it held before.
    trainer = Trainer(spec, dataset)
    trainer.train_step(0, 99)
    hashes = train_round(trainer, TrainingStrategy(), store, reloaded, resumed_progress, worker_index=1,
                         start_weights=start).checkpoints
    assert hashes == [h.hex() for h in reference.checkpoint_hashes]


def test_a_finished_round_is_not_trained_again(setup, tmp_path):
    spec, dataset, start, reference = setup
    state, progress, store = fresh_round(tmp_path)
    train_round(Trainer(spec, dataset), TrainingStrategy(), store, state, progress, worker_index=1, start_weights=start)

    class Refuse(TrainingStrategy):
        def train_segment(self, *args, **kwargs):
            raise AssertionError("trained a finished round again")

    again = train_round(Trainer(spec, dataset), Refuse(), store, state, progress, worker_index=1,
                        start_weights=start)
    assert again.end_weights is None  # nothing trained: the caller reads W_end from the store
    again = again.checkpoints
    assert again == progress.checkpoints


def test_the_update_is_the_codec_of_start_minus_end_and_the_commitment_is_valid(setup, tmp_path, residuals):
    spec, dataset, start, reference = setup
    state, progress, store = fresh_round(tmp_path)
    trainer = Trainer(spec, dataset)
    train_round(trainer, TrainingStrategy(), store, state, progress, worker_index=1, start_weights=start)
    update_hash, residual_stored = encode_update(trainer, store, progress, start, state=state, residuals=residuals)
    assert WorkerState.load(tmp_path).task(7).round(0).update_hash == update_hash == progress.update_hash  # saved
    assert residual_stored.result() == progress.residual_hash  # recorded once stored, in the background
    state.save()  # the worker's next save (the next round's checkpoint 0) carries it
    assert WorkerState.load(tmp_path).task(7).round(0).residual_hash == progress.residual_hash
    codec = get_codec("int8")
    assert store.get(progress.update_hash) == codec.encode(reference.pseudo_gradient)  # first round: no residual
    sent = codec.decode(store.get(progress.update_hash))
    residual = decode_tensors(store.get(progress.residual_hash))
    assert all(torch.equal(residual[n], reference.pseudo_gradient[n] - sent[n]) for n in sent)
    assert any(residual[n].abs().max() > 0 for n in residual)  # int8 is lossy: something was left over
    assert progress.start_weights_hash == reference.start_weights_hash.hex()

    message = commitment(7, progress, spec.training.batch_size, trainer.profile_id)
    validate_commit_round(message)
    assert message.checkpoint_root == reference.checkpoint_root
    assert message.num_checkpoints == segment_count(STEPS, 5) + 1 == spec.num_checkpoints(STEPS)
    assert message.samples_processed == STEPS * 8 and message.steps == STEPS
    assert message.determinism_profile == trainer.profile_id and len(message.determinism_profile.encode()) <= 64
    final = final_report(7, 2, "ab" * 32)
    validate_commit_round(final)
    assert (final.round, final.update_hash, final.steps) == (2, b"", 0)


def test_a_corrupt_checkpoint_on_disk_is_refused_on_resume(setup, tmp_path):
    spec, dataset, start, reference = setup
    state, progress, store = fresh_round(tmp_path)
    stop = threading.Event()
    with pytest.raises(RoundInterrupted):
        train_round(Trainer(spec, dataset), TrainingStrategy(), store, state, progress, worker_index=1,
                    start_weights=start, stop=stop, on_segment=lambda step, steps: stop.set())
    store.path(progress.checkpoints[-1]).write_bytes(b"not the checkpoint")
    with pytest.raises(WorkerError, match="corrupt"):
        train_round(Trainer(spec, dataset), TrainingStrategy(), store, state, progress, worker_index=1,
                    start_weights=start)


def test_skipped_steps_claims_every_step_and_any_replayed_segment_exposes_it(setup, tmp_path):
    spec, dataset, start, reference = setup
    state, progress, store = fresh_round(tmp_path)
    hashes = play_cheat_round(get_cheat("skipped_steps"), Trainer(spec, dataset), store, state, state.task(7), 0,
                              start_weights=start, previous_residual_hash="").checkpoints
    assert progress.checkpoints == hashes and WorkerState.load(tmp_path).task(7).rounds[0].checkpoints == hashes
    assert len(hashes) == 4 and hashes[0] == reference.checkpoint_hashes[0].hex()
    checkpoints = [decode_checkpoint(store.get(h)) for h in hashes]
    assert [c.step for c in checkpoints] == [0, 5, 10, 12]  # claims the full round
    assert all(float(slots["step"]) == c.step for c in checkpoints for slots in c.optimizer.values())  # forged
    replayer = Trainer(spec, dataset)
    for segment, end in enumerate((5, 10, 12)):
        replay = train_segment(replayer, checkpoints[segment], worker_index=1, round_index=0, end_step=end)
        assert checkpoint_hash(replay).hex() != hashes[segment + 1], f"segment {segment} was not exposed"
    assert merkle_root([bytes.fromhex(h) for h in hashes]) != reference.checkpoint_root


def test_step_delay_changes_timing_not_bytes(setup, tmp_path):
    spec, dataset, start, reference = setup
    state, progress, store = fresh_round(tmp_path, steps=3)
    hashes = train_round(Trainer(spec, dataset), TrainingStrategy(step_delay=0.01), store, state, progress,
                         worker_index=1, start_weights=start).checkpoints
    expected = run_round(Trainer(spec, dataset), start, worker_index=1, round_index=0, steps=3)
    assert hashes == [h.hex() for h in expected.checkpoint_hashes]


def test_error_feedback_carries_the_residual_to_the_next_round_and_resumes_identically(setup, tmp_path, residuals):
    spec, dataset, start, reference = setup
    state, first, store = fresh_round(tmp_path)
    trainer = Trainer(spec, dataset)
    train_round(trainer, TrainingStrategy(), store, state, first, worker_index=1, start_weights=start)
    encode_update(trainer, store, first, start, state=state, residuals=residuals)
    second = state.task(7).round(1)
    second.steps = STEPS
    train_round(trainer, TrainingStrategy(), store, state, second, worker_index=1, start_weights=start)
    # waits for it to be recorded
    assert previous_residual(state.task(7).rounds, 1, residuals) == first.residual_hash != ""
    assert previous_residual(state.task(7).rounds, 0, residuals) == ""
    update, residual = encode_update(trainer, store, second, start, first.residual_hash, residuals=residuals)
    # a restart
    again, residual_again = encode_update(trainer, store, second, start, first.residual_hash, residuals=residuals)
    assert (again, residual_again.result()) == (update, residual.result())
    rounds = {0: dataclasses.replace(first, residual_hash=""), 1: second}  # killed before the residual was recorded
    # zero, not an older residual that round 0's update already carried
    assert previous_residual(rounds, 2, residuals) == ""

    feedback = ErrorFeedback(get_codec(spec.codec))  # the runtime's own error feedback, round after round
    feedback.encode(reference.pseudo_gradient)
    round_one = run_round(Trainer(spec, dataset), start, worker_index=1, round_index=1, steps=STEPS)
    expected, _ = feedback.encode(round_one.pseudo_gradient)
    assert store.get(update) == expected != get_codec(spec.codec).encode(round_one.pseudo_gradient)


def test_a_residual_that_cannot_be_stored_is_logged_and_the_next_update_starts_from_zero(setup, tmp_path,
                                                                                         monkeypatch, caplog, residuals):
    spec, dataset, start, _ = setup
    state, first, store = fresh_round(tmp_path)
    trainer = Trainer(spec, dataset)
    train_round(trainer, TrainingStrategy(), store, state, first, worker_index=1, start_weights=start)

    def disk_full(data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "put_hashing", disk_full)
    _, stored = encode_update(trainer, store, first, start, state=state, residuals=residuals)
    with pytest.raises(OSError):
        stored.result()
    assert store.has(first.update_hash)  # the update, which is committed, was stored all the same
    assert previous_residual(state.task(7).rounds, 1, residuals) == "" and first.residual_hash == ""
    assert "the error-feedback residual was not stored" in caplog.text and "No space left" in caplog.text


def test_while_storing_gets_the_end_weights_while_the_last_checkpoint_is_stored(setup, tmp_path):
    spec, dataset, start, reference = setup
    state, progress, store = fresh_round(tmp_path)
    seen, events = [], []

    def while_storing(end_weights, checkpoints_stored):
        seen.append({name: tensor.clone() for name, tensor in end_weights.items()})
        events.append(checkpoints_stored)

    trained = train_round(Trainer(spec, dataset), TrainingStrategy(), store, state, progress, worker_index=1,
                          start_weights=start, while_storing=while_storing)
    assert len(seen) == 1 and all(torch.equal(seen[0][n], reference.end_weights[n]) for n in reference.end_weights)
    assert trained.end_weights is None  # handed over: not copied again
    assert trained.checkpoints == [h.hex() for h in reference.checkpoint_hashes]
    assert events[0].is_set() and all(store.has(h) for h in trained.checkpoints)  # set once they are stored


def test_a_round_that_fails_beside_its_last_checkpoint_still_says_its_checkpoints_are_done(setup, tmp_path):
    spec, dataset, start, _ = setup
    state, progress, store = fresh_round(tmp_path)
    events = []

    def while_storing(end_weights, checkpoints_stored):
        events.append(checkpoints_stored)
        raise WorkerError("encoding failed")

    with pytest.raises(WorkerError, match="encoding failed"):
        train_round(Trainer(spec, dataset), TrainingStrategy(), store, state, progress, worker_index=1,
                    start_weights=start, while_storing=while_storing)
    assert events[0].is_set()  # a residual store waiting for it is not left waiting forever


def test_the_residual_is_stored_once_the_rounds_checkpoints_are_and_the_update_at_once(setup, tmp_path, residuals):
    spec, dataset, start, _ = setup
    state, progress, store = fresh_round(tmp_path)
    trainer = Trainer(spec, dataset)
    train_round(trainer, TrainingStrategy(), store, state, progress, worker_index=1, start_weights=start)
    checkpoints_stored = threading.Event()
    update_hash, residual_stored = encode_update(trainer, store, progress, start, state=state,
                                                 residual_after=checkpoints_stored, residuals=residuals)
    assert store.has(update_hash) and progress.update_hash == update_hash  # committed: not held back
    with pytest.raises(TimeoutError):
        residual_stored.result(timeout=0.5)
    assert progress.residual_hash == ""
    checkpoints_stored.set()
    assert residual_stored.result(timeout=30) == progress.residual_hash and store.has(progress.residual_hash)


def test_beside_the_last_checkpoint_the_update_is_saved_by_that_checkpoints_record(setup, tmp_path, residuals):
    spec, dataset, start, _ = setup
    state, progress, store = fresh_round(tmp_path)
    trainer = Trainer(spec, dataset)
    train_round(trainer, TrainingStrategy(), store, state, progress, worker_index=1, start_weights=start)
    last = progress.checkpoints.pop()  # as while the round's last checkpoint is still being stored
    state.save()
    update_hash, residual_stored = encode_update(trainer, store, progress, start, state=state, residuals=residuals)
    residual_stored.result(timeout=30)
    assert progress.update_hash == update_hash and store.has(update_hash)
    assert WorkerState.load(tmp_path).task(7).round(0).update_hash == ""  # not saved a second time here
    with state.lock:  # what the last checkpoint's record does
        progress.checkpoints.append(last)
        state.save()
    saved = WorkerState.load(tmp_path).task(7).round(0)
    assert saved.update_hash == update_hash and saved.checkpoints == progress.checkpoints


def test_an_update_encoded_beside_the_last_checkpoint_is_saved_when_the_round_returns(setup, tmp_path, residuals):
    spec, dataset, start, _ = setup
    state, progress, store = fresh_round(tmp_path)
    trainer = Trainer(spec, dataset)
    encoded = []

    def while_storing(end_weights, checkpoints_stored):
        encoded.append(encode_update(trainer, store, progress, start, end_weights=end_weights, state=state,
                                     residual_after=checkpoints_stored, residuals=residuals))

    trained = train_round(trainer, TrainingStrategy(), store, state, progress, worker_index=1, start_weights=start,
                          while_storing=while_storing)
    (update_hash, residual_stored), = encoded
    residual_stored.result(timeout=30)
    saved = WorkerState.load(tmp_path).task(7).round(0)  # whichever came first, the encoding or the record
    assert saved.update_hash == update_hash and saved.checkpoints == trained.checkpoints


@pytest.mark.parametrize("checkpoint_process, training_core", [(False, False), (True, False), (False, True),
                                                                (True, True)])
def test_the_workers_round_and_run_round_give_the_same_checkpoints_and_update_however_accelerated(
        setup, tmp_path, checkpoint_process, training_core):
    """One round loop: the worker's round, with each acceleration on or off, and the reference `run_round`, with
    and without one, give the same checkpoint bytes, end weights and encoded update."""
    spec, dataset, start, reference = setup
    options = AccelerationOptions(checkpoint_process=checkpoint_process, training_core=training_core)
    with Acceleration(options) as acceleration:
        state, progress, store = fresh_round(tmp_path)
        trainer = Trainer(spec, dataset)
        residuals = ResidualStore(acceleration)
        try:
            trained = train_round(trainer, TrainingStrategy(), store, state, progress, worker_index=1,
                                  start_weights=start, acceleration=acceleration)
            update_hash, residual_stored = encode_update(trainer, store, progress, start, state=state,
                                                         residuals=residuals)
            residual_stored.result(timeout=30)
        finally:
            trainer.close()
            residuals.close()
        accelerated_reference = run_round(Trainer(spec, dataset), start, worker_index=1, round_index=0, steps=STEPS,
                                          keep_bytes=True, acceleration=acceleration)
    assert trained.checkpoints == [h.hex() for h in reference.checkpoint_hashes]
    assert [bytes(c.data) for c in accelerated_reference.checkpoints] == [store.get(h) for h in trained.checkpoints]
    assert all(torch.equal(trained.end_weights[n], reference.end_weights[n]) for n in reference.end_weights)
    assert store.get(update_hash) == get_codec(spec.codec).encode(reference.pseudo_gradient)
