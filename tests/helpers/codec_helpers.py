"""What the fused-codec tests share: named tensors cut from one array, random cuts, and the reference encoding."""

from __future__ import annotations

import numpy as np
import torch

from trolly.compute.codecs import Codec, ErrorFeedback, get_codec


def split(flat: np.ndarray, cuts: list[int]) -> dict[str, torch.Tensor]:
    """Named tensors of the sizes `cuts` gives, named so that the canonical order is not insertion order."""
    tensors, begin = {}, 0
    for index, size in enumerate(cuts):
        tensors[f"t{(7 * index) % 10}.{index}"] = torch.from_numpy(flat[begin:begin + size].copy())
        begin += size
    return tensors


def draw_cuts(draw, integers, size: int) -> list[int]:
    """Tensor sizes adding up to `size`, drawn with hypothesis (`integers` is `st.integers`)."""
    cuts, left = [], size
    while left:
        take = draw(integers(1, left))
        cuts.append(take)
        left -= take
    return cuts


def reference(codec: Codec | str, start, end, residual):
    """`ErrorFeedback(codec).encode` of `start - end` plus `residual` (None: zero): (bytes, new residual)."""
    feedback = ErrorFeedback(get_codec(codec) if isinstance(codec, str) else codec)
    if residual is not None:
        feedback.load_state(residual)
    data, _ = feedback.encode({name: start[name] - end[name] for name in end})
    return data, feedback.residual


MLP_SHAPES = {"0.weight": (1024, 64), "0.bias": (1024,), "2.weight": (1024, 1024), "2.bias": (1024,),
              "4.weight": (10, 1024), "4.bias": (10,)}
"""The parameter shapes of the protocol's example MLP (64-1024-1024-10)."""


def model_sized_update(seed: int = 5) -> tuple[dict, dict, dict]:
    """(start, end, residual) of the example MLP's size: random weights, a small step, a smaller residual."""
    generator = torch.Generator().manual_seed(seed)
    start = {name: torch.randn(shape, generator=generator) for name, shape in MLP_SHAPES.items()}
    end = {name: tensor - 1e-3 * torch.randn(tensor.shape, generator=generator) for name, tensor in start.items()}
    residual = {name: 1e-4 * torch.randn(tensor.shape, generator=generator) for name, tensor in start.items()}
    return start, end, residual
