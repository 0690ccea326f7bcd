"""End to end: the wallet against a real `trolly-node dev` process (solo engine, JSON-RPC over 127.0.0.1).

One dev chain per module (blocks every 200 ms, its own home and RPC port); each test uses its own keys, so
tests do not depend on each other. Most commands go through CliRunner (same code as the console script);
`test_console_script_*` runs the installed `trolly-wallet` itself.
"""

import base64
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
from dev_node import dev_node
from net_helpers import free_port
from wallet_cli_helpers import fails_with, hermetic, invoke_wallet, ok_json

from trolly.abci_app.home_genesis import DEV_UNBONDING_BLOCKS
from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key
from trolly.wallet.rpc import RpcClient

pytestmark = pytest.mark.slow

BIN = pathlib.Path(sys.executable).parent
WALLET_SCRIPT = BIN / "trolly-wallet"
PASSWORD = "e2e-password-1"
DEV_ADDRESS = encode_address(dev_key(0).address)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with dev_node(tmp_path_factory.mktemp("node-home")) as url:
        yield url


@pytest.fixture
def wallet(tmp_path, node, monkeypatch):
    hermetic(monkeypatch)
    home = tmp_path / "wallet"

    def run(*args, input=None, password=PASSWORD):
        env = {"TROLLY_WALLET_HOME": str(home), "TROLLY_NODE": node}
        if password is not None:
            env["TROLLY_WALLET_PASSWORD"] = password
        return invoke_wallet(args, env, input)

    run.home = home
    return run


def balance_of(wallet, who):
    return ok_json(wallet("query", "account", who, "-o", "json"))["balance"]


def funded_key(wallet, name, amount="100trl", backend="file"):
    """A new key in the wallet, funded from the dev account (recovered into the same keyring)."""
    if "dev" not in [k["name"] for k in ok_json(wallet("keys", "list", "--keyring-backend", backend, "-o", "json"))]:
        ok_json(wallet("keys", "add", "dev", "--recover", "--keyring-backend", backend, "-o", "json",
                       input=DEV_MNEMONIC + "\n"))
    address = ok_json(wallet("keys", "add", name, "--keyring-backend", backend, "-o", "json"))["address"]
    sent = ok_json(wallet("tx", "send", address, amount, "--from", "dev", "--keyring-backend", backend, "--yes",
                          "-o", "json"))
    assert sent["included"] and sent["code"] == 0
    return address


def fees_paid(node: str, address: str) -> int:
    """The fees of every transaction `address` signed (the dev chain charges the default fees)."""
    with RpcClient(node) as client:
        results, _ = client.tx_search(f"tx.signer='{address}'", per_page=100)
    return sum(int(event.get("fee", "0")) for result in results for event in result.events
               if event.type == "tx" and event.get("signer") == address)


def test_receive_send_and_two_quick_sends(wallet, node):
    alice = funded_key(wallet, "alice", "10trl")
    bob = ok_json(wallet("keys", "add", "bob", "-o", "json"))["address"]
    assert balance_of(wallet, "alice") == 10_000_000
    sent = ok_json(wallet("tx", "send", "bob", "1.5trl", "--from", "alice", "--fees", "5000utrl", "--yes", "-o", "json"))
    assert sent["code"] == 0 and sent["height"] > 0
    found = ok_json(wallet("query", "tx", sent["hash"], "-o", "json"))
    assert found["height"] == sent["height"] and found["tx"]["signer"] == alice
    fails_with(wallet("query", "tx", "AB" * 32), 1, "not found")
    with RpcClient(node) as client:  # the library's tx_search, as the worker and verifier use it
        results, total = client.tx_search(f"tx.height={sent['height']}")
        assert sent["hash"] in [r.hash for r in results] and total >= 1
        by_signer, _ = client.tx_search(f"tx.signer='{alice}'")
        assert sent["hash"] in [r.hash for r in by_signer]
    # two sends straight after each other, without waiting: the second must not reuse the first's nonce
    first = ok_json(wallet("tx", "send", bob, "1utrl", "--from", "alice", "--yes", "--no-wait", "-o", "json"))
    second = ok_json(wallet("tx", "send", bob, "2utrl", "--from", "alice", "--yes", "-o", "json"))
    assert second["nonce"] == first["nonce"] + 1 and second["code"] == 0
    with RpcClient(node) as client:
        assert client.wait_for_tx(first["hash"], timeout=10).code == 0
    assert balance_of(wallet, bob) == 1_500_003
    assert balance_of(wallet, alice) == 10_000_000 - 1_500_000 - 3 - fees_paid(node, alice)


def test_generate_only_then_broadcast(wallet, node, tmp_path):
    carol = funded_key(wallet, "carol", "5trl", backend="test")
    generated = ok_json(wallet("tx", "send", DEV_ADDRESS, "1trl", "--from", "carol", "--keyring-backend", "test",
                               "--generate-only", "--yes", "-o", "json"))
    assert balance_of(wallet, carol) == 5_000_000  # nothing sent yet
    path = tmp_path / "signed.txt"
    path.write_text(generated["tx"] + "\n")
    sent = ok_json(wallet("tx", "broadcast", path, "--yes", "-o", "json"))
    assert sent["hash"] == generated["hash"] and sent["code"] == 0
    assert balance_of(wallet, carol) == 4_000_000 - fees_paid(node, carol)


