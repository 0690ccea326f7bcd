"""`python -m benchmarks.fuzz_chain` end to end on a small stream: two app processes and the reference agree,
nothing crashes, and the last line is the JSON the issue asks for."""

from __future__ import annotations

import json

import pytest

from benchmarks import fuzz_chain

pytestmark = pytest.mark.slow


def test_a_short_soak_reports_zero_crashes_invariant_failures_and_nondeterminism(capsys):
    fuzz_chain.main(["--txs", "400", "--block-txs", "40"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["txs"] >= 400
    assert (result["crashes"], result["invariant_failures"], result["nondeterministic"], result["unknown_codes"]) \
        == (0, 0, 0, 0)
    assert result["distinct_failure_codes"] >= 8  # the stream reached many different checks
    assert result["honest_tx_per_s"] > 0 and result["hostile_tx_per_s"] > 0


def test_a_crashed_app_is_counted_as_a_crash(tmp_path):
    soak = fuzz_chain.Soak(str(tmp_path))
    try:
        soak.start()
        soak.apps[1].process.kill()
        soak.apps[1].process.wait()
        soak.block([])
        assert soak.tally.crashes >= 1
    finally:
        soak.close()
