"""One training round of one worker, resumable at any checkpoint (docs/protocol.md section 2).

    train_round      checkpoints 0..n, every k steps, through the one round loop every round runs
                     (`training.train_round_segments`), each stored as a blob and recorded in the saved
                     progress as soon as it is hashed (in the background, beside training); after a restart
                     it loads the last recorded checkpoint and carries on from there
    encode_update    the pseudo-gradient W_r - W_end plus the error-feedback residual, encoded by the spec's
                     codec; the update stored as a blob, the new residual too, in the background
                     (`ResidualStore`, one per worker)
    commitment       the `MsgCommitRound` that names all of it

The worker's `compute.acceleration.Acceleration` (batches drawn ahead, the checkpoint process, the training
core) is handed to `train_round` by the service that built it; without one a round trains as the reference
`training.run_round` does, to the same bytes.

Resuming is exact: a checkpoint holds the weights, the AdamW state and the step count (the last one, n, only
the weights and step count: once it is stored the round is trained), and the batch of a step depends only on
(seed, worker, round, step), so a round interrupted at checkpoint j < n and resumed gives the same checkpoints
j+1..n, byte for byte, as one that never stopped. That is the property the verifier relies on too (it
replays a segment from its first checkpoint).

Error feedback (`compute.codecs.ErrorFeedback`, as in `compute.pipeline.train_and_encode`): what the codec
dropped from this worker's update in round r is added to its pseudo-gradient of its next round, so a top-k
codec still delivers the whole update over time. The residual starts at zero in a task's first round and is a
function of the worker's own earlier pseudo-gradients (each one W_r - W_end of committed checkpoints), so the
update stays recomputable from what the worker serves; it is stored as a blob and recorded in the saved
progress beside the training of the next round, so a restart encodes the same bytes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping

import torch

from trolly.chain.proto.market_pb2 import MsgCommitRound

from ..acceleration import Acceleration
from ..acceleration.checkpoint_process import RemoteSnapshot
from ..blobs import BlobStore
from ..checkpoints import DeferredSnapshot, HashedCheckpoint, TrainingState, decode_checkpoint, weights_hash
from ..canonical import decode_tensors
from ..canonical_copy import BufferPool, allocate_canonical
from ..codecs import get_codec
from ..codecs.fused import Workspace, encode_with_feedback
from ..checkpoint_merkle import merkle_root
from ..training import Trainer, round_checkpoints, train_round_segments
from .errors import WorkerError
from .progress import RoundProgress, WorkerState
from .strategies import TrainingStrategy


log = logging.getLogger("trolly.worker")


class RoundInterrupted(WorkerError):
    """The service is stopping; the round's progress so far is saved and will be resumed."""


def load_checkpoint(store: BlobStore, digest: str) -> TrainingState:
    data = store.get(digest)
    if hashlib.sha256(data).hexdigest() != digest:
        raise WorkerError(f"checkpoint blob {digest} is corrupt on disk")
    return decode_checkpoint(data)


@dataclasses.dataclass(frozen=True)
class TrainedRound:
    checkpoints: list[str]
    """Hex hashes of checkpoints 0..n, all in the store."""
    end_weights: Mapping[str, torch.Tensor] | None
    """The weights of checkpoint n, when this call trained up to it and did not hand them to `while_storing`
    (None: read them from the store)."""
    claimed_samples: int | None = None
    """TEST SWITCH ONLY: the samples a cheat claims (`cheat_round.py`); None: the honest count, steps x batch."""


class ProgressRecorder:
    """The sink of a worker's round: each checkpoint, once stored, is recorded in the saved progress.

    Runs in the checkpoint queue's thread, after the blob is stored (it was written while it was hashed): the
    state that names it comes after it. Checkpoint 0 also brings the start weights' hash, when the caller
    left it to this thread (hashing W_r costs the training thread nothing here)."""

    def __init__(self, state: WorkerState, progress: RoundProgress, start_weights: Mapping[str, torch.Tensor]) -> None:
        self.state = state
        self.progress = progress
        self.start_weights = start_weights

    def __call__(self, checkpoint: HashedCheckpoint, data: bytes | None) -> None:
        progress = self.progress
        digest = checkpoint.digest.hex()
        start_hash = weights_hash(self.start_weights).hex() \
            if checkpoint.index == 0 and not progress.start_weights_hash else ""
        with self.state.lock:
            if start_hash:
                progress.start_weights_hash = start_hash
            if checkpoint.index != len(progress.checkpoints):
                raise WorkerError(f"checkpoint {checkpoint.index} recorded out of order")
            progress.checkpoints.append(digest)
            self.state.save()