def test_stake_create_bond_unbond_power_visible(wallet, node):
    operator = funded_key(wallet, "val", "100trl", backend="test")
    consensus = base64.b64encode(dev_key(42).pubkey).decode()
    common = ("--from", "val", "--keyring-backend", "test", "--yes", "-o", "json")
    created = ok_json(wallet("tx", "stake", "create-validator", "--stake", "20trl", "--moniker", "e2e-val",
                             "--consensus-pubkey", consensus, *common))
    assert created["code"] == 0

    def power():
        return {v["operator"]: v["power"] for v in ok_json(wallet("query", "validators", "-o", "json"))}.get(operator)

    assert power() == 20
    assert ok_json(wallet("tx", "stake", "bond", "5trl", *common))["code"] == 0
    assert power() == 25
    assert ok_json(wallet("tx", "stake", "unbond", "10trl", *common))["code"] == 0
    assert power() == 15
    deadline = time.monotonic() + 10  # CometBFT's set follows the app's updates a block or two later
    while time.monotonic() < deadline:
        consensus_set = ok_json(wallet("query", "validators", "--consensus", "-o", "json"))
        if any(v["pubkey"] == consensus and v["voting_power"] == 15 for v in consensus_set):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"validator not in CometBFT's set with power 15: {consensus_set}")
    fails_with(wallet("tx", "stake", "unbond", "1000trl", *common[:-2]), 9, "code")
    # the dev chain unbonds in DEV_UNBONDING_BLOCKS (200 ms each): the 10trl show as unbonding, then come back
    deadline = time.monotonic() + 20 + DEV_UNBONDING_BLOCKS * 0.2 * 3
    while (pending := ok_json(wallet("query", "unbonding", operator, "-o", "json")))["total"]:
        assert pending["total"] == 10_000_000 and time.monotonic() < deadline, pending
        time.sleep(0.2)
    # As a validator the operator also earns a share of every block's fees, so its balance is at least what
    # its stake changes and its own fees leave, and above that only by fee rewards (a few thousand utrl here).
    floor = 100_000_000 - 20_000_000 - 5_000_000 + 10_000_000 - fees_paid(node, operator)
    assert floor <= balance_of(wallet, operator) < floor + 100_000


def test_failures_leave_balances_and_keyring_unchanged(wallet):
    dan = funded_key(wallet, "dan", "2trl")
    home = wallet.home
    before_files = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and p.name != "nonces.json"}
    before = (balance_of(wallet, "dan"), balance_of(wallet, "dev"))
    bad = dan[:-1] + ("q" if dan[-1] != "q" else "p")
    fails_with(wallet("tx", "send", DEV_ADDRESS, "1trl", "--from", "dan", "--yes", password="wrong-password"),
               4, "wrong keyring password")
    fails_with(wallet("tx", "send", DEV_ADDRESS, "3trl", "--from", "dan", "--yes"), 8, "insufficient funds")
    fails_with(wallet("tx", "send", bad, "1trl", "--from", "dan", "--yes"), 6, "invalid address")
    fails_with(wallet("tx", "send", DEV_ADDRESS, "1trl", "--from", "nobody", "--yes"), 5, "unknown key name")
    down = f"http://127.0.0.1:{free_port()}"
    fails_with(wallet("tx", "send", DEV_ADDRESS, "1trl", "--from", "dan", "--yes", "--node", down), 3, down)
    after_files = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and p.name != "nonces.json"}
    assert after_files == before_files
    assert (balance_of(wallet, "dan"), balance_of(wallet, "dev")) == before


def test_account_proof_against_the_real_app_hash(wallet):
    ok_json(wallet("keys", "add", "dev", "--recover", "-o", "json", input=DEV_MNEMONIC + "\n"))
    proven = ok_json(wallet("query", "account", "dev", "--prove", "-o", "json"))
    assert proven["proof"]["verified"] and proven["proof"]["header_height"] == proven["proof"]["query_height"] + 1
    never_used = encode_address(dev_key(77).address)
    absent = ok_json(wallet("query", "account", never_used, "--prove", "-o", "json"))
    assert absent["balance"] == 0 and absent["proof"]["verified"]


def test_console_script_runs_and_fails_with_one_line(node, tmp_path):
    if not WALLET_SCRIPT.exists():
        pytest.skip(f"trolly-wallet console script not installed at {WALLET_SCRIPT}")
    env = {**os.environ, "TROLLY_WALLET_HOME": str(tmp_path / "w"), "TROLLY_NODE": node}
    env.pop("TROLLY_WALLET_PASSWORD", None)
    status = subprocess.run([str(WALLET_SCRIPT), "query", "status", "-o", "json"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert status.returncode == 0 and json.loads(status.stdout)["chain_id"]
    added = subprocess.run([str(WALLET_SCRIPT), "keys", "add", "dev", "--recover", "--keyring-backend", "test",
                            "-o", "json"], input=DEV_MNEMONIC + "\n", env=env, capture_output=True, text=True, timeout=60)
    assert added.returncode == 0 and json.loads(added.stdout)["address"] == DEV_ADDRESS
    down = f"http://127.0.0.1:{free_port()}"
    failed = subprocess.run([str(WALLET_SCRIPT), "query", "account", "dev", "--keyring-backend", "test", "--node", down],
                            env=env, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 3
    assert failed.stderr.strip().count("\n") == 0 and failed.stderr.startswith(f"Error: node unreachable at {down}")
