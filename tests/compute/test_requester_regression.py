"""Regression (issue 34 item 3): a CSV's number column packed with `--task regression`, its target standardized
with the train split's mean and scale (kept in the preprocessing), trained with mean squared error and scored
in the column's own units; the hint to pack as regression; and every refusal, with nothing written."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch.nn import functional

from requester_helpers import write_csv
from trolly.chain.market.spec import validate_spec
from trolly.compute.data.packing import held_out_split, open_packed, read_preprocessing
from trolly.compute.data.preprocessing import Preprocessing, fit, fit_target, target_values
from trolly.compute.errors import DatasetError
from trolly.compute.requester.metrics import evaluate_regression, regression_scores
from trolly.compute.spec import example_spec, parse_spec
from trolly.compute.training import Trainer, evaluate
from trolly.compute.worker.data import check_declared_shape
from trolly.wallet.cli import cli

URLS = ("http://127.0.0.1:9999",)


def pack(*args):
    return CliRunner().invoke(cli, ["data", "pack", *map(str, args)], catch_exceptions=False)


def houses(count: int = 60) -> list[tuple]:
    """A price (in the thousands) from an area, a city (a word column) and a noisy gap; seeded."""
    generator = np.random.default_rng(3)
    rows = []
    for i in range(count):
        area = round(float(generator.uniform(40, 200)), 1)
        city = ["north", "south", "east"][i % 3]
        price = round(1500 * area + {"north": 90000, "south": 20000, "east": 50000}[city]
                      + float(generator.normal(0, 5000)), 2)
        rows.append((area, city, price))
    return rows


def write_houses(path, rows=None):
    return write_csv(path, houses() if rows is None else rows, header="area,city,price")


def test_pack_regression_standardizes_the_target_with_the_train_splits_mean_and_scale(tmp_path):
    rows = houses()
    result = pack(write_houses(tmp_path / "houses.csv", rows), "-o", tmp_path / "packed", "--task", "regression",
                  "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["task"], summary["num_classes"], summary["labels"], summary["input_size"]) == \
        ("regression", 1, [], 4)
    prices = np.array([row[2] for row in rows])
    test = held_out_split(np.zeros(len(rows), dtype=np.int64), 0.2, 0)  # one group: no classes to stratify by
    assert summary["target"] == pytest.approx({"column": "price", "mean": prices[~test].mean(),
                                               "scale": prices[~test].std()})
    packed = open_packed(tmp_path / "packed")
    dataset = packed.load()
    assert dataset.shape.kind == "regression" and dataset.train_targets.dtype == torch.float32
    expected = (prices[test] - prices[~test].mean()) / prices[~test].std()
    assert dataset.test_targets.numpy() == pytest.approx(expected, abs=1e-5)
    assert float(dataset.train_targets.mean()) == pytest.approx(0.0, abs=1e-5)
    clear = Preprocessing.from_bytes((tmp_path / "packed" / "preprocessing.json").read_bytes())
    manifest = json.loads(packed.store.get(packed.manifest_hash))
    assert clear == read_preprocessing(manifest, packed.store.get, packed.key) and clear.target == packed.target
    section = packed.spec_dataset(list(URLS))
    assert (section["task"], section["num_classes"]) == ("regression", 1)
    raw = json.dumps(example_spec(packed.manifest_hash, dataset=section)).encode()
    validate_spec(raw, 4)
    assert parse_spec(raw).dataset.task == "regression"


def test_a_classification_preprocessing_keeps_its_bytes_and_a_regression_one_round_trips():
    preprocessing = fit({"n": ["1", "2", "3", "4"]}, np.ones(4, dtype=bool), "y")
    assert b"target" not in preprocessing.to_bytes()  # classification packs hash as before
    rows = houses(12)
    target = fit_target(target_values([str(r[2]) for r in rows], "price"), np.ones(12, dtype=bool), "price")
    regression = Preprocessing(preprocessing.columns, (), "price", target)
    assert Preprocessing.from_bytes(regression.to_bytes()) == regression
    assert target.restore(target.standardize(np.array([rows[0][2]]))) == pytest.approx([rows[0][2]])


@pytest.mark.parametrize("cell, words", [
    ("cheap", r"line 5, column 'price': 'cheap' is not a number: --task regression predicts a column of numbers"),
    ("NA", r"line 5 has no value in the target column 'price' \('NA'\): a target is never imputed"),
    ("", r"line 5 has an empty label \('price'\)"),
    ("inf", r"line 5, column 'price': 'inf' is not a finite number"),
])
def test_a_bad_target_cell_is_refused_naming_the_line_and_nothing_is_written(tmp_path, cell, words):
    rows = houses()
    rows[3] = (*rows[3][:2], cell)
    result = pack(write_houses(tmp_path / "houses.csv", rows), "-o", tmp_path / "packed", "--task", "regression")
    assert result.exit_code != 0 and not (tmp_path / "packed").exists()
    assert "houses.csv" in result.output
    assert re.search(words, result.output), result.output


def test_a_constant_target_and_a_word_label_column_are_refused_naming_the_column(tmp_path):
    constant = [(*row[:2], 7) for row in houses()]
    result = pack(write_houses(tmp_path / "flat.csv", constant), "-o", tmp_path / "flat", "--task", "regression")
    assert result.exit_code != 0 and "the target column 'price' is constant" in result.output
    words = pack(write_houses(tmp_path / "houses.csv"), "-o", tmp_path / "words", "--task", "regression",
                 "--label-column", "city")
    assert words.exit_code != 0 and "column 'city': 'north' is not a number" in words.output
    texts = tmp_path / "texts.jsonl"
    texts.write_text('{"text": "a", "label": "1.5"}\n{"text": "b", "label": "2.5"}\n')
    jsonl = pack(texts, "-o", tmp_path / "texts", "--task", "regression")
    assert jsonl.exit_code != 0 and "--task regression is for a CSV file" in jsonl.output
    assert not any((tmp_path / name).exists() for name in ("flat", "words", "texts"))


def test_packing_numbers_as_classes_hints_at_regression_and_refuses_too_many(tmp_path):
    few = [(*row[:2], (i % 30) * 10) for i, row in enumerate(houses(90))]  # 30 values, three rows each
    result = pack(write_houses(tmp_path / "few.csv", few), "-o", tmp_path / "few", "--json")
    assert result.exit_code == 0, result.output
    assert "pack with --task regression" in json.loads(result.stdout)["hint"]
    human = pack(write_houses(tmp_path / "few.csv", few), "-o", tmp_path / "few-again")
    assert "Hint: the label column holds numbers (30 distinct values)" in human.output
    whole = [(*row[:2], i % 3) for i, row in enumerate(houses(90))]  # class codes: no hint
    assert "hint" not in json.loads(pack(write_houses(tmp_path / "codes.csv", whole), "-o", tmp_path / "codes",
                                         "--json").stdout)
    single = pack(write_houses(tmp_path / "houses.csv"), "-o", tmp_path / "single")  # 60 prices, one row each
    assert single.exit_code != 0 and "have a single example" in single.output
    assert "numbers (60 distinct values): to predict the number" in single.output
    many = pack(write_houses(tmp_path / "many.csv", houses(120)), "-o", tmp_path / "many")
    assert many.exit_code != 0 and "120 distinct numbers, more than the 100" in many.output
    assert "--task regression" in many.output and not (tmp_path / "many").exists() and not (tmp_path / "single").exists()


@pytest.fixture
def regression_pack(tmp_path):
    assert pack(write_houses(tmp_path / "houses.csv"), "-o", tmp_path / "packed", "--task", "regression").exit_code == 0
    return open_packed(tmp_path / "packed")


def regression_spec(packed, **training):
    document = example_spec(packed.manifest_hash, model={"arch": "mlp", "config": {"hidden": [16]}},
                            dataset=packed.spec_dataset(list(URLS)), codec="int8")
    document["training"].update(training)
    return parse_spec(json.dumps(document))


def test_the_trainer_steps_on_mean_squared_error_and_evaluate_gives_it_without_accuracy(regression_pack):
    dataset = regression_pack.load()
    trainer = Trainer(regression_spec(regression_pack, batch_size=16,
                                      inner_optimizer={"name": "adamw", "lr": 0.01}), dataset)
    inputs, targets = dataset.train_inputs[:16], dataset.train_targets[:16]
    with torch.no_grad():
        expected = functional.mse_loss(trainer.model(inputs).reshape(-1), targets)
        assert float(trainer.loss(inputs, targets)) == pytest.approx(float(expected))
    before, accuracy = evaluate(trainer.model, dataset)
    assert accuracy is None
    trainer.start_round(trainer.model.state_dict())
    for _ in range(200):
        trainer.train_step(0, 0)
    after, _ = evaluate(trainer.model, dataset)
    assert after < before / 4
    scores = evaluate_regression(trainer.model, dataset, regression_pack.target)
    assert scores["units"] == "price" and scores["r2"] > 0.8
    standardized = evaluate_regression(trainer.model, dataset, None)  # the same fit, in standardized units
    assert standardized["r2"] == pytest.approx(scores["r2"])
    assert scores["mae"] == pytest.approx(standardized["mae"] * regression_pack.target.scale, rel=1e-6)
    assert scores["rmse"] ** 2 == pytest.approx(after * regression_pack.target.scale ** 2, rel=1e-4)


def test_regression_scores_are_r2_mae_and_rmse():
    scores = regression_scores(np.array([1.0, 2.0, 3.0, 5.0]), np.array([1.0, 2.0, 4.0, 5.0]))
    assert scores == pytest.approx({"r2": 1 - 1 / 10, "mae": 0.25, "rmse": 0.5})  # deviations 4+1+1+4
    assert regression_scores(np.array([1.0, 2.0]), np.array([3.0, 3.0]))["r2"] is None


def test_a_worker_refuses_a_regression_pack_under_a_classification_spec_and_the_reverse(tmp_path, regression_pack):
    """Attack: a requester declares one kind of data and serves the other (say a regression spec, whose model
    has one output, over a classification manifest): the chain bounded the model by the declared shape, and the
    labels would be read as the wrong kind. A worker refuses the manifest before it trains."""
    classes = example_spec("0" * 64, model={"arch": "mlp", "config": {"hidden": [8]}}, codec="int8")
    classes["dataset"] = {**regression_pack.spec_dataset(list(URLS)), "num_classes": 2}
    del classes["dataset"]["task"]
    with pytest.raises(DatasetError, match="is regression .* the spec declares classification"):
        check_declared_shape(parse_spec(json.dumps(classes)), regression_pack.load())
    rows = [(*row[:2], ["cheap", "dear"][i % 2]) for i, row in enumerate(houses())]
    assert pack(write_houses(tmp_path / "kinds.csv", rows), "-o", tmp_path / "kinds").exit_code == 0
    classified = open_packed(tmp_path / "kinds")
    regression = example_spec("0" * 64, model={"arch": "mlp", "config": {"hidden": [8]}}, codec="int8")
    regression["dataset"] = {**classified.spec_dataset(list(URLS)), "num_classes": 1, "task": "regression"}
    with pytest.raises(DatasetError, match="is classification .* the spec declares regression"):
        check_declared_shape(parse_spec(json.dumps(regression)), classified.load())


def test_submit_data_packs_for_regression_and_a_pack_keeps_its_task(tmp_path):
    from trolly.compute.requester.cli import prepare_data_submission
    from trolly.wallet.errors import WalletError

    source = write_houses(tmp_path / "houses.csv")
    prepared = prepare_data_submission(str(source), None, None, 2, URLS, "127.0.0.1:0", None, task="regression")
    spec = parse_spec(prepared.spec)
    assert (spec.dataset.task, spec.dataset.num_classes, spec.dataset.input_size) == ("regression", 1, 4)
    assert prepared.packed.target is not None and prepared.packed.target.column == "price"
    with pytest.raises(WalletError, match="is packed for regression, not classification"):
        prepare_data_submission(str(tmp_path / "houses.csv.packed"), None, None, 2, URLS, "127.0.0.1:0", None,
                                task="classification")
