"""The wallet's `task` and `worker` commands against a fake node running the real chain rules."""

from __future__ import annotations

import pytest

from market_helpers import spec_bytes
from wallet_cli_helpers import hermetic, invoke_wallet, ok_json
from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key
from trolly.chain.market.economics import minimum_collateral, task_cost

from wallet_helpers import fake_node  # noqa: F401  (fixture)

DEV_ADDRESS = encode_address(dev_key(0).address)
TRL = 10**6


@pytest.fixture
def wallet(tmp_path, monkeypatch):
    """The CLI with a hermetic home and the unencrypted test keyring holding the dev key."""
    hermetic(monkeypatch)
    env = {"TROLLY_WALLET_HOME": str(tmp_path / "home"), "TROLLY_KEYRING_BACKEND": "test"}

    def run(*args, input=None, node=None):
        extra = {"TROLLY_NODE": node.url} if node is not None else {}
        return invoke_wallet(args, {**env, **extra}, input)

    added = run("keys", "add", "dev", "--recover", "-o", "json", input=DEV_MNEMONIC + "\n")
    assert added.exit_code == 0, added.output
    return run


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "spec.json"
    path.write_bytes(spec_bytes())  # 2 rounds, 20 inner steps, a checkpoint every 5: 4 segments
    return path


def included(result):
    outcome = ok_json(result)
    assert outcome["included"] and outcome["code"] == 0, outcome
    return outcome


def test_submit_shows_cost_and_collateral_and_sends_nothing_when_declined(wallet, fake_node, spec_file):
    result = wallet("task", "submit", spec_file, "--budget", "50trl", "--from", "dev", input="n\n", node=fake_node)
    assert result.exit_code != 0
    # Reward by default: all the budget allows at 2% + 3% fees over 2 rounds.
    reward = 50 * TRL * 10_000 // 10_500 // 2 - 10
    while task_cost(2, reward + 1, 200, 300) <= 50 * TRL:
        reward += 1
    collateral = minimum_collateral(reward, 1, 4, 2, 10_000, 1_000_000)
    shown = {line.split("  ")[0].strip(): line for line in result.stderr.splitlines() if "  " in line}
    assert f"({reward}utrl)" in shown["reward per round"]
    assert f"({task_cost(2, reward, 200, 300)}utrl)" in shown["cost (rounds x reward + fees)"]
    assert f"({collateral}utrl)" in shown["collateral per worker"]
    assert "cancelled" in result.stderr
    assert ok_json(wallet("task", "list", "--all", "-o", "json", node=fake_node)) == []


def test_submit_refuses_what_the_chain_would_refuse_before_signing(wallet, fake_node, spec_file, tmp_path):
    low = wallet("task", "submit", spec_file, "--budget", "50trl", "--reward-per-round", "30trl", "--from", "dev",
                 "--yes", node=fake_node)
    assert low.exit_code != 0 and "does not cover the cost" in low.stderr
    cheap = wallet("task", "submit", spec_file, "--budget", "50trl", "--collateral", "1utrl", "--from", "dev", "--yes",
                   node=fake_node)
    assert cheap.exit_code != 0 and "below the minimum" in cheap.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1}')
    invalid = wallet("task", "submit", bad, "--budget", "50trl", "--from", "dev", "--yes", node=fake_node)
    assert invalid.exit_code != 0 and "not valid" in invalid.stderr
    assert ok_json(wallet("task", "list", "--all", "-o", "json", node=fake_node)) == []


