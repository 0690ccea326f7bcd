"""The app's per-transaction CPU benchmark runs end to end, with and without the signature checker, and gives
the same app hash both ways (a tiny configuration; speed itself is never asserted)."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.app_tx_cpu", *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_app_tx_cpu_reports_every_phase_and_the_same_app_hash_with_the_checker_on_and_off():
    figures = []
    for checker in ("off", "on"):
        finished = run("--txs", "120", "--block-size", "40", "--checker", checker)
        assert finished.returncode == 0, finished.stderr[-3000:]
        figures.append(json.loads(finished.stdout.strip().splitlines()[-1]))
    assert set(figures[0]["phases_us"]) == {"check_tx_new", "check_tx_recheck", "prepare_proposal",
                                            "process_proposal", "finalize_block", "commit"}
    assert figures[0]["per_tx_us"] > 0 and figures[0]["txs"] == 120 and figures[0]["block_size"] == 40
    assert figures[0]["app_hash"] == figures[1]["app_hash"] and len(figures[0]["app_hash"]) == 64
    assert figures[0]["gc"] == "node"


@pytest.mark.slow
def test_app_tx_cpu_gives_the_same_app_hash_with_the_node_s_collector_settings_and_python_s():
    hashes = []
    for setting in ("node", "default"):
        finished = run("--txs", "60", "--block-size", "20", "--gc", setting)
        assert finished.returncode == 0, finished.stderr[-3000:]
        summary = json.loads(finished.stdout.strip().splitlines()[-1])
        assert summary["gc"] == setting
        hashes.append(summary["app_hash"])
    assert hashes[0] == hashes[1]


def test_app_tx_cpu_refuses_a_block_size_below_one():
    finished = run("--txs", "10", "--block-size", "0")
    assert finished.returncode != 0 and "--block-size" in finished.stderr
