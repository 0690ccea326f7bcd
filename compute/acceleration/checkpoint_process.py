"""Checkpoints taken by a helper process, for the worker's rounds: the training thread only says when.

The worker's trainer keeps its live weights and AdamW state in one shared memory file (the state arena,
`state_arena.py`). `CheckpointProcess` starts `checkpoint_process_main.py` on it: for each checkpoint the
training thread sends (sequence, step) and goes on with the next step's batch, forward and backward passes;
the process copies the arena into canonical checkpoint bytes meanwhile and says so (the trainer waits for
that before its optimizer step changes the arena, as it does for a `DeferredSnapshot`), then hashes the bytes
and stores them as a blob, on its own core and under its own GIL. Why a process and not threads: see that
module's docstring.

The bytes are those of `checkpoints.capture` (the tests compare them), so nothing a verifier sees changes.

    process = checkpoint_process_for(trainer, store, pinning)   # None: use threads (CheckpointHasher)
    with RemoteCheckpoints(store, sink=record) as checkpoints, trainer.snapshots_by(process):
        checkpoints.submit(0, trainer.snapshot_soon())   # a RemoteSnapshot
        ...

A `CheckpointProcess` is the trainer's `training.SnapshotTaker`: started once per trainer and store, kept by
the trainer (`Trainer.keep_snapshot_taker`), it ends with the trainer (`Trainer.close`) or with the worker: it
exits when its input closes, so a worker killed with SIGKILL leaves no orphan behind. Whether a worker uses
one is an option of its acceleration (`worker_acceleration.py`: the `checkpoint_process` key of worker.json,
`trolly-worker start --checkpoint-process/--no-checkpoint-process`); without one, checkpoints stay in threads
of the worker itself.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from ..canonical_copy import layout_of
from ..checkpoints import CheckpointQueue, HashedCheckpoint, TrainingState, checkpoint_bytes
from ..errors import CheckpointError
from .affinity import CorePinning
from .checkpoint_process_main import ANSWER, COMMAND, COPIED, FAILED, FINAL, READY, SNAPSHOT, STORED, read_exactly
from .state_arena import StateArena, shared_state_arena

if TYPE_CHECKING:
    from ..blobs import BlobStore
    from ..training import Trainer

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0


def available() -> bool:
    """True where a checkpoint process can run: Linux shared memory files."""
    return hasattr(os, "memfd_create")


class RemoteSnapshot:
    """A checkpoint being taken by the process: `wait()` until it is copied, `digest()` once stored.

    `source_weights` are the trainer's live weights, which the checkpoint holds until the trainer's next change
    (as for `checkpoints.DeferredSnapshot`)."""

    def __init__(self, sequence: int, step: int, source_weights: Mapping[str, torch.Tensor]) -> None:
        self.sequence = sequence
        self.step = step
        self.source_weights = source_weights
        self._copied = threading.Event()
        self._stored = threading.Event()
        self._digest: bytes | None = None
        self._error: str | None = None

    def wait(self) -> None:
        """Until the arena has been copied (or the process failed: `digest` then raises)."""
        self._copied.wait()

    def digest(self) -> bytes:
        self._stored.wait()
        if self._error is not None:
            raise CheckpointError(self._error)
        return self._digest

    def _set_copied(self) -> None:
        self._copied.set()

    def _set_stored(self, digest: bytes) -> None:
        self._digest = digest
        self._copied.set()
        self._stored.set()

    def _set_failed(self, error: str) -> None:
        if self._error is None and not self._stored.is_set():
            self._error = error
        self._copied.set()
        self._stored.set()


class CheckpointProcess:
    """The helper process of one trainer's state arena and one blob store. With a `pinning`, the process and
    the thread reading its answers keep off the training thread's CPU."""

    def __init__(self, arena: StateArena, blob_root: os.PathLike, pinning: CorePinning | None = None) -> None:
        self.blob_root = os.fspath(blob_root)
        self._pinning = pinning
        # A checkpoint holds the arena's tensors and the step count, which each command brings; a round's last
        # checkpoint holds the weights and the step count only (`checkpoints.final_state`).
        weights = {name: tensor for name, tensor in arena.tensors.items() if name.startswith("weights/")}
        setup = {"blob_root": self.blob_root, "arena_size": arena.size,
                 "layouts": {SNAPSHOT.decode(): _copy_plan(arena, arena.tensors),
                             FINAL.decode(): _copy_plan(arena, weights)}}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "trolly.compute.acceleration.checkpoint_process_main", str(arena.descriptor)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(arena.descriptor,), bufsize=0)
        if pinning is not None:  # before its setup: the threads it starts follow
            pinning.keep_process_off_training_core(self._process.pid)
        self._lock = threading.Lock()
        self._pending: dict[int, RemoteSnapshot] = {}
        self._next = 0
        self._failure: str | None = None
        self._ready = threading.Event()
        self._send(json.dumps(setup).encode() + b"\n")
        self._reader = threading.Thread(target=self._read_answers, name="checkpoint-process-answers", daemon=True)
        self._reader.start()
        if not self._ready.wait(START_TIMEOUT) or self._failure is not None:
            self.close()
            raise CheckpointError(f"the checkpoint process did not start: {self._failure or 'no answer'}")

    @property
    def alive(self) -> bool:
        return self._failure is None and self._process.poll() is None

    def snapshot(self, step: int, source_weights: Mapping[str, torch.Tensor], final: bool = False) -> RemoteSnapshot:
        """Ask for a checkpoint of the arena as it is now, at `step` (`final`: a round's last, weights only)."""
        with self._lock:
            snapshot = RemoteSnapshot(self._next, step, source_weights)
            self._next += 1
            if self._failure is not None:
                snapshot._set_failed(self._failure)
                return snapshot
            self._pending[snapshot.sequence] = snapshot
        try:
            self._send(COMMAND.pack(FINAL if final else SNAPSHOT, snapshot.sequence, step))
        except OSError as error:
            self._fail(f"the checkpoint process is gone: {error}")
        return snapshot

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # a raw pipe may take a long message in parts
            view = view[self._process.stdin.write(view):]

    def _read_answers(self) -> None:
        if self._pinning is not None:
            self._pinning.keep_off_training_core()
        answers = self._process.stdout
        try:
            while True:
                header = read_exactly(answers, ANSWER.size)
                if not header:
                    break
                kind, sequence, length = ANSWER.unpack(header)
                payload = read_exactly(answers, length) if length else b""
                if kind == READY:
                    self._ready.set()
                    continue
                with self._lock:
                    snapshot = self._pending.get(sequence)
                    if kind != COPIED:
                        self._pending.pop(sequence, None)
                if snapshot is None:
                    continue
                if kind == COPIED:
                    snapshot._set_copied()
                elif kind == STORED and len(payload) == 32:
                    snapshot._set_stored(payload)
                elif kind == FAILED:
                    snapshot._set_failed(f"checkpoint process: {payload.decode(errors='replace')}")
                else:
                    raise CheckpointError(f"unexpected answer {kind!r} from the checkpoint process")
        except (OSError, EOFError, CheckpointError) as error:
            self._fail(f"the checkpoint process's answers broke off: {error}")
        self._fail(f"the checkpoint process exited (code {self._process.wait()})")

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = reason
            pending, self._pending = list(self._pending.values()), {}
        for snapshot in pending:
            snapshot._set_failed(reason)
        self._ready.set()

    def close(self) -> None:
        """End the process once what it was asked is stored."""
        if self._process.stdin and not self._process.stdin.closed:
            try:
                self._process.stdin.close()
            except OSError:
                pass
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=5)


