"""Keep freed memory for reuse: every training step and checkpoint allocates the same large buffers again.

A training step allocates activations and gradients, a checkpoint its bytes, a codec several
megabyte-sized arrays; all are freed and allocated again a few milliseconds later. glibc's malloc serves
blocks above its mmap threshold (128 KiB at start, adjusted upwards only as it goes) with fresh `mmap`s, and
gives the top of the heap back to the kernel beyond its trim threshold, so the same memory keeps being
returned and faulted in again: one page fault per 4 KiB, plus transparent huge pages zeroed on demand for the
arrays numpy marks for them: a large part of a plain PyTorch step of the reference MLP, and of a codec's
encoding.

`retain_freed_memory` raises both thresholds, so freed blocks stay in the heap and are reused as they are.
It changes no result, only where memory comes from, and costs the peak footprint staying resident (a worker
reaches that peak every round anyway). It is process-wide, like the determinism profile, and applied with
it (`training.Trainer`); applying it again sets the same two values, so nothing remembers whether it was.
Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper limit for it on 64-bit systems: blocks above come from mmap
TRIM_THRESHOLD = 1024 * 1024 * 1024


def retain_freed_memory() -> bool:
    """Ask malloc to keep freed memory (see the module docstring). True when it took effect."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
