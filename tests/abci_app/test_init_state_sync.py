"""`trolly-node init --state-sync RPC1,RPC2`: the [statesync] section from a trusted block the given nodes agree
on, and a clear refusal, writing nothing, when a node does not answer, the nodes disagree, or the trust hash
given is not the chain's."""

from __future__ import annotations

import socket
import tomllib

import pytest
from click.testing import CliRunner
from fake_rpc import FakeRpc, node_answers

from trolly.abci_app.cli import main
from trolly.abci_app.home import load_home

HASH_A = "AB" * 32
HASH_B = "CD" * 32


@pytest.fixture
def servers():
    started = []

    def start(**answers):
        base = {"chain_id": "trolly-test", "latest": 50, "hashes": {49: HASH_A, 30: HASH_A}, "node_id": "aa" * 20,
                "p2p_port": 26656}
        base.update(answers)
        rpc = FakeRpc(node_answers(**base))
        started.append(rpc)
        return rpc

    yield start
    for rpc in started:
        rpc.close()


def init(*args):
    return CliRunner().invoke(main, ["init", *args], catch_exceptions=False)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_new_home_joins_with_genesis_peers_and_the_trusted_block_the_nodes_agree_on(servers, tmp_path):
    one, two = servers(node_id="11" * 20, p2p_port=1001), servers(node_id="22" * 20, p2p_port=1002, latest=52)
    done = init("--home", str(tmp_path / "h"), "--state-sync", f"{one.url},{two.url}")
    assert done.exit_code == 0, done.output
    home = load_home(tmp_path / "h")
    section = home.config["statesync"]
    assert section["enable"] is True and section["rpc_servers"] == f"{one.url},{two.url}"
    assert (section["trust_height"], section["trust_hash"], section["trust_period"]) == (49, HASH_A, "168h0m0s")
    assert home.chain_id == "trolly-test"
    assert home.config["p2p"]["persistent_peers"] == f"{'11' * 20}@127.0.0.1:1001,{'22' * 20}@127.0.0.1:1002"


def test_an_existing_home_of_the_chain_gets_only_its_statesync_section(servers, tmp_path):
    one, two = servers(), servers()
    assert init("--home", str(tmp_path / "h"), "--chain-id", "trolly-test").exit_code == 0
    before = tomllib.loads((tmp_path / "h" / "config" / "config.toml").read_text())
    done = init("--home", str(tmp_path / "h"), "--state-sync", f"{one.url},{two.url}", "--trust-height", "30",
                "--trust-hash", HASH_A.lower())
    assert done.exit_code == 0, done.output
    after = tomllib.loads((tmp_path / "h" / "config" / "config.toml").read_text())
    assert after["statesync"]["trust_height"] == 30 and after["statesync"]["trust_hash"] == HASH_A
    assert {k: v for k, v in after.items() if k != "statesync"} == {k: v for k, v in before.items() if k != "statesync"}


@pytest.mark.parametrize("case, complaint", [
    ("unreachable", "did not answer /status"),
    ("disagreeing hashes", "disagree on block 49's hash"),
    ("different chains", "different chains"),
    ("wrong trust hash", "is not block 49's hash"),
    ("one server", "at least two different RPC servers"),
    ("existing home of another chain", "is a home of chain 'other-chain'"),
])
def test_a_trust_source_that_cannot_be_trusted_is_refused_saying_why_and_nothing_is_written(servers, tmp_path, case,
                                                                                            complaint):
    """Attack: a joining node pointed at a dead node, a node on another fork or chain, or a wrong trust hash
    must not start syncing from a trust root the chain does not have."""
    one = servers()
    home = tmp_path / "h"
    args = ["--home", str(home), "--state-sync"]
    if case == "unreachable":
        args.append(f"{one.url},http://127.0.0.1:{closed_port()}")
    elif case == "disagreeing hashes":
        args.append(f"{one.url},{servers(hashes={49: HASH_B}).url}")
    elif case == "different chains":
        args.append(f"{one.url},{servers(chain_id='trolly-other').url}")
    elif case == "wrong trust hash":
        args += [f"{one.url},{servers().url}", "--trust-hash", HASH_B]
    elif case == "one server":
        args.append(one.url)
    else:
        assert init("--home", str(home), "--chain-id", "other-chain").exit_code == 0
        args.append(f"{one.url},{servers().url}")
    before = (home / "config" / "config.toml").read_bytes() if home.exists() else None
    done = CliRunner().invoke(main, ["init", *args])
    assert done.exit_code != 0 and complaint in done.output, done.output
    after = (home / "config" / "config.toml").read_bytes() if home.exists() else None
    assert after == before
