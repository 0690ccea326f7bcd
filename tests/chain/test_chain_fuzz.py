"""Hostile, correctly signed transactions of every message type (benchmarks/hostile_txs.py) against the state
machine and the ABCI adapter: only clean successes or failed-transaction results, the invariants after every
block, and two app instances over real LevelDB stores on the same app hash after every block."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from google.protobuf.timestamp_pb2 import Timestamp

from benchmarks.hostile_txs import CHAIN_ID, MESSAGES, Signers, block_of_txs, genesis_app_state, sign_block
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.codes import registered_codes
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.store import Store
from trolly.chain.app import MESSAGE_ROUTES

KNOWN_CODES = {(codespace, code) for codespace, code in registered_codes()} | {("", 0)}
FUZZ_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def events_of(result) -> list[tuple[str, dict]]:
    return [(e.type, dict(e.attributes)) for e in result.events]


def test_every_message_type_of_the_chain_has_a_hostile_strategy():
    names = {route.message_type.DESCRIPTOR.full_name.rsplit(".", 1)[-1] for route in MESSAGE_ROUTES.values()}
    kinds = {"".join(part.title() for part in kind.split("_")) for kind in MESSAGES}
    assert names == {"Msg" + kind for kind in kinds}, (names, kinds)


@FUZZ_SETTINGS
@given(blocks=st.lists(block_of_txs(24), min_size=1, max_size=5))
def test_hostile_blocks_only_fail_transactions_and_keep_every_invariant(make_chain, blocks):
    chain = make_chain(app_state=genesis_app_state(), chain_id=CHAIN_ID)  # invariants checked after each block
    signers = Signers()
    for planned in blocks:
        output = chain.block(*sign_block(signers, planned))
        assert len(output.tx_results) == len(planned)
        for result in output.tx_results:
            assert (result.codespace if result.code else "", result.code) in KNOWN_CODES, result
            assert result.code == 0 or result.log
        signers.observe([events_of(r) for r in output.tx_results])


def apps(tmp_path) -> list[TrollyApplication]:
    instances = []
    for name in ("a", "b"):
        store = Store(str(tmp_path / name), sync=False)
        app = TrollyApplication(store)
        app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1, time=Timestamp(seconds=1),
                                             app_state_bytes=json.dumps(genesis_app_state()).encode()))
        instances.append(app)
    return instances


@FUZZ_SETTINGS
@given(blocks=st.lists(block_of_txs(24), min_size=1, max_size=4), data=st.data())
def test_two_app_instances_reach_the_same_app_hash_and_results_on_hostile_blocks(tmp_path_factory, blocks, data):
    instances = apps(tmp_path_factory.mktemp("apps"))
    signers = Signers()
    try:
        for height, planned in enumerate(blocks, start=1):
            txs = sign_block(signers, planned)
            for app in instances:  # CheckTx never raises either
                for tx in txs:
                    response = app.check_tx(abci.RequestCheckTx(tx=tx))
                    assert (response.codespace if response.code else "", response.code) in KNOWN_CODES
            request = abci.RequestFinalizeBlock(height=height, txs=txs, time=Timestamp(seconds=1 + height),
                                                hash=bytes([height]) * 32)
            responses = [app.finalize_block(request) for app in instances]
            assert len({r.app_hash for r in responses}) == 1, f"app hashes diverge at height {height}"
            assert len({tuple((t.code, t.codespace) for t in r.tx_results) for r in responses}) == 1
            for app in instances:
                app.commit(abci.RequestCommit())
            signers.observe([[(e.type, {a.key: a.value for a in e.attributes}) for e in t.events]
                             for t in responses[0].tx_results])
    finally:
        for app in instances:
            app.store.close()