def _copy_plan(arena: StateArena, tensors: Mapping[str, torch.Tensor]) -> dict:
    """How the process turns the arena into the checkpoint of `tensors` (arena tensors) and the step count: the
    checkpoint's size, its fixed headers, and the copies of each tensor's data."""
    layout = layout_of({"step": torch.zeros((), dtype=torch.int64), **tensors})
    copies = []
    step_offset = None
    for name, dtype, shape, offset in layout.entries:
        if name == "step":
            step_offset = offset
        elif arena.nbytes(name):
            copies.append([arena.offsets[name], offset, arena.nbytes(name)])
    if step_offset is None:
        raise CheckpointError("a checkpoint layout without its step count")
    return {"checkpoint_size": layout.size, "headers": [[offset, header.hex()] for offset, header in layout.headers],
            "copies": copies, "step_offset": step_offset}


class RemoteCheckpoints(CheckpointQueue):
    """`checkpoints.CheckpointHasher`'s contract for checkpoints taken by a `CheckpointProcess`.

    `submit(index, snapshot)` takes a `RemoteSnapshot` (stored by the process) or a plain `TrainingState`
    (the test cheats forge those: stored here, after everything before it). `sink(HashedCheckpoint, None)` is
    called on a background thread for each, in index order, once its blob is stored; `results()` waits for
    all and raises the first failure as CheckpointError.
    """

    def __init__(self, store: BlobStore, sink: Callable[[HashedCheckpoint, None], None] | None = None,
                 on_start: Callable[[], None] | None = None) -> None:
        super().__init__(self._finish, name="checkpoint-records",
                         failure=lambda error: error if isinstance(error, CheckpointError)
                         else CheckpointError(f"checkpoint failed: {error}"), on_start=on_start)
        self._store = store
        self._sink = sink

    def _finish(self, item: tuple[int, RemoteSnapshot | TrainingState]) -> None:
        index, snapshot = item
        if isinstance(snapshot, RemoteSnapshot):
            record = HashedCheckpoint(index, snapshot.step, snapshot.digest(), None)
        else:
            digest = self._store.put_hashing(checkpoint_bytes(snapshot))
            record = HashedCheckpoint(index, snapshot.step, bytes.fromhex(digest), None)
        if self._sink is not None:
            self._sink(record, None)
        self._results.append(record)


def checkpoint_process_for(trainer: Trainer, store: BlobStore,
                           pinning: CorePinning | None = None) -> CheckpointProcess | None:
    """The trainer's checkpoint process for `store`, started (and its state moved into an arena) on first use;
    None where there can be none (`available()`), or when it cannot start (logged; threads take over)."""
    if not available():
        return None
    root = os.fspath(store.root)
    current = trainer.snapshot_taker
    if isinstance(current, CheckpointProcess) and current.alive and current.blob_root == root:
        return current
    try:
        process = CheckpointProcess(shared_state_arena(trainer), root, pinning)
    except (OSError, CheckpointError) as error:
        log.warning("checkpoints stay in this process's threads: %s", error)
        return None
    trainer.keep_snapshot_taker(process)
    return process
