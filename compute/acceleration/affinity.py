"""A core of its own for the training thread, while a worker trains a round.

A worker's round runs its training steps on one thread and everything else beside them: the checkpoint
process (copy, hash, store), the threads that read its answers and record them, the residual's store. On a
machine with a core to spare, the scheduler still puts those threads on the training thread's core whenever
they wake up (a few times per checkpoint), and each time the training step in progress waits; pinning the
training thread alone on one core and the rest on the others avoids that.

    pinning = CorePinning.of_this_process()    # None: no CPU to spare
    with pinning.training_core(threads):        # in the training thread, for the round
        ...
    pinning.keep_off_training_core()            # first thing in every background thread the round starts
    pinning.keep_process_off_training_core(pid) # the checkpoint process

The worker builds one `CorePinning` when it starts (`worker_acceleration.Acceleration`, switched off by the
`training_core` option) and hands it down. The split is taken from the CPUs the process may use then: the
training thread gets the first, every background thread the others. Only a single-threaded profile (the
determinism profile's thread count, 1 by default) is pinned: PyTorch's intra-op threads would share the
training thread's one CPU. Which CPU runs a computation changes no byte of it.

Nothing here is module-level state: a background thread keeps off the training core because whoever starts
it was handed the hook (`Acceleration.keep_off_training_core`): the checkpoint queues' threads
(`BackgroundQueue(on_start=...)`), the trainer's snapshot copier (`Trainer.snapshots_by(keep_off=...)`), the
worker's residual store. A thread started from one that keeps off the training core inherits its CPUs (Linux),
as the blob store's hashing thread does from the checkpoint thread that first stores a blob.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class CorePinning:
    """The training thread's CPU and the CPUs of everything beside it."""

    training: frozenset[int]
    background: frozenset[int]

    @classmethod
    def of_this_process(cls) -> CorePinning | None:
        """The split of the CPUs this process may use now, or None where there is no CPU to spare."""
        if not hasattr(os, "sched_getaffinity"):
            return None
        return cls.of_cpus(os.sched_getaffinity(0))

    @classmethod
    def of_cpus(cls, cpus) -> CorePinning | None:
        """The first CPU for training, the others for the background; None for fewer than two CPUs."""
        ordered = sorted(cpus)
        if len(ordered) < 2:
            return None
        return cls(frozenset(ordered[:1]), frozenset(ordered[1:]))

    def keep_off_training_core(self) -> None:
        """Run the calling (background) thread on the CPUs the training thread does not use."""
        _set(0, self.background)

    def keep_process_off_training_core(self, pid: int) -> None:
        """The same for a child process (its threads started later inherit it)."""
        _set(pid, self.background)

    @contextlib.contextmanager
    def training_core(self, threads: int = 1) -> Iterator[None]:
        """Within: the calling thread, training with `threads` intra-op threads, runs on the training CPU alone (if
        `threads` is 1); its CPUs are restored after."""
        if threads != 1:
            yield
            return
        previous = os.sched_getaffinity(0)
        _set(0, self.training)
        try:
            yield
        finally:
            _set(0, previous)


@contextlib.contextmanager
def training_core(pinning: CorePinning | None, threads: int = 1) -> Iterator[None]:
    """`pinning.training_core(threads)`, or nothing when there is no pinning."""
    if pinning is None:
        yield
        return
    with pinning.training_core(threads):
        yield


def _set(pid: int, cpus: frozenset[int] | set[int]) -> None:
    try:
        os.sched_setaffinity(pid, cpus)
    except OSError:  # a container may refuse it (or the process has gone): the split is only a speed-up
        pass
