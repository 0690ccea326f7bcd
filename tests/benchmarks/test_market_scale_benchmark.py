"""`benchmarks.market_scale` runs whole rounds end to end on a tiny market and prints its JSON line; bad sizes are
refused with a message. Speed itself is never asserted here (docs/performance.md records it)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
KINDS = ("commits", "sampling", "verdicts", "settlement", "reveals", "reveal_settlement")


def run(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.market_scale", *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_market_scale_settles_every_round_of_a_tiny_market_and_reports_each_kind_of_block():
    finished = run("--tasks", "3", "--workers-per-task", "3", "--validators", "8", "--rounds", "1")
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert (result["tasks"], result["workers"], result["validators"], result["rounds"]) == (3, 9, 8, 1)
    for kind in KINDS:
        assert result[f"{kind}_block_seconds"] > 0 and result[f"{kind}_block_cpu_seconds"] > 0
    assert result["max_block_seconds"] == max(result[f"{kind}_block_seconds"] for kind in KINDS)
    assert result["commit_txs_per_round"] == 9 and result["verdict_txs_per_round"] > 0
    # A training round adds its commitments; its votes are deleted when its reveal window closes, in the round's
    # last block.
    assert result["state_keys_per_round"] == 9 and result["state_bytes_per_round"] > 0
    by_record = result["state_bytes_per_round_by_record"]
    assert by_record["market_commit"] > 0 and "market_verdict" not in by_record
    assert isinstance(result["target_met"], bool) and result["load_average_1m"] >= 0


def test_market_scale_refuses_sizes_the_chain_cannot_hold():
    for arguments in (("--tasks", "0"), ("--validators", "101"), ("--workers-per-task", "65")):
        finished = run(*arguments)
        assert finished.returncode == 2 and "must be at least" in finished.stderr, arguments
