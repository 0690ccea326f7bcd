"""The test switches the fault tests use (tests/test_cometbft_faults.py): each is off unless asked for, refuses
a bad value with a clear error, and does what it says. None of them is for a real validator.

- `TROLLY_TEST_EXIT_BEFORE_COMMIT_HEIGHT` (trolly-node start): the app exits at that height's Commit;
- `trolly-verifier start --test-switch-vote-fail` / `--test-switch-never-vote`: a dishonest verifier.
"""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from trolly.abci_app.cli import main as node_main
from trolly.abci_app.crash_switch import ENVIRONMENT_VARIABLE, exit_before_commit_height
from trolly.abci_app.errors import AbciAppError
from trolly.verifier.cli import main_group as verifier_main
from trolly.verifier.replay import FAILED, SegmentClaim
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
