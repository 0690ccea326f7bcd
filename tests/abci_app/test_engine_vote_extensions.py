"""Seeds from vote extensions are every network's default: the genesis `trolly-node init` writes enables
extensions and has the market sample only from their seed, and the solo engine, which has no other
validators, extends its own precommits as CometBFT would, so the app's seed transaction opens its blocks too."""

from __future__ import annotations

import base64
import json

import pytest

from engine_helpers import InProcessChain, result
from trolly.abci_app import home as homelib
from trolly.abci_app.home_genesis import with_extension_seeds
from trolly.abci_app.seed import SEED_TX_PREFIX


@pytest.mark.parametrize("dev", [False, True])
def test_the_genesis_of_trolly_node_init_samples_from_vote_extension_seeds(tmp_path, dev):
    paths = homelib.init_home(tmp_path / "home", "seed-default", dev=dev)
    genesis = json.loads(paths.genesis.read_text())
    assert genesis["consensus_params"]["abci"]["vote_extensions_enable_height"] == "1"
    assert genesis["app_state"]["params"]["market"]["seed_from_extensions"] == 1


def test_a_genesis_without_vote_extensions_keeps_the_chain_default():
    app_state = {"params": {"market": {"min_collateral": 5}}, "accounts": [], "validators": []}
    assert with_extension_seeds(app_state, {"abci": {"vote_extensions_enable_height": "0"}}) is app_state
    seeded = with_extension_seeds(app_state, {"abci": {"vote_extensions_enable_height": "1"}})
    assert seeded["params"]["market"] == {"min_collateral": 5, "seed_from_extensions": 1}
    assert app_state["params"]["market"] == {"min_collateral": 5}  # the caller's document is left alone


def test_the_solo_engine_extends_its_votes_so_that_its_blocks_carry_the_seed_transaction(tmp_path):
    with InProcessChain(tmp_path) as chain:
        chain.wait_for_height(4)
        for height in (2, 3, 4):
            txs = result(chain.url, "block", {"height": str(height)})["block"]["data"]["txs"]
            assert txs and base64.b64decode(txs[0]).startswith(SEED_TX_PREFIX), height
