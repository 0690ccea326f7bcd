"""`python -m benchmarks.quality` end to end on a small choice of its tables and a short budget: each table packed,
trained by 3 workers over DiLoCo rounds and by one alone, scored beside the local baseline, and the JSON line
the figures in docs/performance.md come from (a smoke test: the figures themselves come from the full run)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_quality_benchmark_scores_ours_beside_the_baseline_and_alone():
    completed = subprocess.run([sys.executable, "-m", "benchmarks.quality", "--quick", "--tables",
                                "iris,churn,diabetes", "--epochs", "3"],
                               cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == "quality" and result["quick"] and result["workers"] == 3
    assert set(result["tables"]) == {"iris", "churn", "diabetes"} and result["skipped"] == []
    classification = {name: table for name, table in result["tables"].items() if name != "diabetes"}
    for name, table in result["tables"].items():
        assert {"ours", "baseline", "alone", "metric"} <= set(table)
        assert all(table[key] <= 1 for key in ("ours", "baseline", "alone"))
        assert name == "diabetes" or all(0 <= table[key] for key in ("ours", "baseline", "alone"))
        assert abs(table["gap"] - (table["ours"] - max(table["baseline"], table["alone"]))) < 2e-4
        assert table["epochs"] >= 3 and table["rounds"] * table["inner_steps"] * 32 >= 3 * table["train_rows"]
    assert result["tables"]["iris"]["metric"] == "accuracy"
    assert result["tables"]["churn"]["metric"] == "balanced_accuracy"  # one customer in ten churns
    assert result["tables"]["churn"]["features"] > 7  # the words one-hot, the customer id left out
    assert result["tables"]["diabetes"]["metric"] == "r2"  # a regression table, beside a ridge regression
    assert result["tables"]["diabetes"]["baseline"] > 0.3  # the ridge explains much of its target
    assert result["worst_gap"] == min(table["gap"] for table in classification.values())
    assert result["worst_regression_gap"] == result["tables"]["diabetes"]["gap"]
    assert result["worst_gap_at_least_target"] == (result["worst_gap"] >= -0.01)
