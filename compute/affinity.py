"""A core of its own for the training thread, while a worker trains a round.

A worker's round runs its training steps on one thread and everything else beside them: the checkpoint
process (copy, hash, store), the threads that read its answers and record them, the residual's store. On a
machine with a core to spare, the scheduler still puts those threads on the training thread's core whenever
they wake up (a few times per checkpoint), and each time the training step in progress waits. Measured on
the 2-core benchmark VM (`python -m benchmarks.worker_overhead --quick`, three runs each way): with the
training thread alone on one core and the rest on the other, ours/plain went from 0.83-0.88 to 0.89-0.92.

    with training_core(threads):     # in the training thread, for the round
        ...
    keep_off_training_core()         # first thing in every background thread the round starts
    keep_process_off_training_core(pid)   # the checkpoint process

The split is taken from the CPUs this process may use when this module is imported: the training thread gets
the first, every background thread the others. Only a single-threaded profile (the determinism profile's
thread count, 1 by default) is pinned: PyTorch's intra-op threads would share the training thread's one CPU.
With no CPU to spare it does nothing. Which CPU runs a computation changes no byte of it.
`TROLLY_TRAINING_CORE=off` switches it off.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

ENVIRONMENT_SWITCH = "TROLLY_TRAINING_CORE"

_CPUS: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()


def split() -> tuple[frozenset[int], frozenset[int]] | None:
    """(the training thread's CPU, the background's CPUs), or None where there is no CPU to spare."""
    if os.environ.get(ENVIRONMENT_SWITCH, "on").lower() in ("off", "0", "no") or len(_CPUS) < 2:
        return None
    return frozenset(_CPUS[:1]), frozenset(_CPUS[1:])


def keep_off_training_core() -> None:
    """Run the calling (background) thread on the CPUs the training thread does not use."""
    cpus = split()
    if cpus is not None:
        _set(0, cpus[1])


def keep_process_off_training_core(pid: int) -> None:
    """The same for a child process (its threads started later inherit it)."""
    cpus = split()
    if cpus is not None:
        _set(pid, cpus[1])


@contextlib.contextmanager
def training_core(threads: int = 1) -> Iterator[None]:
    """Within: the calling thread, training with `threads` intra-op threads, runs on the training CPU alone (if
    `threads` is 1); its CPUs are restored after."""
    cpus = split()
    if cpus is None or threads != 1:
        yield
        return
    previous = os.sched_getaffinity(0)
    _set(0, cpus[0])
    try:
        yield
    finally:
        _set(0, previous)


def _set(pid: int, cpus: frozenset[int] | set[int]) -> None:
    try:
        os.sched_setaffinity(pid, cpus)
    except OSError:  # a container may refuse it (or the process has gone): the split is only a speed-up
        pass