def train_round(trainer: Trainer, strategy: TrainingStrategy, store: BlobStore, state: WorkerState,
                progress: RoundProgress, *, worker_index: int, start_weights: Mapping[str, torch.Tensor],
                acceleration: Acceleration | None = None,
                stop: threading.Event | None = None,
                on_segment: Callable[[int, int], None] | None = None,
                while_storing: Callable[[Mapping[str, torch.Tensor], threading.Event], None] | None = None,
                ) -> TrainedRound:
    """Train round `progress.round` for `progress.steps` steps from `start_weights`, or resume it from its
    last saved checkpoint, through the one round loop (`training.train_round_segments`), each checkpoint
    stored as a blob and recorded in the saved progress (`ProgressRecorder`). An empty
    `progress.start_weights_hash` is filled in (in the background, saved with checkpoint 0).

    `acceleration`: the worker's (`compute.acceleration`: batches drawn ahead, the checkpoint process, the
    training core); None trains as the reference does, with the same bytes. `stop`, once set, interrupts
    the round at the next segment boundary (`RoundInterrupted`, progress saved); `on_segment(step, steps)`
    follows it.

    `while_storing(end_weights, checkpoints_stored)`, if given, runs on this thread as soon as the last segment
    is trained, while the last checkpoint is still being hashed and stored in the background: the worker
    encodes its update there, so that the two overlap. `checkpoints_stored` is set once every checkpoint of
    the round is stored (or storing them failed, or the round stopped): work that can wait, such as storing
    the error-feedback residual (`encode_update(residual_after=...)`), waits for it rather than take the
    core and the disk from the last checkpoint, which the commitment needs. It is not called when every
    checkpoint was already stored."""
    expected = trainer.spec.num_checkpoints(progress.steps)
    if len(progress.checkpoints) == expected:
        return TrainedRound(list(progress.checkpoints), None)
    checkpoints_stored = threading.Event()
    try:
        with round_checkpoints(trainer, acceleration, sink=ProgressRecorder(state, progress, start_weights),
                               store=store) as checkpoints:
            snapshot = train_round_segments(
                trainer, checkpoints, worker_index=worker_index, round_index=progress.round, steps=progress.steps,
                start_weights=start_weights, resume=_resumed_state(store, progress),
                first_segment=max(0, len(progress.checkpoints) - 1), advance=strategy.train_segment,
                before_segment=_stop_check(stop, checkpoints, progress),
                on_step=(lambda step: on_segment(step, progress.steps)) if on_segment is not None else None,
                acceleration=acceleration)
            end_weights = _hand_over_end_weights(snapshot, while_storing, checkpoints_stored)
            checkpoints.results()
    finally:
        checkpoints_stored.set()  # stored, failed or stopped: nothing waits for it forever
    if len(progress.checkpoints) != expected:
        raise WorkerError(f"round {progress.round} has {len(progress.checkpoints)} checkpoints, expected {expected}")
    return TrainedRound(list(progress.checkpoints), end_weights)


def _resumed_state(store: BlobStore, progress: RoundProgress) -> TrainingState | None:
    """The round's last recorded checkpoint, to resume from (None: the round starts afresh)."""
    return load_checkpoint(store, progress.checkpoints[-1]) if progress.checkpoints else None


def _stop_check(stop: threading.Event | None, checkpoints, progress: RoundProgress) -> Callable[[int], None] | None:
    """Before each segment: once `stop` is set, wait for what is being stored and raise `RoundInterrupted`."""
    if stop is None:
        return None

    def check(step: int) -> None:
        if stop.is_set():
            checkpoints.results()
            raise RoundInterrupted(f"stopped in round {progress.round} at step {step} of {progress.steps}")

    return check


