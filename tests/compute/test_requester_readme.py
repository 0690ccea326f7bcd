"""The README's requester path, run as a user runs it: the console scripts against a localnet on the solo engine.

`trolly-localnet up -d` prints the `export` line the requester pastes; with only that environment, the README's
own `python -c` writes its customers table (an id, numbers at their own scales, a city and a plan in words, empty
cells), which is packed (`trolly-wallet data pack`: private, the default), paid for and served with the README's
`task submit --data` (left running as the README leaves it, delivering the data key), followed (`task status`),
fetched with the table's preprocessing and as ONNX (`task fetch --data --onnx`) and evaluated beside the baseline
the README shows (`task eval --data`: the same logistic regression on the same split, beaten as the README says);
the fetched model answers the README's new rows (`model predict`: an empty cell, a city never seen) with the
labels the README prints, as does the README's numpy snippet, which imports nothing of Trolly. The localnet's
validator operator gets the task's key once drawn to check it, although it has signed nothing: its public key is
in the localnet's genesis.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from localnet_helpers import free_base_port, localnet, wait_until
from requester_helpers import (readme_blocks, readme_fields, readme_numpy_snippet, readme_output_of,
                               readme_table_rows, write_readme_customers)

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
MODULES = "\nimport sys as _sys\nprint(json.dumps(sorted(_sys.modules)))\n"


def readme_command(starts: str) -> list[str]:
    """The README's command line that starts with `starts`, as arguments (its comment and `&` left off)."""
    line = next(line for _, body in readme_blocks("bash") for line in body.splitlines() if line.startswith(starts))
    return line.split("#")[0].replace(" &", "").split()[1:]


def test_the_readme_requester_path_from_its_table_to_a_model_that_answers_raw_rows(tmp_path):
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

        write_readme_customers(tmp_path)
        packed = json.loads(wallet(*readme_command("trolly-wallet data pack customers.csv"), "--json").stdout)
        shown = readme_fields(readme_output_of("trolly-wallet data pack customers.csv"))
        assert str(packed["labels"]) == shown["labels"] and str(packed["test_samples"]) == shown["test_samples"]
        assert packed["private"] and (tmp_path / "customers-data" / "data.key").exists()

        submit = subprocess.Popen([str(BIN / "trolly-wallet"), *readme_command("trolly-wallet task submit --data"),
                                   "--listen", "127.0.0.1:0"],
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

        fetched = json.loads(wallet(*readme_command("trolly-wallet task fetch 1"), "--json").stdout)
        assert fetched["final_weights_hash"] == view["final_weights_hash"]
        assert {"preprocessing.json", "model.onnx"} <= set(fetched["files"])
        evaluated = json.loads(wallet(*readme_command("trolly-wallet task eval 1"), "-o", "json").stdout)
        promised = readme_fields(readme_output_of("trolly-wallet task eval 1"))
        assert evaluated["test_samples"] == int(promised["test_samples"])
        assert evaluated["baseline_name"] == promised["baseline_name"] == "logistic regression"
        assert evaluated["baseline"] == float(promised["baseline"])  # fitted locally: the same split, the same one
        assert evaluated["beats_baseline"] and promised["beats_baseline"] == "True", evaluated
        text = wallet(*readme_command("trolly-wallet task eval 1")).stdout
        assert "accuracy" in text and "loss" in text and "baseline" in text and "verdict" in text

        snippet, labels = readme_numpy_snippet()
        loaded = subprocess.run([sys.executable, "-I", "-c", snippet + MODULES], cwd=tmp_path, capture_output=True,
                                text=True, timeout=60)
        assert loaded.returncode == 0, loaded.stderr
        labels_line, _, modules_line = loaded.stdout.splitlines()
        assert not [name for name in json.loads(modules_line) if name.split(".")[0] in ("trolly", "torch")]
        assert json.loads(labels_line.replace("'", '"')) == labels
        predicted = json.loads(wallet(*readme_command("trolly-wallet model predict"), "-o", "json").stdout)
        assert [entry["label"] for entry in predicted] == labels
        assert [row[1] for row in readme_table_rows(readme_output_of("trolly-wallet model predict"))] == labels
    finally:
        if submit is not None and submit.poll() is None:
            submit.kill()
        localnet("down", "--home", str(home), check=False)
