"""`trolly-verifier`: every command has help, `replay` explains a verdict offline and exits 3 on a cheat,
`cheats` lists the registry (and a module's additions), bad input gives a clear error and a non-zero code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from trolly.compute.blobs import BlobStore
from trolly.verifier.cli import EXIT_FAIL_VERDICT, main_group

from verifier_helpers import build_round, claim_for, digits, own_profile, tiny_spec, tiny_spec_document


def write_round(tmp_path, cheat: str):
    """A blob-store directory with one worker-round, its claim file for segment 1, and the spec file."""
    spec = tiny_spec()
    cheated, published = build_round(spec, cheat, faked={1})
    store = BlobStore(tmp_path / "blobs")
    for data in published.blobs.values():
        store.put(data)
    store.set_checkpoints(1, 1, list(published.listing))
    claim = claim_for(cheated, published, 1, own_profile())
    (tmp_path / "claim.json").write_text(json.dumps(claim.to_json()))
    (tmp_path / "spec.json").write_text(json.dumps(tiny_spec_document(digits().manifest_hash)))
    return tmp_path / "claim.json", tmp_path / "spec.json", tmp_path / "blobs"


@pytest.mark.parametrize("command", [[], ["start"], ["replay"], ["cheats"]])
def test_every_command_has_help(command):
    result = CliRunner().invoke(main_group, [*command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_replay_explains_an_honest_segment_with_its_numbers(tmp_path):
    claim, spec, blobs = write_round(tmp_path, "honest")
    result = CliRunner().invoke(main_group, ["replay", "--claim", str(claim), "--spec", str(spec), "--checkpoints", str(blobs)])
    assert result.exit_code == 0, result.output
    assert "verdict: PASS" in result.output and "mode:    bitwise" in result.output
    assert "errors:  weights" in result.output and "evidence hash:" in result.output


def test_replay_of_a_cheat_fails_with_exit_code_3_and_json_numbers(tmp_path):
    claim, spec, blobs = write_round(tmp_path, "changed_lr")
    result = CliRunner().invoke(main_group, ["replay", "--claim", str(claim), "--spec", str(spec), "--checkpoints",
                                             str(blobs), "--output", "json"])
    assert result.exit_code == EXIT_FAIL_VERDICT
    report = json.loads(result.output)
    assert report["verdict"] == "fail" and report["comparison"]["weights_error"] > report["comparison"]["threshold"]


def test_replay_needs_a_segment_to_check():
    result = CliRunner().invoke(main_group, ["replay", "--task", "1"])
    assert result.exit_code != 0 and "--claim" in result.output


def test_cheats_lists_builtins_and_module_additions(tmp_path):
    module = tmp_path / "extra.py"
    module.write_text("from trolly.compute.cheats import register_cheat, honest_round\n"
                      "register_cheat('cli_test_cheat', 'listed by the CLI test')(honest_round)\n")
    from trolly.compute.cheats import CHEATS
    try:
        result = CliRunner().invoke(main_group, ["cheats", "--cheat-module", str(module)])
        assert result.exit_code == 0
        assert "bf16" in result.output and "cli_test_cheat" in result.output
    finally:
        CHEATS.pop("cli_test_cheat", None)


def test_console_script_reports_an_unreachable_node_without_a_traceback(tmp_path):
    claim, _, _ = write_round(tmp_path, "honest")
    completed = subprocess.run([sys.executable, "-m", "trolly.verifier.cli", "replay", "--claim", str(claim),
                                "--node", "http://127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 1
    assert completed.stderr.startswith("error:") and "Traceback" not in completed.stderr


def test_start_refuses_a_missing_key(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "trolly.verifier.cli", "start", "--key", "nobody", "--home",
                                str(tmp_path / "v"), "--wallet-home", str(tmp_path / "w"), "--keyring-backend", "test",
                                "--once"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 1 and "error:" in completed.stderr and "Traceback" not in completed.stderr
