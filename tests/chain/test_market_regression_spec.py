"""A packed dataset's `task` (issue 34 item 3): `"task": "regression"` declares one number per sample to predict,
`num_classes` 1 and features only; absent (or "classification") it is the classes it always was. The chain checks
it with integers and names alone, and compute's spec parser reads the same field into `DatasetSpec.task`."""

from __future__ import annotations

import json

import pytest

from trolly.chain.market.datasets import dataset_shape, dataset_task
from trolly.chain.market.errors import InvalidSpec
from trolly.chain.market.spec import validate_spec
from trolly.compute.errors import SpecError
from trolly.compute.spec import example_spec, parse_spec

HASH = "ab" * 32
REGRESSION = {"name": "packed", "manifest_hash": HASH, "input_size": 11, "num_classes": 1, "task": "regression"}


def spec_bytes(dataset: dict, arch: str = "mlp") -> bytes:
    return json.dumps(example_spec(HASH, model={"arch": arch, "config": {"hidden": [8]} if arch == "mlp" else {}},
                                   dataset=dataset)).encode()


def test_a_regression_dataset_declares_one_output_and_the_model_is_bounded_by_it():
    assert dataset_shape(REGRESSION) == (11, 1, 0) and dataset_task(REGRESSION) == "regression"
    summary = validate_spec(spec_bytes(REGRESSION), 4)
    assert summary.footprint.parameters == 11 * 8 + 8 + 8 * 1 + 1
    spec = parse_spec(spec_bytes(REGRESSION))
    assert (spec.dataset.task, spec.dataset.num_classes, spec.dataset.input_size) == ("regression", 1, 11)


def test_absent_or_named_classification_is_classification_and_bundled_data_is_classification():
    classes = {**REGRESSION, "num_classes": 3}
    del classes["task"]
    assert dataset_task(classes) == "classification" == dataset_task({**classes, "task": "classification"})
    assert parse_spec(spec_bytes(classes)).dataset.task == "classification"
    assert parse_spec(json.dumps(example_spec(HASH)).encode()).dataset.task == "classification"  # digits


@pytest.mark.parametrize("dataset, words", [
    ({**REGRESSION, "num_classes": 2}, "num_classes must be 1"),
    ({**REGRESSION, "num_classes": True}, "num_classes must be 1"),
    ({**REGRESSION, "task": "ranking"}, "dataset.task must be one of classification, regression"),
    ({**REGRESSION, "task": 1}, "dataset.task must be one of"),
    ({**REGRESSION, "context": 11}, "regression dataset holds features"),
    ({**REGRESSION, "task": "classification"}, "num_classes must be an integer in 2"),
    ({"name": "digits", "manifest_hash": HASH, "task": "regression"}, "bundled"),
])
def test_the_chain_and_compute_refuse_a_task_field_that_does_not_fit(dataset, words):
    raw = spec_bytes(dataset)
    with pytest.raises(InvalidSpec, match=words):
        validate_spec(raw, 4)
    with pytest.raises(SpecError, match=words):
        parse_spec(raw)


def test_a_regression_dataset_fits_no_text_model():
    with pytest.raises(InvalidSpec, match="does not fit"):
        validate_spec(json.dumps(example_spec(HASH, model={"arch": "transformer", "config": {}},
                                              dataset=REGRESSION)).encode(), 4)
