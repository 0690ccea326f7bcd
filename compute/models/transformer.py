"""A small decoder-only transformer over bytes (characters), pre-norm, learned positions.

Attention is written out with an explicit causal mask rather than a fused kernel, so that what runs is the
same plain matmul/softmax sequence on every CPU backend.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    layers: int = 2
    heads: int = 4
    width: int = 64
    vocab_size: int = 256
    context: int = 64

    FROM_DATA: ClassVar[tuple[str, ...]] = ("vocab_size", "context")

    @staticmethod
    def from_shape(shape) -> dict:
        return {"vocab_size": shape.num_classes, "context": shape.context}

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")


class SelfAttention(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.out = nn.Linear(config.width, config.width)
        mask = torch.tril(torch.ones(config.context, config.context, dtype=torch.bool))
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / (width // self.heads) ** 0.5)
        scores = scores.masked_fill(~self.causal_mask[:length, :length], float("-inf"))
        attended = functional.softmax(scores, dim=-1) @ v
        return self.out(attended.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.width)
        self.attention = SelfAttention(config)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(nn.Linear(config.width, 4 * config.width), nn.GELU(), nn.Linear(4 * config.width, config.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.width)
        self.position_embedding = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))
