"""A localnet of 4 validators on real CometBFT v0.38 processes, driven through `trolly-localnet` as a user
drives it: every node makes the same chain (heights, app hashes) with the 40/30/20/10 % powers CometBFT was
given; `kill validator-3` ends its cometbft, app and verifier at once while the others go on; `start
validator-3` brings it back and it catches up to the same app hash; starting a node that holds a running
validator's consensus key is warned about. One network for the module (bringing it up costs seconds); the
test that double-signs runs last.
"""

from __future__ import annotations

import json

import pytest

from trolly.localnet.home_layout import LocalnetConfig
from trolly.localnet.network import Localnet
from trolly.wallet.rpc import RpcClient

from localnet_helpers import (cometbft_missing, four_validators, localnet, process_family, recorded_pids, survivors,
                              wait_until)

pytestmark = pytest.mark.slow


if cometbft_missing():
    pytest.skip(f"needs CometBFT v0.38 (make setup installs it where Go exists): {cometbft_missing()}",
                allow_module_level=True)


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    yield from four_validators(tmp_path_factory, "cometbft-localnet")


def status(net: Localnet) -> dict:
    return json.loads(localnet("status", "-o", "json", "--home", str(net.layout.home)).stdout)


def test_status_lists_every_validator_with_its_rpc_height_and_app_hash(net):
    shown = status(net)
    assert shown["engine"] == "cometbft"
    nodes = shown["nodes"]
    config = net.config
    assert [n["name"] for n in nodes] == [f"validator-{i}" for i in range(4)]
    assert [n["rpc"] for n in nodes] == [config.rpc_url(i) for i in range(4)]
    assert all(n["height"] >= 1 and len(n["app_hash"]) == 64 for n in nodes)
    assert all(n["services"] == {f"app-{i}": True, f"cometbft-{i}": True, f"verifier-{i}": True}
               for i, n in enumerate(nodes))


def test_cometbft_runs_the_validator_set_with_unequal_powers(net):
    with RpcClient(net.config.rpc_url(2), timeout=5.0) as client:
        validators = client.call("validators")["validators"]
        node_info = client.call("status")["node_info"]
    assert sorted(int(v["voting_power"]) for v in validators) == [10, 20, 30, 40]
    assert node_info["version"].startswith("0.38.")


def test_every_node_records_the_same_app_hashes(net):
    top = min(net.height(i) for i in range(4)) - 1
    net.wait_for_height(top + 1)
    for height in (1, top):
        assert len({net.app_hash_at(i, height) for i in range(4)}) == 1


def test_a_killed_validator_stops_whole_the_others_go_on_and_it_catches_up_on_start(net):
    home = net.layout.home
    pids = recorded_pids(home)
    family = process_family({pids["cometbft-3"], pids["app-3"], pids["verifier-3"]})
    done = localnet("kill", "validator-3", "--home", str(home))
    assert "killed verifier-3, cometbft-3, app-3" in " ".join(done.stderr.split())
    assert survivors(family) == []
    assert status(net)["nodes"][3]["services"] == {"app-3": False, "cometbft-3": False, "verifier-3": False}
    # Its app listened on its home's unix socket, and SIGKILL left the socket file: `start` must bind it again.
    assert net.layout.app_address(net.config, 3) == f"unix://{net.layout.app_socket(3)}"
    assert net.layout.app_socket(3).is_socket()
    # 90 % of the power is left: blocks go on.
    height = net.height(0)
    net.wait_for_height(height + 3, nodes=[0, 1, 2], timeout=30)

    localnet("start", "validator-3", "--home", str(home))
    target = net.height(0) + 2
    net.wait_for_height(target, timeout=60)
    assert net.app_hash_at(3, target - 1) == net.app_hash_at(0, target - 1)
    assert all(status(net)["nodes"][3]["services"].values())


def test_starting_a_running_validator_is_refused(net):
    done = localnet("start", "validator-1", "--home", str(net.layout.home), check=False)
    assert done.returncode == 1 and "validator-1 is already running" in " ".join(done.stderr.split())


def test_one_service_alone_can_be_killed_and_started(net):
    home = net.layout.home
    localnet("kill", "verifier-2", "--home", str(home))
    assert status(net)["nodes"][2]["services"] == {"app-2": True, "cometbft-2": True, "verifier-2": False}
    done = localnet("start", "validator-2", "--home", str(home))
    assert "started verifier-2" in done.stderr  # only what was stopped


def test_starting_a_node_with_a_running_validators_key_is_warned_about(net):
    """Runs last: the two nodes then sign with one key, and that validator may be slashed for it."""
    home = net.layout.home
    localnet("add-node", "--key-from", "validator-3", "--home", str(home))
    try:
        done = localnet("start", "validator-4", "--home", str(home))
        warning = " ".join(done.stderr.split())
        assert "WARNING: validator-4 holds the same consensus key as validator-3, which is running" in warning
        # It is a full CometBFT node of the same chain: it syncs the blocks.
        wait_until(lambda: net.height(4) >= 2, 60, "the added node to sync")
    finally:
        localnet("kill", "validator-4", "--home", str(home), check=False)
