"""The README's requester walkthrough read back and run as written, so that it cannot rot (without a localnet).

The README's own `python -c` writes customers.csv (an id column, numbers at their own scales, a city and a plan in
words, empty cells) and its here-document new-customers.csv; `data pack` packs the table (private, the default) to
the summary and the column table the README shows (the same statistics, the same cells imputed, the id left out);
a task's result on it is fetched as `task fetch --data customers-data --onnx` writes it (weights trained in
process: `prediction_helpers`); the README's numpy snippet runs in a fresh interpreter that imports nothing of
Trolly or torch and prints the labels its comment says, the ones `model predict` gives on the same raw rows (one
with an empty cell, one with a city never seen), with the same probabilities, and so does the README's onnxruntime
line. tests/compute/test_requester_readme.py runs the same text against a localnet.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys

from click.testing import CliRunner
from prediction_helpers import finished_task
from requester_helpers import (README, readme_fields, readme_numpy_snippet, readme_output_of, readme_table_rows,
                               write_readme_customers)

from trolly.compute.blobs import AddressPolicy
from trolly.compute.data.packing import open_packed
from trolly.compute.requester.model_files import result_files
from trolly.compute.requester.results import write_result
from trolly.wallet.cli import cli

MODULES = "\nimport sys as _sys\nprint(json.dumps(sorted(_sys.modules)))\n"


def test_the_readmes_pack_output_is_what_packing_its_table_prints(tmp_path):
    write_readme_customers(tmp_path)
    packed = CliRunner().invoke(cli, ["data", "pack", str(tmp_path / "customers.csv"), "-o",
                                      str(tmp_path / "customers-data"), "--json"])
    assert packed.exit_code == 0, packed.output
    summary = json.loads(packed.output)
    shown = readme_output_of("trolly-wallet data pack customers.csv")
    fields = readme_fields(shown)
    for key in ("task", "input_size", "imputed_cells", "num_classes", "labels", "train_samples", "test_samples",
                "private"):
        assert fields[key] == str(summary[key]), key
    columns = [[c["column"], c["kind"], c["done"], str(c["features"]), str(c["imputed"])] for c in summary["columns"]]
    assert readme_table_rows(shown) == columns
    kinds = {row[1] for row in columns}
    assert {"numeric", "words", "left out"} <= kinds and int(fields["imputed_cells"]) > 0


def test_the_readmes_snippet_loads_the_fetched_model_without_trolly_and_answers_as_model_predict(tmp_path):
    write_readme_customers(tmp_path)
    packed = CliRunner().invoke(cli, ["data", "pack", str(tmp_path / "customers.csv"), "-o",
                                      str(tmp_path / "customers-data")])
    assert packed.exit_code == 0, packed.output
    result, _ = finished_task(tmp_path / "customers-data")
    files = asyncio.run(result_files(result, AddressPolicy(), open_packed(tmp_path / "customers-data"), onnx=True))
    write_result(result, tmp_path / "customers-model", files)

    columns = json.loads((tmp_path / "customers-model" / "preprocessing.json").read_text())["columns"]
    cities = next(c["categories"] for c in columns if c["name"] == "city")
    rows = (tmp_path / "new-customers.csv").read_text().splitlines()[1:]
    assert any(",," in row or ",NA," in row for row in rows)  # the rows the README answers have a missing cell
    assert any(row.split(",")[2] not in cities + [""] for row in rows)  # and a city never seen in training

    snippet, promised = readme_numpy_snippet()
    ran = subprocess.run([sys.executable, "-I", "-c", snippet + MODULES], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    labels_line, probabilities_line, modules_line = ran.stdout.splitlines()
    printed = json.loads(labels_line.replace("'", '"'))
    assert printed == promised
    assert not [name for name in json.loads(modules_line) if name.split(".")[0] in ("trolly", "torch")]

    answered = json.loads(CliRunner().invoke(cli, ["model", "predict", str(tmp_path / "customers-model"),
                                                   str(tmp_path / "new-customers.csv"), "-o", "json"]).stdout)
    assert [a["label"] for a in answered] == printed
    assert [row[1] for row in readme_table_rows(readme_output_of("model predict customers-model"))] == printed
    shown = [float(value) for value in probabilities_line.strip("[]").split()]
    assert all(abs(a["probability"] - value) < 1e-4 for a, value in zip(answered, shown, strict=True))

    session = re.search(r"`(onnxruntime\.InferenceSession\(.*?\}\))`", README.read_text(), re.DOTALL).group(1)
    onnx = snippet + f"\nimport onnxruntime\nprint({' '.join(session.split())}[1].max(axis=1).round(4).tolist())\n"
    ran = subprocess.run([sys.executable, "-I", "-c", onnx], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    from_onnx = json.loads(ran.stdout.splitlines()[-1])
    assert all(abs(value - numpy) < 1e-4 for value, numpy in zip(from_onnx, shown, strict=True))
