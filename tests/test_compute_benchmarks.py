"""The compute benchmarks run end to end and end with one JSON object (tiny settings: a smoke test only;
the figures themselves come from running the benchmarks)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def last_json_line(arguments):
    completed = subprocess.run([sys.executable, "-m", *arguments], cwd=ROOT, capture_output=True, text=True,
                               timeout=600, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_worker_overhead_reports_a_ratio():
    result = last_json_line(["benchmarks.worker_overhead", "--rounds", "1", "--steps", "10"])
    assert result["benchmark"] == "worker_overhead" and result["ratio"] > 0
    assert result["checkpoint_bytes_written"] > 0


@pytest.mark.slow
def test_compression_reports_bytes_ratio_and_loss_gap():
    result = last_json_line(["benchmarks.compression", "--rounds", "1", "--seeds", "1234", "7", "--skip-transformer"])
    # one round of the ternary codec against 50 dense fp32 gradients: about 1.63 bits a value in the first
    # round (ratio ~980); over the benchmark's 16 rounds the updates' heavier tails bring it to ~1.55 (~1036)
    assert result["bytes_ratio"] > 900
    assert set(result) >= {"loss_gap_rel", "accuracy_dense", "accuracy_ours"}
    mlp = result["mlp"]
    assert [run["seed"] for run in mlp["per_seed"]] == [1234, 7] == result["seeds"]
    # the headline compares the seeds' mean losses; each seed's own comparison is reported beside it
    assert mlp["loss_dense"] == pytest.approx(sum(run["loss_dense"] for run in mlp["per_seed"]) / 2, abs=1e-4)
    assert mlp["loss_gap_rel"] == pytest.approx((mlp["loss_ours"] - mlp["loss_dense"]) / mlp["loss_dense"], abs=1e-3)
    assert mlp["per_seed"][0]["loss_dense"] != mlp["per_seed"][1]["loss_dense"]  # the seed reaches the task
