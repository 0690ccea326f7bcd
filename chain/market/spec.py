"""Validating a task spec (docs/protocol.md section 1) without computing with a float.

The chain stores the spec's exact bytes and their sha256; workers and verifiers read the spec from the chain.
The schema is declared here once: the version, the field sets, the names from the fixed registries, the limits
and the hyperparameters' ranges. `compute/spec.py` imports it to build its dataclasses (required and optional
fields, unknown ones refused, integers where integers are required, hyperparameters within their ranges), so
that a spec the chain accepts is one every worker can run.
Numbers with a fraction or exponent are parsed as `Decimal` and only compared against exact decimal bounds:
nothing on chain computes with a float. The bytes are read by `load_untrusted_json`, whose limits are explicit
(duplicate keys and NaN/Infinity refused, because two readers could take different values from them). `training.rounds` must equal the message's `rounds`.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..codec import JsonRejected, load_untrusted_json
from .datasets import (CLASSIFICATION, DATASETS, PACKED_CONTEXT_FIELD, PACKED_SHAPE_FIELDS, PACKED_TASK_FIELD,
                       dataset_shape, dataset_task)
from .errors import InvalidBlobUrl, InvalidSpec
from .urls import check_blob_url
from .footprint import Footprint, model_footprint

SPEC_VERSION = 1
MODEL_ARCHS = ("cnn", "lora-text", "mlp", "transformer")
CODECS = ("fp16", "fp32", "int8", "sign", "ternary", "topk", "topk-fp16", "topk-int8", "topk-int8-sparse")
"""The fixed codec names of docs/protocol.md section 2a (`compute/codecs`)."""
INSTRUCTION_SETS = ("avx2", "avx512", "default")
MAX_CHECKPOINT_EVERY = 10
"""Segments are at most 10 inner steps long (short segments bound honest divergence: docs/architecture.md section 5)."""
MAX_INTEGER = (1 << 63) - 1
MAX_DATASET_URLS = 16
"""Most base URLs a spec may name for its dataset; each obeys the blob URL rules (`chain/market/urls.py`)."""
DEFAULT_DATASET_MAX_SHARDS = 1_024
"""A dataset's shard count (train and test together) when a spec declares no `dataset.max_shards`."""
DEFAULT_DATASET_MAX_BYTES = 1 << 30
"""A dataset's shard bytes (train and test together) when a spec declares no `dataset.max_bytes`."""


# (lower bound, lower bound open?, upper bound (always open)) of each hyperparameter.
INNER_OPTIMIZER = {"lr": (0, True, 10), "weight_decay": (0, False, 10), "beta1": (0, False, 1),
                   "beta2": (0, False, 1), "eps": (0, True, 1)}
OUTER_OPTIMIZER = {"lr": (0, True, 10), "momentum": (0, False, 1)}
SCHEDULES = ("constant", "cosine", "linear")
"""The inner learning-rate schedules of docs/protocol.md section 1 (`compute/lr_schedule.py`)."""
DECAYING_SCHEDULES = ("cosine", "linear")
"""The schedules that decay to a `final_lr` (a constant schedule has none)."""
FINAL_LR = (0, False, 10)
"""The range of a decaying schedule's `final_lr`, as the hyperparameters' above; it may not exceed the lr."""
INNER_OPTIMIZER_NAME = "adamw"
OUTER_OPTIMIZER_NAME = "nesterov"
DEFAULT_INNER_LR = Decimal("0.001")
"""compute's AdamW lr when a spec names none (a schedule's final_lr may not exceed it)."""
DEFAULT_THREADS = 1
"""The determinism profile's thread count when a spec names none."""
TORCH_KERNEL = "torch"
"""The kernel of the CPU and GPU profiles (`torch-<v>/...`, `market.profiles`): PyTorch, as `compute.training` runs it."""
WASM32_KERNEL = "wasm32"
"""The browser worker's kernel (`wasm32/kernel-<v>`, docs/browser-worker.md): an MLP on classification features only."""
KERNELS = (TORCH_KERNEL, WASM32_KERNEL)
"""The training kernels a spec's `determinism.kernels` may allow; each names a family of determinism profiles."""
DEFAULT_KERNELS = (TORCH_KERNEL,)
"""The kernels a spec allows when it names none: PyTorch's profiles alone."""


