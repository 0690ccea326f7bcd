"""Downtime on a localnet of 4 validators on real CometBFT v0.38 processes (issue 35, test a).

Validator-3 (10 TRL of its operator's and 5 TRL the requester delegated to it: 15 of 105 TRL of the power)
has its CometBFT stopped while its app and verifier go on: the three others keep making blocks, and the last
commit of each block lists validator-3 as absent. With a window of 20 commits of which half must be signed, its
11th miss jails it: its power goes to 0 (and CometBFT drops it from the set), 1 % of its stake is burned,
exactly, and its delegator loses exactly its share of that (its shares unchanged, worth 1 % less). An unjail before its jail time has passed is refused with the
blocks left. Its CometBFT comes back and catches up as a full node; once the jail time has passed, its operator
unjails it with the wallet's CLI, it rejoins CometBFT's set with the power of what is left of its stake, signs
commits again, and its missed-blocks counter stops growing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto.staking_pb2 import MsgDelegate
from trolly.localnet.home_layout import REQUESTER_INDEX, LocalnetConfig
from trolly.localnet.network import Localnet
from trolly.wallet.rpc import RpcClient

from dev_node import send_included
from localnet_helpers import cometbft_missing, free_base_port, query, wait_until

pytestmark = pytest.mark.slow

if cometbft_missing():
    pytest.skip(f"needs CometBFT v0.38 (make setup installs it where Go exists): {cometbft_missing()}",
                allow_module_level=True)

WALLET = str(Path(sys.executable).parent / "trolly-wallet")
SELF_BOND = 10_000_000
"""validator-3's genesis stake (the last of 4 bonds 1 x LocalnetConfig's 10 TRL)."""
DELEGATED = 5_000_000
"""The requester's delegation to validator-3, made before it goes down."""
STAKE = SELF_BOND + DELEGATED
DOWNTIME = {"signed_blocks_window": 20, "min_signed_per_window_bps": 5_000, "downtime_jail_blocks": 60,
            "slash_fraction_downtime_bps": 100, "halt_reset_seconds": 300}
"""Small enough to jail within seconds of blocks, long enough a jail to try an early unjail while it lasts."""


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    home = tmp_path_factory.mktemp("cometbft-downtime") / "net"
    net = Localnet(home, LocalnetConfig(validators=4, workers=0, slow_workers=0, block_time="200ms",
                                        base_port=free_base_port(validators=4, workers=0)))
    net.ensure_initialized()
    for index in range(net.config.nodes):  # before the first start: every node's genesis alike
        path = net.layout.node_home(index) / "config" / "genesis.json"
        genesis = json.loads(path.read_text())
        genesis["app_state"]["params"]["slashing"] = DOWNTIME
        path.write_text(json.dumps(genesis, indent=2))
    try:
        net.up(timeout=120)
        yield net
    finally:
        net.down()


def wallet(net: Localnet, *args: str) -> subprocess.CompletedProcess:
    """`trolly-wallet ARGS` against node 0 with the localnet's test keyring, JSON output."""
    return subprocess.run(
        [WALLET, *args, "--home", str(net.layout.wallet_home), "--keyring-backend", "test",
         "--node", net.config.rpc_url(0), "--output", "json"],
        capture_output=True, text=True, timeout=120)


def cometbft_validators(net: Localnet) -> dict[str, int]:
    with RpcClient(net.config.rpc_url(0), timeout=5.0) as client:
        result = client.call("validators", per_page="100")
    return {v["address"].upper(): int(v["voting_power"]) for v in result["validators"]}


def signed_a_recent_commit(net: Localnet, address: str) -> bool:
    with RpcClient(net.config.rpc_url(0), timeout=5.0) as client:
        height = client.status().latest_block_height - 1
        commit = client.call("commit", height=str(height))["signed_header"]["commit"]
    return any(s["validator_address"].upper() == address and s["signature"] for s in commit["signatures"])


