"""The task spec (docs/protocol.md section 1) parsed into frozen dataclasses.

The chain stores the spec's exact bytes and their sha256 and checks only its structure; this module is where
its floats are read and every field is validated, with an error naming the field that is wrong. Unknown keys
are refused, so a typo cannot silently fall back to a default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
from collections.abc import Mapping
from typing import Any

from .codecs import CODEC_REGISTRY
from .determinism import INSTRUCTION_SETS, DeterminismProfile
from .errors import SpecError
from .models import MODEL_REGISTRY

SPEC_VERSION = 1
MAX_CHECKPOINT_EVERY = 10  # replayed segments stay short so honest drift cannot hide a cheat
DATASET_NAMES = ("digits", "pycorpus")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    arch: str
    config: Mapping[str, Any]  # read-only mapping of the architecture's own fields


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    name: str
    manifest_hash: str
    urls: tuple[str, ...]


SCHEDULE_NAMES = ("constant", "linear", "cosine")


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    """The inner lr over the task's nominal steps (`compute.schedule.inner_lr`): a linear warm-up over
    `warmup_steps`, then constant, or a linear or cosine decay from `lr` to `final_lr` at the last step."""

    name: str = "constant"
    warmup_steps: int = 0
    final_lr: float = 0.0  # cosine and linear only


@dataclasses.dataclass(frozen=True)
class InnerOptimizerSpec:
    name: str = "adamw"
    lr: float = 0.001
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    schedule: ScheduleSpec = ScheduleSpec()


@dataclasses.dataclass(frozen=True)
class OuterOptimizerSpec:
    name: str = "nesterov"
    lr: float = 0.7
    momentum: float = 0.9


@dataclasses.dataclass(frozen=True)
class TrainingSpec:
    rounds: int
    inner_steps: int
    batch_size: int
    checkpoint_every: int
    seed: int
    inner_optimizer: InnerOptimizerSpec = InnerOptimizerSpec()
    outer_optimizer: OuterOptimizerSpec = OuterOptimizerSpec()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    version: int
    model: ModelSpec
    dataset: DatasetSpec
    training: TrainingSpec
    codec: str
    determinism: DeterminismProfile

    def num_checkpoints(self, steps: int) -> int:
        """n + 1 checkpoints (0..n) for a round of `steps` inner steps, n = ceil(steps / k)."""
        return -(-steps // self.training.checkpoint_every) + 1


def _object(value: Any, where: str, required: set[str], optional: set[str] = frozenset()) -> dict:
    if not isinstance(value, dict):
        raise SpecError(f"{where} must be a JSON object")
    missing = sorted(required - set(value))
    if missing:
        raise SpecError(f"{where} is missing {', '.join(missing)}")
    unknown = sorted(set(value) - required - set(optional))
    if unknown:
        raise SpecError(f"{where} has unknown field(s) {', '.join(unknown)}")
    return value


def _positive_int(value: Any, where: str, allow_zero: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1) or value >= 2**63:
        raise SpecError(f"{where} must be a {'non-negative' if allow_zero else 'positive'} integer, got {value!r}")
    return value


def _number(value: Any, where: str, low: float, high: float, low_open: bool = False) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise SpecError(f"{where} must be a number, got {value!r}")
    value = float(value)
    if not (low < value if low_open else low <= value) or not value < high:
        raise SpecError(f"{where} must be in {'(' if low_open else '['}{low}, {high}), got {value!r}")
    return value


def _string(value: Any, where: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(f"{where} must be a non-empty string")
    if choices is not None and value not in choices:
        raise SpecError(f"{where} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _parse_schedule(value: Any, lr: float, total_steps: int) -> ScheduleSpec:
    where = "training.inner_optimizer.schedule"
    name = _string(_object(value, where, {"name"}, {"warmup_steps", "final_lr"})["name"], f"{where}.name",
                   SCHEDULE_NAMES)
    if name == "constant" and "final_lr" in value:
        raise SpecError(f"{where}.final_lr is only for a decaying schedule (linear, cosine), not constant")
    warmup_steps = _positive_int(value.get("warmup_steps", 0), f"{where}.warmup_steps", allow_zero=True)
    if warmup_steps > total_steps:
        raise SpecError(f"{where}.warmup_steps must be at most the task's {total_steps} steps (rounds x inner_steps), "
                        f"got {warmup_steps}")
    final_lr = _number(value.get("final_lr", 0.0), f"{where}.final_lr", 0.0, 10.0)
    if final_lr > lr:
        raise SpecError(f"{where}.final_lr must be at most training.inner_optimizer.lr ({lr!r}), got {final_lr!r}")
    return ScheduleSpec(name=name, warmup_steps=warmup_steps, final_lr=final_lr)


def _parse_inner(value: Any, total_steps: int) -> InnerOptimizerSpec:
    fields = _object(value, "training.inner_optimizer", {"name"},
                     {"lr", "weight_decay", "beta1", "beta2", "eps", "schedule"})
    defaults = InnerOptimizerSpec()
    lr = _number(fields.get("lr", defaults.lr), "training.inner_optimizer.lr", 0.0, 10.0, low_open=True)
    return InnerOptimizerSpec(
        name=_string(fields["name"], "training.inner_optimizer.name", ("adamw",)),
        lr=lr,
        weight_decay=_number(fields.get("weight_decay", defaults.weight_decay), "training.inner_optimizer.weight_decay", 0.0, 10.0),
        beta1=_number(fields.get("beta1", defaults.beta1), "training.inner_optimizer.beta1", 0.0, 1.0),
        beta2=_number(fields.get("beta2", defaults.beta2), "training.inner_optimizer.beta2", 0.0, 1.0),
        eps=_number(fields.get("eps", defaults.eps), "training.inner_optimizer.eps", 0.0, 1.0, low_open=True),
        schedule=_parse_schedule(fields.get("schedule", {"name": "constant"}), lr, total_steps),
    )


def _parse_outer(value: Any) -> OuterOptimizerSpec:
    fields = _object(value, "training.outer_optimizer", {"name"}, {"lr", "momentum"})
    defaults = OuterOptimizerSpec()
    return OuterOptimizerSpec(
        name=_string(fields["name"], "training.outer_optimizer.name", ("nesterov",)),
        lr=_number(fields.get("lr", defaults.lr), "training.outer_optimizer.lr", 0.0, 10.0, low_open=True),
        momentum=_number(fields.get("momentum", defaults.momentum), "training.outer_optimizer.momentum", 0.0, 1.0),
    )


def _parse_training(value: Any) -> TrainingSpec:
    fields = _object(value, "training", {"rounds", "inner_steps", "batch_size", "checkpoint_every", "seed"},
                     {"inner_optimizer", "outer_optimizer"})
    checkpoint_every = _positive_int(fields["checkpoint_every"], "training.checkpoint_every")
    if checkpoint_every > MAX_CHECKPOINT_EVERY:
        raise SpecError(f"training.checkpoint_every must be at most {MAX_CHECKPOINT_EVERY}, got {checkpoint_every}")
    rounds = _positive_int(fields["rounds"], "training.rounds")
    inner_steps = _positive_int(fields["inner_steps"], "training.inner_steps")
    return TrainingSpec(
        rounds=rounds,
        inner_steps=inner_steps,
        batch_size=_positive_int(fields["batch_size"], "training.batch_size"),
        checkpoint_every=checkpoint_every,
        seed=_positive_int(fields["seed"], "training.seed", allow_zero=True),
        inner_optimizer=_parse_inner(fields.get("inner_optimizer", {"name": "adamw"}), rounds * inner_steps),
        outer_optimizer=_parse_outer(fields.get("outer_optimizer", {"name": "nesterov"})),
    )


def spec_from_dict(document: Any) -> TaskSpec:
    """Validate a decoded spec document and build the TaskSpec."""
    fields = _object(document, "spec", {"version", "model", "dataset", "training", "codec"}, {"determinism"})
    if fields["version"] != SPEC_VERSION or isinstance(fields["version"], bool):
        raise SpecError(f"spec.version must be {SPEC_VERSION}, got {fields['version']!r}")
    model = _object(fields["model"], "model", {"arch"}, {"config"})
    config = model.get("config", {})
    if not isinstance(config, dict):
        raise SpecError("model.config must be a JSON object")
    dataset = _object(fields["dataset"], "dataset", {"name", "manifest_hash"}, {"urls"})
    manifest_hash = _string(dataset["manifest_hash"], "dataset.manifest_hash")
    if len(manifest_hash) != 64 or any(c not in "0123456789abcdef" for c in manifest_hash):
        raise SpecError("dataset.manifest_hash must be 64 lower-case hex digits")
    urls = dataset.get("urls", [])
    if not isinstance(urls, list) or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls):
        raise SpecError("dataset.urls must be a list of http(s) URLs")
    determinism = _object(fields.get("determinism", {"threads": 1}), "determinism", {"threads"}, {"instruction_set"})
    instruction_set = determinism.get("instruction_set")
    if instruction_set is not None:
        _string(instruction_set, "determinism.instruction_set", INSTRUCTION_SETS)
    return TaskSpec(
        version=SPEC_VERSION,
        model=ModelSpec(arch=_string(model["arch"], "model.arch", tuple(sorted(MODEL_REGISTRY))),
                        config=types.MappingProxyType(dict(config))),
        dataset=DatasetSpec(name=_string(dataset["name"], "dataset.name", DATASET_NAMES), manifest_hash=manifest_hash,
                            urls=tuple(u.rstrip("/") for u in urls)),
        training=_parse_training(fields["training"]),
        codec=_string(fields["codec"], "codec", tuple(sorted(CODEC_REGISTRY))),
        determinism=DeterminismProfile(threads=_positive_int(determinism["threads"], "determinism.threads"),
                                       instruction_set=instruction_set),
    )


def parse_spec(data: bytes | str) -> TaskSpec:
    """Parse the spec's JSON bytes (exactly what was submitted on chain)."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise SpecError(f"spec is not valid JSON: {error}") from None
    return spec_from_dict(document)


def spec_hash(data: bytes) -> str:
    """Hex sha256 of the spec's exact bytes, as the chain records it."""
    return hashlib.sha256(data).hexdigest()


def example_spec(manifest_hash: str, **overrides: Any) -> dict:
    """A complete spec document (the one in docs/protocol.md) for tests, benchmarks and the localnet demo.
    `overrides` replace top-level sections."""
    document = {
        "version": SPEC_VERSION,
        "model": {"arch": "mlp", "config": {"hidden": [1024, 1024]}},
        "dataset": {"name": "digits", "manifest_hash": manifest_hash, "urls": ["http://127.0.0.1:8600"]},
        "training": {
            "rounds": 4, "inner_steps": 50, "batch_size": 32, "checkpoint_every": 10, "seed": 1234,
            "inner_optimizer": {"name": "adamw", "lr": 0.001, "weight_decay": 0.0},
            "outer_optimizer": {"name": "nesterov", "lr": 0.7, "momentum": 0.9},
        },
        "codec": "topk-int8",
        "determinism": {"threads": 1},
    }
    document.update(overrides)
    return document
