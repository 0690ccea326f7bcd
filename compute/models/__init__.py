"""A registry of declarative architectures: a task names one (`mlp`, `cnn`, `transformer`, `lora-text`) and its
fields.

No requester code runs on workers: a spec picks an entry here and sets the fields of its frozen config
dataclass (everything optional, defaults in the dataclass). The dataset supplies what the data fixes
(input size, classes, vocabulary, context), see `DataShape`; on regression data mlp and cnn have one output,
the value predicted (`num_classes` 1). Initial weights are a pure function of the task
seed (`build_model`). `lora-text` fine-tunes a pinned pretrained model (`lora_text.py`); its module imports
`transformers` and `peft`, so it is loaded only when a task asks for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import SpecError
from .cnn import CNN, CNNConfig
from .lora_text import LoraTextClassifier, LoraTextConfig
from .mlp import MLP, MLPConfig
from .shape import DataShape
from .transformer import Transformer, TransformerConfig


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str
    config_class: type
    model_class: type
    kinds: tuple[str, ...]  # dataset kinds it accepts (DataShape.kind)


MODEL_REGISTRY: dict[str, Architecture] = {
    "mlp": Architecture("mlp", MLPConfig, MLP, ("classification", "regression")),
    "cnn": Architecture("cnn", CNNConfig, CNN, ("classification", "regression")),
    "transformer": Architecture("transformer", TransformerConfig, Transformer, ("text",)),
    "lora-text": Architecture("lora-text", LoraTextConfig, LoraTextClassifier, ("text-classification",)),
}


def _coerce(field: dataclasses.Field, value: Any, arch: str) -> Any:
    default = field.default
    if isinstance(default, tuple):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            raise SpecError(f"{arch}.{field.name} must be a list of positive integers, got {value!r}")
        return tuple(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise SpecError(f"{arch}.{field.name} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise SpecError(f"{arch}.{field.name} must be a positive integer, got {value!r}")
        return value
    if isinstance(default, float):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise SpecError(f"{arch}.{field.name} must be a number in [0, 1), got {value!r}")
        return float(value)
    raise SpecError(f"{arch}.{field.name} cannot be set")  # pragma: no cover - every field has a typed default


def make_config(arch: str, config: Mapping[str, Any], shape: DataShape):
    """The frozen config for `arch` from the spec's `config` fields and the dataset's shape."""
    if arch not in MODEL_REGISTRY:
        raise SpecError(f"unknown model architecture {arch!r}; known: {', '.join(sorted(MODEL_REGISTRY))}")
    entry = MODEL_REGISTRY[arch]
    if shape.kind not in entry.kinds:
        raise SpecError(f"architecture {arch!r} does not fit {shape.kind} data")
    from_spec = getattr(entry.config_class, "FROM_SPEC", ())  # set from the spec's other sections (a base model)
    settable = {f.name: f for f in dataclasses.fields(entry.config_class)
                if f.name not in entry.config_class.FROM_DATA and f.name not in from_spec}
    unknown = sorted(set(config) - set(settable) - set(from_spec))
    if unknown:
        raise SpecError(f"unknown {arch} config field(s): {', '.join(unknown)}; known: {', '.join(sorted(settable))}")
    values = {name: _coerce(settable[name], value, arch) for name, value in config.items() if name in settable}
    values.update(entry.config_class.from_shape(shape))
    if from_spec:
        values.update(entry.config_class.from_spec(config))
    try:
        return entry.config_class(**values)
    except ValueError as error:
        raise SpecError(f"invalid {arch} config: {error}") from None


def build_model(arch: str, config: Mapping[str, Any], shape: DataShape, seed: int) -> torch.nn.Module:
    """Build `arch` with initial weights that depend only on (architecture, config, seed).

    The global RNG is forked and seeded so module constructors draw the same numbers in every process, and
    the caller's global RNG is left as it was.
    """
    model_config = make_config(arch, config, shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MODEL_REGISTRY[arch].model_class(model_config)
    return model


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["MODEL_REGISTRY", "DataShape", "build_model", "make_config", "count_parameters",
           "MLP", "MLPConfig", "CNN", "CNNConfig", "Transformer", "TransformerConfig", "LoraTextClassifier",
           "LoraTextConfig"]