@dataclass(frozen=True)
class Fields:
    """The fields of one JSON object of the spec: those it must have and those it may have; no others."""

    required: frozenset[str]
    optional: frozenset[str] = frozenset()


SPEC_FIELDS = Fields(frozenset({"version", "model", "dataset", "training", "codec"}), frozenset({"determinism"}))
MODEL_FIELDS = Fields(frozenset({"arch"}), frozenset({"config", "base"}))
DATASET_FIELDS = Fields(frozenset({"name", "manifest_hash"}),
                        frozenset({"urls", "max_shards", "max_bytes", "cipher", *PACKED_SHAPE_FIELDS,
                                   PACKED_CONTEXT_FIELD, PACKED_TASK_FIELD}))
TRAINING_FIELDS = Fields(frozenset({"rounds", "inner_steps", "batch_size", "checkpoint_every", "seed"}),
                         frozenset({"inner_optimizer", "outer_optimizer"}))
INNER_OPTIMIZER_FIELDS = Fields(frozenset({"name"}), frozenset(INNER_OPTIMIZER) | {"schedule"})
OUTER_OPTIMIZER_FIELDS = Fields(frozenset({"name"}), frozenset(OUTER_OPTIMIZER))
SCHEDULE_FIELDS = Fields(frozenset({"name"}), frozenset({"warmup_steps", "final_lr"}))
DETERMINISM_FIELDS = Fields(frozenset({"threads"}), frozenset({"instruction_set", "kernels"}))


@dataclass(frozen=True)
class SpecSummary:
    """The integers the chain needs from a spec."""

    rounds: int
    inner_steps: int
    batch_size: int
    checkpoint_every: int
    seed: int
    footprint: Footprint
    """The model's parameter count and memory estimate (`market.footprint`), which `SubmitTask` bounds."""
    dataset_max_shards: int = DEFAULT_DATASET_MAX_SHARDS
    dataset_max_bytes: int = DEFAULT_DATASET_MAX_BYTES
    """The most shards and shard bytes the dataset's manifest may list, which `SubmitTask` bounds by the market's
    `max_dataset_shards` and `max_dataset_bytes`: a worker refuses a manifest beyond them before it joins and a
    verifier before it fetches a shard, so a requester cannot hand either more than the task declared."""
    private_data: int = 0
    """1 when `dataset.cipher` names the cipher of a private dataset (`DATA_CIPHER`): the task commits to its
    data key (`MsgSubmitTask.data_key_hash`), delivered to its members after the start and to the validators
    drawn to check it (`MsgDeliverKey`, `market.data_keys`)."""
    kernels: tuple[str, ...] = DEFAULT_KERNELS
    """The training kernels the spec allows (`determinism.kernels`): a commitment's determinism profile must be
    one of theirs (`market.profiles.check_replayable`)."""


DATA_CIPHER = "xsalsa20poly1305"
"""The one cipher a private dataset's shards may be encrypted with (PyNaCl's secretbox)."""


def _private_data(dataset: dict) -> int:
    if "cipher" not in dataset:
        return 0
    if dataset["cipher"] != DATA_CIPHER:
        raise InvalidSpec(f"dataset.cipher must be {DATA_CIPHER!r}, got {dataset['cipher']!r}"[:200])
    return 1


def kernels_problem(kernels: Any, arch: Any, dataset: dict) -> str | None:
    """What is wrong with `kernels` as the `determinism.kernels` of a spec training `arch` on `dataset` (None:
    nothing). Shared with `compute/spec.py`. The wasm32 kernel trains the MLP template on classification
    features and nothing else, so a spec allowing it for anything else could be joined by workers who cannot
    train it."""
    if (not isinstance(kernels, list) or not kernels
            or not all(isinstance(kernel, str) and kernel in KERNELS for kernel in kernels)
            or len(set(kernels)) != len(kernels)):
        return f"determinism.kernels must be a list of distinct kernels among {', '.join(KERNELS)}, got {kernels!r}"[:300]
    if WASM32_KERNEL in kernels:
        _, _, context = dataset_shape(dataset)
        task = dataset_task(dataset)
        if arch != "mlp" or task != CLASSIFICATION or context:
            what = f"{task} data" if not context else "token ids"
            return (f"determinism.kernels may allow {WASM32_KERNEL} only for an mlp on classification features (the "
                    f"kernel trains nothing else), not for a {arch} on {what}"[:300])
    return None


