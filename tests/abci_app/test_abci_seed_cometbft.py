"""Real CometBFT signs the vote extensions and the app turns them into a seed transaction: this checks the
signed bytes (`abci_app/seed.py`) against CometBFT itself, since a proposer only includes signatures that
verify."""

from __future__ import annotations

import base64

import pytest

from engine_helpers import rpc_post, wait_until
from test_node_processes import COMETBFT, NO_COMETBFT, _height, cometbft_node
from trolly.abci_app.seed import SeedProof, is_seed_tx

pytestmark = pytest.mark.slow


@pytest.mark.skipif(COMETBFT is None, reason=f"needs CometBFT v0.38 (the venv's, or on PATH): {NO_COMETBFT}")
def test_blocks_on_real_cometbft_lead_with_a_seed_tx_of_the_previous_heights_extensions(tmp_path):
    with cometbft_node(tmp_path / "h", "seed-test") as url:
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
