"""A fetched model answers raw rows: `task fetch` writes the table's preprocessing beside the weights (fetched by
the manifest for public data, read from the requester's pack for private data), `trolly-wallet model predict`
applies it to a CSV's raw rows (a column of words, missing cells, a word never seen in training) and gives the
labels and probabilities the model gives on the features the pack made, every bad rows file is refused naming
the line or the columns with nothing printed, and `--onnx` writes a graph onnxruntime runs to the same answers.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json

import numpy as np
import onnxruntime
import pytest
import torch
from click.testing import CliRunner
from prediction_helpers import finished_task, people_csv

from trolly.compute.blobs import AddressPolicy
from trolly.compute.data.packing import PREPROCESSING_FILE, held_out_split, open_packed
from trolly.compute.data.preprocessing import Preprocessing
from trolly.compute.requester.model_files import ONNX_FILE, result_files
from trolly.compute.requester.onnx_export import mlp_onnx
from trolly.compute.requester.prediction import load_fetched
from trolly.compute.requester.results import ResultError, write_result
from trolly.compute.requester.serving import ServingThread
from trolly.wallet.cli import cli

LOCAL = AddressPolicy(allow_private=True)


def wallet(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


def pack(source, out, *options):
    packed = wallet("data", "pack", source, "-o", out, *options)
    assert packed.exit_code == 0, packed.output
    return out


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    """People's table packed private, trained, and fetched with --data: (model directory, CSV, result, dataset)."""
    directory = tmp_path_factory.mktemp("fetched")
    source = people_csv(directory / "people.csv")
    packed = pack(source, directory / "people-data")
    result, dataset = finished_task(packed)
    files = asyncio.run(result_files(result, LOCAL, open_packed(packed), onnx=True))
    write_result(result, directory / "people-model", files)
    return directory / "people-model", source, result, dataset


def held_out_lines(source) -> list[str]:
    """The CSV's held-out rows as `data pack` drew them at its defaults (from the labels and the seed alone)."""
    rows = source.read_text().splitlines()[1:]
    labels = [row.rsplit(",", 1)[1] for row in rows]
    names = sorted(set(labels))
    test = held_out_split(np.array([names.index(label) for label in labels]), 0.2, 0)
    return [row for row, held in zip(rows, test) if held]


def probabilities_of(model, features) -> np.ndarray:
    with torch.no_grad():
        return torch.softmax(model(torch.as_tensor(features)).double(), dim=1).numpy()


def test_fetch_writes_a_private_tables_preprocessing_read_from_the_pack_given_with_data(fetched, tmp_path):
    model_directory, source, result, _ = fetched
    written = sorted(path.name for path in model_directory.iterdir())
    assert written == sorted(["model.safetensors", "spec.json", "labels.json", PREPROCESSING_FILE, ONNX_FILE])
    pack_copy = (source.parent / "people-data" / PREPROCESSING_FILE).read_bytes()
    assert (model_directory / PREPROCESSING_FILE).read_bytes() == pack_copy
    assert Preprocessing.from_bytes(pack_copy).columns[1].categories == ("Lyon", "Nice", "Paris")


def test_a_private_tables_fetch_without_its_pack_is_refused_naming_data(fetched, tmp_path):
    """The preprocessing blob is encrypted under the task's key: fetched by its manifest alone it cannot be read."""
    _, source, result, _ = fetched
    server = ServingThread(open_packed(source.parent / "people-data").store, "127.0.0.1", 0).start()
    try:
        served = dataclasses.replace(result, urls=(server.url,))
        with pytest.raises(ResultError, match="private data.*--data"):
            asyncio.run(result_files(served, LOCAL))
    finally:
        server.stop()


def test_a_pack_that_is_not_the_tasks_data_is_refused(fetched, tmp_path):
    _, _, result, _ = fetched
    other = pack(people_csv(tmp_path / "other.csv", count=60), tmp_path / "other-data")
    with pytest.raises(ResultError, match="does not hold the data task 1 trained on"):
        asyncio.run(result_files(result, LOCAL, open_packed(other)))


