"""The real LevelDB store under the ABCI adapter: app hashes, Query proofs and the crash contract end to end."""

from __future__ import annotations

import threading

from abci_helpers import CHAIN_ID, genesis_bytes, key_for, send_tx
from google.protobuf.timestamp_pb2 import Timestamp

from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.store import Store
from trolly.chain.accounts import get_account, encode_account
from trolly.chain.crypto import encode_address
from trolly.chain.keys import account_key
from trolly.chain.ics23_proofs import EXIST_OP_TYPE, NONEXIST_OP_TYPE
from trolly.chain.sparse_merkle import MemoryTree
from trolly.wallet.proofs import proof_holds
from trolly.chain.state import State

ALICE, BOB, CAROL = key_for(1), key_for(2), key_for(3)
START = 1_000_000


def start(path) -> tuple[TrollyApplication, Store]:
    store = Store(path)
    app = TrollyApplication(store)
    app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1,
                                         app_state_bytes=genesis_bytes({ALICE: START, BOB: START})))
    return app, store


def finalize(app, height, txs):
    return app.finalize_block(abci.RequestFinalizeBlock(height=height, txs=txs, time=Timestamp(seconds=1_700_000_000 + height)))


def test_app_hash_is_the_root_of_all_committed_state(tmp_path):
    app, store = start(tmp_path / "db")
    try:
        response = finalize(app, 1, [send_tx(ALICE, BOB.address, 10, 0), send_tx(ALICE, CAROL.address, 5, 1)])
        assert all(result.code == 0 for result in response.tx_results)
        app.commit(abci.RequestCommit())
        assert response.app_hash == store.last_app_hash
        assert store.last_app_hash == MemoryTree(dict(store.reader().iterate(b""))).root()
        assert app.info(abci.RequestInfo()).last_block_app_hash == response.app_hash
    finally:
        store.close()


def test_query_proofs_verify_against_the_app_hash_for_present_and_absent_accounts(tmp_path):
    app, store = start(tmp_path / "db")
    try:
        finalize(app, 1, [send_tx(ALICE, CAROL.address, 7, 0)])
        app.commit(abci.RequestCommit())
        for key, present in ((CAROL, True), (key_for(99), False)):
            response = app.query(abci.RequestQuery(path=f"/account/{encode_address(key.address)}", prove=True))
            assert response.code == 0, response.log
            (op,) = response.proof_ops.ops
            assert op.type == (EXIST_OP_TYPE if present else NONEXIST_OP_TYPE) and op.key == account_key(key.address)
            account = get_account(State(store.reader()), key.address)
            value = encode_account(account) if present else None
            assert proof_holds(store.last_app_hash, op.key, value, op.type, op.data)
            assert not proof_holds(store.last_app_hash, op.key, None if present else b"\x00" * 16, op.type, op.data)
    finally:
        store.close()


def test_a_crash_between_finalize_and_commit_replays_to_the_same_hash(tmp_path):
    app, store = start(tmp_path / "db")
    finalize(app, 1, [send_tx(ALICE, BOB.address, 1, 0)])
    app.commit(abci.RequestCommit())
    block_2 = [send_tx(BOB, CAROL.address, 3, 0), send_tx(ALICE, CAROL.address, 4, 1)]
    first_try = finalize(app, 2, block_2).app_hash
    committed_1 = store.last_app_hash
    store.close()  # the process dies here: FinalizeBlock ran, Commit never came

    store = Store(tmp_path / "db")
    try:
        app = TrollyApplication(store)
        info = app.info(abci.RequestInfo())
        assert (info.last_block_height, info.last_block_app_hash) == (1, committed_1)
        assert finalize(app, 2, block_2).app_hash == first_try
        app.commit(abci.RequestCommit())
        assert (store.last_height, store.last_app_hash) == (2, first_try)
    finally:
        store.close()


def test_proofs_taken_while_another_thread_commits_always_verify(tmp_path):
    """prove is atomic against commit: the proof always matches the hash it names."""
    store = Store(tmp_path / "db")
    stop = threading.Event()
    errors: list[str] = []

    def prover():
        while not stop.is_set():
            proven = store.prove(b"\x01hot")
            if not proof_holds(proven.app_hash, b"\x01hot", proven.value, proven.proof_type, proven.proof):
                errors.append(f"proof at height {proven.height} does not verify")

    thread = threading.Thread(target=prover)
    thread.start()
    try:
        for height in range(1, 80):
            changes = {b"\x01hot": b"%d" % height, b"\x01k%d" % height: b"x"}
            if height % 3 == 0:
                changes[b"\x01hot"] = None
            store.commit(store.prepare(changes, height))
    finally:
        stop.set()
        thread.join()
        store.close()
    assert errors == []