def parse_spec(raw: bytes) -> dict:
    """The spec as a dict with `Decimal` for every non-integer number; raises InvalidSpec, and only that, for any
    bytes (limits in `trolly.chain.codec`: depth, number length and exponent, duplicate keys, NaN, surrogates)."""
    try:
        return load_untrusted_json(raw)
    except JsonRejected as exc:
        raise InvalidSpec(f"spec is not acceptable JSON: {exc}") from None


def field_problem(value: Any, where: str, fields: Fields) -> str | None:
    """What is wrong with `value` as the object `fields` describes (None: nothing). Shared with `compute/spec.py`,
    which raises its own error type with the same words."""
    if not isinstance(value, dict):
        return f"{where} must be a JSON object"
    missing = sorted(fields.required - set(value))
    if missing:
        return f"{where} is missing {', '.join(missing)}"
    unknown = sorted(set(value) - fields.required - fields.optional)
    if unknown:
        return f"{where} has unknown field(s) {', '.join(unknown)}"
    return None


def _object(value: Any, where: str, fields: Fields) -> dict:
    problem = field_problem(value, where, fields)
    if problem is not None:
        raise InvalidSpec(problem)
    return value


def _integer(value: Any, where: str, minimum: int = 1, maximum: int = MAX_INTEGER) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidSpec(f"{where} must be an integer in {minimum}..{maximum}, got {value!r}")
    return value


def _choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InvalidSpec(f"{where} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _hyperparameters(value: Any, where: str, name: str, ranges: dict[str, tuple[int, bool, int]],
                     schema: Fields) -> dict:
    fields = _object(value, where, schema)
    _choice(fields["name"], f"{where}.name", (name,))
    for field, (low, low_open, high) in ranges.items():
        if field in fields:
            _number(fields[field], f"{where}.{field}", low, low_open, high)
    return fields


def _number(number: Any, where: str, low: int, low_open: bool, high: int) -> Decimal | int:
    if isinstance(number, bool) or not isinstance(number, (int, Decimal)):
        raise InvalidSpec(f"{where} must be a number, got {number!r}")
    try:
        inside = (low < number if low_open else low <= number) and number < high
    except decimal.InvalidOperation:
        inside = False
    if not inside:
        raise InvalidSpec(f"{where} must be in {'(' if low_open else '['}{low}, {high}), got {number}")
    return number


def _schedule(value: Any, lr: Decimal | int, total_steps: int) -> None:
    """The optional inner lr schedule, checked as `compute.spec` parses it."""
    where = "training.inner_optimizer.schedule"
    fields = _object(value, where, SCHEDULE_FIELDS)
    name = _choice(fields["name"], f"{where}.name", SCHEDULES)
    if name not in DECAYING_SCHEDULES and "final_lr" in fields:
        raise InvalidSpec(f"{where}.final_lr is only for a decaying schedule (linear, cosine), not constant")
    if "warmup_steps" in fields:
        warmup = _integer(fields["warmup_steps"], f"{where}.warmup_steps", 0)
        if warmup > total_steps:
            raise InvalidSpec(f"{where}.warmup_steps must be at most the task's {total_steps} steps, got {warmup}")
    if "final_lr" in fields and _number(fields["final_lr"], f"{where}.final_lr", *FINAL_LR) > lr:
        raise InvalidSpec(f"{where}.final_lr must be at most training.inner_optimizer.lr ({lr}), "
                          f"got {fields['final_lr']}")


def _kernels(determinism: Any, arch: str, dataset: dict) -> tuple[str, ...]:
    """The spec's allowed kernels (DEFAULT_KERNELS when it names none); the section's other fields are checked
    after (`validate_spec`)."""
    if not isinstance(determinism, dict) or "kernels" not in determinism:
        return DEFAULT_KERNELS
    problem = kernels_problem(determinism["kernels"], arch, dataset)
    if problem is not None:
        raise InvalidSpec(problem)
    return tuple(determinism["kernels"])


