"""The throughput benchmark still runs end to end (a tiny configuration; speed itself is never asserted)."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_chain_throughput_runs_and_ends_with_its_json_line():
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.chain_throughput", "--quick", "--accounts", "400", "--blocks", "2",
         "--block-size", "100"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(figures) == {"tx_per_s_in_process", "tx_per_s_socket", "tx_per_s_in_process_one_core", "ed25519_verify_per_s",
                            "accounts"}
    assert figures["accounts"] == 400
    assert figures["tx_per_s_in_process"] > 0 and figures["ed25519_verify_per_s"] > 0
    assert figures["tx_per_s_socket"] is not None and figures["tx_per_s_socket"] > 0, run.stderr[-3000:]
    assert "app hashes equal in-process" in run.stderr
