"""Regression end to end (issue 34 item 3) through the console scripts against a real localnet (solo engine, its
validator's verifier and a worker, all real processes): scikit-learn's bundled diabetes table written as a CSV a
user would have (raw scales, a column of words added), paid for with `task submit --data diabetes.csv --task
regression` (packed private, its target standardized with the train split's mean and scale, served, its key
delivered), trained, replayed and voted on by the verifier, settled, fetched (`task fetch`) and evaluated
(`task eval --data`): R^2, MAE and RMSE in the target's own units on the held-out split.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from localnet_helpers import exported_env, free_base_port, localnet, task_ended, wallet_in
from safetensors.numpy import load_file

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def write_diabetes(path: Path) -> Path:
    """The diabetes table at its natural scales, a seeded `clinic` column of words beside its ten measurements,
    and the disease progression a year later, the number to predict, last."""
    from sklearn.datasets import load_diabetes

    table = load_diabetes(scaled=False)
    clinics = np.random.default_rng(0).choice(["north", "south", "east"], size=len(table.target))
    lines = [",".join([*table.feature_names, "clinic", "progression"])]
    lines += [",".join([*(f"{value:g}" for value in row), clinic, f"{target:g}"])
              for row, clinic, target in zip(table.data, clinics, table.target)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_regression_table_is_trained_verified_settled_fetched_and_scored_in_its_own_units(tmp_path):
    home = tmp_path / "localnet-home"
    up = localnet("up", "-d", "--engine", "solo", "--workers", "1", "--home", str(home), "--base-port",
                  str(free_base_port(workers=1)), timeout=180.0)
    submit = None
    try:
        env = exported_env(up)
        wallet = wallet_in(env, tmp_path)

        write_diabetes(tmp_path / "diabetes.csv")
        submit = subprocess.Popen([str(BIN / "trolly-wallet"), "task", "submit", "--data", "diabetes.csv", "--task",
                                   "regression", "--workers", "1", "--budget", "50trl", "--from", "requester",
                                   "--yes", "--listen", "127.0.0.1:0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                                  start_new_session=True)
        task = task_ended(env["TROLLY_NODE"])
        assert task["status"] == "completed", task
        assert submit.wait(timeout=60) == 0, submit.stderr.read()
        trained = [r for r in task["round_details"] if not r["final_report"]]
        # The verifier replayed the regression segments and passed them (their votes are deleted once each round's
        # reveal window closed: the decisions stay).
        decisions = [d for r in trained for c in r["commitments"] for d in c["decisions"]]
        assert decisions and set(decisions) == {"pass"}

        fetched = json.loads(wallet("task", "fetch", "1", "-o", "diabetes-model", "--data", "diabetes.csv.packed",
                                    "--json").stdout)  # private data: the preprocessing (and target) from the pack
        assert fetched["final_weights_hash"] == task["final_weights_hash"] and fetched["num_classes"] == 1
        spec = json.loads((tmp_path / "diabetes-model" / "spec.json").read_text())
        assert spec["dataset"]["task"] == "regression" and spec["dataset"]["num_classes"] == 1
        weights = load_file(tmp_path / "diabetes-model" / "model.safetensors")
        assert weights["layers.2.bias"].shape == (1,)  # the MLP's one output: the value predicted
        target = json.loads((tmp_path / "diabetes-model" / "preprocessing.json").read_text())["target"]
        assert target["column"] == "progression" and target["scale"] > 0
        predicted = json.loads(wallet("model", "predict", "diabetes-model", "diabetes.csv", "-o", "json").stdout)
        values = [row["value"] for row in predicted]  # every raw row answered in the target's own units
        assert len(values) == 442 and 25 < sum(values) / len(values) < 346, values[:5]

        evaluated = json.loads(wallet("task", "eval", "1", "--data", "diabetes.csv.packed", "-o", "json").stdout)
        assert "accuracy" not in evaluated and evaluated["units"] == "progression"
        assert 0.2 < evaluated["r2"] < 0.8, evaluated  # a linear fit scores about 0.5 on this table
        assert 30 < evaluated["mae"] < evaluated["rmse"] < 80, evaluated  # the target runs 25..346
        assert evaluated["test_samples"] == 88
        assert evaluated["metric"] == "r2" and evaluated["baseline_name"] == "ridge regression"  # beside a baseline
    finally:
        if submit is not None and submit.poll() is None:
            submit.kill()
        localnet("down", "--home", str(home), check=False)
