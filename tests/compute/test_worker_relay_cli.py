"""`trolly-worker init/start --relay`: the relay a worker with no inbound route publishes through, checked before
anything is written or started (the end-to-end run behind a namespace is tests/compute/test_relay_netns.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from trolly.compute.worker.cli import main
from trolly.compute.worker.config import WorkerConfig
from trolly.compute.worker.errors import WorkerHomeError


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"TROLLY_WORKER_HOME": None,
                                                                 "TROLLY_WALLET_PASSWORD": None})


@pytest.mark.parametrize("relay, message", [
    ("ftp://relay.example", "relay must start with http"),
    ("http://user:pw@relay.example", "relay must not carry user information"),
    ("http://relay.example/?q", "no query"),
])
def test_init_refuses_a_relay_the_chain_would_refuse_and_writes_nothing(tmp_path, relay, message):
    home = tmp_path / "w"
    result = invoke("init", "--home", home, "--key", "w", "--keyring-backend", "test", "--create-key",
                    "--relay", relay)
    assert result.exit_code != 0 and "Error: " in result.output and message in result.output
    assert not home.exists() or not (home / "worker.json").exists()


def test_start_refuses_a_bad_relay_before_any_network(tmp_path):
    home = tmp_path / "w"
    home.mkdir()
    (home / "worker.json").write_text('{"version": 1, "key_name": "w", "keyring_backend": "test", "node": '
                                      '"http://127.0.0.1:9"}')
    result = invoke("start", "--home", home, "--relay", "relay.example")
    assert result.exit_code != 0 and "the relay 'relay.example' cannot be registered" in result.output


def test_worker_json_keeps_a_good_relay_and_refuses_a_bad_one():
    assert WorkerConfig(key_name="w", relay="https://relay.example:8650").relay == "https://relay.example:8650"
    with pytest.raises(WorkerHomeError, match="relay must start with http"):
        WorkerConfig(key_name="w", relay="relay.example")


def test_init_keeps_the_relay_and_status_says_blobs_go_through_it(tmp_path):
    import json

    home = tmp_path / "w"
    result = invoke("init", "--home", home, "--key", "w", "--keyring-backend", "test", "--create-key", "--node",
                    "127.0.0.1:9", "--relay", "https://relay.example:8650/")
    assert result.exit_code == 0, result.output
    assert "blobs published through the relay https://relay.example:8650" in result.output
    assert json.loads((home / "worker.json").read_text())["relay"] == "https://relay.example:8650"
    status = json.loads(invoke("status", "--home", home, "-o", "json").output)
    assert (status["relay"], status["blob_url"]) == ("https://relay.example:8650", "")
    assert "blobs through the relay https://relay.example:8650" in invoke("status", "--home", home).output
