"""Checkpoints: weights, AdamW state and step count in canonical bytes, hashed off the training thread.

A checkpoint (docs/protocol.md section 2) is the canonical tensor encoding (`canonical.py`) of:

    "step"                        int64 scalar: inner steps done in this round
    "weights/<parameter>"         float32, the model's state_dict entries
    "adamw/<parameter>/step"      float32 scalar (PyTorch's own AdamW step counter)
    "adamw/<parameter>/exp_avg"   float32, first moment
    "adamw/<parameter>/exp_avg_sq" float32, second moment

Checkpoint 0 carries a fresh optimizer as zeros, which is exactly the state PyTorch's AdamW creates on its
first step, so loading it and training is bitwise the same as training from scratch. The round's last
checkpoint (after all its steps) holds "step" and the weights only: nothing ever continues from it (the next
round starts from W_{r+1} with a fresh optimizer), so its AdamW state would be a third of every round's last
blob, hashed and stored at the very end of the round, for nothing (`final_state`). `start_weights_hash` and
the final weights' hash are over the canonical bytes of the weights alone (names without a prefix).

`capture` is how the training loop takes a checkpoint: one copy of the live tensors straight into their
canonical bytes (`canonical_copy.py`), kept with the state as `encoded`, so that hashing and storing it read
those bytes without encoding them again. `CheckpointHasher` hashes (and hands to a sink, e.g. the blob store)
checkpoints in a background thread: the loop only pays for that one copy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import queue
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from .background import BackgroundQueue
from .canonical import decode_entries, decode_tensors, encode_tensors, encode_tensors_into_buffer, hash_tensors
from .canonical import read_entries
from .canonical_copy import BufferPool, copy_tensors, layout_of
from .errors import CheckpointError, EncodingError
from .model_layout import LayoutError, ModelLayout

if TYPE_CHECKING:  # the store is only passed in: no import at run time
    from .blobs import BlobStore

MOMENTS = ("exp_avg", "exp_avg_sq")


@dataclasses.dataclass(frozen=True)
class TrainingState:
    """Everything needed to continue a round exactly: step count, weights, per-parameter AdamW state."""

    step: int
    weights: Mapping[str, torch.Tensor]
    optimizer: Mapping[str, Mapping[str, torch.Tensor]]  # parameter -> {"step", "exp_avg", "exp_avg_sq"}
    encoded: "EncodedCheckpoint | None" = dataclasses.field(default=None, compare=False, repr=False)
    """The checkpoint bytes this state's tensors are views of (set by `capture`); ignored unless it still
    describes the state (see `EncodedCheckpoint.describes`)."""

    @property
    def final(self) -> bool:
        """True for the form of a round's last checkpoint: no optimizer state."""
        return not self.optimizer

    @classmethod
    def fresh(cls, weights: Mapping[str, torch.Tensor]) -> "TrainingState":
        """Round start: the given weights (copied), step 0, an optimizer that has not stepped yet."""
        zero = torch.zeros((), dtype=torch.float32)
        optimizer = {name: {"step": zero, "exp_avg": zero.expand(tensor.shape), "exp_avg_sq": zero.expand(tensor.shape)}
                     for name, tensor in weights.items() if tensor.is_floating_point()}
        return capture(0, weights, optimizer)


@dataclasses.dataclass(frozen=True, eq=False)
class EncodedCheckpoint:
    data: memoryview  # canonical bytes, page-aligned
    step: int
    tensors: Mapping[str, torch.Tensor]  # checkpoint name -> the view of `data` the state holds

    def describes(self, state: TrainingState) -> bool:
        """True when `state` still holds exactly these views and this step. Writing into the views in place
        keeps the bytes right (they are the bytes); a state built with other tensors or another step (a
        forged checkpoint, `dataclasses.replace`) does not match and is encoded from scratch."""
        if state.step != self.step:
            return False
        current = checkpoint_tensors(state)
        del current["step"]
        return len(current) + 1 == len(self.tensors) and all(self.tensors.get(name) is tensor
                                                              for name, tensor in current.items())


def capture(step: int, weights: Mapping[str, torch.Tensor],
            optimizer: Mapping[str, Mapping[str, torch.Tensor]], pool: BufferPool | None = None) -> TrainingState:
    """A copy of (step, weights, optimizer state) written straight into checkpoint bytes (a buffer of `pool`,
    or fresh memory)."""
    state, fill = prepare_capture(step, weights, optimizer, pool)
    fill()
    return state


def prepare_capture(step: int, weights: Mapping[str, torch.Tensor], optimizer: Mapping[str, Mapping[str, torch.Tensor]],
                    pool: BufferPool | None = None) -> tuple[TrainingState, Callable[[], None]]:
    """`capture` in two halves: the state, whose tensors are views of checkpoint bytes not yet filled in, and
    the function that copies the data (one call that releases the GIL, meant for another thread)."""
    live = checkpoint_tensors(TrainingState(step=step, weights=weights, optimizer=optimizer))
    data, views = layout_of(live).allocate(pool)
    copied_weights = {name: views[f"weights/{name}"] for name in weights}
    copied_optimizer = {name: {slot: views[f"adamw/{name}/{slot}"] for slot in ("step", *MOMENTS)}
                        for name in optimizer}
    state = TrainingState(step=step, weights=copied_weights, optimizer=copied_optimizer,
                          encoded=EncodedCheckpoint(data=data, step=step, tensors=views))
    return state, lambda: copy_tensors(views, live)


