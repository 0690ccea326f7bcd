"""Copy tensors straight into their canonical bytes: the fast path beside `canonical.encode_tensors`.

A checkpoint is taken every k inner steps while training goes on, so its tensors must be copied before the
next step changes them. `copy_into_canonical` makes that one copy land where the canonical encoding
(`canonical.py`) puts each tensor's data, with the headers written around it, and returns the encoding plus
tensors that are views of it. Hashing and storing the checkpoint then read the very bytes the copy wrote:
no second copy (encoding) and no third (aligning for direct I/O, see `blobs/direct.py`: the buffer starts
on a page boundary).

The reference is `canonical.encode_tensors`; the tests check that both give the same bytes. The views keep
their buffer alive and may start at any byte offset (the headers between entries have arbitrary lengths):
PyTorch's CPU kernels do not need aligned data, and elementwise results do not depend on it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

import numpy as np
import torch

from .canonical import canonical_names, entry_header, file_header

PAGE = 4096


class _BufferPool:
    """Spare checkpoint buffers, by size. Fresh memory costs a page fault per 4 KiB on first touch (about
    2 ms for a 13.5 MB checkpoint on the benchmark VM, on the training thread); a worker takes checkpoints of
    one size over and over, so a buffer nobody references any more is kept for the next one instead of
    being freed."""

    SPARES_PER_SIZE = 4

    def __init__(self) -> None:
        self._spares: dict[int, list[torch.Tensor]] = {}
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """`size` uninitialised bytes starting on a page boundary, with at least a page to spare after them."""
        with self._lock:
            spares = self._spares.get(size)
            raw = spares.pop() if spares else None
        if raw is None:
            raw = torch.empty(size + 2 * PAGE, dtype=torch.uint8)
        start = -raw.data_ptr() % PAGE
        array = raw[start:start + size].numpy()  # the array keeps `raw` alive
        # Runs when the last view, memoryview or state holding the array is gone.
        weakref.finalize(array, self._give_back, size, raw)
        return array

    def _give_back(self, size: int, raw: torch.Tensor) -> None:
        with self._lock:
            spares = self._spares.setdefault(size, [])
            if len(spares) < self.SPARES_PER_SIZE:
                spares.append(raw)


_pool = _BufferPool()


def copy_into_canonical(tensors: Mapping[str, torch.Tensor]) -> tuple[memoryview, dict[str, torch.Tensor]]:
    """The canonical bytes of `tensors` and, for each name, a view of its data inside those bytes, holding a
    copy of the tensor as it is now. Same checks and errors as `encode_tensors`."""
    names = canonical_names(tensors)
    pieces: list[tuple[int, bytes]] = []  # (offset, header bytes)
    entries: list[tuple[str, int]] = []  # (name, data offset)
    offset = 0
    start = file_header(len(names))
    pieces.append((0, start))
    offset += len(start)
    for name in names:
        tensor = tensors[name]
        header = entry_header(name, tensor)
        pieces.append((offset, header))
        offset += len(header)
        entries.append((name, offset))
        offset += tensor.numel() * tensor.element_size()
    buffer = _pool.take(offset)
    for where, header in pieces:
        buffer[where:where + len(header)] = np.frombuffer(header, dtype=np.uint8)
    views: dict[str, torch.Tensor] = {}
    for name, where in entries:
        tensor = tensors[name]
        if tensor.numel():
            view = torch.frombuffer(buffer, dtype=tensor.dtype, count=tensor.numel(), offset=where)
            view = view.view(tensor.shape)
            view.copy_(tensor.detach())  # native order is the canonical little-endian: torch runs on no other CPU
        else:
            view = torch.empty(tensor.shape, dtype=tensor.dtype)
        views[name] = view
    return memoryview(buffer), views

