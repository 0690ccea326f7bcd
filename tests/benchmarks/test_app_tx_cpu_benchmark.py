"""The app's per-transaction CPU benchmark runs end to end, with and without the signature checker and with the
node's or Python's collector settings, and gives the same app hash every way (a tiny configuration; speed itself
is never asserted)."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.app_tx_cpu", *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_app_tx_cpu_reports_every_phase_and_the_same_app_hash_whatever_the_checker_and_the_collector():
    figures = []
    for checker, collector in (("off", "node"), ("on", "node"), ("off", "default")):
        finished = run("--txs", "120", "--block-size", "40", "--checker", checker, "--gc", collector)
        assert finished.returncode == 0, finished.stderr[-3000:]
        figures.append(json.loads(finished.stdout.strip().splitlines()[-1]))
    assert set(figures[0]["phases_us"]) == {"check_tx_new", "check_tx_recheck", "prepare_proposal",
                                            "process_proposal", "finalize_block", "commit"}
    assert figures[0]["per_tx_us"] > 0 and figures[0]["txs"] == 120 and figures[0]["block_size"] == 40
    assert [(figure["checker"], figure["gc"]) for figure in figures] == [("off", "node"), ("on", "node"),
                                                                          ("off", "default")]
    assert len({figure["app_hash"] for figure in figures}) == 1 and len(figures[0]["app_hash"]) == 64


def test_app_tx_cpu_refuses_a_block_size_below_one():
    finished = run("--txs", "10", "--block-size", "0")
    assert finished.returncode != 0 and "--block-size" in finished.stderr
