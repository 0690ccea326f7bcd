"""The memo of passed stateless checks (chain/checked_txs.py) and how FinalizeBlock uses it: a speed-up only.

Every test compares against the path without a memo: the same transactions give the same results and the
same writes whether their checks were remembered or not, and a remembered check is never taken for bytes,
a chain id or params it did not pass under.
"""

from __future__ import annotations

import pytest
from abci_helpers import CHAIN_ID as APP_CHAIN_ID
from abci_helpers import FakeStore, genesis_bytes, key_for, send_tx
from google.protobuf.timestamp_pb2 import Timestamp

from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.signature_checker import MIN_BATCH, SignatureChecker, execute_block
from trolly.chain import app as chain_app
from trolly.chain.checked_txs import DECODED_BYTES_PER_BYTE, ENTRY_OVERHEAD_BYTES, CheckedTxs, entry_cost
from trolly.chain.crypto import verify_signature
from trolly.chain.params import AuthParams, get_params
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.state import State
from trolly.chain.tx import build_tx

from chain_helpers import CHAIN_ID, Chain


def sends(chain: Chain, count: int, amount: int) -> list[bytes]:
    """`count` valid sends, each from its own account (nonce 0), so every one succeeds."""
    recipient = chain.accounts[0].address
    return [build_tx(chain.accounts[index], CHAIN_ID, 0, 1, [MsgSend(to=recipient, amount=amount)])
            for index in range(1, count + 1)]


def auth_params(chain: Chain) -> AuthParams:
    return get_params(State(chain.kv), AuthParams)


def forge(raw: bytes) -> bytes:
    return raw[:-1] + bytes([raw[-1] ^ 1])  # the signature is the envelope's last field


@pytest.fixture
def spot_checks(monkeypatch) -> list[bytes]:
    """Every signature checked on the spot by `chain.app` (the real check, counted)."""
    checked: list[bytes] = []

    def counting(pubkey, message, signature):
        checked.append(message)
        return verify_signature(pubkey, message, signature)

    monkeypatch.setattr(chain_app, "verify_signature", counting)
    return checked


def execute(chain: Chain, txs: list[bytes], checks: CheckedTxs | None, checker=None) -> tuple[list, dict]:
    state = State(chain.kv)
    output = execute_block(state, chain.env(chain.height + 1), txs, checks, checker)
    return [(r.code, r.log, r.events) for r in output.tx_results], state.changes()


def test_a_passed_check_is_remembered_and_not_made_again(spot_checks):
    checks = CheckedTxs()
    raw = sends(Chain(accounts=2), 1, amount=1)[0]
    first = chain_app.check_stateless(raw, CHAIN_ID, AuthParams(), checks)
    again = chain_app.check_stateless(raw, CHAIN_ID, AuthParams(), checks)
    assert again is first and len(spot_checks) == 1 and raw in checks


def test_a_failed_check_is_not_remembered_and_fails_every_time(spot_checks):
    checks = CheckedTxs()
    forged = forge(sends(Chain(accounts=2), 1, amount=1)[0])
    for _ in range(2):
        with pytest.raises(Exception, match="signature"):
            chain_app.check_stateless(forged, CHAIN_ID, AuthParams(), checks)
    assert len(spot_checks) == 2 and forged not in checks and len(checks) == 0


def test_a_check_passed_under_another_chain_id_or_params_is_made_again(spot_checks):
    checks = CheckedTxs()
    raw = sends(Chain(accounts=2), 1, amount=1)[0]
    chain_app.check_stateless(raw, CHAIN_ID, AuthParams(), checks)
    with pytest.raises(Exception, match="chain"):
        chain_app.check_stateless(raw, "another-chain", AuthParams(), checks)
    with pytest.raises(Exception, match="limit"):
        chain_app.check_stateless(raw, CHAIN_ID, AuthParams(max_tx_bytes=10), checks)
    assert len(spot_checks) == 1  # the two refusals came before the signature


