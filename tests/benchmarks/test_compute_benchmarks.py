"""The compute benchmarks run end to end and end with one JSON object (tiny settings: a smoke test only;
the figures themselves come from running the benchmarks)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def last_json_line(arguments):
    completed = subprocess.run([sys.executable, "-m", *arguments], cwd=ROOT, capture_output=True, text=True,
                               timeout=600, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_worker_overhead_reports_a_ratio():
    result = last_json_line(["benchmarks.worker_overhead", "--rounds", "3", "--steps", "10"])
    assert result["benchmark"] == "worker_overhead" and result["ratio"] > 0
    assert result["checkpoint_bytes_written"] > 0
    # the middle one of the rounds' plain / ours ratios (round times are printed to the millisecond)
    pairs = sorted(p / o for p, o in zip(result["round_seconds_plain"], result["round_seconds_ours"]))
    assert result["ratio_median_of_pairs"] == pytest.approx(pairs[1], rel=0.05)
    phases = result["fastest_round_ms"]  # where the fastest round went adds up to that round
    assert set(phases) == {"start_and_training", "encoding", "finishing"} and min(phases.values()) >= 0
    assert abs(sum(phases.values()) - 1000 * min(result["round_seconds_ours"])) < 1.5


@pytest.mark.slow
def test_compression_reports_bytes_ratio_and_loss_gap():
    # Four rounds: the ternary codec sends about 1.63 bits a value in a task's first round (ratio ~980 for one
    # round against 50 dense fp32 gradients); later updates have heavier tails, fewer values sent (4 rounds:
    # 1010.7, the benchmark's 16: 1035.7). Training is deterministic, so the figure is too.
    result = last_json_line(["benchmarks.compression", "--rounds", "4", "--seeds", "1234", "7", "--skip-transformer",
                             "--powersgd-seeds", "0"])  # the PowerSGD table: test_benchmark_powersgd.py
    assert result["bytes_ratio"] > 1000
    assert set(result) >= {"loss_gap_rel", "accuracy_dense", "accuracy_ours"}
    mlp = result["mlp"]
    assert [run["seed"] for run in mlp["per_seed"]] == [1234, 7] == result["seeds"]
    # the headline compares the seeds' mean losses; each seed's own comparison is reported beside it
    assert mlp["loss_dense"] == pytest.approx(sum(run["loss_dense"] for run in mlp["per_seed"]) / 2, abs=1e-4)
    assert mlp["loss_gap_rel"] == pytest.approx((mlp["loss_ours"] - mlp["loss_dense"]) / mlp["loss_dense"], abs=1e-3)
    assert mlp["per_seed"][0]["loss_dense"] != mlp["per_seed"][1]["loss_dense"]  # the seed reaches the task
