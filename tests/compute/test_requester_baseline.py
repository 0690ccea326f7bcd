"""`task eval` scores the network's model beside a baseline the requester fits alone in seconds, on the same
split and the same features (`compute/requester/baseline.py`): a logistic regression on a table's features,
TF-IDF of the token ids with a logistic regression on texts packed for lora-text, balanced accuracy where the
labels are imbalanced; and it says whether the network beat it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from requester_helpers import iris_like, write_csv
from trolly.compute.data import Dataset
from trolly.compute.data.packing import open_packed
from trolly.compute.models import DataShape
from trolly.compute.requester.baseline import beside_baseline, fit_baseline, metric_of, score
from trolly.compute.requester.cli import prepare_data_submission
from trolly.compute.requester.results import TaskResult, evaluate_result, spec_shape
from trolly.compute.spec import parse_spec
from trolly.compute.training import initial_weights
from trolly.wallet.cli import cli

URLS = ("http://127.0.0.1:9999",)
FIELDS = {"metric", "score", "baseline", "baseline_name", "baseline_seconds", "beats_baseline", "verdict"}


def features(train_targets, test_targets, train_inputs=None, test_inputs=None, kind="classification", classes=2):
    """A Dataset by hand: one informative feature (the label plus noise) unless inputs are given."""
    generator = np.random.default_rng(1)

    def made(targets):
        return torch.tensor(np.stack([targets + generator.normal(0, 0.3, len(targets)),
                                      generator.normal(0, 1, len(targets))], axis=1), dtype=torch.float32)
    train_targets, test_targets = np.asarray(train_targets), np.asarray(test_targets)
    return Dataset("packed", "0" * 64, DataShape(kind, 2, classes),
                   made(train_targets) if train_inputs is None else train_inputs, torch.tensor(train_targets),
                   made(test_targets) if test_inputs is None else test_inputs, torch.tensor(test_targets))


def test_a_table_baseline_is_a_logistic_regression_on_the_packed_features(tmp_path):
    source = write_csv(tmp_path / "data.csv", iris_like(200))
    prepared = prepare_data_submission(str(source), None, "mlp", None, URLS, "127.0.0.1:0", None)
    answer = fit_baseline(prepared.packed.load())
    assert set(answer) == {"metric", "baseline", "baseline_name", "seconds"}
    assert answer["metric"] == "accuracy" and answer["baseline_name"] == "logistic regression"
    assert answer["baseline"] > 0.9 and 0 <= answer["seconds"] < 30


def test_imbalanced_labels_are_scored_by_balanced_accuracy():
    """Predicting the common label of a 1:9 table is right nine times in ten and learns nothing: balanced
    accuracy gives it 0.5."""
    targets = np.array([0] * 90 + [1] * 10)
    assert score(np.zeros(100), targets, "accuracy") == pytest.approx(0.9)
    assert score(np.zeros(100), targets, "balanced_accuracy") == pytest.approx(0.5)
    assert score(targets, targets, "balanced_accuracy") == 1.0
    imbalanced = features([0] * 90 + [1] * 10, [0] * 18 + [1] * 2)
    assert metric_of(imbalanced) == "balanced_accuracy" == fit_baseline(imbalanced)["metric"]
    assert metric_of(features([0] * 60 + [1] * 40, [0, 1])) == "accuracy"


def test_texts_packed_as_token_ids_get_tf_idf_and_a_logistic_regression():
    """Token ids as a bag of words: a label that shows in which words a text holds, padded with id 0, is found."""
    generator = np.random.default_rng(2)

    def texts(labels):
        tokens = generator.integers(1000, 1100, (len(labels), 16))
        tokens[:, 2:5] = np.where(np.asarray(labels) == 1, 7, 9)[:, None]  # the word that tells the label
        tokens[:, 10:] = 0  # padding
        return torch.tensor(tokens, dtype=torch.int64)
    train, test = [0, 1] * 40, [0, 1] * 10
    dataset = Dataset("packed", "0" * 64, DataShape("text-classification", 16, 2, 16), texts(train),
                      torch.tensor(train), texts(test), torch.tensor(test))
    answer = fit_baseline(dataset)
    assert answer["baseline_name"] == "TF-IDF + logistic regression" and answer["baseline"] == 1.0


def test_a_next_token_corpus_has_no_baseline():
    tokens = torch.zeros((4, 8), dtype=torch.int64)
    assert fit_baseline(Dataset("pycorpus", "0" * 64, DataShape("text", 8, 256, 8), tokens, tokens, tokens,
                                tokens)) is None


class Constant(torch.nn.Module):
    """Always the same label's logits."""

    def __init__(self, label: int, classes: int = 2) -> None:
        super().__init__()
        self.logits = torch.nn.functional.one_hot(torch.tensor(label), classes).float()

    def forward(self, inputs):
        return self.logits.expand(len(inputs), -1)


