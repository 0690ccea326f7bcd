"""State sync and pruning with real CometBFT v0.38 processes.

A node added to the running 4-validator localnet, its home given `trolly-node init --state-sync` with two
validators' RPCs (which first refuses a trust hash that is not the chain's), joins from a snapshot (its block store starts after genesis: it never replayed the early
blocks), reaches the app hash the validators have, and then follows the chain by block sync.

A one-validator network with short block times, whose node keeps few blocks and few heights of its state, runs
for thousands of blocks: CometBFT's block store and the app's undo log stay bounded, and a query at a pruned
height answers an error naming the oldest height kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import plyvel
import pytest
import tomli_w

from trolly.abci_app import store_history as history
from trolly.abci_app.store import Store
from trolly.localnet.home_layout import LocalnetConfig
from trolly.localnet.network import Localnet

from localnet_helpers import cometbft_missing, free_base_port, localnet

pytestmark = pytest.mark.slow

if cometbft_missing():
    pytest.skip(f"needs CometBFT v0.38 (make setup installs it where Go exists): {cometbft_missing()}",
                allow_module_level=True)

NODE = str(Path(sys.executable).parent / "trolly-node")


def rpc_get(url: str, path: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"{url}/{path}", timeout=5) as response:
        return json.loads(response.read())


def data_bytes(node_home: Path) -> int:
    return sum(path.stat().st_size for path in (node_home / "data").rglob("*") if path.is_file())


def data_breakdown(node_home: Path) -> dict[str, int]:
    entries = {}
    for entry in (node_home / "data").iterdir():
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        entries[entry.name] = sum(path.stat().st_size for path in files)
    return entries


def status(url: str) -> dict:
    return rpc_get(url, "status")["result"]["sync_info"]


def test_a_fresh_node_joins_by_state_sync_at_the_validators_app_hash_then_follows_by_block_sync(tmp_path):
    home = tmp_path / "net"
    base = free_base_port(validators=5, workers=0)
    localnet("up", "-d", "--validators", "4", "--workers", "0", "--home", str(home), "--base-port", str(base),
             "--block-time", "300ms")
    net = Localnet(home)
    try:
        net.wait_for_height(45, nodes=[0], timeout=120)  # snapshots at 20 and 40 exist
        name = net.add_node()
        index = net.config.nodes - 1
        rpcs = f"{net.config.rpc_url(0)},{net.config.rpc_url(1)}"
        wrong = subprocess.run([NODE, "init", "--home", str(net.layout.node_home(index)), "--state-sync", rpcs,
                                "--trust-height", "10", "--trust-hash", "AB" * 32],
                               capture_output=True, text=True, timeout=60)
        assert wrong.returncode != 0 and "is not block 10's hash" in wrong.stderr, wrong.stderr
        joined = subprocess.run([NODE, "init", "--home", str(net.layout.node_home(index)), "--state-sync", rpcs],
                                capture_output=True, text=True, timeout=60)
        assert joined.returncode == 0, joined.stderr
        net.start(name)
        target = net.height(0) + 5
        net.wait_for_height(target, nodes=[index], timeout=150)
        joined_status = status(net.config.rpc_url(index))
        assert int(joined_status["earliest_block_height"]) > 20  # restored from a snapshot, not replayed
        for height in (int(joined_status["earliest_block_height"]), target - 1):
            assert net.app_hash_at(index, height) == net.app_hash_at(0, height)
        later = net.height(0) + 5
        net.wait_for_height(later, nodes=[index], timeout=60)  # it keeps following the chain
        assert net.app_hash_at(index, later - 1) == net.app_hash_at(2, later - 1)
        app_log = net.supervisor.log_file(f"app-{index}").read_text()
        assert "restored" in app_log and "entries at height" in app_log
    finally:
        net.down()


def test_a_pruned_node_keeps_its_blocks_and_state_history_bounded_over_thousands_of_blocks(tmp_path):
    home = tmp_path / "net"
    base = free_base_port(validators=1, workers=0)
    net = Localnet(home, LocalnetConfig(validators=1, workers=0, slow_workers=0, base_port=base, block_time="10ms"))
    net.ensure_initialized()
    node_home = net.layout.node_home(0)
    genesis_path = node_home / "config" / "genesis.json"
    genesis = json.loads(genesis_path.read_text())
    # Evidence expires after 100 blocks and 1 s (CometBFT keeps a block's header and commit while either holds).
    genesis["consensus_params"]["evidence"].update(max_age_num_blocks="100", max_age_duration="1000000000")
    genesis_path.write_text(json.dumps(genesis))
    config_path = node_home / "config" / "config.toml"
    config = tomllib.loads(config_path.read_text())
    config["trolly"].update(min_retain_blocks=100, state_keep_recent=50, snapshot_interval=0)
    config["consensus"].update(timeout_propose="1s")
    config_path.write_text(tomli_w.dumps(config))
    app_window = 2 * 180 + 10  # the localnet market's longest_reveal_wait: the retention floor here
    try:
        net.up(timeout=120)
        deadline = time.monotonic() + 240
        sizes = {}
        while net.height(0) < 3000 and time.monotonic() < deadline:
            time.sleep(2)
            sizes.setdefault(net.height(0) // 1000, data_bytes(node_home))
        latest = net.height(0)
        print(f"data/ bytes by thousand blocks: {sizes}; at the end, by entry: {data_breakdown(node_home)}")
        assert latest >= 2000, f"only {latest} blocks in 4 minutes"
        sync = status(net.config.rpc_url(0))
        earliest = int(sync["earliest_block_height"])
        assert latest - app_window - 5 <= earliest <= latest - app_window + 5
        answer = rpc_get(net.config.rpc_url(0), 'abci_query?path="/params"&height=5')["result"]["response"]
        assert answer["code"] != 0 and "height 5 is pruned" in answer["log"] and "oldest height kept is" in answer["log"]
        oldest = int(answer["log"].split("oldest height kept is ")[1].split(")")[0])
        assert oldest >= latest - 50
    finally:
        net.down()
    # CometBFT's block store on disk (goleveldb's files are LevelDB's format): one block meta per block kept.
    blocks = plyvel.DB(str(node_home / "data" / "blockstore.db"))
    try:
        metas = [int(key[2:]) for key in blocks.iterator(prefix=b"H:", include_value=False)]
        parts = {int(key[2:].split(b":")[0]) for key in blocks.iterator(prefix=b"P:", include_value=False)}
    finally:
        blocks.close()
    print(f"blockstore.db: {len(metas)} block metas, {len(parts)} blocks' parts")
    for kept in (metas, parts):
        assert len(kept) <= app_window + 10 and min(kept) >= latest - app_window - 5
    with Store(node_home / "data" / "application.db") as store:
        with store._db.iterator(prefix=history.CHANGED_PREFIX, include_value=False) as keys:
            heights = {int.from_bytes(key[1:9], "big") for key in keys}
        # Only heights whose block changed state have records; whichever these are, none is older than kept.
        assert len(heights) <= 49 and all(height > store.last_height - 50 for height in heights)
        assert store.oldest_height >= store.last_height - 49