@pytest.mark.timeout(600)
def test_a_validator_whose_cometbft_stops_is_jailed_and_slashed_then_unjailed_by_its_operator_signs_again(net):
    rpc = net.config.rpc_url(0)
    operator = encode_address(dev_key(3).address)
    delegator = encode_address(dev_key(REQUESTER_INDEX).address)
    address = json.loads((net.layout.node_home(3) / "config" / "priv_validator_key.json").read_text())["address"]
    address = address.upper()
    send_included(rpc, dev_key(REQUESTER_INDEX), MsgDelegate(validator=dev_key(3).address, amount=DELEGATED))
    before = query(rpc, f"/validator/{operator}")
    assert (before["stake"], before["self_bond"], before["power"], before["jailed"]) == (STAKE, SELF_BOND, 15, False)
    supply = query(rpc, "/supply")["supply"]

    # Its CometBFT stops (its app and verifier run on): absent from every commit until jailed.
    assert net.kill("cometbft-3") == ["cometbft-3"]
    wait_until(lambda: query(rpc, f"/validator/{operator}")["jailed"], 180, "validator-3 to be jailed for downtime")
    burned = STAKE * DOWNTIME["slash_fraction_downtime_bps"] // 10_000
    after = query(rpc, f"/validator/{operator}")
    assert (after["stake"], after["power"]) == (STAKE - burned, 0)
    assert query(rpc, "/supply")["supply"] == supply - burned  # burned exactly, nothing else moved
    # Each delegation loses its share of the burn exactly: its tokens are shares x stake // shares (1:1 before).
    assert after["self_bond"] == SELF_BOND * (STAKE - burned) // STAKE
    [delegation] = query(rpc, f"/delegations/{delegator}")["delegations"]
    assert (delegation["validator"], delegation["amount"]) == (operator, DELEGATED * (STAKE - burned) // STAKE)
    assert delegation["amount"] == DELEGATED - DELEGATED // 100  # 1 % of it, to the utrl
    info = query(rpc, f"/signing_info/{operator}")
    assert info["jailed"] and not info["tombstoned"] and info["missed_blocks_counter"] == 0  # its window restarts
    wait_until(lambda: address not in cometbft_validators(net), 60, "CometBFT to drop validator-3 from its set")

    # While jail time remains, the operator's unjail is refused with the height it may come back at.
    early = wallet(net, "tx", "stake", "unjail", "--from", "validator-3", "--yes")
    assert early.returncode == 9 and f"jailed until height {info['jailed_until']}" in early.stderr, early.stderr
    assert query(rpc, f"/validator/{operator}")["jailed"]

    # Back: its CometBFT catches up as a full node; after the jail time, its operator unjails it.
    net.start("cometbft-3")
    wait_until(lambda: net.height(3) >= net.height(0) - 1, 120, "validator-3's node to catch up")
    net.wait_for_height(info["jailed_until"], nodes=[0], timeout=180)
    unjailed = wallet(net, "tx", "stake", "unjail", "--from", "validator-3", "--yes")
    assert unjailed.returncode == 0, unjailed.stderr
    assert json.loads(unjailed.stdout)["code"] == 0
    back = query(rpc, f"/validator/{operator}")
    assert (back["jailed"], back["power"], back["stake"]) == (False, (STAKE - burned) // 10**6, STAKE - burned)
    wait_until(lambda: cometbft_validators(net).get(address) == back["power"], 60, "validator-3 back in the set")

    # It signs again: its signature in commits, and its missed counter no longer grows while commits count.
    wait_until(lambda: signed_a_recent_commit(net, address), 60, "a commit signed by validator-3")
    first = query(rpc, f"/signing_info/{operator}")
    net.wait_for_height(net.height(0) + 10, nodes=[0], timeout=60)
    later = query(rpc, f"/signing_info/{operator}")
    assert later["index_offset"] >= first["index_offset"] + 10
    assert later["missed_blocks_counter"] == first["missed_blocks_counter"] <= 2, (first, later)
    assert not later["jailed"]
