"""What a dataset tells a model: its kind and sizes."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DataShape:
    """kind: "classification" (fixed-size float inputs, integer labels), "regression" (fixed-size float inputs,
    one float target each: the model's one output), "text" (token windows) or "text-classification" (token
    windows, one integer label each).

    input_size: features per sample (classification, regression); num_classes: labels (1 for regression: the
    one value predicted), or the vocabulary for text;
    context: tokens per input window (text and text-classification).
    """

    kind: str
    input_size: int
    num_classes: int
    context: int = 0