def test_fetch_of_a_public_table_fetches_its_preprocessing_by_the_manifest(tmp_path):
    packed = pack(people_csv(tmp_path / "people.csv"), tmp_path / "people-data", "--public")
    server = ServingThread(open_packed(packed).store, "127.0.0.1", 0).start()
    try:
        result, _ = finished_task(packed, urls=(server.url,), steps=5)
        files = asyncio.run(result_files(result, LOCAL))
    finally:
        server.stop()
    assert files == {PREPROCESSING_FILE: (packed / PREPROCESSING_FILE).read_bytes()}
    assert write_result(result, tmp_path / "model", files)[-1] == PREPROCESSING_FILE
    assert load_fetched(tmp_path / "model").preprocessing == Preprocessing.from_bytes(files[PREPROCESSING_FILE])


def test_predict_on_raw_rows_gives_the_models_answers_on_the_features_the_pack_made(fetched, tmp_path):
    """The held-out rows, raw (an id, the label, a missing age among them), answered as the model answers the
    held-out shard's features; a city never seen in training and a row with every cell missing as features made
    by hand from preprocessing.json (the city none of the categories, the gaps the train median)."""
    model_directory, source, result, dataset = fetched
    header = source.read_text().splitlines()[0]
    rows = held_out_lines(source)
    assert any(",," in row for row in rows) and any(",NA," in row for row in rows)  # missing ages held out
    extra = ["1,52000,Rome,40,", "2,,,,"]
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([header, *rows, *extra]) + "\n")
    answered = json.loads(wallet("model", "predict", model_directory, path, "-o", "json").stdout)
    columns = {c["name"]: c for c in json.loads((model_directory / PREPROCESSING_FILE).read_text())["columns"]}
    income, age = columns["income"], columns["age"]
    by_hand = np.array([[(52000 - income["mean"]) / income["scale"], 0, 0, 0, (40 - age["mean"]) / age["scale"]],
                        [(income["fill"] - income["mean"]) / income["scale"], 0, 0, 0,
                         (age["fill"] - age["mean"]) / age["scale"]]], dtype=np.float32)
    by_hand[1, 1 + ["Lyon", "Nice", "Paris"].index(columns["city"]["fill"])] = 1.0  # a missing city: the most frequent
    expected = np.concatenate([probabilities_of(result.model(), dataset.test_inputs),
                               probabilities_of(result.model(), by_hand)])
    assert [a["line"] for a in answered] == list(range(2, 2 + len(rows) + len(extra)))
    assert [a["label"] for a in answered] == [result.labels[i] for i in expected.argmax(axis=1)]
    assert np.allclose([a["probability"] for a in answered], expected.max(axis=1), atol=1e-6)
    truth = [row.rsplit(",", 1)[1] for row in rows]
    assert np.mean([a["label"] == t for a, t in zip(answered, truth)]) >= 0.8  # a model, not a constant


def test_predict_prints_a_table_json_and_csv(fetched, tmp_path):
    model_directory, source, _, _ = fetched
    path = tmp_path / "rows.csv"
    path.write_text("income,city,age\n70000,Lyon,33\n20000,Paris,NA\n")  # no id, no label: the columns read
    as_json = json.loads(wallet("model", "predict", model_directory, path, "-o", "json").stdout)
    assert [set(a) for a in as_json] == [{"line", "label", "probability"}] * 2
    assert all(0.5 <= a["probability"] <= 1 for a in as_json)
    as_csv = list(csv.DictReader(io.StringIO(wallet("model", "predict", model_directory, path, "-o", "csv").stdout)))
    assert [(int(r["line"]), r["label"], float(r["probability"])) for r in as_csv] == \
           [(a["line"], a["label"], a["probability"]) for a in as_json]
    text = wallet("model", "predict", model_directory, path)
    assert text.exit_code == 0 and "probability" in text.stdout
    assert all(a["label"] in text.stdout and f"{a['probability']:.4f}" in text.stdout for a in as_json)


