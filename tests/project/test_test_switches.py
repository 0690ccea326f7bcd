"""The test switches the fault tests use (tests/localnet/test_cometbft_faults.py): each is off unless asked for, refuses
a bad value with a clear error, and does what it says. None of them is for a real validator.

- `TROLLY_TEST_EXIT_BEFORE_COMMIT_HEIGHT` (trolly-node start): the app exits at that height's Commit;
- `trolly-verifier start --test-switch-vote-fail` / `--test-switch-never-vote`: a dishonest verifier;
- `trolly-worker start --cheat NAME` / `trolly-localnet up --cheat NAME`: a cheating worker, playing a cheat from
  the one registry (`compute/cheats/`) that the verification benchmark measures and `trolly-verifier cheats`
  lists (every cheat played by a worker and caught: tests/compute/test_compute_cheats.py).
"""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from trolly.abci_app.cli import main as node_main
from trolly.abci_app.crash_switch import ENVIRONMENT_VARIABLE, exit_before_commit_height
from trolly.abci_app.errors import AbciAppError
from trolly.compute import cheats
from trolly.compute.worker import cli as worker_cli
from trolly.localnet.cli import main as localnet_main
from trolly.verifier.cli import main_group as verifier_main
from trolly.verifier.segment_check import FAILED, SegmentClaim
from trolly.verifier.service import ServiceConfig, VerifierService, failing_report


def test_the_crash_switch_is_off_unless_the_variable_names_a_height():
    assert exit_before_commit_height({}) is None
    assert exit_before_commit_height({ENVIRONMENT_VARIABLE: " "}) is None
    assert exit_before_commit_height({ENVIRONMENT_VARIABLE: "42"}) == 42


@pytest.mark.parametrize("value", ["0", "-3", "ten", "1.5"])
def test_the_crash_switch_refuses_a_value_that_is_not_a_height(value):
    with pytest.raises(AbciAppError, match=f"{ENVIRONMENT_VARIABLE} must be a block height"):
        exit_before_commit_height({ENVIRONMENT_VARIABLE: value})


def test_trolly_node_start_with_a_bad_crash_switch_exits_nonzero_before_anything_starts(tmp_path):
    result = CliRunner().invoke(node_main, ["start", "--home", str(tmp_path / "home")],
                                env={ENVIRONMENT_VARIABLE: "soon"})
    assert result.exit_code != 0
    assert f"{ENVIRONMENT_VARIABLE} must be a block height" in result.output
    assert not (tmp_path / "home").exists()


def _claim() -> SegmentClaim:
    return SegmentClaim(task_id=1, round=0, worker="trolly1worker", worker_index=0, segment=2,
                        checkpoint_root=b"\x01" * 32, num_checkpoints=4, steps=40, samples_processed=1280,
                        start_weights_hash=b"\x02" * 32, determinism_profile="cpu")


def test_a_verifier_with_the_vote_fail_switch_fails_a_segment_without_replaying_it():
    report = failing_report(_claim())
    assert report.outcome == FAILED and report.verdict_name == "fail"
    assert "TEST SWITCH" in report.reason


def test_a_verifier_with_the_never_vote_switch_has_nothing_to_vote(tmp_path):
    from trolly.chain.hd import dev_key

    service = VerifierService(ServiceConfig(home=tmp_path, never_vote=True), dev_key(0))
    try:
        assert asyncio.run(service._verify_and_vote(_claim(), deadline=100)) is None
    finally:
        asyncio.run(service.close())


def test_a_verifier_refuses_two_test_switches_at_once(tmp_path):
    result = CliRunner().invoke(verifier_main, [
        "start", "--home", str(tmp_path), "--key", "v", "--wallet-home", str(tmp_path / "w"),
        "--keyring-backend", "test", "--test-switch-vote-fail", "--test-switch-never-vote"])
    assert result.exit_code != 0
    assert "at most one test switch" in result.output


def test_the_worker_the_benchmark_and_the_verifier_share_one_cheat_registry():
    """One registry, one name per cheat: the worker's `--cheat` choices, `trolly-verifier cheats` and the cheats
    the verification benchmark runs are the same names, read from the same dict."""
    import benchmarks.verification as benchmark
    from trolly.verifier import cli as verifier_cli

    assert worker_cli.CHEATS is verifier_cli.CHEATS is benchmark.CHEATS is cheats.CHEATS
    names = set(cheats.CHEATS)
    assert len(names) >= 15 and all("-" not in name for name in names)
    switch = next(p for p in worker_cli.main.commands["start"].params if p.name == "cheat")
    assert set(switch.type.choices) == names
    listed = CliRunner().invoke(verifier_main, ["cheats"])
    assert listed.exit_code == 0 and {line.split()[0] for line in listed.output.splitlines()} == names
    assert set(benchmark.cheat_names()) == names


def test_the_localnet_refuses_a_cheat_the_registry_does_not_have(tmp_path):
    result = CliRunner().invoke(localnet_main, ["up", "--home", str(tmp_path), "--cheat", "skip-steps"])
    assert result.exit_code != 0 and "unknown cheat 'skip-steps'" in result.output and "skipped_steps" in result.output
    assert not any(tmp_path.iterdir())
