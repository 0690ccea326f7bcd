"""A spec's model size and memory estimate, computed from its config with integers only.

The chain bounds what a requester may ask workers to hold (`max_model_parameters`, `max_batch_size`,
`max_memory_mb` in `market.params`), so that a spec cannot ask for a model no worker can train and tie up
their collateral; a worker compares the same estimate with its declared `hardware.memory_mb` before it joins.

Parameter counts follow `compute/models` exactly (a test builds each model and compares):

- mlp (sizes = input, *hidden, classes): sum over consecutive sizes a, b of a*b + b.
- cnn (channels c_1..c_m on a side x side image, one 2x2 max-pool): sum of 9*c_{i-1}*c_i + c_i (c_0 = 1), then
  flat = c_m * (side/2)^2, flat*hidden + hidden, hidden*classes + classes.
- transformer (width w, layers L, vocabulary V, context C): 2*V*w + C*w + L*(12*w^2 + 13*w) + 2*w + V
  (token and position embeddings, per block two layer norms, qkv, output projection and a 4w MLP, the last
  norm and the head).
- lora-text (a pinned base model of L layers, width w, `rank` r, classes K): 4*L*r*2w + w*K + K, the LoRA adapters on
  the four attention projections of every layer and the classifier head: the trained weights. The frozen base
  (`market.base_models`) is held once, as 4-byte floats, beside them in the memory estimate.

The memory estimate is a bound, not a measurement: 4-byte floats for the weights, their gradients, two AdamW
moments, the round's start weights and a checkpoint's weights and moments (8 copies of the parameters), plus
forward and backward activations (2 x batch_size x the activations of one sample), plus `RUNTIME_OVERHEAD_MB`
for the interpreter and PyTorch themselves.

The dataset fixes the input size, classes, vocabulary and context: by name for a bundled one, declared in the
spec for a packed one (`market.datasets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base_models import BaseModel, base_model
from .datasets import TEXT_CLASSIFICATION, dataset_shape, is_text_classification
from .errors import InvalidSpec

MODEL_DEFAULTS = {
    "mlp": {"hidden": (1024, 1024)},
    "cnn": {"channels": (16, 32), "hidden": 64},
    "transformer": {"layers": 2, "heads": 4, "width": 64},
    "lora-text": {"rank": 8, "alpha": 16},
}
"""The settable fields of each architecture's config dataclass, with compute's defaults."""

FLOAT_BYTES = 4
PARAMETER_COPIES = 8
RUNTIME_OVERHEAD_MB = 256
MAX_DIMENSION = 1 << 20
"""Largest single width, channel count, layer count or head count read from a config (keeps the integers small)."""


@dataclass(frozen=True)
class Footprint:
    parameters: int
    activations_per_sample: int
    memory_mb: int


def _positive(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIMENSION:
        raise InvalidSpec(f"model.config.{where} must be an integer in 1..{MAX_DIMENSION}, got {value!r}")
    return value


def _sizes(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or len(value) > 64:
        raise InvalidSpec(f"model.config.{where} must be a list of at most 64 positive integers, got {value!r}")
    return tuple(_positive(item, where) for item in value)


def _config(arch: str, config: dict) -> dict:
    defaults = MODEL_DEFAULTS[arch]
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise InvalidSpec(f"unknown {arch} config field(s): {', '.join(unknown)}; known: {', '.join(sorted(defaults))}")
    values = dict(defaults)
    for name, value in config.items():
        values[name] = _sizes(value, name) if isinstance(defaults[name], tuple) else _positive(value, name)
    return values


def _mlp(values: dict, inputs: int, classes: int) -> tuple[int, int]:
    sizes = (inputs, *values["hidden"], classes)
    parameters = sum(a * b + b for a, b in zip(sizes, sizes[1:]))
    return parameters, inputs + 2 * sum(values["hidden"]) + classes


def _cnn(values: dict, inputs: int, classes: int) -> tuple[int, int]:
    side = _isqrt(inputs)
    if side * side != inputs or side % 2:
        raise InvalidSpec(f"cnn needs square images with an even side, input_size={inputs}")
    parameters = activations = 0
    previous = 1
    for channels in values["channels"]:
        parameters += 9 * previous * channels + channels
        activations += 2 * channels * side * side  # convolution and ReLU outputs
        previous = channels
    flat = previous * (side // 2) ** 2
    hidden = values["hidden"]
    parameters += flat * hidden + hidden + hidden * classes + classes
    return parameters, inputs + activations + flat + 2 * hidden + classes


def _transformer(values: dict, vocabulary: int, context: int) -> tuple[int, int]:
    width, layers, heads = values["width"], values["layers"], values["heads"]
    if width % heads:
        raise InvalidSpec(f"transformer width {width} is not a multiple of heads {heads}")
    parameters = 2 * vocabulary * width + context * width + layers * (12 * width * width + 13 * width) + 2 * width + vocabulary
    per_position = layers * (18 * width + 2 * heads * context) + 3 * width + vocabulary
    return parameters, context * per_position


def _lora_text(values: dict, base: BaseModel, classes: int, context: int) -> tuple[int, int]:
    width, layers = base.hidden, base.layers
    if context > base.max_positions:
        raise InvalidSpec(f"lora-text reads at most {base.max_positions} tokens, the dataset has {context}")
    parameters = 4 * layers * values["rank"] * 2 * width + width * classes + classes
    per_position = layers * (16 * width + 2 * base.intermediate + 2 * base.heads * context)
    return parameters, context * per_position


def _isqrt(value: int) -> int:
    root = 0
    while (root + 1) * (root + 1) <= value:
        root += 1
    return root


def model_footprint(arch: str, config: Any, dataset: str | dict, batch_size: int, base: Any = None) -> Footprint:
    """Parameters, activations per sample and the memory estimate (MiB, rounded up) of a spec's model.
    `dataset`: the spec's `dataset` section, or the name of a bundled dataset; `base`: the spec's `model.base`,
    which a `lora-text` model must name and no other may."""
    if not isinstance(config, dict):
        raise InvalidSpec("model.config must be a JSON object")
    if arch not in MODEL_DEFAULTS:
        raise InvalidSpec(f"no footprint for model {arch!r}")
    inputs, classes, context = dataset_shape(dataset if isinstance(dataset, dict) else {"name": dataset})
    values = _config(arch, config)
    name = dataset if isinstance(dataset, str) else dataset.get("name")
    if (arch == "lora-text") != is_text_classification(name, context):
        raise InvalidSpec(f"architecture {arch!r} does not fit dataset {name!r}"
                          + ("" if arch != "lora-text" else f"; it reads {', '.join(TEXT_CLASSIFICATION)} or packed "
                                                            f"token ids (dataset.context)"))
    if (arch == "lora-text") != (base is not None):
        raise InvalidSpec("model.base names the pretrained model of a lora-text model, and only of one")
    frozen = 0
    if arch == "lora-text":
        pinned = base_model(base)
        parameters, activations = _lora_text(values, pinned, classes, context)
        frozen = pinned.parameters
    elif arch == "transformer":
        if not context:
            raise InvalidSpec("architecture 'transformer' does not fit classification data")
        parameters, activations = _transformer(values, classes, context)
    elif context:
        raise InvalidSpec(f"architecture {arch!r} does not fit text data")
    elif arch == "mlp":
        parameters, activations = _mlp(values, inputs, classes)
    else:
        parameters, activations = _cnn(values, inputs, classes)
    total = FLOAT_BYTES * (frozen + PARAMETER_COPIES * parameters + 2 * batch_size * activations)
    return Footprint(parameters, activations, RUNTIME_OVERHEAD_MB + -(-total // (1 << 20)))


def spec_footprint(spec: dict) -> Footprint:
    """The footprint of a parsed spec's model at its batch size (`parse_spec`'s document): what a worker's memory
    is checked against, by the worker before it joins and by a requester asking why nobody did. KeyError or
    TypeError for a document without those sections, InvalidSpec for a model the chain does not know."""
    model = spec["model"]
    return model_footprint(model["arch"], model.get("config", {}), spec["dataset"], spec["training"]["batch_size"],
                           model.get("base"))