class DeferredSnapshot:
    """A snapshot whose data is being copied on another thread (`copier`'s) while the training thread goes on
    (`Trainer.snapshot_soon`).

    The trainer waits for the copy before it changes anything (its optimizer step, a load); consumers call
    `result()`, which waits for the copy and raises CheckpointError if it failed. `source_weights` are the
    weights being copied, as the trainer holds them: the snapshot's values until the trainer's next change
    (its next optimizer step or load), and readable without waiting for the copy.
    """

    def __init__(self, state: TrainingState, fill: Callable[[], None],
                 source_weights: Mapping[str, torch.Tensor], copier: SnapshotCopier) -> None:
        self._state = state
        self.source_weights = source_weights
        self._fill = fill
        self._done = threading.Event()
        self._error: BaseException | None = None
        copier.put(self)

    def _copy(self) -> None:
        try:
            self._fill()
        except BaseException as error:  # reported by result()
            self._error = error
        finally:
            self._done.set()

    def wait(self) -> None:
        """Wait until the copy is over (done or failed)."""
        self._done.wait()

    def result(self) -> TrainingState:
        self._done.wait()
        if self._error is not None:
            raise CheckpointError(f"taking the snapshot failed: {self._error}") from self._error
        return self._state


class SnapshotCopier:
    """The one thread that fills a trainer's deferred snapshots, started on first use and again after `close`.
    A thread started per snapshot would cost the training thread a hand-over of the GIL each time (up to the
    switch interval).

    `keep_off` (set by `Trainer.snapshots_by`, from the acceleration of the round) is the hook that keeps the
    thread off the training core: the thread calls it before its next copy whenever it has changed. The
    thread refers to the copier only, never to the trainer, so a trainer dropped unclosed can be collected
    (its finalizer then closes the copier)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._queue: queue.SimpleQueue[DeferredSnapshot | None] = queue.SimpleQueue()  # the thread's
        self.keep_off: Callable[[], None] | None = None

    def put(self, snapshot: DeferredSnapshot) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._run, args=(self._queue,), name="checkpoint-copy",
                                                daemon=True)
                self._thread.start()
            self._queue.put(snapshot)

    @property
    def running(self) -> bool:
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """End the thread after the copies queued before (a later `put` starts a new one)."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._queue.put(None)
        if thread is not threading.current_thread():
            thread.join()

    def _run(self, snapshots: queue.SimpleQueue) -> None:
        applied = None
        while True:
            snapshot = snapshots.get()
            if snapshot is None:
                return
            keep_off = self.keep_off
            if keep_off is not None and keep_off != applied:  # bound methods compare by object and function
                keep_off()
                applied = keep_off
            snapshot._copy()  # never raises: errors are kept for result()


def checkpoint_bytes(state: TrainingState) -> bytes | bytearray | memoryview:
    """The canonical checkpoint bytes: the captured ones when they still describe the state."""
    if state.encoded is not None and state.encoded.describes(state):
        return state.encoded.data
    return encode_tensors_into_buffer(checkpoint_tensors(state))


def checkpoint_tensors(state: TrainingState) -> dict[str, torch.Tensor]:
    tensors = {"step": torch.tensor(state.step, dtype=torch.int64)}
    for name, tensor in state.weights.items():
        tensors[f"weights/{name}"] = tensor
    for name, slots in state.optimizer.items():
        for slot in ("step", *MOMENTS):
            tensors[f"adamw/{name}/{slot}"] = slots[slot]
    return tensors


def final_state(state: TrainingState) -> TrainingState:
    """The state as a round's last checkpoint holds it: step and weights, no optimizer state."""
    return TrainingState(step=state.step, weights=state.weights, optimizer={})


def encode_checkpoint(state: TrainingState) -> bytes:
    return encode_tensors(checkpoint_tensors(state))


def checkpoint_hash(state: TrainingState) -> bytes:
    if state.encoded is not None and state.encoded.describes(state):
        return hashlib.sha256(state.encoded.data).digest()
    return hash_tensors(checkpoint_tensors(state))


