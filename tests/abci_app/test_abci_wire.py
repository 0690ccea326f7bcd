"""A CometBFT stand-in written independently of the server (own protobuf codec, blocking sockets) drives a
real server process over four connections: Info, InitChain, FinalizeBlock, Commit, CheckTx, Query, restart."""

from __future__ import annotations

import json
import os
import sys

import pytest
from abci_helpers import CHAIN_ID, ServerProcess, genesis_bytes, key_for, send_tx

import abci_wire_client as wire
from trolly.chain.accounts import Account, encode_account
from trolly.chain.crypto import encode_address
from trolly.chain.errors import InvalidNonce, TxDecodeError, UnknownQueryPath, WrongChainId
from trolly.chain.keys import account_key
from trolly.chain.ics23_proofs import EXIST_OP_TYPE, NONEXIST_OP_TYPE
from trolly.wallet.proofs import proof_holds

pytestmark = pytest.mark.slow

ALICE, BOB = key_for(1), key_for(2)
START = 5_000_000
T0 = 1_700_000_000


NODE_SCRIPT = os.path.join(os.path.dirname(sys.executable), "trolly-node")


@pytest.fixture
def paths(tmp_path):
    return str(tmp_path / "application.db"), f"unix://{tmp_path / 'abci.sock'}"


@pytest.fixture(params=["python -m trolly.abci_app.server", "trolly-node start"])
def launch(request, tmp_path):
    """Starts (and restarts) the app process the way its launcher does, on the same state each time."""
    if request.param == "trolly-node start":
        if not os.path.exists(NODE_SCRIPT):
            pytest.skip(f"the trolly-node console script is not installed at {NODE_SCRIPT}")
        home = str(tmp_path / "home")
        return lambda address: ServerProcess.node_start(home, address, CHAIN_ID)
    db = str(tmp_path / "application.db")
    return lambda address: ServerProcess(db, address)


def test_independent_client_drives_a_real_server_process(launch, tmp_path):
    address = f"unix://{tmp_path / 'abci.sock'}"
    server = launch(address)
    try:
        client = wire.CometLikeClient(server.address)
        info = client.info()
        assert (info.text(1), info.int(3), info.int(4), info.bytes(5)) == ("trolly", 1, 0, b"")

        genesis = client.init_chain(CHAIN_ID, genesis_bytes({ALICE: START}), seconds=T0)
        genesis_hash = genesis.bytes(3)  # ResponseInitChain{consensus_params=1, validators=2, app_hash=3}
        assert len(genesis_hash) == 32

        # The mempool connection admits a valid tx and refuses bad ones with their codes.
        first = send_tx(ALICE, BOB.address, 1_000, 0)
        assert client.check_tx(first).code == 0
        assert client.check_tx(first).code == InvalidNonce.code
        wrong_chain = client.check_tx(send_tx(ALICE, BOB.address, 1, 1, chain_id="elsewhere"))
        assert (wrong_chain.code, wrong_chain.codespace) == (WrongChainId.code, "trolly") and wrong_chain.log
        assert client.check_tx(b"\x00garbage").code == TxDecodeError.code

        hashes = []
        app_hash, outcomes = client.finalize_and_commit(1, [first, b"\x00garbage"], seconds=T0 + 1)
        assert [o.code for o in outcomes] == [0, TxDecodeError.code]
        transfer = [attrs for kind, attrs in outcomes[0].events if kind == "transfer"][0]
        assert ("amount", "1000", True) in transfer
        hashes.append(app_hash)
        for height in range(2, 6):
            app_hash, outcomes = client.finalize_and_commit(
                height, [send_tx(ALICE, BOB.address, height, height - 1)], seconds=T0 + height)
            assert [o.code for o in outcomes] == [0]
            hashes.append(app_hash)
        assert len(set(hashes)) == 5

        # After Commit the mempool overlay was reset: RECHECK of a tx now in a block fails on its nonce.
        assert client.check_tx(first, recheck=True).code == InvalidNonce.code

        info = client.info()
        assert (info.int(4), info.bytes(5)) == (5, hashes[-1])

        # Query with a proof that verifies against the committed app hash, with the raw account value.
        answer = client.query_path(f"/account/{encode_address(BOB.address)}", prove=True)
        expected_balance = 1_000 + sum(range(2, 6))
        assert answer.int(1) == 0 and answer.int(9) == 5
        assert json.loads(answer.bytes(7)) == {"address": encode_address(BOB.address), "balance": expected_balance,
                                               "nonce": 0, "pub_key": None}
        (op,) = answer.message(8).messages(1)  # ProofOps{ops=1}, ProofOp{type=1, key=2, data=3}
        assert (op.text(1), op.bytes(2)) == (EXIST_OP_TYPE, account_key(BOB.address))
        assert proof_holds(hashes[-1], op.bytes(2), encode_account(Account(expected_balance, 0)), op.text(1),
                           op.bytes(3))
        assert not proof_holds(hashes[-1], op.bytes(2), encode_account(Account(expected_balance + 1, 0)),
                               op.text(1), op.bytes(3))

        # An account that does not exist: a non-membership proof against the same app hash.
        nobody = key_for(77)
        absent = client.query_path(f"/account/{encode_address(nobody.address)}", prove=True)
        (op,) = absent.message(8).messages(1)
        assert json.loads(absent.bytes(7))["balance"] == 0
        assert op.text(1) == NONEXIST_OP_TYPE
        assert proof_holds(hashes[-1], account_key(nobody.address), None, op.text(1), op.bytes(3))
        assert not proof_holds(hashes[-1], account_key(nobody.address), encode_account(Account(1, 0)), op.text(1),
                               op.bytes(3))

        unknown = client.query_path("/no/such/path")
        assert unknown.int(1) == UnknownQueryPath.code and "unknown query path" in unknown.text(3)
        client.close()
    finally:
        assert server.stop() == 0, server.stderr()

    # A restart reports the last committed height and app hash (the handshake's starting point).
    restarted = launch(address)
    try:
        client = wire.CometLikeClient(restarted.address)
        info = client.info()
        assert (info.int(4), info.bytes(5)) == (5, hashes[-1])
        app_hash, outcomes = client.finalize_and_commit(6, [send_tx(ALICE, BOB.address, 1, 5)], seconds=T0 + 6)
        assert [o.code for o in outcomes] == [0]  # the chain id came back from committed state
        client.close()
    finally:
        assert restarted.stop() == 0, restarted.stderr()


