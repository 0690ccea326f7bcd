"""`python -m benchmarks.soak --quick` end to end: a short soak of the 4-validator CometBFT localnet under faults
(issue 36 item 5), with real processes.

It must end with nothing wrong (no honest worker slashed, no invariant broken, no supply drift, no two nodes
disagreeing on an app hash) and with every fault having happened and had its effect: the killed validator came
back and caught up, the paused validator was jailed and slashed for downtime and then unjailed, the node that
joined by state sync started after genesis and reached the validators' app hash, a worker was killed mid-round,
the cheater was slashed, and tasks completed around all that. The pruned node's disk grew less than the
unpruned node's over the same heights.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from localnet_helpers import cometbft_missing

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(bool(cometbft_missing()), reason="needs CometBFT v0.38 (make setup installs it)")
@pytest.mark.timeout(1500)
def test_a_quick_soak_under_faults_slashes_only_the_cheater_and_keeps_every_node_agreeing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.soak", "--quick", "--home", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1400)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, done.stderr[-3000:]
    result = json.loads(lines[-1])
    # Nothing wrong.
    assert result["honest_workers_slashed"] == 0, result
    assert result["invariant_failures"] == 0, result["invariant_failure_details"]
    assert result["invariant_checks"] >= 6  # the killed validator's store while down, every node's at the end
    assert result["supply_drift"] == 0 and result["supply_checks"] > 10, result
    assert result["burned_utrl"] > 0  # the downtime slash and the cheater's collateral, at least
    assert result["app_hash_disagreements"] == 0, result["disagreeing_heights"]
    assert result["heights_compared"] > 100
    # Every fault happened and had its effect.
    assert all(result["faults_happened"].values()), result["faults_happened"]
    paused = result["faults"]["validator_paused"]
    # The downtime slash takes 1 %; drawn into a committee while its node is paused, its verifier's votes cannot
    # land either, and the market's absent-verifier penalty may take more (it did in one run: 7.9 of 10 TRL left).
    assert paused["jailed"] and paused["stake_jailed"] <= paused["stake_before"] * 99 // 100
    assert result["faults"]["validator_unjailed"]["power_after"] > 0
    assert result["state_sync_join_seconds"] > 0
    assert result["faults"]["state_sync_join"]["earliest_height"] > 1
    assert result["cheaters_slashed"] >= 1 and result["worker_kills"] >= 1
    assert result["tasks_completed"] >= 1 and result["tasks_submitted"] >= result["tasks_completed"]
    # Pruning bounds the disk: the pruned node grew less than the one keeping everything.
    assert result["disk_bytes_per_1000_blocks_unpruned"] > result["disk_bytes_per_1000_blocks_pruned"]
    assert result["ok"] and done.returncode == 0