def validate_spec(raw: bytes, rounds: int) -> SpecSummary:
    """Check `raw` against the spec schema and the message's `rounds`; returns the integers the chain uses."""
    spec = _object(parse_spec(raw), "spec", SPEC_FIELDS)
    if spec["version"] != SPEC_VERSION or isinstance(spec["version"], bool):
        raise InvalidSpec(f"spec.version must be {SPEC_VERSION}, got {spec['version']!r}")

    model = _object(spec["model"], "model", MODEL_FIELDS)
    _choice(model["arch"], "model.arch", MODEL_ARCHS)
    if not isinstance(model.get("config", {}), dict):
        raise InvalidSpec("model.config must be a JSON object")

    dataset = _object(spec["dataset"], "dataset", DATASET_FIELDS)
    dataset_shape(dataset)  # a known name; a packed dataset declares its shape
    manifest = dataset["manifest_hash"]
    if not isinstance(manifest, str) or len(manifest) != 64 or any(c not in "0123456789abcdef" for c in manifest):
        raise InvalidSpec("dataset.manifest_hash must be 64 lower-case hex digits")
    urls = dataset.get("urls", [])
    if not isinstance(urls, list) or len(urls) > MAX_DATASET_URLS:
        raise InvalidSpec(f"dataset.urls must be a list of at most {MAX_DATASET_URLS} http(s) base URLs")
    for url in urls:
        try:
            check_blob_url(url)
        except InvalidBlobUrl as exc:
            raise InvalidSpec(f"dataset.urls: {exc.log.replace('blob_url', 'a URL')}") from None

    training = _object(spec["training"], "training", TRAINING_FIELDS)
    summary = SpecSummary(
        rounds=_integer(training["rounds"], "training.rounds"),
        inner_steps=_integer(training["inner_steps"], "training.inner_steps"),
        batch_size=_integer(training["batch_size"], "training.batch_size"),
        checkpoint_every=_integer(training["checkpoint_every"], "training.checkpoint_every", 1, MAX_CHECKPOINT_EVERY),
        seed=_integer(training["seed"], "training.seed", 0),
        footprint=model_footprint(model["arch"], model.get("config", {}), dataset,
                                  _integer(training["batch_size"], "training.batch_size"), model.get("base")),
        dataset_max_shards=_integer(dataset.get("max_shards", DEFAULT_DATASET_MAX_SHARDS), "dataset.max_shards"),
        dataset_max_bytes=_integer(dataset.get("max_bytes", DEFAULT_DATASET_MAX_BYTES), "dataset.max_bytes"),
        private_data=_private_data(dataset),
        kernels=_kernels(spec.get("determinism", {}), model["arch"], dataset),
    )
    if summary.rounds != rounds:
        raise InvalidSpec(f"training.rounds is {summary.rounds} but the message asks for {rounds} rounds")
    inner = _hyperparameters(training.get("inner_optimizer", {"name": INNER_OPTIMIZER_NAME}),
                             "training.inner_optimizer", INNER_OPTIMIZER_NAME, INNER_OPTIMIZER, INNER_OPTIMIZER_FIELDS)
    if "schedule" in inner:
        _schedule(inner["schedule"], inner.get("lr", DEFAULT_INNER_LR), summary.rounds * summary.inner_steps)
    _hyperparameters(training.get("outer_optimizer", {"name": OUTER_OPTIMIZER_NAME}), "training.outer_optimizer",
                     OUTER_OPTIMIZER_NAME, OUTER_OPTIMIZER, OUTER_OPTIMIZER_FIELDS)

    _choice(spec["codec"], "codec", CODECS)
    determinism = _object(spec.get("determinism", {"threads": DEFAULT_THREADS}), "determinism", DETERMINISM_FIELDS)
    _integer(determinism["threads"], "determinism.threads")
    if "instruction_set" in determinism:
        _choice(determinism["instruction_set"], "determinism.instruction_set", INSTRUCTION_SETS)
    return summary
