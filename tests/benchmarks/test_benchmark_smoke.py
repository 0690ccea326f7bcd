"""The short benchmarks run end to end on the default chain's rules (fees included) and print their JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def last_json(module: str, *arguments: str) -> dict:
    done = subprocess.run([sys.executable, "-m", module, *arguments], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_market_end_block_submits_tasks_paying_the_minimum_fee_and_reports_its_ratio():
    result = last_json("benchmarks.market_end_block", "--quick")
    assert result["idle_tasks"] > 0 and result["due_tasks"] > 0
    assert result["ratio"] > 0 and result["expire_ms_per_task"] > 0


def test_delegation_benchmark_times_blocks_with_10_and_10000_delegators_in_one_run():
    """F1 credits one record per validator: a block with 10,000 delegators must not cost many times one with 10
    (a payout visiting every delegation would cost about a thousand times as much)."""
    result = last_json("benchmarks.delegation", "--quick")
    assert (result["delegators_small"], result["delegators_large"]) == (10, 10_000)
    assert result["block_seconds_10"] > 0 and result["block_seconds_10000"] > 0
    assert result["ratio"] < 10 and result["distribution_ratio"] < 10


@pytest.mark.slow
def test_engine_throughput_commits_every_send_paying_the_minimum_fee_end_to_end_and_over_abci():
    result = last_json("benchmarks.engine_throughput", "--quick")
    assert result["txs"] > 0 and result["blocks"] > 0
    assert result["tx_per_s_end_to_end"] > 0 and result["tx_per_s_abci_direct"] > 0
