"""The README's fetched model, loaded as the README loads it: its snippets run as written, so they cannot rot.

The README's own `python -c` writes iris.csv, `data pack` packs it (private, the default), a task's result on it
is fetched as `task fetch --data iris-data --onnx` writes it (weights trained in process: `prediction_helpers`),
and the README's numpy snippet runs in a fresh interpreter that imports nothing of Trolly or torch: it prints
the labels its comment says, the ones `model predict` gives on the same raw rows, with the same probabilities.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from prediction_helpers import finished_task

from trolly.compute.blobs import AddressPolicy
from trolly.compute.data.packing import open_packed
from trolly.compute.requester.model_files import result_files
from trolly.compute.requester.results import write_result
from trolly.wallet.cli import cli

README = Path(__file__).resolve().parents[2] / "README.md"
MODULES = "\nimport sys as _sys\nprint(json.dumps(sorted(_sys.modules)))\n"


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.DOTALL)


def test_the_readmes_snippet_loads_the_fetched_model_without_trolly_and_answers_as_model_predict(tmp_path):
    writer = next(block for block in readme_blocks("bash") if "iris.csv" in block and 'python -c "' in block)
    code = re.search(r'python -c "\n(.*?)"\n', writer, re.DOTALL).group(1)
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=120)
    packed = CliRunner().invoke(cli, ["data", "pack", str(tmp_path / "iris.csv"), "-o", str(tmp_path / "iris-data")])
    assert packed.exit_code == 0, packed.output
    result, _ = finished_task(tmp_path / "iris-data")
    files = asyncio.run(result_files(result, AddressPolicy(), open_packed(tmp_path / "iris-data"), onnx=True))
    write_result(result, tmp_path / "iris-model", files)

    snippet = next(block for block in readme_blocks("python") if "iris-model/preprocessing.json" in block)
    ran = subprocess.run([sys.executable, "-I", "-c", snippet + MODULES], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    labels_line, probabilities_line, modules_line = ran.stdout.splitlines()
    printed = ast.literal_eval(labels_line)
    promised = ast.literal_eval(re.search(r"argmax\(axis=1\)\]\)\s+# (\[.*\])", snippet).group(1))
    assert printed == promised
    assert not [name for name in json.loads(modules_line) if name.split(".")[0] in ("trolly", "torch")]

    answered = json.loads(CliRunner().invoke(cli, ["model", "predict", str(tmp_path / "iris-model"),
                                                   str(tmp_path / "iris.csv"), "-o", "json"]).stdout)
    chosen = answered[::50]  # the snippet's rows: every 50th of the file
    assert [a["label"] for a in chosen] == printed
    shown = [float(value) for value in probabilities_line.strip("[]").split()]
    assert all(abs(a["probability"] - value) < 1e-4 for a, value in zip(chosen, shown, strict=True))
