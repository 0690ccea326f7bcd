"""Validating a task spec (docs/protocol.md section 1) without computing with a float.

The chain stores the spec's exact bytes and their sha256; workers and verifiers read the spec from the chain.
Here we check only its structure: the JSON is parsed with decimals for numbers with a fraction or exponent
(learning rates stay opaque `Decimal`s that nothing computes with), required keys are present, names are
strings, integers are integers, and `training.rounds` agrees with the message. Duplicate keys are refused,
because two readers could take different values from them.
"""

from __future__ import annotations

import decimal
import json
import re
from dataclasses import dataclass
from typing import Any

from .errors import InvalidSpec

SPEC_VERSION = 1
MODEL_ARCHS = ("mlp", "cnn", "transformer")
DATASETS = ("digits", "pycorpus")
MAX_CHECKPOINT_EVERY = 10
"""Segments are at most 10 inner steps long (DESIGN section 5: short segments bound honest divergence)."""

_NAME = re.compile(r"^[a-z0-9][a-z0-9_+\-.]{0,63}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class SpecSummary:
    """The integers the chain needs from a spec."""

    rounds: int
    inner_steps: int
    batch_size: int
    checkpoint_every: int
    seed: int


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        duplicated = sorted({k for k in keys if keys.count(k) > 1})
        raise InvalidSpec(f"spec has duplicate keys: {', '.join(duplicated)}")
    return dict(pairs)


def _reject_constant(name: str) -> None:
    raise InvalidSpec(f"spec contains {name}, which is not JSON")


def parse_spec(raw: bytes) -> dict:
    """The spec as a dict with `Decimal` for every non-integer number; raises InvalidSpec."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSpec("spec is not UTF-8") from None
    try:
        value = json.loads(
            text,
            parse_float=decimal.Decimal,
            parse_constant=_reject_constant,
            object_pairs_hook=_reject_duplicates,
        )
    except json.JSONDecodeError as exc:
        raise InvalidSpec(f"spec is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidSpec("spec is nested too deeply") from None
    if not isinstance(value, dict):
        raise InvalidSpec("spec must be a JSON object")
    return value


def _section(spec: dict, name: str) -> dict:
    value = spec.get(name)
    if not isinstance(value, dict):
        raise InvalidSpec(f"spec.{name} must be an object")
    return value


def _integer(section: dict, path: str, key: str, minimum: int = 1, maximum: int | None = None) -> int:
    value = section.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidSpec(f"spec.{path}.{key} must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise InvalidSpec(f"spec.{path}.{key} must be {bound}, got {value}")
    return value


def _name(section: dict, path: str, key: str, allowed: tuple[str, ...] | None = None) -> str:
    value = section.get(key)
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidSpec(f"spec.{path}.{key} must be a lower-case name, got {value!r}")
    if allowed is not None and value not in allowed:
        raise InvalidSpec(f"spec.{path}.{key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _optimizer(training: dict, key: str) -> None:
    optimizer = training.get(key)
    if not isinstance(optimizer, dict):
        raise InvalidSpec(f"spec.training.{key} must be an object")
    _name(optimizer, f"training.{key}", "name")
    for field, value in optimizer.items():
        if field != "name" and (isinstance(value, bool) or not isinstance(value, (int, decimal.Decimal))):
            raise InvalidSpec(f"spec.training.{key}.{field} must be a number, got {value!r}")


def validate_spec(raw: bytes, rounds: int) -> SpecSummary:
    """Check `raw` against the spec schema and the message's `rounds`; returns the integers the chain uses."""
    spec = parse_spec(raw)
    version = spec.get("version")
    if version != SPEC_VERSION or isinstance(version, bool):
        raise InvalidSpec(f"spec.version must be {SPEC_VERSION}, got {version!r}")

    model = _section(spec, "model")
    _name(model, "model", "arch", MODEL_ARCHS)
    if "config" in model and not isinstance(model["config"], dict):
        raise InvalidSpec("spec.model.config must be an object")

    dataset = _section(spec, "dataset")
    _name(dataset, "dataset", "name", DATASETS)
    if not isinstance(dataset.get("manifest_hash"), str) or not _HEX64.match(dataset["manifest_hash"]):
        raise InvalidSpec("spec.dataset.manifest_hash must be 64 lower-case hex digits")
    urls = dataset.get("urls")
    if not isinstance(urls, list) or not urls or not all(
        isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls
    ):
        raise InvalidSpec("spec.dataset.urls must be a non-empty list of http(s) URLs")

    training = _section(spec, "training")
    summary = SpecSummary(
        rounds=_integer(training, "training", "rounds"),
        inner_steps=_integer(training, "training", "inner_steps"),
        batch_size=_integer(training, "training", "batch_size"),
        checkpoint_every=_integer(training, "training", "checkpoint_every", 1, MAX_CHECKPOINT_EVERY),
        seed=_integer(training, "training", "seed", 0, (1 << 63) - 1),
    )
    if summary.rounds != rounds:
        raise InvalidSpec(f"spec.training.rounds is {summary.rounds} but the message asks for {rounds} rounds")
    _optimizer(training, "inner_optimizer")
    _optimizer(training, "outer_optimizer")

    if not isinstance(spec.get("codec"), str) or not _NAME.match(spec["codec"]):
        raise InvalidSpec(f"spec.codec must be a codec name, got {spec.get('codec')!r}")
    determinism = _section(spec, "determinism")
    _integer(determinism, "determinism", "threads", 1, 1024)
    return summary
