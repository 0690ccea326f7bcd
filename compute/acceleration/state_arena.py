"""The trainer's weights and AdamW state in one shared memory file, which a checkpoint process reads.

`shared_state_arena(trainer)` moves the state there once (`Trainer.relocate_state`: values unchanged) and
returns the arena; the checkpoint process (`checkpoint_process.py`) maps the same file and copies checkpoints
out of it. Every tensor keeps the 64-byte alignment PyTorch's allocator gives, so the kernels, and the bytes,
are the same as in the trainer's own memory. Linux only (`os.memfd_create`).
"""

from __future__ import annotations

import mmap
import os
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..training import Trainer

ALIGNMENT = 64  # the start of every arena tensor: what PyTorch's own CPU allocator gives, so kernels see the same


class StateArena:
    """One shared memory file holding tensors (each at a 64-byte boundary), mapped into this process."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        offsets: dict[str, int] = {}
        size = 0
        for name, tensor in tensors.items():
            size = -(-size // ALIGNMENT) * ALIGNMENT
            offsets[name] = size
            size += tensor.numel() * tensor.element_size()
        self.size = max(size, 1)
        self.descriptor = os.memfd_create("trolly-training-state", os.MFD_CLOEXEC)
        # Kept open while the arena lives (a restarted process attaches to it again); closed with the arena,
        # so a finished task's trainer leaves neither a descriptor nor its shared memory behind.
        weakref.finalize(self, os.close, self.descriptor)
        os.ftruncate(self.descriptor, self.size)
        self._map = mmap.mmap(self.descriptor, self.size)
        self.offsets = offsets
        self.tensors: dict[str, torch.Tensor] = {}
        for name, tensor in tensors.items():
            view = torch.frombuffer(self._map, dtype=tensor.dtype, count=tensor.numel(), offset=offsets[name]) \
                if tensor.numel() else torch.empty(0, dtype=tensor.dtype)
            self.tensors[name] = view.view(tensor.shape)

    def nbytes(self, name: str) -> int:
        tensor = self.tensors[name]
        return tensor.numel() * tensor.element_size()


def shared_state_arena(trainer: Trainer) -> StateArena:
    """The trainer's state arena, its weights and AdamW state moved into it on first call."""
    home = trainer.relocate_state(StateArena)
    if not isinstance(home, StateArena):
        raise TypeError(f"the trainer's state already lives in a {type(home).__name__}, not a shared arena")
    return home
