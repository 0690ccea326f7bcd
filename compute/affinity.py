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

The worker builds one `CorePinning` when it starts (`compute.acceleration.Acceleration`, switched off by the
`training_core` option) and hands it down. The split is taken from the CPUs the process may use then: the
training thread gets the first, every background thread the others. Only a single-threaded profile (the
determinism profile's thread count, 1 by default) is pinned: PyTorch's intra-op threads would share the
training thread's one CPU. Which CPU runs a computation changes no byte of it.

Threads owned by modules that are not handed the pinning (the blob store's hashing thread, the checkpoint
copier, `compute.background` queues) call the module-level `keep_off_training_core()`: it follows the
pinning of the round being trained in this process, if any (`training_core` records it for the round's
duration), and does nothing otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
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
        with _in_effect(self):
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


class _RoundPinning:
    """The pinning of the round being trained in this process, for threads owned by modules it is not handed to.
    Set only while a round's training thread is pinned; a second round pinned at once (tests) nests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stack: list[CorePinning] = []

    @contextlib.contextmanager
    def __call__(self, pinning: CorePinning) -> Iterator[None]:
        with self._lock:
            self._stack.append(pinning)
        try:
            yield
        finally:
            with self._lock:
                self._stack.remove(pinning)

    def current(self) -> CorePinning | None:
        with self._lock:
            return self._stack[-1] if self._stack else None


_in_effect = _RoundPinning()


def keep_off_training_core() -> None:
    """For background threads of modules that are not handed the pinning: keep off the training CPU of the round
    being trained in this process (nothing when no round is pinned)."""
    pinning = _in_effect.current()
    if pinning is not None:
        pinning.keep_off_training_core()


def _set(pid: int, cpus: frozenset[int] | set[int]) -> None:
    try:
        os.sched_setaffinity(pid, cpus)
    except OSError:  # a container may refuse it (or the process has gone): the split is only a speed-up
        pass