@pytest.mark.parametrize("content, named", [
    ("income,age\n1,2\n", ["lacks the column(s) 'city'"]),
    ("income,city,age,height\n1,Lyon,2,3\n", ["'height'", "not trained on"]),
    ("income,city,age,height\n1,Lyon,2,3\n".replace("age,", ""), ["lacks the column(s) 'age'", "'height'"]),
    ("income,city,age\n1,Lyon,2\n3,Nice\n", ["line 3 has 2 cells, the header has 3"]),
    ("income,city,age\n1,Lyon,2\nabc,Nice,3\n", ["line 3, column 'income'", "'abc' is not a number"]),
    ("income,city,age\n1,Lyon,2\n2,Nic\u00e9,3\n".encode("latin-1"), ["line 3 is not UTF-8"]),
    ("", ["is empty"]),
    ("income,city,age\n", ["has a header but no rows"]),
    ("income,city,city,age\n1,a,b,2\n", ["'city' more than once"]),
])
def test_a_bad_rows_file_is_refused_naming_the_line_or_the_columns_with_nothing_printed(fetched, tmp_path, content,
                                                                                        named):
    """A rows file that does not fit the model: the columns it lacks or should not have, a ragged row, a word in a
    column of numbers, bytes that are not UTF-8, nothing at all."""
    model_directory = fetched[0]
    path = tmp_path / "rows.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for output in ("text", "json", "csv"):
        refused = wallet("model", "predict", model_directory, path, "-o", output)
        assert refused.exit_code != 0 and refused.stdout == "" and refused.stderr.startswith("Error: ")
        assert all(part in refused.stderr for part in named), refused.stderr


def test_predict_refuses_a_directory_without_the_preprocessing(fetched, tmp_path):
    model_directory, source, result, _ = fetched
    write_result(result, tmp_path / "weights-only")
    refused = wallet("model", "predict", tmp_path / "weights-only", source)
    assert refused.exit_code != 0 and refused.stdout == ""
    assert "no preprocessing.json" in refused.stderr and "--data" in refused.stderr


def test_the_onnx_model_gives_the_projects_answers_under_onnxruntime(fetched):
    """onnxruntime on the held-out features: the same labels as the project's forward pass, and probabilities
    within 1e-5."""
    model_directory, _, result, dataset = fetched
    session = onnxruntime.InferenceSession(str(model_directory / ONNX_FILE), providers=["CPUExecutionProvider"])
    features = np.concatenate([dataset.test_inputs.numpy(), dataset.train_inputs.numpy()])
    scores, probabilities = session.run(None, {"features": features})
    with torch.no_grad():
        expected = result.model()(torch.from_numpy(features))
    assert np.array_equal(probabilities.argmax(axis=1), expected.argmax(dim=1).numpy())
    assert np.allclose(scores, expected.numpy(), atol=1e-5)
    assert np.allclose(probabilities, torch.softmax(expected, dim=1).numpy(), atol=1e-5)


def test_onnx_export_refuses_a_model_that_is_not_an_mlp():
    with pytest.raises(ResultError, match="--onnx exports an mlp"):
        mlp_onnx(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_a_regression_model_predicts_values_in_the_target_columns_own_units(tmp_path):
    """A table packed with --task regression: `model predict` answers each raw row with a value, the model's
    standardized output brought back by the target's train mean and scale, close to the price the row's area and
    district make (a fit far better than the mean price)."""
    generator = np.random.default_rng(5)
    lines, prices = ["area,district,price"], []
    for row in range(80):
        area, district = float(generator.uniform(30, 200)), ("north", "south")[row % 2]
        prices.append(3_000 * area + (50_000 if district == "north" else 0) + float(generator.normal(0, 2_000)))
        lines.append(f"{area:.1f},{district},{prices[-1]:.0f}")
    source = tmp_path / "houses.csv"
    source.write_text("\n".join(lines) + "\n")
    packed = pack(source, tmp_path / "houses-data", "--task", "regression")
    result, _ = finished_task(packed, steps=300)
    files = asyncio.run(result_files(result, LOCAL, open_packed(packed)))
    write_result(result, tmp_path / "houses-model", files)

    answered = wallet("model", "predict", tmp_path / "houses-model", source, "-o", "json")
    assert answered.exit_code == 0, answered.output
    values = np.array([row["value"] for row in json.loads(answered.stdout)])
    assert [row["line"] for row in json.loads(answered.stdout)] == list(range(2, 82))
    errors = np.abs(values - np.array(prices))
    assert errors.mean() < 0.25 * np.abs(np.array(prices) - np.mean(prices)).mean(), errors.mean()
    as_csv = wallet("model", "predict", tmp_path / "houses-model", source, "-o", "csv")
    assert as_csv.stdout.splitlines()[0] == "line,value"
    assert np.allclose([float(line.split(",")[1]) for line in as_csv.stdout.splitlines()[1:]], values)
