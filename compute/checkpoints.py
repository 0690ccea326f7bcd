"""Checkpoints: weights, AdamW state and step count in canonical bytes, hashed off the training thread.

A checkpoint (docs/protocol.md section 2) is the canonical tensor encoding (`canonical.py`) of:

    "step"                        int64 scalar: inner steps done in this round
    "weights/<parameter>"         float32, the model's state_dict entries
    "adamw/<parameter>/step"      float32 scalar (PyTorch's own AdamW step counter)
    "adamw/<parameter>/exp_avg"   float32, first moment
    "adamw/<parameter>/exp_avg_sq" float32, second moment

Checkpoint 0 carries a fresh optimizer as zeros, which is exactly the state PyTorch's AdamW creates on its
first step, so loading it and training is bitwise the same as training from scratch. `start_weights_hash` and
the final weights' hash are over the canonical bytes of the weights alone (names without a prefix).

`CheckpointHasher` takes snapshots from the training loop and encodes/hashes them in a background thread:
the loop only pays for copying the tensors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import queue
import threading
from collections.abc import Callable, Mapping

import torch

from .canonical import decode_tensors, encode_tensors, encode_tensors_into_buffer, hash_tensors, iter_chunks
from .errors import CheckpointError, EncodingError

MOMENTS = ("exp_avg", "exp_avg_sq")


@dataclasses.dataclass(frozen=True)
class TrainingState:
    """Everything needed to continue a round exactly: step count, weights, per-parameter AdamW state."""

    step: int
    weights: Mapping[str, torch.Tensor]
    optimizer: Mapping[str, Mapping[str, torch.Tensor]]  # parameter -> {"step", "exp_avg", "exp_avg_sq"}

    @classmethod
    def fresh(cls, weights: Mapping[str, torch.Tensor]) -> "TrainingState":
        """Round start: the given weights, step 0, an optimizer that has not stepped yet."""
        optimizer = {
            name: {"step": torch.zeros((), dtype=torch.float32), "exp_avg": torch.zeros_like(tensor),
                   "exp_avg_sq": torch.zeros_like(tensor)}
            for name, tensor in weights.items() if tensor.is_floating_point()
        }
        return cls(step=0, weights={n: t.detach().clone() for n, t in weights.items()}, optimizer=optimizer)


def checkpoint_tensors(state: TrainingState) -> dict[str, torch.Tensor]:
    tensors = {"step": torch.tensor(state.step, dtype=torch.int64)}
    for name, tensor in state.weights.items():
        tensors[f"weights/{name}"] = tensor
    for name, slots in state.optimizer.items():
        for slot in ("step", *MOMENTS):
            tensors[f"adamw/{name}/{slot}"] = slots[slot]
    return tensors


def encode_checkpoint(state: TrainingState) -> bytes:
    return encode_tensors(checkpoint_tensors(state))


def checkpoint_hash(state: TrainingState) -> bytes:
    return hash_tensors(checkpoint_tensors(state))


def decode_checkpoint(data: bytes) -> TrainingState:
    """Parse checkpoint bytes; CheckpointError when they are not a well-formed checkpoint."""
    try:
        tensors = decode_tensors(data)
    except EncodingError as error:
        raise CheckpointError(f"checkpoint does not decode: {error}") from None
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


class CheckpointHasher:
    """Encode and hash checkpoints in a background thread, in submission order.

    `submit` takes a snapshot the caller will not modify again (see `Trainer.snapshot`). `sink`, if given, is
    called in the background thread with each (HashedCheckpoint, bytes-like: a bytearray), e.g. to store the blob. `results()`
    waits for everything submitted and re-raises any error from the background thread.
    """

    def __init__(self, sink: Callable[[HashedCheckpoint, bytes], None] | None = None, keep_bytes: bool = False) -> None:
        self._sink = sink
        self._keep_bytes = keep_bytes
        self._queue: queue.Queue = queue.Queue()
        self._results: list[HashedCheckpoint] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="checkpoint-hasher", daemon=True)
        self._thread.start()

    def submit(self, index: int, state: TrainingState) -> None:
        if self._error is not None:
            raise CheckpointError(f"checkpoint hashing failed: {self._error}") from self._error
        self._queue.put((index, state))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is not None:
                    continue
                index, state = item
                needs_bytes = self._keep_bytes or self._sink is not None
                if needs_bytes:
                    data = encode_tensors_into_buffer(checkpoint_tensors(state))
                    digest = hashlib.sha256(data).digest()
                else:
                    data = None
                    digest = hashlib.sha256()
                    for chunk in iter_chunks(checkpoint_tensors(state)):
                        digest.update(chunk)
                    digest = digest.digest()
                record = HashedCheckpoint(index, state.step, digest, bytes(data) if self._keep_bytes else None)
                if self._sink is not None:
                    self._sink(record, data)
                self._results.append(record)
            except BaseException as error:  # reported to the training thread by results()/submit()
                self._error = error
            finally:
                self._queue.task_done()

    def results(self) -> list[HashedCheckpoint]:
        self._queue.join()
        if self._error is not None:
            raise CheckpointError(f"checkpoint hashing failed: {self._error}") from self._error
        return list(self._results)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def __enter__(self) -> "CheckpointHasher":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