def test_beside_baseline_says_whether_the_network_beat_it():
    dataset = features([0, 1] * 50, [0, 1] * 20)
    below = beside_baseline(Constant(0), dataset)
    assert set(below) == FIELDS and below["score"] == 0.5 and below["baseline"] > 0.9
    assert not below["beats_baseline"] and "below the logistic regression" in below["verdict"]
    perfect = torch.nn.Linear(2, 2)
    with torch.no_grad():  # the first feature is the label plus small noise: this reads it off
        perfect.weight.copy_(torch.tensor([[-10.0, 0.0], [10.0, 0.0]]))
        perfect.bias.copy_(torch.tensor([5.0, -5.0]))
    answer = beside_baseline(perfect, dataset)
    assert answer["score"] >= answer["baseline"]
    assert answer["verdict"].startswith("the network's model beats" if answer["beats_baseline"] else
                                        "the network's model ties")


def task_result(tmp_path):
    """A finished task's result on a packed table, its weights the spec's initial ones (an untrained model)."""
    source = write_csv(tmp_path / "data.csv", iris_like(200))
    prepared = prepare_data_submission(str(source), None, "mlp", None, URLS, "127.0.0.1:0", None)
    spec = parse_spec(prepared.spec)
    result = TaskResult(1, "00" * 32, prepared.spec, spec, spec_shape(spec), initial_weights(spec, spec_shape(spec)),
                        ("setosa", "virginica"), URLS)
    return result, prepared


def test_evaluate_result_puts_the_baseline_beside_the_score(tmp_path):
    result, prepared = task_result(tmp_path)
    answer = evaluate_result(result, prepared.packed.load())
    assert FIELDS <= set(answer) and answer["score"] == answer["accuracy"] and answer["metric"] == "accuracy"
    assert answer["beats_baseline"] == (answer["score"] > answer["baseline"])


def test_task_eval_prints_the_baseline_as_json_and_as_a_table(tmp_path, monkeypatch):
    result, prepared = task_result(tmp_path)

    async def fetched(client, task_id, addresses):
        return result

    monkeypatch.setattr("trolly.compute.requester.cli.fetch_result", fetched)
    directory = str(open_packed(prepared.packed.directory).directory)
    shown = CliRunner().invoke(cli, ["task", "eval", "1", "--data", directory, "-o", "json"], catch_exceptions=False)
    answer = json.loads(shown.stdout)
    assert FIELDS <= set(answer) and answer["baseline_name"] == "logistic regression"
    assert answer["baseline"] > 0.9 and answer["test_samples"] == prepared.packed.test_samples
    table = CliRunner().invoke(cli, ["task", "eval", "1", "--data", directory], catch_exceptions=False)
    assert "baseline_name" in table.output and "logistic regression" in table.output and "verdict" in table.output


def test_a_regression_target_gets_a_ridge_regression_scored_by_r2():
    """The hook for regression (issue 34 item 3): a dataset of kind "regression" is scored by R^2 beside a ridge."""
    generator = np.random.default_rng(3)
    inputs = torch.tensor(generator.normal(0, 1, (300, 2)), dtype=torch.float32)
    targets = (2 * inputs[:, 0] + torch.tensor(generator.normal(0, 0.1, 300), dtype=torch.float32))
    dataset = Dataset("packed", "0" * 64, DataShape("regression", 2, 1), inputs[:240], targets[:240], inputs[240:],
                      targets[240:])
    answer = fit_baseline(dataset)
    assert (answer["metric"], answer["baseline_name"]) == ("r2", "ridge regression") and answer["baseline"] > 0.99
    assert score(np.zeros(4), np.array([1.0, 2.0, 3.0, 4.0]), "r2") < 0  # worse than the mean
    line = torch.nn.Linear(2, 1)
    with torch.no_grad():
        line.weight.copy_(torch.tensor([[2.0, 0.0]]))
        line.bias.zero_()
    assert beside_baseline(line, dataset)["score"] > 0.99
