"""What makes a worker's rounds fast, built once where the worker starts and handed down to every round.

None of it changes a byte of what a round produces (the tests train with each part on and off and compare):

    batches drawn ahead   one thread draws the round's batches (`sample_batch`) ahead of the training thread,
                          off its core (`Trainer.draw_batches_ahead`)
    checkpoint process    a helper process copies, hashes and stores checkpoints from shared memory, so the
                          training thread only says when (`compute.checkpoint_process`); otherwise threads
                          of the worker do it
    core pinning          the training thread gets a CPU to itself for the round, everything beside it the
                          others (`compute.affinity`)

    acceleration = Acceleration(AccelerationOptions(checkpoint_process=True, training_core=True))
    ...  run_round(..., acceleration=acceleration) / rounds.train_round(..., acceleration=acceleration)
    acceleration.close()

The options come from the worker's configuration file and `trolly-worker start` flags, once, at the edge.
A round trained without an `Acceleration` (the verifier's replays, the reference `run_round`) draws its
batches in the step, hashes its checkpoints in a thread and pins nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .affinity import CorePinning, training_core
from .checkpoints import CheckpointHasher, CheckpointQueue, HashedCheckpoint

if TYPE_CHECKING:
    from .blobs import BlobStore
    from .checkpoint_process import CheckpointProcess
    from .training import Trainer


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

    def checkpoint_process_for(self, trainer: Trainer, store: BlobStore) -> CheckpointProcess | None:
        """The trainer's checkpoint process for `store`, or None: switched off, unavailable, or it cannot start."""
        if not self.options.checkpoint_process:
            return None
        from .checkpoint_process import checkpoint_process_for  # Linux only; a verifier never needs it

        return checkpoint_process_for(trainer, store, self.pinning)

    def close(self) -> None:
        """Stop the batch-drawing thread (after what it is drawing)."""
        self.batch_drawer.shutdown(wait=True)

    def __enter__(self) -> Acceleration:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@contextlib.contextmanager
def round_checkpoints(trainer: Trainer, acceleration: Acceleration | None, *,
                      sink: Callable[[HashedCheckpoint, bytes | None], None] | None = None,
                      store: BlobStore | None = None, keep_bytes: bool = False) -> Iterator[CheckpointQueue]:
    """Within: the queue a round submits its checkpoints to, and the round's training thread pinned.

    With an acceleration whose checkpoint process runs for `store`, the process takes the checkpoints
    (`checkpoint_process.RemoteCheckpoints`: the sink gets no bytes); otherwise a `CheckpointHasher` hashes
    them in a thread (and stores them, with `store`). The queue's thread and the trainer's snapshot copier
    keep off the training core with the acceleration's `keep_off_training_core` (handed to them here); the
    blob store's hashing thread, started from the queue's thread, inherits its CPUs."""
    process = acceleration.checkpoint_process_for(trainer, store) \
        if acceleration is not None and store is not None else None
    threads = trainer.spec.determinism.threads
    keep_off = acceleration.keep_off_training_core if acceleration is not None else None
    with acceleration.training_core(threads) if acceleration is not None else contextlib.nullcontext():
        if process is not None:
            from .checkpoint_process import RemoteCheckpoints

            queue: CheckpointQueue = RemoteCheckpoints(store, sink=sink, on_start=keep_off)
        else:
            queue = CheckpointHasher(sink=sink, keep_bytes=keep_bytes, store=store, on_start=keep_off)
        with queue, trainer.snapshots_by(process, keep_off=keep_off):
            yield queue
