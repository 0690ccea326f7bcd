"""A multi-layer perceptron: Linear -> ReLU blocks. 64-1024-1024-10 on digits has 1.1M parameters."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    hidden: tuple[int, ...] = (1024, 1024)
    input_size: int = 64
    num_classes: int = 10

    FROM_DATA: ClassVar[tuple[str, ...]] = ("input_size", "num_classes")

    @staticmethod
    def from_shape(shape) -> dict:
        return {"input_size": shape.input_size, "num_classes": shape.num_classes}


class MLP(nn.Module):
    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        sizes = (config.input_size, *config.hidden)
        layers: list[nn.Module] = []
        for inputs, outputs in zip(sizes, sizes[1:]):
            layers += [nn.Linear(inputs, outputs), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], config.num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layers(inputs)
