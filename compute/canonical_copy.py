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

import dataclasses
import functools
import math
import threading
import weakref
from collections.abc import Mapping

import numpy as np
import torch

from .canonical import canonical_names, entry_header, file_header
from .errors import EncodingError

PAGE = 4096


class BufferPool:
    """Spare checkpoint buffers, by size. Fresh memory costs a page fault per 4 KiB page on first touch, paid
    on the training thread; a worker takes checkpoints of one size over and over, so a buffer nobody
    references any more is kept for the next one instead of being freed.

    Owned by whoever allocates over and over (a `Trainer` for its snapshots, the worker's residual store) and
    passed to `CanonicalLayout.allocate`; without one, every buffer is fresh memory. Safe to share between
    threads."""

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
            raw = _fresh(size)
        array = _aligned(raw, size)
        # Runs when the last view, memoryview or state holding the array is gone.
        weakref.finalize(array, self._give_back, size, raw)
        return array

    def _give_back(self, size: int, raw: torch.Tensor) -> None:
        with self._lock:
            spares = self._spares.setdefault(size, [])
            if len(spares) < self.SPARES_PER_SIZE:
                spares.append(raw)


def _fresh(size: int) -> torch.Tensor:
    """Room for `size` bytes starting on a page boundary, with at least a page to spare after them."""
    return torch.empty(size + 2 * PAGE, dtype=torch.uint8)


def _aligned(raw: torch.Tensor, size: int) -> np.ndarray:
    start = -raw.data_ptr() % PAGE
    return raw[start:start + size].numpy()  # the array keeps `raw` alive


@dataclasses.dataclass(frozen=True)
class CanonicalLayout:
    """Where the headers and the data of a fixed set of (name, dtype, shape) go in their canonical bytes."""

    size: int
    headers: tuple[tuple[int, bytes], ...]  # (offset, bytes): the file header and each entry's header
    entries: tuple[tuple[str, torch.dtype, torch.Size, int], ...]  # (name, dtype, shape, data offset)

    def allocate(self, pool: BufferPool | None = None) -> tuple[memoryview, dict[str, torch.Tensor]]:
        """A page-aligned buffer (a spare of `pool`, or fresh memory) with the headers written, and a view of
        each entry's (unset) data."""
        buffer = pool.take(self.size) if pool is not None else _aligned(_fresh(self.size), self.size)
        for where, header in self.headers:
            buffer[where:where + len(header)] = np.frombuffer(header, dtype=np.uint8)
        views: dict[str, torch.Tensor] = {}
        for name, dtype, shape, where in self.entries:
            count = math.prod(shape)
            views[name] = (torch.frombuffer(buffer, dtype=dtype, count=count, offset=where).view(shape) if count
                           else torch.empty(shape, dtype=dtype))
        return memoryview(buffer), views


def layout_of(tensors: Mapping[str, torch.Tensor]) -> CanonicalLayout:
    """The layout of `tensors` (same checks and errors as `encode_tensors`); cached by names, dtypes, shapes."""
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise EncodingError(f"{name!r} is not a tensor")
    key = tuple((name, tensor.dtype, tensor.shape) for name, tensor in tensors.items())
    return _layout(key)


@functools.lru_cache(maxsize=16)
def _layout(key: tuple[tuple[str, torch.dtype, torch.Size], ...]) -> CanonicalLayout:
    shapes = {name: torch.empty(shape, dtype=dtype, device="meta")  # dtype and shape, no memory
              for name, dtype, shape in key}
    names = canonical_names(shapes)
    start = file_header(len(names))
    headers = [(0, start)]
    entries = []
    offset = len(start)
    for name in names:
        header = entry_header(name, shapes[name])
        headers.append((offset, header))
        offset += len(header)
        dtype, shape = shapes[name].dtype, shapes[name].shape
        entries.append((name, dtype, shape, offset))
        offset += math.prod(shape) * shapes[name].element_size()
    return CanonicalLayout(size=offset, headers=tuple(headers), entries=tuple(entries))


def copy_tensors(targets: Mapping[str, torch.Tensor], sources: Mapping[str, torch.Tensor]) -> None:
    """targets[name] = sources[name] for every name, in one call that releases the GIL for all the copies."""
    names = [name for name, target in targets.items() if target.numel()]
    torch._foreach_copy_([targets[n] for n in names], [sources[n].detach() for n in names])


def copy_into_canonical(tensors: Mapping[str, torch.Tensor], pool: BufferPool | None = None
                        ) -> tuple[memoryview, dict[str, torch.Tensor]]:
    """The canonical bytes of `tensors` and, for each name, a view of its data inside those bytes, holding a
    copy of the tensor as it is now. Same checks and errors as `encode_tensors`."""
    data, views = allocate_canonical(tensors, pool)
    copy_tensors(views, tensors)
    return data, views


def allocate_canonical(like: Mapping[str, torch.Tensor], pool: BufferPool | None = None
                       ) -> tuple[memoryview, dict[str, torch.Tensor]]:
    """Canonical bytes for tensors of the names, dtypes and shapes of `like`, with their data not yet set,
    and the view of each one's data there: whatever is written into the views is the encoding's data.
    `pool`: where the buffer comes from (none: fresh memory)."""
    return layout_of(like).allocate(pool)
