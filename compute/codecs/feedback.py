"""Error feedback: what a lossy codec dropped this round is added to the next round's update.

With top-k, most of a pseudo-gradient is not sent; remembering the remainder (the residual) and sending it
later keeps the sum of what was sent equal to the sum of what was computed, minus one round's residual.
This is what lets sparse updates reach dense accuracy (Deep Gradient Compression, Lin et al. 2018).
The residual is worker-local state; `state()` / `load_state()` let a worker persist it across a restart.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .base import Codec


class ErrorFeedback:
    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.residual: dict[str, torch.Tensor] = {}

    def encode(self, update: Mapping[str, torch.Tensor], *, consume: bool = False,
               residual_into: Mapping[str, torch.Tensor] | None = None) -> tuple[bytes, dict[str, torch.Tensor]]:
        """Encode update + residual; returns the bytes and what they decode to (the update as sent).

        `consume`: the update's float32 tensors are the caller's to give away, and the sum is formed in them
        instead of in copies. `residual_into`: float32 tensors by name to write the new residual into (views
        of its canonical bytes, `canonical_copy.allocate_canonical`), which then hold it. Neither changes a
        value: only where the arithmetic writes."""
        corrected = {}
        for name, tensor in update.items():
            tensor = tensor.detach()
            owned = consume and tensor.dtype == torch.float32
            if name in self.residual:
                corrected[name] = tensor.add_(self.residual[name]) if owned else tensor.to(torch.float32) + self.residual[name]
            else:
                corrected[name] = tensor if owned else tensor.to(torch.float32).clone()
        data, sent = self.codec.encode_and_decode(corrected)
        if residual_into is None:
            self.residual = {name: corrected[name] - sent[name] for name in corrected}
        else:
            for name in corrected:
                torch.sub(corrected[name], sent[name], out=residual_into[name])
            self.residual = {name: residual_into[name] for name in corrected}
        return data, sent

    def state(self) -> dict[str, torch.Tensor]:
        return {name: tensor.clone() for name, tensor in self.residual.items()}

    def load_state(self, residual: Mapping[str, torch.Tensor], copy: bool = True) -> None:
        """Start from `residual`: copies, or (`copy=False`) the tensors themselves, for float32 tensors that
        nobody writes into (encode only reads the residual, then replaces it)."""
        self.residual = {name: tensor.detach().to(torch.float32).clone() if copy or tensor.dtype != torch.float32
                         else tensor.detach() for name, tensor in residual.items()}
