"""`trolly-node init` writes a home in CometBFT v0.38's formats; the CLI has help everywhere and clear errors."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import tomllib

import pytest
from click.testing import CliRunner

from trolly.abci_app import home as homelib
from trolly.abci_app.cli import main, parse_duration
from trolly.chain.crypto import PrivateKey, decode_address, encode_address
from trolly.chain.hd import dev_key


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def dev_home(tmp_path):
    result = run("init", "--home", str(tmp_path / "h"), "--chain-id", "test-chain", "--dev")
    assert result.exit_code == 0, result.output
    return homelib.HomePaths(tmp_path / "h")


def test_genesis_has_cometbft_v038_fields_and_types(dev_home):
    genesis = json.loads(dev_home.genesis.read_text())
    assert set(genesis) == {"genesis_time", "chain_id", "initial_height", "consensus_params", "validators", "app_hash", "app_state"}
    assert genesis["chain_id"] == "test-chain"
    assert genesis["initial_height"] == "1" and genesis["app_hash"] == ""
    assert homelib.parse_time(genesis["genesis_time"]) > 0 and genesis["genesis_time"].endswith("Z")
    params = genesis["consensus_params"]
    assert params["block"] == {"max_bytes": "22020096", "max_gas": "-1"}
    assert params["evidence"] == {"max_age_num_blocks": "100000", "max_age_duration": "172800000000000", "max_bytes": "1048576"}
    assert params["validator"] == {"pub_key_types": ["ed25519"]}
    assert params["abci"] == {"vote_extensions_enable_height": "1"}  # they seed sampling (abci_app/seed.py)
    [validator] = genesis["validators"]
    assert set(validator) == {"address", "pub_key", "power", "name"}
    assert validator["pub_key"]["type"] == "tendermint/PubKeyEd25519"
    pubkey = base64.b64decode(validator["pub_key"]["value"])
    assert len(pubkey) == 32
    assert validator["address"] == hashlib.sha256(pubkey).digest()[:20].hex().upper()
    assert validator["power"] == "10"  # 10 TRL stake / 1 TRL per power unit


def test_dev_genesis_funds_the_dev_key_and_bonds_the_node_validator(dev_home):
    genesis = json.loads(dev_home.genesis.read_text())
    app_state = genesis["app_state"]
    dev_address = encode_address(dev_key(0).address)
    assert app_state["accounts"] == [{"address": dev_address, "balance": str(homelib.DEFAULT_DEV_BALANCE),
                                      "pub_key": base64.b64encode(dev_key(0).pubkey).decode()}]
    [bonded] = app_state["validators"]
    assert bonded["operator"] == dev_address
    assert bonded["pub_key"] == genesis["validators"][0]["pub_key"]["value"]
    assert int(bonded["stake"]) <= homelib.DEFAULT_DEV_BALANCE
    assert set(app_state["params"]) <= {"auth", "staking", "market"}
    assert app_state["params"]["market"] == {"seed_from_extensions": 1}  # sampling waits for extension seeds


def test_plain_init_funds_no_public_key(tmp_path):
    assert run("init", "--home", str(tmp_path / "h"), "--chain-id", "prod-1").exit_code == 0
    genesis = json.loads((tmp_path / "h/config/genesis.json").read_text())
    addresses = [a["address"] for a in genesis["app_state"]["accounts"]]
    assert encode_address(dev_key(0).address) not in addresses
    [validator] = genesis["app_state"]["validators"]
    pubkey = base64.b64decode(validator["pub_key"])
    assert decode_address(validator["operator"]) == hashlib.sha256(pubkey).digest()[:20]
    assert addresses == [validator["operator"]]
    assert genesis["app_state"]["accounts"][0]["pub_key"] == validator["pub_key"]  # the operator's key is on chain


def test_init_allows_the_named_web_origins_to_call_the_rpc_and_refuses_what_is_no_origin(tmp_path):
    """A browser worker's page (the console's origin) calls the node's JSON-RPC: `--cors-origin` writes
    `[rpc] cors_allowed_origins` (CometBFT and the solo engine read it); a URL with a path is no origin."""
    assert run("init", "--home", str(tmp_path / "h"), "--chain-id", "prod-1").exit_code == 0
    assert tomllib.loads((tmp_path / "h/config/config.toml").read_text())["rpc"]["cors_allowed_origins"] == []
    origins = ["http://127.0.0.1:26748", "https://worker.example"]
    result = run("init", "--home", str(tmp_path / "c"), "--chain-id", "prod-1", "--cors-origin", origins[0],
                 "--cors-origin", origins[1])
    assert result.exit_code == 0, result.output
    assert tomllib.loads((tmp_path / "c/config/config.toml").read_text())["rpc"]["cors_allowed_origins"] == origins
    refused = run("init", "--home", str(tmp_path / "d"), "--chain-id", "prod-1", "--cors-origin", "http://a/worker")
    assert refused.exit_code != 0 and "is not a web origin" in refused.output
    assert not (tmp_path / "d").exists()


def test_priv_validator_key_is_cometbft_format_and_consistent(dev_home):
    document = json.loads(dev_home.priv_validator_key.read_text())
    assert set(document) == {"address", "pub_key", "priv_key"}
    assert document["pub_key"]["type"] == "tendermint/PubKeyEd25519"
    assert document["priv_key"]["type"] == "tendermint/PrivKeyEd25519"
    private = base64.b64decode(document["priv_key"]["value"])
    public = base64.b64decode(document["pub_key"]["value"])
    assert len(private) == 64 and private[32:] == public
    assert PrivateKey(private[:32]).pubkey == public  # the seed really derives the public half
    assert document["address"] == hashlib.sha256(public).digest()[:20].hex().upper()
    genesis = json.loads(dev_home.genesis.read_text())
    assert genesis["validators"][0]["pub_key"]["value"] == document["pub_key"]["value"]


def test_node_key_and_validator_state_formats(dev_home):
    node_key = json.loads(dev_home.node_key.read_text())
    assert set(node_key) == {"priv_key"} and node_key["priv_key"]["type"] == "tendermint/PrivKeyEd25519"
    assert len(base64.b64decode(node_key["priv_key"]["value"])) == 64
    state = json.loads(dev_home.priv_validator_state.read_text())
    assert state == {"height": "0", "round": 0, "step": 0}


def test_secret_files_are_owner_only(dev_home):
    for path in (dev_home.priv_validator_key, dev_home.node_key, dev_home.priv_validator_state):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(dev_home.genesis.stat().st_mode) == 0o644


def test_config_toml_parses_with_cometbft_v038_keys(tmp_path):
    result = run(
        "init", "--home", str(tmp_path / "h"), "--chain-id", "c", "--moniker", "alice",
        "--rpc-laddr", "tcp://127.0.0.1:36657", "--proxy-app", "tcp://127.0.0.1:36658",
    )
    assert result.exit_code == 0
    config = tomllib.loads((tmp_path / "h/config/config.toml").read_text())
    for key in ("proxy_app", "moniker", "db_backend", "db_dir", "genesis_file", "priv_validator_key_file",
                "priv_validator_state_file", "node_key_file", "abci"):
        assert key in config, key
    assert config["moniker"] == "alice" and config["proxy_app"] == "tcp://127.0.0.1:36658" and config["abci"] == "socket"
    assert config["rpc"]["laddr"] == "tcp://127.0.0.1:36657"
    for key in ("laddr", "persistent_peers", "addr_book_strict", "allow_duplicate_ip", "seeds", "external_address"):
        assert key in config["p2p"], key
    assert isinstance(config["p2p"]["addr_book_strict"], bool) and isinstance(config["p2p"]["allow_duplicate_ip"], bool)
    for key in ("timeout_propose", "timeout_prevote", "timeout_precommit", "timeout_commit", "create_empty_blocks"):
        assert key in config["consensus"], key
    assert config["consensus"]["timeout_commit"] == "1s"
    for section in ("mempool", "statesync", "blocksync", "storage", "tx_index", "instrumentation"):
        assert section in config, section


def test_config_overrides_for_localnet_peers():
    config = homelib.NodeConfig(persistent_peers="abc@127.0.0.1:26656", addr_book_strict=False, allow_duplicate_ip=True)
    document = tomllib.loads(__import__("tomli_w").dumps(homelib.config_toml(config)))
    assert document["p2p"]["persistent_peers"] == "abc@127.0.0.1:26656"
    assert document["p2p"]["addr_book_strict"] is False and document["p2p"]["allow_duplicate_ip"] is True


def test_init_refuses_to_overwrite_without_force(dev_home):
    before = dev_home.priv_validator_key.read_text()
    result = CliRunner().invoke(main, ["init", "--home", str(dev_home.root), "--chain-id", "other"])
    assert result.exit_code != 0 and "--force" in result.output
    assert dev_home.priv_validator_key.read_text() == before
    forced = run("init", "--home", str(dev_home.root), "--chain-id", "other", "--force")
    assert forced.exit_code == 0
    assert dev_home.priv_validator_key.read_text() != before
    assert json.loads(dev_home.genesis.read_text())["chain_id"] == "other"


@pytest.mark.parametrize("chain_id", ["", "has space", "x" * 51])
def test_init_rejects_bad_chain_id_and_writes_nothing(tmp_path, chain_id):
    result = CliRunner().invoke(main, ["init", "--home", str(tmp_path / "h"), "--chain-id", chain_id])
    assert result.exit_code != 0 and "chain id" in result.output
    assert not (tmp_path / "h/config/genesis.json").exists()


def test_home_defaults_to_environment_variable(tmp_path):
    result = run("init", "--chain-id", "env-chain", env={"TROLLY_NODE_HOME": str(tmp_path / "envhome")})
    assert result.exit_code == 0
    assert json.loads((tmp_path / "envhome/config/genesis.json").read_text())["chain_id"] == "env-chain"


def test_load_home_reports_missing_and_corrupt_files(tmp_path, dev_home):
    with pytest.raises(homelib.HomeError, match="missing"):
        homelib.load_home(tmp_path / "nowhere")
    dev_home.priv_validator_key.write_text('{"priv_key": {"type": "tendermint/PrivKeyEd25519", "value": "AAAA"}}')
    with pytest.raises(homelib.HomeError, match="64 bytes"):
        homelib.load_home(dev_home.root)


def test_time_format_matches_go_rfc3339nano():
    assert homelib.format_time(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"
    assert homelib.format_time(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert homelib.parse_time("2023-11-14T22:13:20.123456789Z") == 1_700_000_000_123_456_789
    assert homelib.parse_time("2023-11-14T23:13:20+01:00") == 1_700_000_000_000_000_000


@pytest.mark.parametrize("text, seconds", [("1s", 1.0), ("200ms", 0.2), ("0.5", 0.5), ("2m", 120.0)])
def test_block_time_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def _commands(group, prefix=()):
    yield prefix
    for name, command in getattr(group, "commands", {}).items():
        yield from _commands(command, prefix + (name,))


@pytest.mark.parametrize("path", list(_commands(main)), ids=lambda p: " ".join(p) or "trolly-node")
def test_every_command_has_help(path):
    result = run(*path, "--help")
    assert result.exit_code == 0
    assert "Usage:" in result.output and len(result.output.splitlines()) > 3


def test_localnet_homes_share_genesis_and_peer_with_each_other(tmp_path):
    homes = homelib.write_localnet_homes(tmp_path / "net", "localnet-1", 3, base_port=36000)
    loaded = [homelib.load_home(paths.root) for paths in homes]
    genesis = loaded[0].genesis
    assert all(home.genesis == genesis for home in loaded)
    assert [v["pub_key"]["value"] for v in genesis["validators"]] == [
        base64.b64encode(home.validator_key.pubkey).decode() for home in loaded
    ]
    operators = [v["operator"] for v in genesis["app_state"]["validators"]]
    assert operators == [encode_address(dev_key(i).address) for i in range(3)]
    funded = {a["address"]: int(a["balance"]) for a in genesis["app_state"]["accounts"]}
    assert all(funded[o] >= int(v["stake"]) for o, v in zip(operators, genesis["app_state"]["validators"]))
    keyed = {a["address"]: a.get("pub_key") for a in genesis["app_state"]["accounts"]}
    assert [keyed[o] for o in operators] == [base64.b64encode(dev_key(i).pubkey).decode() for i in range(3)]
    ports = set()
    for index, home in enumerate(loaded):
        config = home.config
        assert config["p2p"]["allow_duplicate_ip"] is True and config["p2p"]["addr_book_strict"] is False
        peers = config["p2p"]["persistent_peers"].split(",")
        assert sorted(peers) == sorted(f"{other.node_key.node_id}@127.0.0.1:{36000 + 10 * j}"
                                       for j, other in enumerate(loaded) if j != index)
        for address in (config["p2p"]["laddr"], config["rpc"]["laddr"], config["proxy_app"]):
            ports.add(int(address.rsplit(":", 1)[1]))
    assert len(ports) == 9  # every listener distinct


def test_plain_init_keeps_the_chain_s_production_params(tmp_path):
    assert run("init", "--home", str(tmp_path / "h"), "--chain-id", "prod-2").exit_code == 0
    # The chain's defaults, but for sampling from vote-extension seeds, which the genesis enables.
    assert json.loads((tmp_path / "h/config/genesis.json").read_text())["app_state"]["params"] == \
        {"market": {"seed_from_extensions": 1}}