def test_task_and_worker_lifecycle(wallet, fake_node, spec_file):
    included(wallet("worker", "register", "--stake", "10trl", "--blob-url", "http://127.0.0.1:8700",
                    "--samples-per-second", "120", "--from", "dev", "--yes", "-o", "json", node=fake_node))
    worker = ok_json(wallet("worker", "status", "dev", "-o", "json", node=fake_node))
    assert worker["stake"] == 10 * TRL and worker["hardware"]["samples_per_second"] == 120
    assert worker["proof"]["verified"] and "stake" in worker["proof"]["fields"]

    balance_before = fake_node.account(dev_key(0).address).balance
    # The fake node makes 20 blocks a second: a round of 20 s, long enough that a loaded machine's slower steps
    # cannot let it close (and drop the member) before the test has asked what it asks of a running task.
    submitted = wallet("task", "submit", spec_file, "--budget", "50trl", "--workers", "1", "--round-blocks", "400",
                       "--from", "dev", "--yes", node=fake_node)
    assert submitted.exit_code == 0 and "Task 1 submitted" in submitted.stdout, submitted.output
    tasks = ok_json(wallet("task", "list", "-o", "json", node=fake_node))
    assert [(t["id"], t["status"], t["budget"]) for t in tasks] == [(1, "open", 50 * TRL)]
    assert fake_node.account(dev_key(0).address).balance == balance_before - 50 * TRL

    included(wallet("worker", "join", "1", "--from", "dev", "--yes", "-o", "json", node=fake_node))
    view = ok_json(wallet("task", "status", "1", "-o", "json", node=fake_node))
    assert view["status"] == "running" and view["members"][0]["worker"] == DEV_ADDRESS
    assert view["proof"]["verified"] and "status" in view["proof"]["fields"]
    text = wallet("task", "status", "1", node=fake_node)
    assert text.exit_code == 0 and "round 1 of 2" in text.stdout and "escrow remaining" in text.stdout
    assert "proved at height" in text.stdout
    (round_0,) = view["round_details"]  # each round's pages proven too, and said so
    assert round_0["proof"]["verified"] and round_0["proof"]["note"].startswith("proved at height ")
    assert "rounds' proof" in text.stdout
    fake_node.tamper_answer = lambda path, answer: (
        {**answer, "start_weights_hash": "11" * 32} if "/round/" in path else answer)
    lying = wallet("task", "status", "1", node=fake_node)
    assert lying.exit_code != 0 and "start_weights_hash differ from the proven record" in lying.stderr
    fake_node.tamper_answer = None

    busy = wallet("worker", "unregister", "--from", "dev", "--yes", node=fake_node)
    assert busy.exit_code != 0 and "still belongs to tasks 1" in busy.stderr

    # Cancelled during round 0: the round in progress is protected (it would be trained and paid), but the
    # worker never commits, so the round's deadline drops it and the task ends with nobody left.
    included(wallet("task", "cancel", "1", "--from", "dev", "--yes", "-o", "json", node=fake_node))
    view = ok_json(wallet("task", "status", "1", "-o", "json", node=fake_node))
    assert view["cancel_requested"] is True
    for _ in range(100):
        if view["status"] != "running":
            break
        fake_node.wait_blocks(10)
        view = ok_json(wallet("task", "status", "1", "-o", "json", node=fake_node))
    assert view["status"] == "abandoned" and view["members"][0]["reason"] == "missed round"
    penalty = view["members"][0]["penalized"]
    assert fake_node.account(dev_key(0).address).balance == balance_before - penalty  # the rest back
    assert ok_json(wallet("task", "list", "-o", "json", node=fake_node)) == []

    included(wallet("worker", "unregister", "--from", "dev", "--yes", "-o", "json", node=fake_node))
    worker = ok_json(wallet("worker", "status", DEV_ADDRESS, "-o", "json", node=fake_node))
    assert worker["registered"] is False and worker["unbonding"][0]["amount"] == 10 * TRL


def test_status_of_a_missing_task_is_a_clear_error(wallet, fake_node):
    missing = wallet("task", "status", "7", node=fake_node)
    assert missing.exit_code != 0 and "no task 7" in missing.stderr
    bad = wallet("task", "status", "seven", node=fake_node)
    assert bad.exit_code != 0 and "positive integer" in bad.stderr


def test_every_market_command_has_help(wallet):
    for path in (["task"], ["task", "submit"], ["task", "list"], ["task", "status"], ["task", "cancel"], ["worker"],
                 ["worker", "register"], ["worker", "join"], ["worker", "status"], ["worker", "unregister"]):
        result = wallet(*path, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output and len(result.output) > 100


def test_a_worker_registers_through_a_relay_and_needs_a_url_or_a_relay(wallet, fake_node):
    neither = wallet("worker", "register", "--stake", "10trl", "--samples-per-second", "120", "--from", "dev", "--yes",
                     node=fake_node)
    assert neither.exit_code != 0 and "--blob-url" in neither.stderr and "--relay" in neither.stderr
    included(wallet("worker", "register", "--stake", "10trl", "--relay", "http://relay.example:8650",
                    "--samples-per-second", "120", "--from", "dev", "--yes", "-o", "json", node=fake_node))
    worker = ok_json(wallet("worker", "status", "dev", "-o", "json", node=fake_node))
    assert (worker["blob_url"], worker["relay"]) == ("", "http://relay.example:8650")
    shown = wallet("worker", "status", "dev", node=fake_node).stdout
    assert "http://relay.example:8650" in shown