def decode_checkpoint(data: bytes, layout: ModelLayout | None = None, *, copy: bool = True) -> TrainingState:
    """Parse checkpoint bytes; CheckpointError when they are not a well-formed checkpoint. A round's last
    checkpoint decodes to a state without optimizer state (`TrainingState.final`).

    With `layout` (the task's model, `compute/model_layout.py`), the declared names, dtypes and shapes are checked
    against it before any data is copied: bytes from another party cannot make this allocate what the model
    does not have, nor hand a replay tensors that would only fail inside `load_state_dict`. `copy=False`: the
    state's tensors are read-only views of `data` (`canonical.decode_entries`)."""
    try:
        entries = read_entries(data)
        if layout is not None:
            layout.check_checkpoint(entries)
        tensors = decode_entries(data, entries, copy=copy)
    except EncodingError as error:
        raise CheckpointError(f"checkpoint does not decode: {error}") from None
    except LayoutError as error:
        raise CheckpointError(f"checkpoint does not fit the task's model: {error}") from None
    step_tensor = tensors.pop("step", None)
    if step_tensor is None or step_tensor.dtype != torch.int64 or step_tensor.dim() != 0 or int(step_tensor) < 0:
        raise CheckpointError("checkpoint has no valid step count")
    weights: dict[str, torch.Tensor] = {}
    optimizer: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        kind, _, rest = key.partition("/")
        if kind == "weights" and rest:
            weights[rest] = tensor
        elif kind == "adamw" and "/" in rest:
            name, _, slot = rest.rpartition("/")
            if slot not in ("step", *MOMENTS):
                raise CheckpointError(f"unknown optimizer slot {key!r}")
            optimizer.setdefault(name, {})[slot] = tensor
        else:
            raise CheckpointError(f"unexpected checkpoint entry {key!r}")
    for name, slots in optimizer.items():
        if set(slots) != {"step", *MOMENTS}:
            raise CheckpointError(f"incomplete optimizer state for {name!r}")
        if name not in weights or any(slots[m].shape != weights[name].shape for m in MOMENTS):
            raise CheckpointError(f"optimizer state for {name!r} does not match the weights")
    return TrainingState(step=int(step_tensor), weights=weights, optimizer=optimizer)


def encode_weights(weights: Mapping[str, torch.Tensor]) -> bytes:
    return encode_tensors(weights)


def weights_hash(weights: Mapping[str, torch.Tensor]) -> bytes:
    """sha256 of the canonical bytes of the weights alone (`start_weights_hash`, final weights' hash)."""
    return hash_tensors(weights)


def decode_weights(data: bytes) -> dict[str, torch.Tensor]:
    try:
        return decode_tensors(data)
    except EncodingError as error:
        raise CheckpointError(f"weights do not decode: {error}") from None


@dataclasses.dataclass(frozen=True)
class HashedCheckpoint:
    index: int
    step: int
    digest: bytes
    data: bytes | None  # kept only when the hasher was asked to keep bytes


class CheckpointQueue:
    """What every taker of a round's checkpoints shares: each submitted checkpoint is finished (hashed,
    stored, recorded) by `handle` on a background thread, in submission order; `results()` waits for all of
    them and raises the first failure (as `failure` words it); `close()` ends the thread."""

    def __init__(self, handle: Callable, *, name: str, failure: Callable[[BaseException], Exception],
                 on_start: Callable[[], None] | None = None) -> None:
        self._results: list[HashedCheckpoint] = []
        self._queue: BackgroundQueue = BackgroundQueue(handle, name=name, failure=failure, on_start=on_start)

    def submit(self, index: int, state) -> None:
        self._queue.put((index, state))

    def results(self) -> list[HashedCheckpoint]:
        self._queue.join()
        return list(self._results)

    def close(self) -> None:
        self._queue.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class CheckpointHasher(CheckpointQueue):
    """Hash checkpoints in a background thread, in submission order.

    `submit` takes a state the caller will not modify again (see `Trainer.snapshot`), or a snapshot still
    being copied (`DeferredSnapshot`: the hashing thread waits for the copy). With `store` (a
    `blobs.BlobStore`), each checkpoint is stored as a blob, written while it is hashed (`put_hashing`).
    `sink`, if given, is then called in the background thread with each (HashedCheckpoint, bytes-like), e.g.
    to record the stored blob. `results()` waits for everything submitted and re-raises any error from the
    background thread. `on_start`: the thread's first call (`Acceleration.keep_off_training_core`).
    """

    def __init__(self, sink: Callable[[HashedCheckpoint, bytes], None] | None = None, keep_bytes: bool = False,
                 store: BlobStore | None = None, on_start: Callable[[], None] | None = None) -> None:
        super().__init__(self._hash, name="checkpoint-hasher",
                         failure=lambda error: CheckpointError(f"checkpoint hashing failed: {error}"),
                         on_start=on_start)
        self._sink = sink
        self._store = store
        self._keep_bytes = keep_bytes

    def _hash(self, item: tuple[int, TrainingState | DeferredSnapshot]) -> None:
        index, state = item
        if isinstance(state, DeferredSnapshot):
            state = state.result()
        if self._store is not None:
            data = checkpoint_bytes(state)
            digest = bytes.fromhex(self._store.put_hashing(data))
        elif self._keep_bytes or self._sink is not None:
            data = checkpoint_bytes(state)
            digest = hashlib.sha256(data).digest()
        else:
            data, digest = None, checkpoint_hash(state)  # streams the tensors when there are no bytes yet
        record = HashedCheckpoint(index, state.step, digest, bytes(data) if self._keep_bytes else None)
        if self._sink is not None:
            self._sink(record, data)
        self._results.append(record)
