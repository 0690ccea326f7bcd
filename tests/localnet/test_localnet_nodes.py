"""Fast tests of a CometBFT localnet's nodes without running them: unequal stakes, names and ports, the
checks `start` makes (a home of another chain refused, a consensus key shared with a running node warned
about, a taken port named), and `add_node`'s home."""

from __future__ import annotations

import base64
import json
import socket
import tomllib

import pytest

from trolly.abci_app.cometbft import CometbftBinary
from trolly.abci_app.home import load_home
from trolly.localnet.home_layout import VALIDATOR_STAKE, Layout, LocalnetConfig, LocalnetError, init_localnet
from trolly.localnet.network import Localnet
from trolly.localnet.supervisor import ServiceSpec

from localnet_helpers import free_base_port

STAND_IN = CometbftBinary("/bin/false", "0.38.26")
"""A CometBFT binary never run here: these tests stop before any node starts."""


@pytest.fixture
def net(tmp_path):
    config = LocalnetConfig(validators=4, workers=0, slow_workers=0, base_port=free_base_port(validators=6, workers=0))
    init_localnet(Layout(tmp_path / "net"), config)
    localnet = Localnet(tmp_path / "net", cometbft=STAND_IN)
    yield localnet
    localnet.down()


def genesis_of(net: Localnet, index: int = 0) -> dict:
    return json.loads((net.layout.node_home(index) / "config" / "genesis.json").read_text())


def test_four_validators_stake_40_30_20_10_percent(net):
    genesis = genesis_of(net)
    powers = [int(v["power"]) for v in genesis["validators"]]
    assert powers == [40, 30, 20, 10]
    assert [int(v["stake"]) for v in genesis["app_state"]["validators"]] == [p * VALIDATOR_STAKE // 10 for p in powers]
    assert [v["name"] for v in genesis["validators"]] == [f"validator-{i}" for i in range(4)]
    # Without validator 0 the others hold 60 %, short of two thirds; losing any one of the others leaves enough.
    assert 3 * sum(powers[1:]) < 2 * sum(powers)
    assert all(3 * (sum(powers) - p) > 2 * sum(powers) for p in powers[1:])


def test_a_validators_name_stands_for_its_cometbft_app_and_verifier(net):
    config = net.config
    assert net.resolve(config, "validator-2") == ["app-2", "cometbft-2", "verifier-2"]
    assert net.resolve(config, "cometbft-1") == ["cometbft-1"]
    with pytest.raises(LocalnetError, match="no service or node 'validator-9'.*validator-0, validator-1"):
        net.resolve(config, "validator-9")


def test_every_port_has_a_role_naming_its_node(net):
    roles = net.config.port_roles()
    config = net.config
    assert roles[config.p2p_port(3)] == "p2p of validator-3"
    assert roles[config.abci_port(1)] == "ABCI of validator-1" and roles[config.rpc_port(0)] == "RPC of validator-0"
    assert roles[config.relay_port(2)] == "blob relay of validator-2"
    assert roles[config.prometheus_port(1)] == "consensus metrics of validator-1"
    assert roles[config.verifier_metrics_port(3)] == "metrics of verifier-3"
    assert len(roles) == 4 * 7 + 2  # RPC, ABCI, p2p, relay and three metrics endpoints each; the data server, console


def test_a_home_from_another_chain_id_is_refused_by_start(net):
    path = net.layout.node_home(2) / "config" / "genesis.json"
    genesis = json.loads(path.read_text())
    genesis["chain_id"] = "someone-elses-chain"
    path.write_text(json.dumps(genesis))
    with pytest.raises(LocalnetError, match="validator-2: .*node-2 is a home of chain 'someone-elses-chain', "
                                            "not 'trolly-localnet'"):
        net.start("validator-2")
    assert net.running_services() == []


def test_a_taken_port_is_named_when_a_validator_starts(net):
    config = net.config
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", config.p2p_port(1)))
        squatter.listen()
        with pytest.raises(LocalnetError, match=f"cannot start validator-1: port\\(s\\) {config.p2p_port(1)} "
                                                f"\\(p2p of validator-1\\) on 127.0.0.1 already in use"):
            net.start("validator-1")
    assert net.running_services() == []


def test_add_node_writes_a_full_node_from_the_same_genesis_peering_with_everyone(net):
    name = net.add_node()
    config = net.config
    assert name == "validator-4" and config.nodes == 5 and config.validators == 4
    assert genesis_of(net, 4) == genesis_of(net, 0)
    home = load_home(net.layout.node_home(4))
    in_set = {v["pub_key"]["value"] for v in genesis_of(net)["validators"]}
    assert base64.b64encode(home.validator_key.pubkey).decode() not in in_set
    document = tomllib.loads((net.layout.node_home(4) / "config" / "config.toml").read_text())
    peers = document["p2p"]["persistent_peers"].split(",")
    assert len(peers) == 4 and all(f"127.0.0.1:{config.p2p_port(i)}" in document["p2p"]["persistent_peers"]
                                   for i in range(4))
    assert document["rpc"]["laddr"] == f"tcp://127.0.0.1:{config.rpc_port(4)}"
    assert document["proxy_app"] == net.layout.app_address(config, 4)  # its own app's socket (or ABCI port)
    # Its operator key is in the test keyring, ready to stake.
    from trolly.wallet.keyring import Keyring

    assert Keyring(net.layout.wallet_home, backend="test").exists("validator-4")
    assert net.resolve(config, "validator-4") == ["app-4", "cometbft-4"]


def test_a_node_holding_a_running_validators_key_is_warned_about(net):
    """A stand-in process takes cometbft-1's place in the supervisor: `running` is what the check reads."""
    net.supervisor.start(ServiceSpec("cometbft-1", ("sleep", "60")))
    name = net.add_node(key_from="validator-1")
    assert load_home(net.layout.node_home(4)).validator_key == load_home(net.layout.node_home(1)).validator_key
    net.warnings = []
    net.check_node_home(net.config, 4)
    (warning,) = net.warnings
    assert f"{name} holds the same consensus key as validator-1, which is running" in warning
    assert "double-signing" in warning
    # No warning for a key nobody else runs.
    net.warnings = []
    net.check_node_home(net.config, 2)
    assert net.warnings == []


def test_add_node_refuses_a_service_name_as_key_source(net):
    with pytest.raises(LocalnetError, match="takes a node name"):
        net.add_node(key_from="verifier-1")
