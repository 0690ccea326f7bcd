"""`trolly-worker` commands through click's CliRunner (the same code as the console script): help everywhere,
`init` writes a home or nothing, `status` reads it back, bad input fails with `Error:` and a non-zero code."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trolly.compute.worker.cli import main
from trolly.compute.worker.progress import WorkerState
from trolly.wallet.keyring import Keyring


def invoke(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env={"TROLLY_WORKER_HOME": None,
                                                                 "TROLLY_WALLET_PASSWORD": None, **(env or {})})


@pytest.mark.parametrize("command", [[], ["init"], ["start"], ["status"]])
def test_every_command_has_help(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output and len(result.output.splitlines()) > 3


def test_start_help_labels_the_cheat_switch_as_a_test_switch():
    assert "TEST SWITCH" in invoke("start", "--help").output


def test_init_creates_a_key_and_a_config_with_a_fixed_port(tmp_path):
    home = tmp_path / "w"
    result = invoke("init", "--home", home, "--key", "worker", "--keyring-backend", "test", "--create-key",
                    "--node", "127.0.0.1:26657", "--stake", "2trl")
    assert result.exit_code == 0, result.output
    config = json.loads((home / "worker.json").read_text())
    assert config["key_name"] == "worker" and config["stake"] == 2_000_000 and config["node"] == "http://127.0.0.1:26657"
    assert 0 < config["blob_port"] < 65536
    info = Keyring(home, "test").get("worker")
    assert info.address in result.output
    again = invoke("init", "--home", home, "--key", "worker", "--keyring-backend", "test")
    assert again.exit_code != 0 and "exists" in again.output
    forced = invoke("init", "--home", home, "--key", "worker", "--keyring-backend", "test", "--blob-port", 8123, "--force",
                    "--public-url", "https://blobs.example:443")
    assert forced.exit_code == 0, forced.output
    config = json.loads((home / "worker.json").read_text())
    assert config["blob_port"] == 8123 and config["public_url"] == "https://blobs.example:443"
    assert "https://blobs.example:443" in invoke("status", "--home", home).output


@pytest.mark.parametrize("arguments, message", [
    (["--key", "nobody", "--keyring-backend", "test"], "no key 'nobody'"),
    (["--key", "w", "--keyring-backend", "test", "--create-key", "--stake", "1.5"], "invalid stake"),
    (["--key", "w", "--keyring-backend", "test", "--create-key", "--blob-port", "70000"], "70000"),
])
def test_init_failures_write_nothing(tmp_path, arguments, message):
    home = tmp_path / "w"
    result = invoke("init", "--home", home, *arguments)
    assert result.exit_code != 0 and message in result.output
    assert not (home / "worker.json").exists()


def test_status_reports_saved_progress(tmp_path):
    home = tmp_path / "w"
    assert invoke("init", "--home", home, "--key", "w", "--keyring-backend", "test", "--create-key").exit_code == 0
    assert "no tasks yet" in invoke("status", "--home", home).output
    state = WorkerState.load(home)
    progress = state.add_task(4, "cc" * 32, 1)
    progress.round(0).committed = True
    state.save()
    text = invoke("status", "--home", home).output
    assert "task 4: joined" in text and "committed rounds [0]" in text
    document = json.loads(invoke("status", "--home", home, "-o", "json").output)
    assert document["tasks"][0]["task_id"] == 4 and document["key"] == "w"
    assert document["address"] == Keyring(home, "test").get("w").address and document["address"] in text


def test_start_without_a_home_or_with_an_unknown_cheat_fails_clearly(tmp_path):
    result = invoke("start", "--home", tmp_path / "missing")
    assert result.exit_code == 1 and "Error: " in result.output and "trolly-worker init" in result.output
    result = invoke("start", "--home", tmp_path / "missing", "--cheat", "nap")
    assert result.exit_code == 2 and "nap" in result.output


def test_start_with_a_file_keyring_and_no_password_fails_before_any_network(tmp_path):
    home = tmp_path / "w"
    created = invoke("init", "--home", home, "--key", "w", "--create-key", "--node", "127.0.0.1:9",
                     env={"TROLLY_WALLET_PASSWORD": "a-long-password"})
    assert created.exit_code == 0, created.output
    result = invoke("start", "--home", home)
    assert result.exit_code != 0 and "password" in result.output


def test_start_flags_override_the_acceleration_options_of_worker_json_and_only_when_given():
    from trolly.compute.acceleration import AccelerationOptions
    from trolly.compute.worker.cli import start_config
    from trolly.compute.worker.config import WorkerConfig

    saved = WorkerConfig(key_name="w", checkpoint_process=False)
    assert start_config(saved).acceleration == AccelerationOptions(checkpoint_process=False, training_core=True)
    overridden = start_config(saved, checkpoint_process=True, training_core=False, node="127.0.0.1:9")
    assert overridden.acceleration == AccelerationOptions(checkpoint_process=True, training_core=False)
    assert overridden.node == "http://127.0.0.1:9" and not overridden.allow_private_blob_hosts
    assert "--no-checkpoint-process" in invoke("start", "--help").output
    assert "--no-training-core" in invoke("start", "--help").output


@pytest.mark.parametrize("field", ["checkpoint_process", "training_core"])
def test_worker_json_refuses_an_acceleration_option_that_is_not_true_or_false(tmp_path, field):
    from trolly.compute.worker.config import CONFIG_FILE, CONFIG_VERSION

    home = tmp_path / "w"
    home.mkdir()
    (home / CONFIG_FILE).write_text(json.dumps({"version": CONFIG_VERSION, "key_name": "w", field: "off"}))
    result = invoke("status", "--home", home)
    assert result.exit_code != 0 and f"{field} must be true or false" in result.output
