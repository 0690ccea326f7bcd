"""What makes a worker's rounds fast, built once where the worker starts and handed down to every round.

None of it changes a byte of what a round produces (the tests train with each part on and off and compare):

    batches drawn ahead   one thread draws the round's batches (`sample_batch`) ahead of the training thread,
                          off its core (`batches_ahead.py`)
    checkpoint process    a helper process copies, hashes and stores checkpoints from shared memory, so the
                          training thread only says when (`checkpoint_process.py`); otherwise threads of the
                          worker do it
    core pinning          the training thread gets a CPU to itself for the round, everything beside it the
                          others (`affinity.py`)

    acceleration = Acceleration(AccelerationOptions(checkpoint_process=True, training_core=True))
    ...  run_round(..., acceleration=acceleration) / rounds.train_round(..., acceleration=acceleration)
    acceleration.close()

`Acceleration` is the core's `training.RoundAcceleration`: the rounds call it through that interface and
import nothing of this subpackage. The options come from the worker's configuration file and
`trolly-worker start` flags, once, at the edge. A round trained without an `Acceleration` (the verifier's
replays, the reference `run_round`) draws its batches in the step, hashes its checkpoints in a thread and pins
nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..checkpoints import CheckpointHasher, CheckpointQueue, HashedCheckpoint
from .affinity import CorePinning, training_core
from .batches_ahead import draw_batches_ahead

if TYPE_CHECKING:
    from ..blobs import BlobStore
    from ..training import Trainer
    from .checkpoint_process import CheckpointProcess


@dataclasses.dataclass(frozen=True)
class AccelerationOptions:
    """The switches of a worker's acceleration (worker.json keys of the same names, `trolly-worker start` flags)."""

    checkpoint_process: bool = True
    """Checkpoints copied, hashed and stored by a helper process (where Linux shared memory files exist);
    off: by threads of the worker."""
    training_core: bool = True
    """The training thread alone on one CPU during a round, everything else on the others (where the process
    may use two CPUs or more); off: the scheduler places every thread."""


class Acceleration:
    """One worker's acceleration: its batch-drawing thread, its checkpoint process choice and its core pinning."""

    def __init__(self, options: AccelerationOptions = AccelerationOptions(),
                 pinning: CorePinning | None = None) -> None:
        """`pinning` defaults to the split of the CPUs this process may use now (with `training_core` on)."""
        self.options = options
        self.pinning = (pinning or CorePinning.of_this_process()) if options.training_core else None
        self.batch_drawer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="batches-ahead", initializer=self.keep_off_training_core)
        """One thread draws batches ahead for every trainer of the worker, in order."""

    def keep_off_training_core(self) -> None:
        """For the first line of every background thread a round starts: off the training CPU, if pinned."""
        if self.pinning is not None:
            self.pinning.keep_off_training_core()

    def training_core(self, threads: int) -> contextlib.AbstractContextManager:
        """Within: the calling (training) thread on its own CPU, if pinned and single-threaded."""
        return training_core(self.pinning, threads)

    def draw_batches_ahead(self, trainer: Trainer, worker_index: int, round_index: int,
                           steps: range) -> concurrent.futures.Future:
        """The batches of `steps` drawn on this acceleration's thread (`batches_ahead.draw_batches_ahead`)."""
        return draw_batches_ahead(trainer, worker_index, round_index, steps, self.batch_drawer)

    def checkpoint_process_for(self, trainer: Trainer, store: BlobStore) -> CheckpointProcess | None:
        """The trainer's checkpoint process for `store`, or None: switched off, unavailable, or it cannot start."""
        if not self.options.checkpoint_process:
            return None
        from .checkpoint_process import checkpoint_process_for  # Linux only: loaded where it is switched on

        return checkpoint_process_for(trainer, store, self.pinning)

    @contextlib.contextmanager
    def round_checkpoints(self, trainer: Trainer, *,
                          sink: Callable[[HashedCheckpoint, bytes | None], None] | None = None,
                          store: BlobStore | None = None, keep_bytes: bool = False) -> Iterator[CheckpointQueue]:
        """Within: the queue a round submits its checkpoints to, and the round's training thread pinned.

        With a checkpoint process running for `store`, the process takes the checkpoints
        (`checkpoint_process.RemoteCheckpoints`: the sink gets no bytes); otherwise a `CheckpointHasher` hashes
        them in a thread (and stores them, with `store`). The queue's thread and the trainer's snapshot copier
        keep off the training core with `keep_off_training_core` (handed to them here); the blob store's
        hashing thread, started from the queue's thread, inherits its CPUs."""
        process = self.checkpoint_process_for(trainer, store) if store is not None else None
        keep_off = self.keep_off_training_core
        with self.training_core(trainer.spec.determinism.threads):
            if process is not None:
                from .checkpoint_process import RemoteCheckpoints

                queue: CheckpointQueue = RemoteCheckpoints(store, sink=sink, on_start=keep_off)
            else:
                queue = CheckpointHasher(sink=sink, keep_bytes=keep_bytes, store=store, on_start=keep_off)
            with queue, trainer.snapshots_by(process, keep_off=keep_off):
                yield queue

    def close(self) -> None:
        """Stop the batch-drawing thread (after what it is drawing)."""
        self.batch_drawer.shutdown(wait=True)

    def __enter__(self) -> Acceleration:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