def test_server_process_survives_garbage_on_one_connection(paths):
    db, address = paths
    server = ServerProcess(db, address)
    try:
        client = wire.CometLikeClient(server.address)
        client.init_chain(CHAIN_ID, genesis_bytes({ALICE: START}), seconds=T0)
        app_hash, _ = client.finalize_and_commit(1, [], seconds=T0 + 1)
        victim = wire.Connection(server.address)
        victim.send_raw(wire.varint(1 << 62))  # announces an enormous message
        assert victim.closed_by_server()
        victim = wire.Connection(server.address)
        victim.send_raw(b"\x05\xff\xff\xff\xff\xff")  # a frame that is not a Request
        assert victim.closed_by_server()
        info = client.info()
        assert (info.int(4), info.bytes(5)) == (1, app_hash)
        assert server.process.poll() is None
        client.close()
    finally:
        assert server.stop() == 0, server.stderr()


def test_kill_9_between_finalize_block_and_commit_replays_to_the_same_hashes(tmp_path):
    """The crash-recovery contract at the socket: nothing before Commit is durable, everything after is."""
    db, address = str(tmp_path / "application.db"), f"unix://{tmp_path / 'abci.sock'}"
    blocks = {h: [send_tx(ALICE, BOB.address, 100 + h, h - 1)] for h in range(1, 5)}

    # Killed right after InitChain: height 0 again, and InitChain gives the same genesis hash.
    server = ServerProcess(db, address)
    client = wire.CometLikeClient(server.address)
    genesis_hash = client.init_chain(CHAIN_ID, genesis_bytes({ALICE: START}), seconds=T0).bytes(3)
    server.process.kill()
    server.process.wait()

    server = ServerProcess(db, address)
    client = wire.CometLikeClient(server.address)
    assert client.info().int(4) == 0
    assert client.init_chain(CHAIN_ID, genesis_bytes({ALICE: START}), seconds=T0).bytes(3) == genesis_hash
    hashes = {}
    for height in (1, 2, 3):
        hashes[height], _ = client.finalize_and_commit(height, blocks[height], seconds=T0 + height)
    # FinalizeBlock 4 without its Commit, then kill -9.
    (finalized,) = client.consensus.call(wire.finalize_block(4, blocks[4], T0 + 4, (4).to_bytes(32, "big"),
                                                             b"\x01" * 20))
    uncommitted_hash = finalized.bytes(5)
    server.process.kill()
    server.process.wait()

    server = ServerProcess(db, address)
    try:
        client = wire.CometLikeClient(server.address)
        info = client.info()
        assert (info.int(4), info.bytes(5)) == (3, hashes[3])  # the last COMMITTED block
        replayed, outcomes = client.finalize_and_commit(4, blocks[4], seconds=T0 + 4)
        assert replayed == uncommitted_hash and [o.code for o in outcomes] == [0]
        balance = json.loads(client.query_path(f"/account/{encode_address(BOB.address)}").bytes(7))["balance"]
        assert balance == sum(100 + h for h in range(1, 5))  # every transfer exactly once
        client.close()
    finally:
        assert server.stop() == 0, server.stderr()
