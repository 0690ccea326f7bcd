"""benchmarks.browser_worker runs end to end on a tiny model (a smoke test of its machinery: the page, its Web
Worker, Node.js, wasmtime and the torch trainer; the figures come from running the benchmark), and its kernels
agree to the bit."""

import json
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_kernel_run_reaches_the_same_hash_and_each_has_a_rate():
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make setup)")
    if not pathlib.Path("/usr/bin/chromium").exists():
        pytest.skip("Debian's chromium is not installed (make test installs it as root)")
    completed = subprocess.run([sys.executable, "-m", "benchmarks.browser_worker", "--hidden", "24", "16",
                                "--batch-size", "8", "--steps", "3", "--warmup", "1", "--repeats", "1"],
                               cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == "browser_worker" and result["hashes_match"] is True
    hashes = result["hashes"]
    assert set(hashes) >= {"wasm_chromium", "js_chromium", "wasm_wasmtime"}
    assert hashes["wasm_chromium"] == hashes["js_chromium"] == hashes["wasm_wasmtime"]
    assert len(hashes["wasm_chromium"]) == 64
    assert result["task"]["model"] == "mlp 64-24-16-10" and result["task"]["batch_size"] == 8
    assert result["task"]["timed_steps"] == 3 and result["ratio_to_torch"]["torch"] == 1.0
    assert set(result["samples_per_s"]) >= {"wasm_chromium", "js_chromium", "wasm_wasmtime", "torch"}
    assert all(len(seconds) == 1 and seconds[0] >= 0 for seconds in result["seconds"].values())


def test_kernel_runs_that_end_apart_are_reported_as_not_matching():
    """A kernel whose bytes drifted (a fallback that rounds once too few times) must not pass unnoticed."""
    from benchmarks.browser_worker import summarize

    segment = SimpleNamespace(spec=SimpleNamespace(training=SimpleNamespace(batch_size=4)), steps=2)
    turns = {"torch": [{"seconds": 0.5}], "wasm_chromium": [{"seconds": 0.25, "hash": "a"}],
             "js_chromium": [{"seconds": 1.0, "hash": "b"}], "wasm_wasmtime": [{"seconds": 0.0, "hash": "a"}]}
    result = summarize(segment, turns, {}, {})
    assert result["hashes_match"] is False
    assert result["samples_per_s"] == {"torch": 16.0, "wasm_chromium": 32.0, "js_chromium": 8.0,
                                       "wasm_wasmtime": None}
    assert result["wasm_ratio_to_torch"] == 2.0 and result["js_ratio_to_torch"] == 0.5
