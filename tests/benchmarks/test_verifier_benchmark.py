"""The verification benchmark's cheat matrix, on a small scale: every registered cheat (the one registry,
`compute/cheats/`) and a cheat loaded from a `--cheat-module` file are caught by the exact path, and a harmless
"cheat" is not (so the matrix can fail)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import verification  # noqa: E402
from trolly.compute.cheats import CHEATS, load_cheat_module  # noqa: E402
from trolly.verifier.segment_check import Replayer  # noqa: E402

MODULE = '''
import dataclasses
from trolly.compute.cheats import honest_round, register_cheat, segment_cheat
from trolly.compute.cheats.distortions import cheat_steps
from trolly.compute.training import segment_bounds

def _one_step_short(context, segment, start):
    begin, end = segment_bounds(segment, context.steps, context.spec.training.checkpoint_every)
    return cheat_steps(context, begin, end, train_steps=end - begin - 1)

register_cheat("bench_test_one_step_short", "faked segments skip their last step")(segment_cheat(_one_step_short))
register_cheat("bench_test_relabelled_honest", "honest work labelled as faked (must not be caught)")(
    lambda context: dataclasses.replace(honest_round(context), faked_segments=frozenset({0, 1})))
'''


@pytest.mark.slow
def test_cheat_matrix_catches_every_registered_and_module_cheat_and_only_those(tmp_path):
    builtin = verification.cheat_names()
    path = tmp_path / "more_cheats.py"
    path.write_text("from trolly.compute.cheats import CHEATS\n" + MODULE)
    added = load_cheat_module(path)
    exact, tolerant = Replayer(), Replayer(children=False, tolerance_fallback=True)
    try:
        assert verification.cheat_names() == [*builtin, *added]
        result = verification.verify_cheats(verification.QUICK_MODELS, verification.cheat_names(), 1, exact, tolerant)
    finally:
        exact.close()
        tolerant.close()
        for name in added:
            CHEATS.pop(name, None)
    for name in [*builtin, "bench_test_one_step_short"]:
        assert result[name]["caught"] == result[name]["faked_segments"] > 0, name
    assert result["bench_test_relabelled_honest"]["caught"] == 0  # honest work is never "caught"
    assert result["bench_test_relabelled_honest"]["caught_under_tolerance"] == 0


def test_the_cost_measurement_verifies_every_segment_with_one_update_check_per_round():
    replayer = Replayer()
    try:
        cost = verification.measure_cost(verification.QUICK_MODELS[0], replayer, 1)
    finally:
        replayer.close()
    for key in ("seconds_per_trained_step", "seconds_per_verified_segment", "seconds_per_update_check",
                "cpu_seconds_per_trained_step", "cpu_seconds_per_verified_segment", "cpu_seconds_per_update_check"):
        assert cost[key] > 0, key
    every = verification.REFERENCE_TASK["checkpoint_every"]
    assert cost["replay_step_cost_ratio"] == pytest.approx(
        cost["seconds_per_verified_segment"] / (every * cost["seconds_per_trained_step"]))
    assert cost["replay_step_cpu_ratio"] == pytest.approx(
        cost["cpu_seconds_per_verified_segment"] / (every * cost["cpu_seconds_per_trained_step"]))
    # the warm-up's check, then one for the timed round's segments (two in flight at a time share it)
    assert replayer.update_checks.computed == 2


def test_the_wasm32_column_catches_every_cheat_and_reports_its_cost_beside_the_cpu_profiles():
    """The cheat matrix under the wasm32 profile: rounds trained and committed by the kernel, every registered
    cheat caught bitwise; its cost fraction reported beside the CPU profile's."""
    replayer = Replayer()
    try:
        small = verification.Model("mlp-small", "mlp", {"hidden": [16]}, "digits", 5)
        cheats = verification.verify_cheats(verification.QUICK_MODELS, verification.cheat_names(), 1, replayer, None,
                                            "wasm32")
        cpu = verification.measure_cost(small, replayer, 1, 10)
        wasm32 = verification.measure_cost(small, replayer, 1, 10, "wasm32")
    finally:
        replayer.close()
    column = verification.wasm32_summary({"cheats": cheats, "cost": wasm32}, cpu)
    assert column["profile"] == "wasm32/kernel-1"
    assert set(column["detection"]) == set(verification.cheat_names())
    assert all(rate == 1.0 for rate in column["detection"].values()), column["detection"]
    assert column["verifier_compute_fraction"] == wasm32["fraction"] > 0
    assert column["cpu_profile_verifier_compute_fraction"] == cpu["fraction"] > 0