def test_the_memo_is_bounded_in_bytes_oldest_first_out():
    small = [bytes([index]) * 100 for index in range(5)]
    checks = CheckedTxs(capacity_bytes=3 * entry_cost(small[0]))
    for index, raw in enumerate(small):
        checks.remember(raw, "context", index)
    assert len(checks) == 3 and small[0] not in checks and small[4] in checks
    assert checks.held_bytes == 3 * entry_cost(small[0]) <= checks.capacity_bytes
    assert checks.recall(small[4], "context") == 4 and checks.recall(small[4], "other") is None
    large = b"L" * (entry_cost(small[0]) // DECODED_BYTES_PER_BYTE)  # two small entries' room and more
    checks.remember(large, "context", "large")
    assert large in checks and small[4] in checks and small[2] not in checks and small[3] not in checks
    assert checks.held_bytes <= checks.capacity_bytes


def test_a_transaction_larger_than_the_whole_memo_is_not_remembered_and_pushes_nothing_out():
    checks = CheckedTxs(capacity_bytes=entry_cost(b"x" * 1_000))
    checks.remember(b"x" * 1_000, "context", 1)
    checks.remember(b"y" * 1_001, "context", 2)
    assert b"x" * 1_000 in checks and b"y" * 1_001 not in checks and len(checks) == 1


def test_a_mutable_buffer_is_never_remembered():
    checks = CheckedTxs()
    checks.remember(bytearray(b"tx"), "context", 1)
    checks.forget([bytearray(b"tx")])
    assert len(checks) == 0 and bytearray(b"tx") not in checks and checks.held_bytes == 0
    with pytest.raises(ValueError):
        CheckedTxs(capacity_bytes=ENTRY_OVERHEAD_BYTES - 1)


def test_what_a_proposal_alone_brought_is_dropped_and_what_check_tx_admitted_stays():
    checks = CheckedTxs()
    chain = Chain(accounts=4)
    admitted, proposed, both = sends(chain, 3, amount=1)
    chain_app.check_stateless(admitted, CHAIN_ID, AuthParams(), checks)
    for raw in (proposed, both):
        chain_app.check_tx_stateless_only(raw, CHAIN_ID, State(chain.kv), checks, AuthParams())
    assert checks.provisional(proposed) and checks.provisional(both) and not checks.provisional(admitted)
    assert chain_app.check_tx(State(chain.kv), chain.env(chain.height + 1), both, checks, auth_params(chain)).ok
    checks.drop_provisional()
    assert admitted in checks and both in checks and proposed not in checks
    assert checks.held_bytes == entry_cost(admitted) + entry_cost(both)


def throwaway_proposal(proposal: int, count: int) -> list[bytes]:
    """`count` well-signed transfers from keys nobody funded: they pass ProcessProposal's stateless checks,
    no mempool ever saw them, and no block will carry them."""
    return [send_tx(key_for(10_000 + proposal * count + index), key_for(1).address, 1, 0)
            for index in range(count)]


def test_a_proposer_proposing_throwaway_transactions_never_grows_the_memo_past_its_bound():
    admitted = [send_tx(key_for(index), key_for(0).address, 1, 0) for index in range(1, 9)]
    per_proposal = 20
    capacity = sum(entry_cost(raw) for raw in admitted) + per_proposal * entry_cost(admitted[0])
    app = TrollyApplication(FakeStore(), checks=CheckedTxs(capacity_bytes=capacity))
    app.init_chain(abci.RequestInitChain(chain_id=APP_CHAIN_ID, initial_height=1,
                                         app_state_bytes=genesis_bytes({key_for(index): 10**6 for index in range(9)})))
    for raw in admitted:  # the mempool's transactions
        assert app.check_tx(abci.RequestCheckTx(tx=raw)).code == 0
    accept, reject = abci.ResponseProcessProposal.ACCEPT, abci.ResponseProcessProposal.REJECT
    left_behind: list[bytes] = []
    for proposal in range(30):  # round after round at height 1, never decided
        txs = throwaway_proposal(proposal, per_proposal)
        if proposal % 3 == 2:  # one bad transaction at the end: rejected after the others were checked
            txs[-1] = forge(txs[-1])
        status = app.process_proposal(abci.RequestProcessProposal(txs=txs, height=1)).status
        assert status == (reject if proposal % 3 == 2 else accept)
        assert app.checks.held_bytes <= capacity
        assert all(raw in app.checks for raw in admitted)  # the mempool's checks were not pushed out
        assert not any(raw in app.checks for raw in left_behind)  # an earlier proposal's are gone
        if status == reject:
            assert not any(raw in app.checks for raw in txs)
        left_behind = txs
    finalize = app.finalize_block(abci.RequestFinalizeBlock(height=1, txs=admitted[:4],
                                                            time=Timestamp(seconds=1_700_000_000)))
    assert [result.code for result in finalize.tx_results] == [0, 0, 0, 0]
    app.commit(abci.RequestCommit())
    assert set(admitted[4:]) == {raw for raw in admitted if raw in app.checks}
    assert app.checks.held_bytes == sum(entry_cost(raw) for raw in admitted[4:])


def test_a_block_gives_the_same_results_and_writes_with_a_filled_memo_an_empty_one_and_none():
    chain = Chain(accounts=2 * MIN_BATCH + 1)
    txs = sends(chain, 2 * MIN_BATCH, amount=5)
    txs[3] = forge(txs[3])
    txs[7] = txs[6]  # a replay: the same bytes, remembered, still fail on their nonce
    txs[11] = b"\xff not a transaction"
    filled = CheckedTxs()
    for raw in txs:  # what CheckTx does when the transactions arrive
        try:
            chain_app.check_stateless(raw, CHAIN_ID, auth_params(chain), filled)
        except Exception:
            pass
    alone = execute(chain, txs, None)
    assert execute(chain, txs, filled) == alone
    assert execute(chain, txs, CheckedTxs()) == alone
    codes = [code for code, _, _ in alone[0]]
    assert codes[3] != 0 and codes[7] != 0 and codes[11] != 0 and codes.count(0) == len(txs) - 3


def test_a_block_met_first_in_finalize_block_is_checked_in_full_and_not_remembered(spot_checks):
    chain = Chain(accounts=MIN_BATCH + 1)
    txs = sends(chain, MIN_BATCH, amount=3)
    checks = CheckedTxs()
    alone = execute(chain, txs, None)
    assert len(spot_checks) == len(txs)
    assert execute(chain, txs, checks) == alone
    assert len(spot_checks) == 2 * len(txs) and len(checks) == 0  # committed next: never met again


def test_a_block_uses_the_checks_remembered_before_and_leaves_them_for_commit_to_forget(spot_checks):
    chain = Chain(accounts=MIN_BATCH + 1)
    txs = sends(chain, MIN_BATCH, amount=4)
    checks = CheckedTxs()
    for raw in txs[::2]:  # CheckTx met half of them
        chain_app.check_stateless(raw, CHAIN_ID, auth_params(chain), checks)
    assert execute(chain, txs, checks) == execute(chain, txs, None)
    assert len(spot_checks) == len(txs[::2]) + len(txs[1::2]) + len(txs)
    assert all(raw in checks for raw in txs[::2]) and not any(raw in checks for raw in txs[1::2])


class RecordingChecker(SignatureChecker):
    """A checker that records the blocks handed to it and checks nothing (every answer on the spot)."""

    def __init__(self) -> None:
        super().__init__(command=["false"])
        self.started: list[int] = []

    def start_batch(self, txs):
        self.started.append(len(txs))
        return None


def test_a_block_whose_transactions_were_all_checked_before_is_not_sent_to_the_checker(spot_checks):
    chain = Chain(accounts=2 * MIN_BATCH + 1)
    txs = sends(chain, 2 * MIN_BATCH, amount=5)
    checks = CheckedTxs()
    for raw in txs:
        chain_app.check_stateless(raw, CHAIN_ID, auth_params(chain), checks)
    checker = RecordingChecker()
    codes = [code for code, _, _ in execute(chain, txs, checks, checker)[0]]
    assert codes == [0] * len(txs) and checker.started == [] and len(spot_checks) == len(txs)


def test_a_block_with_enough_unchecked_transactions_still_goes_to_the_checker():
    chain = Chain(accounts=2 * MIN_BATCH + 1)
    txs = sends(chain, 2 * MIN_BATCH, amount=7)
    checker = RecordingChecker()
    assert [code for code, _, _ in execute(chain, txs, CheckedTxs(), checker)[0]] == [0] * len(txs)
    assert checker.started == [len(txs)]


def test_a_forged_signature_is_never_taken_as_remembered():
    chain = Chain(accounts=2 * MIN_BATCH + 1)
    txs = sends(chain, 2 * MIN_BATCH, amount=9)
    checks = CheckedTxs()
    for raw in txs:
        chain_app.check_stateless(raw, CHAIN_ID, auth_params(chain), checks)
    codes = [code for code, _, _ in execute(chain, [forge(txs[0])] + txs[1:], checks)[0]]
    assert codes[0] != 0 and codes[1:] == [0] * (len(txs) - 1)


def test_forget_drops_only_the_given_transactions():
    checks = CheckedTxs()
    for index in range(3):
        checks.remember(bytes([index]), "context", index)
    checks.forget([bytes([0]), bytes([2]), b"never remembered"])
    assert len(checks) == 1 and bytes([1]) in checks


def test_the_app_forgets_a_committed_blocks_transactions_and_keeps_the_mempools():
    senders = [key_for(200 + index) for index in range(4)]
    app = TrollyApplication(FakeStore())
    app.init_chain(abci.RequestInitChain(chain_id=APP_CHAIN_ID, initial_height=1,
                                         app_state_bytes=genesis_bytes({key: 100 for key in senders})))
    txs = [send_tx(key, senders[0].address, 1, 0) for key in senders[1:]]
    for tx in txs:
        assert app.check_tx(abci.RequestCheckTx(tx=tx)).code == 0
    assert all(tx in app.checks for tx in txs)
    response = app.finalize_block(abci.RequestFinalizeBlock(height=1, txs=txs[:2], time=Timestamp(seconds=10)))
    assert [result.code for result in response.tx_results] == [0, 0]
    assert all(tx in app.checks for tx in txs)  # not yet: the block may be re-sent before its Commit
    app.commit(abci.RequestCommit())
    assert txs[0] not in app.checks and txs[1] not in app.checks and txs[2] in app.checks


def test_a_transaction_refused_by_the_stateful_checks_is_not_remembered():
    chain = Chain(accounts=3)
    wrong_nonce = build_tx(chain.accounts[1], CHAIN_ID, 7, 1, [MsgSend(to=chain.accounts[0].address, amount=1)])
    admitted = sends(chain, 1, amount=1)[0]
    checks = CheckedTxs()
    state = State(chain.kv)
    assert not chain_app.check_tx(state, chain.env(chain.height + 1), wrong_nonce, checks).ok
    assert chain_app.check_tx(state, chain.env(chain.height + 1), admitted, checks).ok
    assert wrong_nonce not in checks and admitted in checks
