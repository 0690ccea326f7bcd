"""The PowerSGD peer of the compression benchmark: PyTorch's own hook, run by real gloo ranks on tiny tensors,
and the benchmark's JSON gaining its `powersgd` table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks._powersgd import PowerSGDWorkers, bytes_per_round, rank_matching_bytes

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3


def rank_one_updates(generator):
    """Each worker's update: a rank-1 matrix (the same direction for all, different scales) and a bias."""
    column = torch.randn(16, 1, generator=generator)
    row = torch.randn(1, 12, generator=generator)
    return [{"weight": (index + 1.0) * column @ row, "bias": torch.randn(16, generator=generator)}
            for index in range(WORKERS)]


def test_powersgd_hook_returns_the_workers_mean_when_the_updates_are_rank_one():
    updates = rank_one_updates(torch.Generator().manual_seed(5))
    ranks = PowerSGDWorkers(WORKERS, rank=1, seed=0)
    try:
        mean = ranks.mean_update(updates)
    finally:
        ranks.close()
    exact = {name: sum(update[name] for update in updates) / WORKERS for name in ("weight", "bias")}
    # the bias is sent whole; one power iteration recovers a rank-1 matrix
    assert torch.allclose(mean["bias"], exact["bias"], atol=1e-6)
    assert torch.allclose(mean["weight"], exact["weight"], atol=1e-5)


def test_powersgd_keeps_each_workers_error_and_counts_p_q_and_whole_tensors_as_bytes():
    generator = torch.Generator().manual_seed(6)
    updates = [{"weight": torch.randn(16, 12, generator=generator), "bias": torch.randn(16, generator=generator)}
               for _ in range(WORKERS)]
    ranks = PowerSGDWorkers(WORKERS, rank=2, seed=0)
    try:
        mean = ranks.mean_update(updates)
        ranks.mean_update(updates)
        errors = ranks.errors
        sent = ranks.bytes_sent_per_worker()
    finally:
        ranks.close()
    # a rank-2 approximation of random matrices leaves an error, which the hook keeps per worker
    assert not torch.allclose(mean["weight"], sum(update["weight"] for update in updates) / WORKERS, atol=1e-3)
    assert all(error.abs().sum() > 0 for error in errors) and not torch.equal(errors[0], errors[1])
    shapes = {"weight": torch.Size([16, 12]), "bias": torch.Size([16])}
    # P (16 x 2) and Q (12 x 2) for the matrix, the bias whole: float32, two rounds
    assert sent == 2 * bytes_per_round(shapes, 2) == 2 * 4 * (16 * 2 + 12 * 2 + 16)


def test_the_matched_rank_is_the_smallest_sending_at_least_the_target():
    shapes = {"weight": torch.Size([64, 64]), "bias": torch.Size([64])}
    rank = rank_matching_bytes(shapes, rounds=3, target_bytes=3 * 4 * (64 + 128 * 5))
    assert rank == 5
    assert bytes_per_round(shapes, rank - 1) * 3 < 3 * 4 * (64 + 128 * 5) <= bytes_per_round(shapes, rank) * 3


@pytest.mark.slow
def test_compression_benchmark_reports_a_powersgd_table():
    completed = subprocess.run([sys.executable, "-m", "benchmarks.compression", "--rounds", "1", "--seeds", "1234",
                                "--skip-transformer", "--powersgd-ranks", "1"],
                               cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    table = result["powersgd"]
    assert table["seeds"] == [1234] and table["error_feedback"] is True
    ours = table["ours"]
    assert ours["bytes_sent"] == result["mlp"]["per_seed"][0]["ours"]["bytes_per_worker"]
    ranks = [row["rank"] for row in table["ranks"]]
    assert ranks == [1, table["matched_rank"]] and table["matched_rank"] > 1
    low, matched = table["ranks"]
    assert low["bytes_sent"] < ours["bytes_sent"] <= matched["bytes_sent"]
    assert all(row["final_loss"] > 0 and 0 <= row["accuracy"] <= 1 for row in table["ranks"])
    assert table["ours_beats_powersgd_at_equal_or_fewer_bytes"] == (ours["final_loss"] < matched["final_loss"])
    assert result["ours_beats_powersgd_at_equal_or_fewer_bytes"] == table["ours_beats_powersgd_at_equal_or_fewer_bytes"]


def test_powersgd_ranks_draw_the_same_first_qs_so_a_run_repeats_bit_for_bit():
    generator = torch.Generator().manual_seed(7)
    updates = [{"weight": torch.randn(64, 48, generator=generator)} for _ in range(WORKERS)]
    means = []
    for _ in range(2):
        ranks = PowerSGDWorkers(WORKERS, rank=3, seed=11)
        try:
            means.append(ranks.mean_update([{"weight": update["weight"].clone()} for update in updates])["weight"])
        finally:
            ranks.close()
    assert torch.equal(means[0], means[1])
