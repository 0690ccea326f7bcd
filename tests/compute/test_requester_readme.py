"""The README's requester path, run as a user runs it: the console scripts against a localnet on the solo engine.

`trolly-localnet up -d` prints the `export` line the requester pastes; with only that environment, a CSV of the
user's is packed (`trolly-wallet data pack`: private, the default), paid for and served (`task submit --data`,
left running as the README leaves it, delivering the data key), followed (`task status`), fetched with the
table's preprocessing (`task fetch --data`) and evaluated (`task eval --data`); the fetched model answers raw rows
(`model predict`) and is loaded by a script that imports safetensors and numpy and nothing of Trolly, as the
README's is. The localnet's validator operator gets the task's key once drawn to check it, although it has signed
nothing: its public key is in the localnet's genesis.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from localnet_helpers import free_base_port, localnet, wait_until
from requester_helpers import write_flowers_csv

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
SAFETENSORS_ONLY = """
import json, sys
import numpy as np
from safetensors.numpy import load_file
model = sys.argv[1]
weights = load_file(model + "/model.safetensors")
labels = json.load(open(model + "/labels.json"))
columns = json.load(open(model + "/preprocessing.json"))["columns"]
raw = np.array(json.loads(sys.argv[2]))
rows = ((raw - [c["mean"] for c in columns]) / [c["scale"] for c in columns]).astype(np.float32)
hidden = np.maximum(rows @ weights["layers.0.weight"].T + weights["layers.0.bias"], 0)
scores = hidden @ weights["layers.2.weight"].T + weights["layers.2.bias"]
print(json.dumps({"modules": sorted(sys.modules), "labels": [labels[i] for i in scores.argmax(axis=1)]}))
"""


def test_the_readme_requester_path_from_a_csv_to_a_model_safetensors_loads(tmp_path):
    home = tmp_path / "localnet-home"
    up = localnet("up", "-d", "--engine", "solo", "--home", str(home), "--base-port", str(free_base_port()),
                  timeout=180.0)
    submit = None
    try:
        exported = [line for line in (up.stdout + up.stderr).splitlines() if line.startswith("export ")]
        assert len(exported) == 1, up.stdout + up.stderr
        env = {**os.environ, **dict(pair.split("=", 1) for pair in exported[0].split()[1:])}
        assert env["TROLLY_ALLOW_PRIVATE_ADDRESSES"] == "1" and env["TROLLY_KEYRING_BACKEND"] == "test"

        def wallet(*args: str) -> subprocess.CompletedProcess:
            done = subprocess.run([str(BIN / "trolly-wallet"), *args], capture_output=True, text=True, env=env,
                                  cwd=tmp_path, timeout=120)
            assert done.returncode == 0, f"trolly-wallet {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
            return done

        firsts = write_flowers_csv(tmp_path / "flowers.csv")
        packed = json.loads(wallet("data", "pack", "flowers.csv", "-o", "flowers-data", "--json").stdout)
        assert packed["labels"] == ["large", "medium", "small"] and packed["test_samples"] == 18
        assert packed["private"] and (tmp_path / "flowers-data" / "data.key").exists()

        submit = subprocess.Popen([str(BIN / "trolly-wallet"), "task", "submit", "--data", "flowers-data",
                                   "--rounds", "5", "--workers", "2", "--budget", "50trl", "--from", "requester",
                                   "--yes", "--listen", "127.0.0.1:0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                                  start_new_session=True)
        printed = [submit.stdout.readline()]  # the transaction's table, then the task's id
        while printed[-1] and not printed[-1].startswith("Task "):
            printed.append(submit.stdout.readline())
        assert printed[-1].startswith("Task 1 submitted"), "".join(printed) + submit.communicate(timeout=30)[1]

        def completed() -> dict | None:
            answer = json.loads(wallet("task", "status", "1", "-o", "json").stdout)
            return answer if answer["status"] == "completed" else None

        view = wait_until(completed, timeout=600, what="task 1 to complete")
        assert view["final_weights_hash"]
        assert submit.wait(timeout=30) == 0  # it served the data until the task ended, then returned
        operator = json.loads(wallet("query", "account", "validator-0", "-o", "json").stdout)
        assert operator["pub_key"]  # from genesis: its first transactions are verdicts, after the task started
        assert f"Data key delivered to {operator['address']}" in submit.stderr.read()

        fetched = json.loads(wallet("task", "fetch", "1", "-o", "flowers-model", "--data", "flowers-data",
                                    "--json").stdout)
        assert fetched["final_weights_hash"] == view["final_weights_hash"]
        evaluated = json.loads(wallet("task", "eval", "1", "--data", "flowers-data", "-o", "json").stdout)
        assert evaluated["test_samples"] == 18 and evaluated["accuracy"] >= 0.9, evaluated
        assert evaluated["baseline_name"] == "logistic regression" and evaluated["score"] >= evaluated["baseline"] - 0.1
        text = wallet("task", "eval", "1", "--data", "flowers-data").stdout
        assert "accuracy" in text and "loss" in text and "baseline" in text and "verdict" in text

        loaded = subprocess.run([sys.executable, "-I", "-c", SAFETENSORS_ONLY, str(tmp_path / "flowers-model"),
                                 json.dumps(firsts)],
                                capture_output=True, text=True, timeout=60)
        assert loaded.returncode == 0, loaded.stderr
        answer = json.loads(loaded.stdout)
        assert not [name for name in answer["modules"] if name.split(".")[0] in ("trolly", "torch")]
        assert answer["labels"] == ["small", "medium", "large"]
        rows = tmp_path / "rows.csv"
        rows.write_text("a,b,c,d\n" + "".join(",".join(map(str, row)) + "\n" for row in firsts))
        predicted = json.loads(wallet("model", "predict", "flowers-model", str(rows), "-o", "json").stdout)
        assert [entry["label"] for entry in predicted] == ["small", "medium", "large"]
    finally:
        if submit is not None and submit.poll() is None:
            submit.kill()
        localnet("down", "--home", str(home), check=False)
