"""The task page's baseline as the console keeps it (`console/baselines.py`): measured once from the console's
own copy of the data and kept on disk, a dataset the fitting function refuses recorded with why, an answer that
breaks the contract refused, nothing fitted on a text corpus or without a fitting function."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from console_helpers import logistic_baseline
from trolly.compute.data import Dataset
from trolly.compute.errors import DatasetError
from trolly.compute.models import DataShape
from trolly.console.baselines import Baselines, checked_answer
from trolly.console.config import ConsoleConfig


def two_blobs(kind: str = "classification") -> Dataset:
    generator = torch.Generator().manual_seed(0)
    targets = torch.arange(40) % 2
    inputs = torch.randn(40, 3, generator=generator) + 3 * targets[:, None]
    return Dataset("blobs", "ab" * 32, DataShape(kind, 3, 2), inputs[:30], targets[:30], inputs[30:], targets[30:])


def measured(tmp_path, fit, dataset: Dataset, task_id: int = 7) -> tuple[dict | None, Baselines]:
    baselines = Baselines(ConsoleConfig("http://127.0.0.1:1", tmp_path), fit)
    asyncio.run(baselines.measure(task_id, dataset))
    return baselines.current(task_id), baselines


def test_a_baseline_is_measured_once_and_read_back_from_disk(tmp_path):
    calls = []

    def fit(dataset):
        calls.append(dataset.name)
        return logistic_baseline(dataset)

    answer, baselines = measured(tmp_path, fit, two_blobs())
    asyncio.run(baselines.measure(7, two_blobs()))  # measured already: not fitted again
    assert calls == ["blobs"] and answer["metric"] == "accuracy" and answer["baseline"] == 1.0
    again = Baselines(ConsoleConfig("http://127.0.0.1:1", tmp_path), None)  # a console started again
    assert again.current(7) == answer == json.loads((tmp_path / "console" / "baselines" / "task-7.json").read_text())


def test_data_the_fitting_function_refuses_is_recorded_with_why(tmp_path):
    def fit(dataset):
        raise DatasetError("one class in the training split")

    answer, _ = measured(tmp_path, fit, two_blobs())
    assert answer == {"problem": "no baseline for this data: one class in the training split"}


@pytest.mark.parametrize("answer", [{"metric": "accuracy", "baseline": "0.9", "baseline_name": "x", "seconds": 1},
                                    {"metric": "accuracy", "baseline": True, "baseline_name": "x", "seconds": 1},
                                    {"baseline": 0.9, "baseline_name": "x", "seconds": 1}, ["accuracy", 0.9]])
def test_an_answer_that_breaks_the_contract_is_refused(answer):
    with pytest.raises(ValueError, match="the baseline's answer has no"):
        checked_answer(answer)


def test_nothing_is_fitted_on_a_text_corpus_or_without_a_fitting_function(tmp_path):
    assert measured(tmp_path / "text", logistic_baseline, two_blobs("text"))[0] is None
    assert measured(tmp_path / "none", None, two_blobs())[0] is None
    assert not (tmp_path / "text" / "console" / "baselines").exists()