def _hand_over_end_weights(snapshot, while_storing, checkpoints_stored: threading.Event):
    """The round's end weights: handed to `while_storing` at once (None returned), or returned for the caller."""
    if snapshot is None:  # every segment was trained before: the end weights are in the store
        return None
    deferred = isinstance(snapshot, (DeferredSnapshot, RemoteSnapshot))
    if while_storing is not None:
        # The end weights as the trainer holds them: nothing changes them before the next round, and reading
        # them need not wait for the snapshot's copy. The caller has what it needed of them.
        while_storing(snapshot.source_weights if deferred else snapshot.weights, checkpoints_stored)
        return None
    if isinstance(snapshot, RemoteSnapshot):  # the checkpoint's bytes are the process's: copy the weights
        return {name: tensor.clone() for name, tensor in snapshot.source_weights.items()}
    return (snapshot.result() if deferred else snapshot).weights


def encode_update(trainer: Trainer, store: BlobStore, progress: RoundProgress,
                  start_weights: Mapping[str, torch.Tensor], residual_hash: str = "",
                  end_weights: Mapping[str, torch.Tensor] | None = None, *,
                  residuals: ResidualStore,
                  state: WorkerState | None = None,
                  residual_after: threading.Event | None = None) -> tuple[str, concurrent.futures.Future]:
    """Encode W_r - W_end (W_end: the round's last checkpoint, read from the store unless given) plus the
    residual stored as `residual_hash` (none: zero); store the update, and start storing the new residual on
    `residuals` (the worker's `ResidualStore`). Returns (update hash, the residual's storing: a future of its
    blob hash).

    With `state`, the round's progress records both: the update's hash at once, the residual's once it is
    stored, on a background thread while the worker goes on (saved with the worker's next save;
    `previous_residual` waits for it). The update's hash is saved here when every checkpoint of the round is
    recorded; beside the round's last checkpoint (`train_round`'s `while_storing`), that checkpoint's record
    comes later and saves it: one fsync at the round's end instead of two. Only the update is on the round's
    critical path; the residual's hash is committed too (`residual_hash`: verifiers recompute the update from
    it), so the commitment waits for it (`ResidualStore.wait`); a worker killed before it was recorded encodes
    the round again, which gives the same bytes.

    `residual_after`: the residual's store waits until it is set (`train_round`'s `checkpoints_stored`):
    hashing and writing the residual beside the round's last checkpoint would take that checkpoint's core and
    disk, and the round ends when that checkpoint is stored. The worker commits and waits for the other
    workers meanwhile."""
    if end_weights is None:
        end_weights = load_checkpoint(store, progress.checkpoints[-1]).weights
    previous = (residuals.last(residual_hash) or decode_tensors(store.get(residual_hash))) if residual_hash else None
    # The new residual is written straight into its canonical bytes (`ErrorFeedback.encode`'s result, fused
    # for the sign and ternary codecs: `codecs.fused`).
    residual_bytes, residual = allocate_canonical(end_weights, residuals.buffers)
    data = encode_with_feedback(get_codec(trainer.spec.codec), start_weights, end_weights, previous, residual,
                                residuals.workspace)
    update_hash = store.put(data)
    if state is not None:
        with state.lock:
            progress.update_hash = update_hash
            # Beside the round's last checkpoint (`train_round`'s `while_storing`), that checkpoint's record
            # saves the state after this, the update's hash with it: one save at the round's end, not two.
            if len(progress.checkpoints) >= trainer.spec.num_checkpoints(progress.steps):
                state.save()
    return update_hash, residuals.submit(store, residual_bytes, residual, progress, state, residual_after)


