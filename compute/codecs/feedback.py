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

    def encode(self, update: Mapping[str, torch.Tensor]) -> tuple[bytes, dict[str, torch.Tensor]]:
        """Encode update + residual; returns the bytes and what they decode to (the update as sent)."""
        corrected = {name: tensor.detach().to(torch.float32) + self.residual[name] if name in self.residual
                     else tensor.detach().to(torch.float32).clone() for name, tensor in update.items()}
        data, sent = self.codec.encode_and_decode(corrected)
        self.residual = {name: corrected[name] - sent[name] for name in corrected}
        return data, sent

    def state(self) -> dict[str, torch.Tensor]:
        return {name: tensor.clone() for name, tensor in self.residual.items()}

    def load_state(self, residual: Mapping[str, torch.Tensor]) -> None:
        self.residual = {name: tensor.detach().to(torch.float32).clone() for name, tensor in residual.items()}
