"""Real CometBFT signs the vote extensions and the app turns them into a seed transaction: this checks the
signed bytes (`abci_app/seed.py`) against CometBFT itself, since a proposer only includes signatures that
verify."""

from __future__ import annotations

import base64
import subprocess

import pytest

from dev_node import stop_process
from engine_helpers import rpc_post, wait_until
from net_helpers import free_ports
from test_node_processes import COMETBFT, NO_COMETBFT, _height, node
from trolly.abci_app import home as homelib
from trolly.abci_app.seed import SeedProof, is_seed_tx

pytestmark = pytest.mark.slow


@pytest.mark.skipif(COMETBFT is None, reason=f"needs CometBFT v0.38 (the venv's, or on PATH): {NO_COMETBFT}")
def test_blocks_on_real_cometbft_lead_with_a_seed_tx_of_the_previous_heights_extensions(tmp_path):
    root = tmp_path / "h"
    rpc_port, p2p_port, abci_port = free_ports(3)
    config = homelib.NodeConfig(proxy_app=f"tcp://127.0.0.1:{abci_port}", rpc_laddr=f"tcp://127.0.0.1:{rpc_port}",
                                p2p_laddr=f"tcp://127.0.0.1:{p2p_port}", timeout_commit="200ms")
    homelib.init_home(root, "seed-test", dev=True, config=config)
    app = node("start", "--home", str(root), stderr=subprocess.DEVNULL)
    cometbft = subprocess.Popen([COMETBFT, "node", "--home", str(root)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{rpc_port}"
        wait_until(lambda: _height(url) >= 5, 120, what="CometBFT blocks")
        for height in (3, 4):
            txs = rpc_post(url, "block", {"height": str(height)})["result"]["block"]["data"]["txs"] or []
            assert txs, f"block {height} has no seed transaction"
            first = base64.b64decode(txs[0])
            assert is_seed_tx(first)
            proof = SeedProof.decode(first)
            assert proof.height == height - 1 and len(proof.signatures) == 1  # the one validator
            results = rpc_post(url, "block_results", {"height": str(height)})["result"]["txs_results"]
            assert results[0].get("code", 0) == 0, results[0]
    finally:
        stop_process(cometbft)
        stop_process(app)