class ResidualStore:
    """A worker's error-feedback residuals on their way to the blob store, and the last one kept in memory.

    One thread stores them in the order their rounds made them, so once the last one submitted is done, all
    are. The residual stored last is kept by blob hash: the next round starts from it, and need not read back
    from disk the 4 bytes per parameter just written (a blob hash names one content forever, so whichever
    store the hash came from, the tensors are the same). Built once per worker, beside its `Acceleration`.

    It also holds what `encode_update` reuses every round: the spare buffers of the residuals' canonical
    bytes (`buffers`) and the encoder's scratch arrays (`workspace`)."""

    def __init__(self, acceleration: Acceleration | None = None) -> None:
        self.buffers = BufferPool()
        self.workspace = Workspace()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="residual-store",
            initializer=acceleration.keep_off_training_core if acceleration is not None else None)
        self._lock = threading.Lock()
        self._pending: concurrent.futures.Future | None = None
        self._last: tuple[str, dict[str, torch.Tensor]] | None = None

    def submit(self, store: BlobStore, data, residual: dict[str, torch.Tensor], progress: RoundProgress,
               state: WorkerState | None, after: threading.Event | None) -> concurrent.futures.Future:
        """Store `residual` (its canonical bytes `data`) once `after` is set; record it in `progress`."""
        with self._lock:
            self._pending = self._executor.submit(self._store, store, data, residual, progress, state, after)
            return self._pending

    def _store(self, store: BlobStore, data, residual: dict[str, torch.Tensor], progress: RoundProgress,
               state: WorkerState | None, after: threading.Event | None) -> str:
        if after is not None:
            after.wait()
        try:
            digest = store.put_hashing(data)
        except Exception as error:
            log.warning("the error-feedback residual was not stored (the next update starts from zero): %s", error)
            raise
        with self._lock:
            self._last = (digest, residual)
        if state is not None:  # saved with the worker's next save: one of its own would be one more fsync
            with state.lock:
                progress.residual_hash = digest
        return digest

    def wait(self) -> None:
        """Until every residual submitted so far is stored and recorded (or has failed: logged)."""
        # Waits on the last store itself: a no-op sent through the thread instead would wake that thread, on
        # the core where the round's last checkpoint is being stored, where the next update waits for it.
        with self._lock:
            pending = self._pending
        if pending is not None:
            concurrent.futures.wait([pending])

    def last(self, digest: str) -> dict[str, torch.Tensor] | None:
        """The residual stored last, if it is the one named `digest`."""
        with self._lock:
            return self._last[1] if self._last is not None and self._last[0] == digest else None

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def previous_residual(rounds: Mapping[int, RoundProgress], round_index: int, residuals: ResidualStore) -> str:
    """The residual left by this worker's latest encoded round before `round_index` ('' if none, or if that
    round's residual was never recorded: then the next update starts from zero rather than from an older
    residual, which that round's update already carried). Waits for residuals still being stored."""
    residuals.wait()
    encoded = [r for r, p in rounds.items() if r < round_index and p.update_hash]
    return rounds[max(encoded)].residual_hash if encoded else ""


def commitment(task_id: int, progress: RoundProgress, batch_size: int, profile_id: str,
               claimed_samples: int | None = None) -> MsgCommitRound:
    """The round's `MsgCommitRound` from its saved progress (`claimed_samples`: TEST SWITCH ONLY, a cheat's
    claim instead of the honest steps x batch size)."""
    if not progress.residual_hash:
        raise WorkerError(f"round {progress.round} has no recorded residual; its update cannot be committed")
    hashes = [bytes.fromhex(h) for h in progress.checkpoints]
    samples = progress.steps * batch_size if claimed_samples is None else claimed_samples
    return MsgCommitRound(
        task_id=task_id, round=progress.round, update_hash=bytes.fromhex(progress.update_hash),
        samples_processed=samples, steps=progress.steps, checkpoint_root=merkle_root(hashes),
        num_checkpoints=len(hashes), start_weights_hash=bytes.fromhex(progress.start_weights_hash),
        determinism_profile=profile_id, residual_hash=bytes.fromhex(progress.residual_hash),
    )


def final_report(task_id: int, rounds: int, final_weights_hash: str) -> MsgCommitRound:
    """The final report (round == rounds): only the hash of W_R."""
    return MsgCommitRound(task_id=task_id, round=rounds, start_weights_hash=bytes.fromhex(final_weights_hash))


def start_weights_hash(weights: Mapping[str, torch.Tensor]) -> str:
    return weights_hash(weights).hex()
