"""A small convolutional network for 8x8 single-channel images (digits)."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class CNNConfig:
    channels: tuple[int, ...] = (16, 32)
    hidden: int = 64
    input_size: int = 64
    num_classes: int = 10

    FROM_DATA: ClassVar[tuple[str, ...]] = ("input_size", "num_classes")

    @staticmethod
    def from_shape(shape) -> dict:
        return {"input_size": shape.input_size, "num_classes": shape.num_classes}

    def __post_init__(self) -> None:
        side = math.isqrt(self.input_size)
        if side * side != self.input_size or side % 2:
            raise ValueError(f"cnn needs square images with an even side, input_size={self.input_size}")


class CNN(nn.Module):
    def __init__(self, config: CNNConfig) -> None:
        super().__init__()
        self.side = math.isqrt(config.input_size)
        layers: list[nn.Module] = []
        previous = 1
        for channels in config.channels:
            layers += [nn.Conv2d(previous, channels, kernel_size=3, padding=1), nn.ReLU()]
            previous = channels
        layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        flat = previous * (self.side // 2) ** 2
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(flat, config.hidden), nn.ReLU(), nn.Linear(config.hidden, config.num_classes))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        images = inputs.view(inputs.shape[0], 1, self.side, self.side)
        return self.head(self.features(images))
