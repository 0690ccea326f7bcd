"""Write large files with direct I/O (`O_DIRECT`), past the page cache.

A worker stores a checkpoint (megabytes: the weights and AdamW state) every k inner steps, from a background
thread on the core that training does not use. Through the page cache each such write costs CPU time in the
kernel, much of it once the pages come from memory the host has not backed recently (a worker writing new
blobs round after round is always in that case). With `O_DIRECT` the device reads the bytes straight from our
buffer: little CPU and mostly waiting, which frees that core for hashing and for everything else on the
machine (docs/performance.md has the figures).

Direct I/O wants block-aligned memory, offsets and lengths. A chunk that starts on a page boundary (a
checkpoint captured by `compute.canonical_copy`) is written from where it lies, all but its last partial
block; other bytes pass through a page-aligned scratch buffer in pieces of `PIECE` bytes: a `DirectScratch`'s,
reused (one per thread; a `BlobStore` owns one), or one made for the call. The last piece is zero-padded to a whole block and the file is then truncated to its real length. Where the filesystem refuses `O_DIRECT` (tmpfs on older
kernels, some network filesystems) the caller falls back to an ordinary write: `write_direct` returns False
having written nothing that counts.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections.abc import Iterable

import numpy as np

BLOCK = 4096  # alignment that satisfies every common logical block size (512 or 4096)
PIECE = 4 * 1024 * 1024
DIRECT_MINIMUM = 1024 * 1024  # below this the page cache costs little and a write need not wait for the device

class DirectScratch:
    """Page-aligned scratch buffers for `write_direct`, one per thread, made on first use and kept: fresh
    memory costs a page fault per page on first touch, on every write."""

    def __init__(self) -> None:
        self._local = threading.local()

    def view(self) -> memoryview:
        view = getattr(self._local, "view", None)
        if view is None:
            view = self._local.view = _fresh_view()
        return view


def _fresh_view() -> memoryview:
    return memoryview(mmap.mmap(-1, PIECE))  # anonymous mappings are page-aligned


def write_direct(path: str | os.PathLike, chunks: Iterable[bytes | bytearray | memoryview],
                 scratch: DirectScratch | None = None) -> bool:
    """Write the concatenation of `chunks` to the existing, empty file `path` with direct I/O, unaligned
    bytes through `scratch`'s buffer (none: one made for this call).

    Returns False (the file may then hold garbage: the caller rewrites it) when direct I/O is not supported
    here; any other OSError propagates.
    """
    if not hasattr(os, "O_DIRECT"):
        return False
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError as error:
        if error.errno == errno.EINVAL:
            return False
        raise
    view = scratch.view() if scratch is not None else _fresh_view()
    try:
        filled = 0
        written = 0
        for chunk in chunks:
            chunk = memoryview(chunk).cast("B")
            if filled == 0 and len(chunk) >= BLOCK and _address(chunk) % BLOCK == 0:
                whole_blocks = len(chunk) - len(chunk) % BLOCK
                written += _write_all(descriptor, chunk[:whole_blocks])
                chunk = chunk[whole_blocks:]
            while len(chunk):
                take = min(len(chunk), PIECE - filled)
                view[filled:filled + take] = chunk[:take]
                filled += take
                chunk = chunk[take:]
                if filled == PIECE:
                    written += _write_all(descriptor, view[:PIECE])
                    filled = 0
        if filled:
            padded = -(-filled // BLOCK) * BLOCK
            view[filled:padded] = bytes(padded - filled)
            _write_all(descriptor, view[:padded])
            written += filled
        os.ftruncate(descriptor, written)
        return True
    except OSError as error:
        if error.errno == errno.EINVAL:
            return False
        raise
    finally:
        os.close(descriptor)


def _address(view: memoryview) -> int:
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


def _write_all(descriptor: int, block: memoryview) -> int:
    done = 0
    while done < len(block):
        # A short direct write ends on a block boundary, so the rest stays aligned.
        done += os.write(descriptor, block[done:])
    return done
