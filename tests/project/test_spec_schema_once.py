"""The task spec's schema is declared once (chain/market/spec.py): the chain and compute accept the same specs.

For each hyperparameter at and around its bounds, and for every field set, the chain's structural check and
compute's parser agree: a spec the chain accepts is one compute builds, and one the chain refuses compute
refuses too.
"""

import copy
import json

import pytest

from trolly.chain.market import spec as chain_spec
from trolly.chain.market.errors import InvalidSpec
from trolly.compute import spec as compute_spec
from trolly.compute.errors import SpecError

MANIFEST = "ab" * 32


def accepted_by_chain(document: dict) -> bool:
    try:
        rounds = document.get("training", {}).get("rounds", 4) if isinstance(document.get("training"), dict) else 4
        chain_spec.validate_spec(json.dumps(document).encode(), rounds)
    except InvalidSpec:
        return False
    return True


def accepted_by_compute(document: dict) -> bool:
    try:
        compute_spec.spec_from_dict(document)
    except SpecError:
        return False
    return True


def with_value(section: str, field: str, value) -> dict:
    document = copy.deepcopy(compute_spec.example_spec(MANIFEST))
    document["training"][section][field] = value
    return document


def bound_cases():
    for section, ranges in (("inner_optimizer", chain_spec.INNER_OPTIMIZER),
                            ("outer_optimizer", chain_spec.OUTER_OPTIMIZER)):
        for field, (low, _, high) in ranges.items():
            for value in (low, low + 1e-9, high - 1e-9, high, -1, high + 1):
                yield section, field, value


@pytest.mark.parametrize("section, field, value", list(bound_cases()))
def test_chain_and_compute_agree_on_each_hyperparameter_bound(section, field, value):
    document = with_value(section, field, value)
    assert accepted_by_chain(document) == accepted_by_compute(document)


def test_chain_and_compute_both_refuse_a_segment_longer_than_the_limit():
    document = compute_spec.example_spec(MANIFEST)
    document["training"]["checkpoint_every"] = chain_spec.MAX_CHECKPOINT_EVERY + 1
    assert not accepted_by_chain(document) and not accepted_by_compute(document)
    document["training"]["checkpoint_every"] = chain_spec.MAX_CHECKPOINT_EVERY
    assert accepted_by_chain(document) and accepted_by_compute(document)


@pytest.mark.parametrize("fields, path", [
    (chain_spec.SPEC_FIELDS, ()), (chain_spec.MODEL_FIELDS, ("model",)), (chain_spec.DATASET_FIELDS, ("dataset",)),
    (chain_spec.TRAINING_FIELDS, ("training",)),
    (chain_spec.INNER_OPTIMIZER_FIELDS, ("training", "inner_optimizer")),
    (chain_spec.OUTER_OPTIMIZER_FIELDS, ("training", "outer_optimizer")),
])
def test_chain_and_compute_both_refuse_an_unknown_field_and_a_missing_one(fields, path):
    document = compute_spec.example_spec(MANIFEST)
    target = document
    for key in path:
        target = target[key]
    target["unknown_field"] = 1
    assert not accepted_by_chain(document) and not accepted_by_compute(document)
    del target["unknown_field"]
    for name in fields.required:
        missing = copy.deepcopy(document)
        inner = missing
        for key in path:
            inner = inner[key]
        del inner[name]
        assert not accepted_by_chain(missing) and not accepted_by_compute(missing), name


def test_compute_names_the_chain_schema_rather_than_a_copy_of_it():
    assert compute_spec.SPEC_VERSION is chain_spec.SPEC_VERSION
    assert compute_spec.MAX_CHECKPOINT_EVERY is chain_spec.MAX_CHECKPOINT_EVERY
    assert compute_spec.DATASET_NAMES is chain_spec.DATASETS
    assert compute_spec.SCHEDULE_NAMES is chain_spec.SCHEDULES


def test_the_instruction_sets_compute_orders_are_the_ones_the_chain_accepts():
    from trolly.compute.determinism import INSTRUCTION_SETS

    assert set(INSTRUCTION_SETS) == set(chain_spec.INSTRUCTION_SETS)


@pytest.mark.parametrize("field", ["max_shards", "max_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, "8", True, 1, 2**40])
def test_chain_and_compute_agree_on_the_declared_dataset_bounds(field, value):
    document = compute_spec.example_spec(MANIFEST)
    document["dataset"][field] = value
    assert accepted_by_chain(document) == accepted_by_compute(document)
    assert accepted_by_chain(document) == (type(value) is int and value >= 1)


def test_compute_reads_the_chain_defaults_of_the_dataset_bounds():
    dataset = compute_spec.spec_from_dict(compute_spec.example_spec(MANIFEST)).dataset
    assert (dataset.max_shards, dataset.max_bytes) == (chain_spec.DEFAULT_DATASET_MAX_SHARDS,
                                                       chain_spec.DEFAULT_DATASET_MAX_BYTES)
