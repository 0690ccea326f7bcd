"""Text classification by a pretrained encoder fine-tuned with LoRA: only the adapters and the head are trained.

The encoder is the spec's pinned base model (`base_model.py`: all-MiniLM-L6-v2, a 6-layer BERT, first), built by
`transformers`' `BertModel` from the package's config with its weights loaded from the package's own files; PEFT
puts a LoRA adapter of rank `rank` (scaling alpha / rank) on each of its attention projections (query, key,
value and the attention output). The sentence is the mean of the encoder's outputs over its tokens (id 0 is
padding), as all-MiniLM-L6-v2 is trained to be read, and a linear head gives the class logits.

The protocol's weights are the trained tensors only: this module's `state_dict()` and `parameters()` are the
adapters (`adapters.<layer>.<projection>.down|up.weight`) and the head, and nothing else; the frozen encoder is
held outside the module tree, so checkpoints, updates, W_r and the final weights hold exactly what is trained,
and every process derives the rest from the pinned package. W_0 is a pure function of the seed: PEFT's
initialisation (A uniform, B zero) and the head's draw from the seeded generator `build_model` forks.

The replay contract holds because nothing random runs in a step (every dropout is 0, PEFT's included) and
attention is the eager matmul/softmax path, so a step is the same sequence of CPU kernels in every process of
the same determinism profile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from trolly.chain.market.base_models import BaseModel, base_model
from trolly.chain.market.errors import InvalidSpec

from ..errors import SpecError
from .base_model import base_model_directory, base_weights

PROJECTIONS = {"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
               "output": "attention.output.dense"}
"""The attention projections of one BERT layer that carry an adapter, by the name the weights use for them."""
ADAPTER = "default"  # PEFT's name for the one adapter


@dataclasses.dataclass(frozen=True)
class LoraTextConfig:
    rank: int = 8
    alpha: int = 16
    num_classes: int = 2
    context: int = 64
    base: BaseModel | None = None

    FROM_DATA: ClassVar[tuple[str, ...]] = ("num_classes", "context")
    FROM_SPEC: ClassVar[tuple[str, ...]] = ("base",)

    @staticmethod
    def from_shape(shape) -> dict:
        return {"num_classes": shape.num_classes, "context": shape.context}

    @staticmethod
    def from_spec(config: Mapping[str, Any]) -> dict:
        """The base model the spec's `model.base` names (`compute.spec` puts it in the config)."""
        if "base" not in config:
            raise SpecError("a lora-text model names its pretrained model in model.base")
        try:
            return {"base": base_model(dict(config["base"]))}
        except InvalidSpec as error:
            raise SpecError(str(error)) from None

    def __post_init__(self) -> None:
        if self.base is not None and self.context > self.base.max_positions:
            raise ValueError(f"the base model reads at most {self.base.max_positions} tokens, not {self.context}")


class Adapter(nn.Module):
    """One projection's LoRA pair, the same modules PEFT runs (registered here so they are the model's state)."""

    def __init__(self, down: nn.Module, up: nn.Module) -> None:
        super().__init__()
        self.down = down
        self.up = up


def frozen_encoder(base: BaseModel) -> nn.Module:
    """The pinned base model as a `BertModel` in eval form, dropout off, its weights the package's (frozen)."""
    from transformers import BertConfig, BertModel

    config = BertConfig.from_json_file(str(base_model_directory(base) / "config.json"))
    config.hidden_dropout_prob = 0.0
    config.attention_probs_dropout_prob = 0.0
    config._attn_implementation = "eager"
    with torch.device("meta"):
        encoder = BertModel(config, add_pooling_layer=False)
    own = encoder.state_dict()
    # The file also holds the sentence pooler (not read: the sentence is the mean of the tokens) and the
    # position ids, which BertModel keeps as buffers outside its state and builds below.
    weights = {name: tensor for name, tensor in base_weights(base).items() if name in own}
    missing, unexpected = encoder.load_state_dict(weights, strict=False, assign=True)
    positions, device = config.max_position_embeddings, encoder.embeddings.word_embeddings.weight.device
    encoder.embeddings.register_buffer("position_ids", torch.arange(positions, device=device).expand((1, -1)),
                                       persistent=False)
    encoder.embeddings.register_buffer("token_type_ids", torch.zeros((1, positions), dtype=torch.long, device=device),
                                       persistent=False)
    meta = [name for name, tensor in [*encoder.named_parameters(), *encoder.named_buffers()] if tensor.is_meta]
    if missing or unexpected or meta:
        raise SpecError(f"the base model's weights do not fit its config: missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]}, not loaded {meta[:3]}")
    encoder.requires_grad_(False)
    return encoder.eval()


class LoraTextClassifier(nn.Module):
    def __init__(self, config: LoraTextConfig) -> None:
        super().__init__()
        from peft import LoraConfig, inject_adapter_in_model

        if config.base is None:
            raise SpecError("a lora-text model needs its base model")
        encoder = frozen_encoder(config.base)
        lora = LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=0.0,
                          target_modules=[f"layer.{i}.{path}" for i in range(config.base.layers)
                                          for path in PROJECTIONS.values()])
        encoder = inject_adapter_in_model(lora, encoder)
        self.adapters = nn.ModuleList()
        for layer in encoder.encoder.layer:
            projections = nn.ModuleDict()
            for name, path in PROJECTIONS.items():
                wrapped = layer.get_submodule(path)
                projections[name] = Adapter(wrapped.lora_A[ADAPTER], wrapped.lora_B[ADAPTER])
            self.adapters.append(projections)
        self.head = nn.Linear(config.base.hidden, config.num_classes)
        self.config = config
        self._encoder = (encoder,)  # outside the module tree: not state, never exchanged

    @property
    def encoder(self) -> nn.Module:
        return self._encoder[0]

    def _apply(self, fn, recurse=True):
        self.encoder._apply(fn, recurse)  # the frozen encoder moves with the model (a device, a dtype)
        return super()._apply(fn, recurse)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.sentence(tokens))

    def sentence(self, tokens: torch.Tensor) -> torch.Tensor:
        """The sentence vector the head reads: the encoder's outputs averaged over the tokens that are not padding."""
        mask = tokens != 0
        hidden = self.encoder(input_ids=tokens, attention_mask=mask.long()).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)

    @torch.no_grad()
    def merged_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model with each adapter folded into its projection (W + scaling * B A), the base's
        tensor names, plus `head.weight` and `head.bias`: what loads into a plain BERT and a linear head."""
        merged = {name: tensor.detach().clone() for name, tensor in base_weights(self.config.base).items()}
        for index, layer in enumerate(self.encoder.encoder.layer):
            for path in PROJECTIONS.values():
                delta = layer.get_submodule(path).get_delta_weight(ADAPTER)
                name = f"encoder.layer.{index}.{path}.weight"
                merged[name] = merged[name] + delta.to(merged[name].device)
        merged["head.weight"] = self.head.weight.detach().clone()
        merged["head.bias"] = self.head.bias.detach().clone()
        return merged
