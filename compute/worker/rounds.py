"""One training round of one worker, resumable at any checkpoint (docs/protocol.md section 2).

    train_round      checkpoints 0..n, every k steps, each stored as a blob and recorded in the saved
                     progress as soon as it is hashed (in the background, beside training); after a restart
                     it loads the last recorded checkpoint and carries on from there
    encode_update    the pseudo-gradient W_r - W_end, encoded by the spec's codec, stored as a blob
    commitment       the `MsgCommitRound` that names all of it

Resuming is exact: a checkpoint holds the weights, the AdamW state and the step count, and the batch of a
step depends only on (seed, worker, round, step), so a round interrupted at checkpoint j and resumed gives
the same checkpoints j+1..n, byte for byte, as one that never stopped. That is the property the verifier
relies on too (it replays a segment from its first checkpoint).

The update is the codec applied to W_r - W_end alone (no error-feedback residual): it is then a function of
the committed checkpoints, so anyone holding checkpoint n can check the update against it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping

import torch

from trolly.chain.proto.market_pb2 import MsgCommitRound

from ..blobs import BlobStore
from ..checkpoints import CheckpointHasher, HashedCheckpoint, TrainingState, decode_checkpoint, weights_hash
from ..codecs import get_codec
from ..merkle import merkle_root
from ..training import Trainer, segment_bounds
from .errors import WorkerError
from .state import RoundProgress, WorkerState
from .strategies import TrainingStrategy


class RoundInterrupted(WorkerError):
    """The service is stopping; the round's progress so far is saved and will be resumed."""


def load_checkpoint(store: BlobStore, digest: str) -> TrainingState:
    data = store.get(digest)
    if hashlib.sha256(data).hexdigest() != digest:
        raise WorkerError(f"checkpoint blob {digest} is corrupt on disk")
    return decode_checkpoint(data)


def train_round(trainer: Trainer, strategy: TrainingStrategy, store: BlobStore, state: WorkerState,
                progress: RoundProgress, *, worker_index: int, start_weights: Mapping[str, torch.Tensor],
                stop: threading.Event | None = None,
                on_segment: Callable[[int, int], None] | None = None) -> list[str]:
    """Train round `progress.round` for `progress.steps` steps from `start_weights`, or resume it from its
    last saved checkpoint; returns the hex hashes of checkpoints 0..n (all stored in `store`)."""
    steps = progress.steps
    every = trainer.spec.training.checkpoint_every
    expected = trainer.spec.num_checkpoints(steps)
    if len(progress.checkpoints) == expected:
        return list(progress.checkpoints)

    def record(checkpoint: HashedCheckpoint, data: bytes) -> None:
        # Runs in the hasher's thread: blob first, then the state that names it.
        digest = store.put(data)
        with state.lock:
            if checkpoint.index != len(progress.checkpoints):
                raise WorkerError(f"checkpoint {checkpoint.index} recorded out of order")
            progress.checkpoints.append(digest)
            state.save()

    with CheckpointHasher(sink=record) as hasher:
        if progress.checkpoints:
            resumed = load_checkpoint(store, progress.checkpoints[-1])
            trainer.load(resumed)
            segment = len(progress.checkpoints) - 1
        else:
            start = TrainingState.fresh(start_weights)
            hasher.submit(0, start)
            trainer.load(start)
            segment = 0
        while trainer.step < steps:
            if stop is not None and stop.is_set():
                hasher.results()
                raise RoundInterrupted(f"stopped in round {progress.round} at step {trainer.step} of {steps}")
            _, end = segment_bounds(segment, steps, every)
            snapshot = strategy.train_segment(trainer, worker_index=worker_index, round_index=progress.round,
                                              end_step=end)
            segment += 1
            hasher.submit(segment, snapshot)
            if on_segment is not None:
                on_segment(trainer.step, steps)
        hasher.results()
    if len(progress.checkpoints) != expected:
        raise WorkerError(f"round {progress.round} has {len(progress.checkpoints)} checkpoints, expected {expected}")
    return list(progress.checkpoints)


def encode_update(trainer: Trainer, store: BlobStore, progress: RoundProgress,
                  start_weights: Mapping[str, torch.Tensor]) -> str:
    """Encode W_r - W_end (W_end from the round's last checkpoint) and store it; returns the update's hash."""
    end_weights = load_checkpoint(store, progress.checkpoints[-1]).weights
    pseudo_gradient = {name: start_weights[name] - end_weights[name] for name in end_weights}
    data = get_codec(trainer.spec.codec).encode(pseudo_gradient)
    return store.put(data)


def commitment(task_id: int, progress: RoundProgress, batch_size: int, profile_id: str) -> MsgCommitRound:
    """The round's `MsgCommitRound` from its saved progress."""
    hashes = [bytes.fromhex(h) for h in progress.checkpoints]
    return MsgCommitRound(
        task_id=task_id, round=progress.round, update_hash=bytes.fromhex(progress.update_hash),
        samples_processed=progress.steps * batch_size, steps=progress.steps, checkpoint_root=merkle_root(hashes),
        num_checkpoints=len(hashes), start_weights_hash=bytes.fromhex(progress.start_weights_hash),
        determinism_profile=profile_id,
    )


def final_report(task_id: int, rounds: int, final_weights_hash: str) -> MsgCommitRound:
    """The final report (round == rounds): only the hash of W_R."""
    return MsgCommitRound(task_id=task_id, round=rounds, start_weights_hash=bytes.fromhex(final_weights_hash))


def start_weights_hash(weights: Mapping[str, torch.Tensor]) -> str:
    return weights_hash(weights).hex()
